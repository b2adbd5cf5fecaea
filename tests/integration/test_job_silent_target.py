"""A target that goes silent mid-apply (docs/jobs.md, "A target that stops answering"), through the real
job playbook on a thin lab target:

- the target's container is frozen (``docker pause``: its processes stop, its TCP connections stay up, as
  a hung VM's do) while its pre-deploy hook runs: the job's SSH keep-alives drop the connection, the target
  is recorded ``target_unreachable`` with its outcome unknown, and the job ends, within a bound set by the
  keep-alives; meanwhile a second job of the same controller to the same host fails its readiness check on
  its own connection instead of waiting on the first job's stuck master;
- a target whose apply runs past the job's task timeout (``stella_job_task_timeout``) is recorded
  ``target_unreachable`` the same way.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import contextlib
import subprocess
import time

import fleetkit as fl
import labkit
import thinkit

ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}
KEEPALIVE = {"stella_job_ssh_keepalive_interval": 3, "stella_job_ssh_keepalive_count": 3}  # silent for 9 s


def sleeping_hook(seconds):
    return {
        "name": "slow",
        "phase": "pre-deploy",
        "failurePolicy": "fail",
        "timeoutSeconds": 600,
        "command": "sleep %d" % seconds,
    }


def hook_running(container, seconds):
    proc = subprocess.run(
        ["docker", "exec", container, "pgrep", "-f", "sleep %d" % seconds],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return proc.returncode == 0


def test_a_target_frozen_mid_apply_is_unreachable_within_the_keepalive_bound_and_blocks_no_other_job(
    lab, thin_pair, tmp_path
):  # pylint: disable=redefined-outer-name
    container = thin_pair[1]["container"]
    first = thinkit.ThinFleetJob(lab, thin_pair[1:], tmp_path / "a", "silent", labkit.free_port())
    second = thinkit.ThinFleetJob(lab, thin_pair[1:], tmp_path / "b", "silent-other", labkit.free_port())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    proc = first.start(
        first.release(hooks=[sleeping_hook(171)], strategy_config={"batchSize": 1}),
        extra=dict(ENGINE_GATE, **KEEPALIVE),
    )
    paused = False
    try:
        fl.wait_for(lambda: hook_running(container, 171), 180, interval=0.5, what="the hook to run on the target")
        subprocess.run(["docker", "pause", container], check=True, capture_output=True, timeout=60)
        paused, frozen_at = True, time.monotonic()
        # a second job of this controller to the same (silent) host: its own connection, refused at readiness
        other = second.run(second.release(), extra=ENGINE_GATE, timeout=120)
        other_seconds = time.monotonic() - frozen_at
        assert other.rc != 0, other.output[-3000:]
        refused = second.job(other.job_id)
        assert (refused["status"], refused["code"]) == ("Failed", "target_unreachable"), refused["reason"]
        assert other_seconds < 60, other_seconds
        # the first job: the keep-alives drop its connection; it ends with the target unreachable
        proc.wait(timeout=120)
        first_seconds = time.monotonic() - frozen_at
        record = first.job(first.job_ids()[-1])
        target = record["targets"][first.names[0]]
        assert target["code"] == "target_unreachable", (target["code"], target["reason"])
        assert "stopped answering while its apply ran" in target["reason"], target["reason"]
        assert target.get("outcomeUnknown") is True
        assert record["status"] in ("Failed", "RolledBack"), record["status"]
        assert first_seconds < 90, first_seconds  # 9 s of keep-alives, the rollback's connect timeout, the close
    finally:
        if paused:
            subprocess.run(["docker", "unpause", container], check=False, capture_output=True, timeout=60)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=30)
        first.cleanup()
        second.cleanup()


def test_an_apply_past_the_task_timeout_is_recorded_unreachable(lab, thin_pair, tmp_path):  # pylint: disable=redefined-outer-name
    fj = thinkit.ThinFleetJob(lab, thin_pair[1:], tmp_path, "timeout", labkit.free_port())
    try:
        start = time.monotonic()
        run = fj.run(
            fj.release(hooks=[sleeping_hook(172)], strategy_config={"batchSize": 1}),
            extra=dict(ENGINE_GATE, stella_job_task_timeout=15),
            timeout=300,
        )
        assert run.rc != 0, run.output[-3000:]
        assert time.monotonic() - start < 150
        record = fj.job(run.job_id)
        assert record["options"]["taskTimeout"] == 15
        target = record["targets"][fj.names[0]]
        assert target["code"] == "target_unreachable" and target.get("outcomeUnknown") is True, target
        assert "Timed out after 15 second" in target["reason"], target["reason"]
    finally:
        fj.cleanup()
