"""A target lost in the middle of a job (``stellaops.runtime.job`` over three lab targets, rolling, one
target a batch): the second target's SSH is cut (its ``sshd`` and every ``sshd-session`` killed, the
job's connection with them) while its apply runs, and comes back before the job's rollback reaches it.

What must hold: the lost target is a failed target (``Failed`` / ``target_unreachable``, its outcome
unknown), the gate closes, the third target is ``Skipped``, the automatic rollback runs in reverse batch
order and restores both changed targets (the lost one included: its apply may have finished there), the
job ends ``RolledBack`` (never ``Running``), and ``ansible-playbook`` exits non-zero with the job's text.
When the lost target is still gone at rollback time, the job ends ``Failed`` with its ``RollbackFailed``
event and a reason naming the target, never ``RolledBack``.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

import pytest

import fleetkit as fl
from labkit import free_port


def outer(*argv, check=True):
    proc = subprocess.run(["docker"] + list(argv), capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError("docker %s failed: %s" % (" ".join(argv), proc.stderr))
    return proc


def sticker_release(state):
    return json.loads(state["sticker"])["release"]["version"] if state["sticker"] else None


@pytest.mark.parametrize("back", [True, False], ids=["back-before-rollback", "still-gone"])
def test_a_target_lost_during_its_apply_is_failed_and_rolled_back_and_the_job_ends(lab, fleet, tmp_path, back):
    fj = fl.FleetJob(lab, fleet[:3], tmp_path, "lost", free_port())
    t1, t2, t3 = fj.names
    lost = fj.by_name[t2]
    marker = "/tmp/%s-apply-started" % fj.application
    # the pre-deploy hook leaves a marker on the target and holds the apply long enough to cut it off
    hold = {"name": "hold", "phase": "pre-deploy", "command": "touch %s && sleep 8" % marker}
    try:
        v1 = fj.run(fj.release(strategy_config={"batchSize": 1}))
        assert v1.rc == 0, v1.output[-4000:]
        outer("exec", lost["container"], "rm", "-f", marker)

        proc = fj.start(fj.release("app_v2", "2.0.0", strategy_config={"batchSize": 1}, hooks=[hold]))
        try:
            fl.wait_for(
                lambda: outer("exec", lost["container"], "test", "-e", marker, check=False).returncode == 0,
                300,
                what="the apply on %s running its pre-deploy hook" % t2,
            )
            # the listener and every connection (OpenSSH 9.8+ serves a connection from sshd-session)
            outer("exec", lost["container"], "pkill", "sshd")

            def lost_recorded():
                ids = fj.job_ids()
                job = fj.job(ids[-1]) if len(ids) == 2 else None
                return job if job and job["targets"][t2]["status"] == "Failed" else None

            during = fl.wait_for(lost_recorded, 300, interval=0.1, what="%s recorded failed" % t2)
            if back:
                outer("exec", lost["container"], "/usr/sbin/sshd")  # back before the rollback reaches it
            assert proc.wait(420) != 0, proc.output_path.read_text()[-4000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            outer("exec", lost["container"], "sh", "-c", "pgrep -x sshd >/dev/null || /usr/sbin/sshd", check=False)
        output = proc.output_path.read_text()
        job_id = during["jobId"]
        assert (during["targets"][t2]["code"], during["targets"][t2].get("outcomeUnknown")) == (
            "target_unreachable",
            True,
        )
        assert during["status"] != "Succeeded"

        record = fj.job(job_id)
        assert "job %s" % job_id in output, output[-4000:]
        lost_target = record["targets"][t2]
        assert lost_target["code"] == "target_unreachable"
        assert lost_target["phases"][0]["name"] == "preflight" and lost_target["phases"][0]["status"] == "failed"
        assert (record["targets"][t1]["statusBeforeRollback"], record["targets"][t1]["status"]) == (
            "Succeeded",
            "RolledBack",
        )
        assert record["targets"][t3]["status"] == "Skipped"
        assert record["rollback"]["batches"] == [[t2], [t1]]
        gates = sorted(record["gates"], key=lambda g: g["batch"])
        assert [(g["batch"], g["proceed"]) for g in gates] == [(0, True), (1, False)]
        assert fj.statuses(job_id)[-1] != "Running"
        if not back:
            # the lost target may still run v2: never RolledBack; the job ends Failed with its RollbackFailed
            # event and the combined reason naming the target (contract: one attempt, never retried)
            assert (record["status"], record["promotion"]) == ("Failed", "Failed"), record["reason"]
            assert record["rollback"]["status"] == "failed" and record["events"][-1]["kind"] == "RollbackFailed"
            assert "auto-rollback failed: %s: target_unreachable" % t2 in record["reason"], record["reason"]
            assert (lost_target["status"], lost_target["code"]) == ("Failed", "target_unreachable")
            assert lost_target["rollbackError"].startswith("target_unreachable: the target did not answer")
            outer("exec", lost["container"], "/usr/sbin/sshd")
            assert fl.web(fj.state(t1, fj.project(record, t1)))["ref"] == "%s@%s" % (
                fj.refs["app_v1"],
                fj.digests["app_v1"],
            )
            return
        assert (record["status"], record["promotion"], record["isRollback"]) == ("RolledBack", "Failed", True), record[
            "reason"
        ]
        assert record["code"] == "target_unreachable" and record["reason"].startswith("target %s: " % t2)
        assert "RolledBack" in output, output[-4000:]
        assert (lost_target["statusBeforeRollback"], lost_target["status"]) == ("Failed", "RolledBack")

        # both changed targets run v1 again (the lost one's apply may have finished v2 there); t3 never changed
        states = fj.states(record)
        for name in (t1, t2, t3):
            facts = fl.web(states[name])
            assert facts["running"] and facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"]), name
            assert sticker_release(states[name]) == "1.0.0", name
    finally:
        outer("exec", lost["container"], "sh", "-c", "pgrep -x sshd >/dev/null || /usr/sbin/sshd", check=False)
        time.sleep(0.5)
        fj.cleanup()
