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
import signal
import time

import pytest

import fleetkit as fl
import pgkit
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import seconds_between, utc_timestamp

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
    slow = {"name": "slow", "phase": "pre-deploy", "failurePolicy": "fail",
            "command": 'case "$STELLA_TARGET_ID" in %s) sleep %d;; esac' % (t2, HOOK_SECONDS)}
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
        assert after["rollback"] is None and after["interrupted"] == record_a["interrupted"]
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
