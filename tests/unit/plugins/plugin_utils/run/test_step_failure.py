"""An error inside one of the controller's steps of a running job never leaves the job Running: it is
recorded in the job, the gate closes, finish fails the job and decides its rollback, and the steps
answer as they do for a failed job. Through the steps' own entry point, on a real SQLite store."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import step_failure as _step_failure
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.steps import STEPS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00.000000Z"
SECRET = "s3cret-Planted-token"


def stored(tmp_path):
    """A Running job of two batches (a, then b), ComposeHost targets, in a real SQLite store."""
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    targets = {
        name: {"targetId": name, "targetName": name, "targetType": "ComposeHost", "projectName": "shop"}
        for name in ("a", "b")
    }
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a"], ["b"]],
            targets=targets,
            options={"autoRollbackOnFailure": True},
            now=T0,
        )
    )
    store.update("job-1", lambda r: _job.start(r, T0))
    store.close()
    return location


def step(location, name, **given):
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, job_id="job-1", **given)
    return JobRunner({}, False).run(args)


def job(location):
    store = _job_store.open_store(location)
    try:
        return store.get("job-1")
    finally:
        store.close()


def succeed(location, name):
    result = {
        "changed": True,
        "previousRevisionPath": "/var/lib/stella/projects/shop/.stella/revisions/r0",
        "deploymentPhases": [{"name": phase, "status": "succeeded"} for phase in ("preflight", "deploy")],
    }
    return step(location, "target", target=name, result=result, probe={"passed": True, "checks": []}, plan=plan(name))


def plan(name):
    """What the job's plan hands the recording step of target ``name`` (for its deployment.json)."""
    return {"jobId": "job-1", "projectName": "shop", "target": {"id": name, "type": "ComposeHost"}}


def broken(monkeypatch, name, exc):
    def raising(ctx, store, args):
        raise exc

    monkeypatch.setattr(STEPS[name], "act", raising)


def test_an_error_in_the_traffic_step_closes_the_gate_and_the_job_fails_with_its_rollback_decided(
    tmp_path, monkeypatch
):
    location = stored(tmp_path)
    succeed(location, "a")
    with monkeypatch.context() as patched:
        broken(patched, "traffic", KeyError("yolo " + SECRET))
        answer = JobRunner({}, False)
        answer.secrets.append(SECRET)
        args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
        args.update(step="traffic", store=location, job_id="job-1", targets=["a"])
        traffic = answer.run(args)
    assert traffic["failure"]["code"] == "internal_error" and traffic["skipped"] is False
    assert "KeyError" in traffic["failure"]["reason"] and SECRET not in repr(traffic)
    assert traffic["warnings"] and "recorded in the job" in traffic["warnings"][0]
    gate = step(location, "gate", targets=["a"])
    assert gate["proceed"] is False and gate["gate"]["code"] == "internal_error"
    assert "controller step traffic failed: KeyError" in gate["gate"]["reason"]
    orders = step(location, "finish")
    record = job(location)
    assert record["status"] == "RollingBack" and record["promotion"] == "Failed"  # the rollback was decided
    assert orders["rollbackOrder"] == ["a"]
    assert record["targets"]["b"]["status"] == "Skipped"
    assert record["stepFailure"]["step"] == "traffic" and SECRET not in repr(record)


def test_an_error_in_the_gate_itself_stops_the_job_and_finish_fails_it(tmp_path, monkeypatch):
    location = stored(tmp_path)
    succeed(location, "a")
    with monkeypatch.context() as patched:
        broken(patched, "gate", ValueError("bad weights"))
        gate = step(location, "gate", targets=["a"])
    assert gate["proceed"] is False and gate["gate"]["batch"] == 0
    step(location, "finish")
    record = job(location)
    assert record["status"] in ("RollingBack", "Failed") and record["rollback"] is not None
    assert record["reason"].startswith("controller step gate failed: ValueError: bad weights")
    assert record["code"] == "internal_error"


def test_an_error_while_recording_a_target_fails_that_target_with_its_outcome_unknown(tmp_path, monkeypatch):
    location = stored(tmp_path)
    with monkeypatch.context() as patched:
        broken(patched, "target", TypeError("unexpected result"))
        answer = step(location, "target", target="a", result={}, plan=plan("a"))
    assert answer["target"]["status"] == "Failed" and answer["target"]["outcomeUnknown"] is True
    gate = step(location, "gate", targets=["a"])
    assert gate["proceed"] is False and "target a failed" in gate["gate"]["reason"]
    step(location, "finish")
    record = job(location)
    assert record["status"] == "RollingBack" and record["rollback"]["batches"] == [["a"]]  # it may run the release


def test_an_error_in_finish_fails_the_job_with_its_rollback_skipped_and_said_why(tmp_path, monkeypatch):
    location = stored(tmp_path)
    succeed(location, "a")
    with monkeypatch.context() as patched:
        broken(patched, "finish", RuntimeError("boom"))
        orders = step(location, "finish")
    record = job(location)
    assert record["status"] == "Failed" and record["promotion"] == "Failed"
    assert record["rollback"] == {
        "attempted": False,
        "skipReason": "controller_step_failed",
        "error": {"code": "internal_error", "reason": "RuntimeError: boom"},
    }
    assert record["reason"].endswith("(auto-rollback skipped: the controller's finish step failed: RuntimeError: boom)")
    assert record["targets"]["b"]["status"] == "Skipped" and orders["rollbackOrder"] == []
    closed = step(location, "close")
    assert closed["status"] == "Failed" and job(location)["status"] == "Failed"


@pytest.mark.parametrize("code", ["job_store_failed", "job_interrupted", "job_not_found"])
def test_an_error_that_says_the_job_cannot_be_written_is_not_recorded(tmp_path, monkeypatch, code):
    location = stored(tmp_path)
    with monkeypatch.context() as patched:
        broken(patched, "gate", StellaError(code, "no"))
        with pytest.raises(StellaError) as err:
            step(location, "gate", targets=["a"])
    assert err.value.code == code and "stepFailure" not in job(location)


def test_an_error_in_a_step_outside_a_running_job_is_raised_as_before(tmp_path, monkeypatch):
    location = stored(tmp_path)
    with monkeypatch.context() as patched:
        broken(patched, "show", KeyError("x"))
        with pytest.raises(KeyError):
            step(location, "show")


def test_the_first_step_failure_is_kept_and_a_finished_target_is_left_as_it_is():
    record = _job.start(
        _job.new_job(
            job_id="j", job_id_source=None, summary={}, batches=[["a"]], targets={"a": {}}, options={}, now=T0
        ),
        T0,
    )
    record = _job.finish_target(record, "a", succeeded=True, now=T0)
    first = _step_failure.step_failed(
        record, step="traffic", code="internal_error", reason="one", now=T0, batch=0, target="a"
    )
    second = _step_failure.step_failed(first, step="gate", code="internal_error", reason="two", now=T0, batch=0)
    assert second["stepFailure"]["reason"] == "one" and second["targets"]["a"]["status"] == "Succeeded"
    assert record.get("stepFailure") is None  # pure
