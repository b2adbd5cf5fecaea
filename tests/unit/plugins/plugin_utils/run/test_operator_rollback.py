"""An operator rollback of a finished deployment, on a real SQLite store through the steps' own entry
point: the deployment (its record and its ``deployments`` projection) is ``RollingBack`` from the
rollback's start, and ends ``RolledBack`` (or ``Failed``) with it, its projection carrying the rollback's
traffic rollback; a deployment already rolled back (or being rolled back) is not rolled back again."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00.000000Z"
DIGEST = "sha256:" + "2" * 64
GONE_OWNER = {"host": "elsewhere", "pid": 1, "startTicks": 1}


def finished_deployment(tmp_path, owner=None):
    """``job-1``: a finished (``Succeeded``, terminal projection) deployment of a and b, both with a
    retained previous revision."""
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    try:
        targets = {
            n: {"targetId": "id-" + n, "targetName": n, "targetType": "ComposeHost", "projectName": "shop"}
            for n in ("a", "b")
        }
        store.create(
            _job.new_job(
                job_id="job-1",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"], ["b"]],
                targets=targets,
                options={},
                now=T0,
                owner=owner,
            )
        )
        store.update(
            "job-1",
            lambda r: _job.start(r, T0),
            lambda r: _job.finish_target(r, "a", succeeded=True, now=T0, facts={"previousRevisionPath": "/p/a/r0"}),
            lambda r: _job.finish_target(r, "b", succeeded=True, now=T0, facts={"previousRevisionPath": "/p/b/r0"}),
            lambda r: _job.finish(r, T0),
        )
        store.project_terminal("job-1", _projection.strategy_evidence(store.get("job-1")), T0)
    finally:
        store.close()
    return location


def step(location, name, **given):
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, **given)
    return JobRunner({}, False).run(args)


def read(location, what, *args):
    store = _job_store.open_store(location)
    try:
        return getattr(store, what)(*args)
    finally:
        store.close()


def restored():
    return {"rollbackRestored": True, "services": [{"service": "web", "state": "running", "imageDigest": DIGEST}]}


def test_the_deployment_is_rolling_back_from_the_rollback_s_start(tmp_path):
    location = finished_deployment(tmp_path)
    orders = step(location, "rollback_start", job_id="job-1", reason="operator: bad release")
    rollback_id = orders["jobId"]
    # before any target was rolled back: the record and its projection say RollingBack
    assert read(location, "get", "job-1")["status"] == "RollingBack"
    projection = read(location, "projection", "job-1")
    assert (projection["status"], projection["terminal"]) == ("RollingBack", False)
    assert "rollback.jobId" not in projection["strategyEvidence"]
    assert [h["status"] for h in read(location, "projection_history", "job-1")][-2:] == ["Succeeded", "RollingBack"]
    for name in orders["rollbackOrder"]:
        step(location, "rollback_target", job_id=rollback_id, target=name, result=restored())
    step(location, "close", job_id=rollback_id)
    source = read(location, "get", "job-1")
    assert source["status"] == "RolledBack"
    assert [e["kind"] for e in source["events"]] == ["RollbackStarted", "RollbackCompleted"]
    assert [h["status"] for h in read(location, "history", "job-1")][-2:] == ["RollingBack", "RolledBack"]
    projection = read(location, "projection", "job-1")
    assert (projection["status"], projection["terminal"]) == ("RolledBack", True)
    assert projection["strategyEvidence"]["rollback.jobId"] == rollback_id
    assert [h["status"] for h in read(location, "projection_history", "job-1")][-2:] == ["RollingBack", "RolledBack"]
    step(location, "close", job_id=rollback_id)  # a second close changes nothing
    assert read(location, "get", "job-1")["revision"] == source["revision"]


def test_the_deployment_being_rolled_back_is_never_taken_for_gone_itself(tmp_path, monkeypatch):
    location = finished_deployment(tmp_path, owner=GONE_OWNER)
    step(location, "rollback_start", job_id="job-1")
    monkeypatch.setattr(_owner, "owner_gone", lambda owner: owner == GONE_OWNER)
    source = read(location, "get", "job-1")
    assert source["status"] == "RollingBack" and _owner.gone_why(source, T0) is None


def test_an_interrupted_rollback_job_ends_the_deployment_s_recovery_failed(tmp_path):
    location = finished_deployment(tmp_path)
    rollback_id = step(location, "rollback_start", job_id="job-1")["jobId"]
    store = _job_store.open_store(location)
    try:
        _owner.record_interrupted(store, rollback_id, "interrupted by an operator")
        source = store.get("job-1")
        projection = store.projection("job-1")
    finally:
        store.close()
    assert source["status"] == "Failed" and source["recovery"]["status"] == "rollback_failed"
    assert [e["kind"] for e in source["events"]] == ["RollbackStarted", "RollbackFailed"]
    assert (projection["status"], projection["terminal"]) == ("Failed", True)
    assert projection["strategyEvidence"]["rollback.status"] == "failed"


def rolled_back(location):
    """``job-1`` rolled back by an operator rollback job that ended ``RolledBack``; its id."""
    orders = step(location, "rollback_start", job_id="job-1")
    for name in orders["rollbackOrder"]:
        step(location, "rollback_target", job_id=orders["jobId"], target=name, result=restored())
    step(location, "close", job_id=orders["jobId"])
    assert read(location, "get", "job-1")["status"] == "RolledBack"
    return orders["jobId"]


def test_rolling_back_a_deployment_already_rolled_back_is_refused_before_anything_is_stored(tmp_path):
    location = finished_deployment(tmp_path)
    first = rolled_back(location)
    before = read(location, "get", "job-1")
    with pytest.raises(StellaError) as caught:  # even with a revision given for a target
        step(location, "rollback_start", job_id="job-1", revision_paths={"a": "/p/a/r0"})
    assert caught.value.code == "rollback_already_done" and "RolledBack" in caught.value.reason
    assert sorted(r["jobId"] for r in read(location, "list", 100)) == sorted(["job-1", first])
    assert read(location, "get", "job-1") == before and read(location, "claims") == {}
    # so is the rollback of a deployment whose rollback is under way, and of a rollback job
    location = finished_deployment(tmp_path / "again")
    started = step(location, "rollback_start", job_id="job-1")["jobId"]
    for job_id in ("job-1", started):
        with pytest.raises(StellaError) as caught:
            step(location, "rollback_start", job_id=job_id, revision_paths={"a": "/p/a/r0"})
        assert caught.value.code == "rollback_already_done"


def test_the_operator_rollback_s_traffic_rollback_is_projected_onto_the_deployment(tmp_path):
    location = finished_deployment(tmp_path)
    orders = step(location, "rollback_start", job_id="job-1")
    back = {
        "strategy.traffic.rollback.mode": "traffic_rollback",
        "strategy.traffic.rollback.status": "restored",
        "strategy.traffic.rollback.shifted": True,
        "strategy.traffic.rollback.slot": "active",
    }
    store = _job_store.open_store(location)
    try:
        store.update(orders["jobId"], lambda r: _job_traffic.record_rollback(r, evidence=back, now=T0))
    finally:
        store.close()
    for name in orders["rollbackOrder"]:
        step(location, "rollback_target", job_id=orders["jobId"], target=name, result=restored())
    step(location, "close", job_id=orders["jobId"])
    evidence = read(location, "projection", "job-1")["strategyEvidence"]
    assert {key: evidence.get(key) for key in back} == back
