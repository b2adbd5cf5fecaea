"""The claim lease across controllers (docs/job-store.md#claim-lease), on the lab's PostgreSQL store that
two controllers share and two Debian 13 DinD targets reached over SSH.

Controller A (this machine) runs a rolling job with a short claim lease; the second target's pre-deploy
hook keeps its step going for longer than the lease. Controller B is the same machine under another host
name (a private UTS namespace), so it cannot tell whether A's process is alive:
- while A runs, its lease keeper renews the lease, so B's job is refused (``project_busy``) although A
  has persisted no change for longer than the lease;
- A freezes (SIGSTOP of its process group): past the lease B records A's job interrupted, takes the
  projects and deploys;
- A, thawed, stops at its next step (``job_interrupted``) without deciding a rollback.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import time

import pytest

import fleetkit as fl
import labkit
import pgkit
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    seconds_between,
    utc_timestamp,
)

LEASE = 6  # the keeper renews every 2 s
HOOK_SECONDS = 35  # the second target's step: longer than the lease


@pytest.fixture
def shared_store(lab, pg_passfile):  # pylint: disable=unused-argument
    with pgkit.fresh_database(lab, prefix="lease") as dsn:
        yield dsn


def signal_group(proc, signum):
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


def last_alive(record):
    """When ``record``'s run last persisted a change or renewed its lease."""
    return max(record["updatedAt"], record.get("leaseRenewedAt") or "")


def test_a_job_past_its_claim_lease_is_taken_over_by_another_controller(lab, fleet, tmp_path, shared_store):
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "lease", free_port(), store=shared_store)
    t1, t2 = fj.names
    slow = {
        "name": "slow",
        "phase": "pre-deploy",
        "failurePolicy": "fail",
        "command": 'case "$STELLA_TARGET_ID" in %s) sleep %d;; esac' % (t2, HOOK_SECONDS),
    }
    release = fj.release(strategy_config={"batchSize": 1}, hooks=[slow])
    release_b = fj.release(strategy_config={"batchSize": 1})  # B's: the same services, no slow hook
    proc = fj.start(release, extra={"stella_job_claim_lease": LEASE})
    try:

        def second_batch_running():
            ids = fj.job_ids()
            record = fj.job(ids[0]) if ids else None
            return record if record and record["targets"][t2]["status"] == "Running" else None

        running = fl.wait_for(second_batch_running, 240, what="a target of batch 2 Running")
        job_a = running["jobId"]
        assert running["options"]["claimLeaseSeconds"] == LEASE
        assert running["owner"]["host"] != "controller-b"

        # B, while A runs t2's slow hook: no change persisted for longer than the lease, but A's keeper
        # renews the lease, so A's projects stay A's
        while seconds_between(fj.job(job_a)["updatedAt"], utc_timestamp()) <= LEASE + 1:
            time.sleep(0.5)
        busy = fj.run(release_b, controller="controller-b")
        assert busy.rc != 0, busy.output[-4000:]
        refused = fj.job(busy.job_id)
        held = fj.job(job_a)
        assert seconds_between(held["updatedAt"], refused["createdAt"]) > LEASE  # past the lease, but renewed
        assert seconds_between(held["updatedAt"], held["leaseRenewedAt"]) > 0
        assert (refused["status"], refused["code"]) == ("Failed", "project_busy"), refused["reason"]
        assert refused["owner"]["host"] == "controller-b"
        assert held["status"] == "Running" and held["targets"][t2]["status"] == "Running"

        signal_group(proc, signal.SIGSTOP)  # A and its keeper freeze, t2's hook still sleeping
        frozen = fj.job(job_a)
        assert frozen["status"] == "Running" and frozen["targets"][t2]["status"] == "Running"

        # B, past A's lease: A is recorded interrupted and B deploys
        while seconds_between(last_alive(fj.job(job_a)), utc_timestamp()) <= LEASE:
            time.sleep(0.5)
        took = fj.run(release_b, controller="controller-b")
        assert took.rc == 0, took.output[-4000:]
        record_a = fj.job(job_a)
        assert (record_a["status"], record_a["promotion"], record_a["code"]) == ("Failed", "Failed", "job_interrupted")
        assert "longer than its claim lease of %ds" % LEASE in record_a["interrupted"]["why"]
        assert record_a["targets"][t1]["status"] == "Succeeded"
        assert (record_a["targets"][t2]["status"], record_a["targets"][t2]["code"]) == ("Failed", "job_interrupted")
        assert fj.statuses(job_a) == ["Pending", "Running", "Failed"]
        record_b = fj.job(took.job_id)
        assert record_b["status"] == "Succeeded", record_b["reason"]
        assert record_b["owner"]["host"] == "controller-b"

        # A, thawed: its next step is refused, and it decides no rollback of projects B now holds
        signal_group(proc, signal.SIGCONT)
        assert proc.wait(300) != 0
        output = proc.output_path.read_text()
        assert "job %s was recorded interrupted, this run stops" % job_a in output, output[-4000:]
        after = fj.job(job_a)
        # no rollback ran: the decision the interruption recorded (job_interrupted) is all A has
        assert (after["rollback"]["attempted"], after["rollback"]["skipReason"]) == (False, "job_interrupted")
        assert after["interrupted"] == record_a["interrupted"]
        assert fj.statuses(job_a) == ["Pending", "Running", "Failed"]
        assert fj.job(took.job_id)["status"] == "Succeeded"
        for name in fj.names:
            facts = fl.web(fj.state(name, record_b["targets"][name]["projectName"]))
            assert facts["running"] and facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"]), facts
    finally:
        signal_group(proc, signal.SIGCONT)
        signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(30)
        fj.cleanup()


def ssh_gate(tmp_path):
    """An ``ssh`` for one target of controller A: once ``armed`` exists, its next connection writes
    ``reached`` and waits for ``go`` before it runs (so A's apply is held after the controller's last
    look at the job store and before the work reaches the target)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    script = gate / "ssh"
    script.write_text(
        "#!/bin/sh\n"
        "d=%s\n"
        'if [ -e "$d/armed" ] && [ ! -e "$d/passed" ]; then\n'
        '  : > "$d/reached"\n'
        '  while [ ! -e "$d/go" ]; do sleep 0.2; done\n'
        '  : > "$d/passed"\n'
        "fi\n"
        'exec %s "$@"\n' % (shlex.quote(str(gate)), shlex.quote(shutil.which("ssh")))
    )
    script.chmod(0o755)
    return gate, str(script)


def project_bytes(fj, name, project):
    """The target's committed files of ``project`` and its containers (ids, images, start times)."""
    directory = os.path.join(fl.WORK_DIRECTORY, project)
    script = (
        "cd %s && sha256sum compose.stella.lock.yml stella.version.json apply-manifest.json "
        "&& docker ps -q --no-trunc --filter label=com.docker.compose.project=%s | sort | xargs docker inspect "
        "--format '{{.Id}} {{.Image}} {{.State.StartedAt}}'" % (shlex.quote(directory), shlex.quote(project))
    )
    return labkit.ssh(fj.by_name[name], script, timeout=120).stdout


def test_a_job_whose_lease_was_taken_over_cannot_change_a_target_when_it_wakes(lab, fleet, tmp_path, shared_store):
    """Controller A is frozen with its apply of 2.0.0 on its way to t2 (after its last look at the store);
    past its lease, controller B takes the projects over and deploys 1.1.0; A, thawed, reaches t2 with
    its older claim: the target refuses (claim_superseded), keeps B's release byte for byte, and A's job
    ends Failed with that code."""
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "fence", free_port(), store=shared_store)
    t1, t2 = fj.names
    gate, ssh = ssh_gate(tmp_path)
    release_a = fj.release("app_v2", "2.0.0", strategy_config={"batchSize": 1})
    release_b = fj.release("app_v1", "1.1.0", strategy_config={"batchSize": 1})
    proc = fj.start(release_a, overrides={t2: {"ansible_ssh_executable": ssh}}, extra={"stella_job_claim_lease": LEASE})
    try:
        job_a = fl.wait_for(lambda: (fj.job_ids() or [None])[0], 120, what="job A recorded")
        (gate / "armed").touch()  # t2's connection check is behind: its next connection is its apply
        fl.wait_for((gate / "reached").exists, 240, what="A's apply of t2 on its way")
        held = fj.job(job_a)
        assert held["targets"][t1]["status"] == "Succeeded" and held["targets"][t2]["status"] == "Running"
        claim_a = held["targets"][t2]["claim"]
        signal_group(proc, signal.SIGSTOP)
        while seconds_between(last_alive(fj.job(job_a)), utc_timestamp()) <= LEASE:
            time.sleep(0.5)
        took = fj.run(release_b, controller="controller-b")
        assert took.rc == 0, took.output[-4000:]
        record_b = fj.job(took.job_id)
        assert record_b["status"] == "Succeeded", record_b["reason"]
        assert record_b["targets"][t2]["claim"]["generation"] > claim_a["generation"]  # same store: newer
        project = record_b["targets"][t2]["projectName"]
        before = project_bytes(fj, t2, project)

        (gate / "go").touch()
        signal_group(proc, signal.SIGCONT)
        assert proc.wait(300) != 0
        output = proc.output_path.read_text()
        assert (gate / "passed").exists()  # A's apply did reach t2
        assert "claim_superseded" in output and "superseded on this project by job %s" % took.job_id in output, output[
            -4000:
        ]
        assert project_bytes(fj, t2, project) == before
        facts = fl.web(fj.state(t2, project))
        assert facts["running"] and facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"]), facts
        after = fj.job(job_a)
        assert (after["status"], after["code"]) == ("Failed", "claim_superseded"), after["reason"]
        assert (after["targets"][t2]["status"], after["targets"][t2]["code"]) == ("Failed", "claim_superseded")
        assert after["interrupted"] and (after["rollback"]["attempted"], after["rollback"]["skipReason"]) == (
            False,
            "job_interrupted",
        )  # no rollback ran
        assert fj.job(took.job_id)["status"] == "Succeeded"
    finally:
        (gate / "go").touch()
        signal_group(proc, signal.SIGCONT)
        signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(30)
        fj.cleanup()
