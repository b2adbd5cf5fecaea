"""``stella prune`` and an operator rollback under way: the deployment it rolls back is still in use
(the rollback's close reads it, records its recovery and writes evidence about it), so neither the
deployment nor its evidence is pruned while the rollback job is unfinished, however old it is. Once it
ended, the rollback job (whose evidence document the deployment's projection names) stays as long as the
deployment does."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import recovery as _recovery
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import retention as _retention

OLD = "2026-01-01T09:00:00.000000Z"


def stored(tmp_path, rollback_status):
    """An old finished deployment ``job-1`` (target a, a retained revision) and its operator rollback,
    ``rollback_status`` (``RollingBack``: under way; ``RolledBack``: ended), old too."""
    path = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(path)
    try:
        targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop", "targetType": "ComposeHost"}}
        store.create(
            _job.new_job(
                job_id="job-1",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"]],
                targets=targets,
                options={},
                now=OLD,
            )
        )
        store.update(
            "job-1",
            lambda r: _job.start(r, OLD),
            lambda r: _job.finish_target(r, "a", succeeded=True, now=OLD, facts={"previousRevisionPath": "/p/r0"}),
            lambda r: _job.finish(r, OLD),
        )
        rollback = _rollback.operator_rollback(store.get("job-1"), job_id="job-1-rollback-x", now=OLD)
        store.create(rollback)
        if rollback_status == "RolledBack":
            store.update(
                "job-1-rollback-x",
                lambda r: _rollback.finish_rollback_target(r, "a", succeeded=True, now=OLD),
                lambda r: _rollback.finish_rollback(r, OLD),
            )
        assert store.get("job-1-rollback-x")["status"] == rollback_status
        # a later deployment of another project on the same target: the target's health names it, not job-1
        other = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop-2", "targetType": "ComposeHost"}}
        store.create(
            _job.new_job(
                job_id="job-2",
                job_id_source=None,
                summary={"release": {"id": "r2"}},
                batches=[["a"]],
                targets=other,
                options={},
                now=utc_timestamp(),
            )
        )
        store.update(
            "job-2",
            lambda r: _job.start(r, utc_timestamp()),
            lambda r: _job.finish_target(r, "a", succeeded=True, now=utc_timestamp()),
            lambda r: _job.finish(r, utc_timestamp()),
        )
    finally:
        store.close()
    return path


def later(store):
    """A later deployment of another project on the same target: the target's health names it, not job-1."""
    other = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop-2", "targetType": "ComposeHost"}}
    store.create(
        _job.new_job(
            job_id="job-2",
            job_id_source=None,
            summary={"release": {"id": "r2"}},
            batches=[["a"]],
            targets=other,
            options={},
            now=utc_timestamp(),
        )
    )
    store.update(
        "job-2",
        lambda r: _job.start(r, utc_timestamp()),
        lambda r: _job.finish_target(r, "a", succeeded=True, now=utc_timestamp()),
        lambda r: _job.finish(r, utc_timestamp()),
    )


def evidence(root):
    for relative in ("jobs/job-1/job.json", "shop/job-1/a/deployment.json"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("{}\n")
    return root


def ids(path):
    store = _job_store.open_store(path)
    try:
        return sorted(r["jobId"] for r in store.list(100))
    finally:
        store.close()


def test_the_deployment_an_unfinished_rollback_rolls_back_and_its_evidence_stay(tmp_path, capsys):
    path = stored(tmp_path, "RollingBack")
    root = evidence(tmp_path / "evidence")
    rc = _command.main(["stella", "prune", "--older-than", "1", "--store", path, "--evidence-dir", str(root)])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, ""), err
    assert "job-1 " not in out and out.startswith("removed 0 finished jobs")
    assert ids(path) == ["job-1", "job-1-rollback-x", "job-2"]
    assert (root / "jobs" / "job-1" / "job.json").is_file() and (
        root / "shop" / "job-1" / "a" / "deployment.json"
    ).is_file()


def test_once_the_rollback_ended_both_may_go(tmp_path, capsys):
    path = stored(tmp_path, "RolledBack")
    root = evidence(tmp_path / "evidence")
    rc = _command.main(["stella", "prune", "--older-than", "1", "--store", path, "--evidence-dir", str(root)])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, ""), err
    assert "  job-1  " in out and "  job-1-rollback-x  " in out and ids(path) == ["job-2"]
    assert not (root / "jobs" / "job-1").exists() and not (root / "shop").exists()


def recovered(tmp_path):
    """``job-1`` rolled back by the operator rollback job ``job-1-rollback-x``, both old; job-1's projection
    names the rollback's evidence document (the rollback job's) and job-1 was updated last (the rollback's
    close ends the deployment's recovery after the rollback job itself)."""
    path = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(path)
    times = ["2026-01-01T09:00:0%d.000000Z" % n for n in range(4)]
    try:
        targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop", "targetType": "ComposeHost"}}
        store.create(
            _job.new_job(
                job_id="job-1",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"]],
                targets=targets,
                options={},
                now=times[0],
            )
        )
        store.update(
            "job-1",
            lambda r: _job.start(r, times[0]),
            lambda r: _job.finish_target(r, "a", succeeded=True, now=times[0], facts={"previousRevisionPath": "/p/r0"}),
            lambda r: _job.finish(r, times[0]),
        )
        store.project_terminal("job-1", _projection.strategy_evidence(store.get("job-1")), times[0])
        rollback, _held = store.create(
            _rollback.operator_rollback(store.get("job-1"), job_id="job-1-rollback-x", now=times[1])
        )
        _recovery.started(store, rollback, times[1])
        rollback = store.update(
            "job-1-rollback-x",
            lambda r: _rollback.finish_rollback_target(r, "a", succeeded=True, now=times[2]),
            lambda r: _rollback.finish_rollback(r, times[2]),
            documents={EVIDENCE_ID: b"{}\n"},
        )
        _recovery.ended(store, rollback, {"rollback.evidence.id": EVIDENCE_ID}, times[3])
        later(store)
    finally:
        store.close()
    return path


EVIDENCE_ID = "jobs/job-1-rollback-x/rollback-evidence.json"


@pytest.mark.parametrize("keep", [2, 0])
def test_no_rollback_evidence_id_is_left_pointing_at_a_removed_document(tmp_path, capsys, keep):
    path = recovered(tmp_path)
    rc = _command.main(["stella", "prune", "--older-than", "1", "--keep", str(keep), "--store", path])
    out, err = capsys.readouterr()
    assert (rc, err) == (0, ""), err
    store = _job_store.open_store(path)
    try:
        projection = store.projection("job-1")
        # --keep 2 keeps job-2 and the deployment, and with it the rollback job whose document its projection names
        assert (projection is not None) == bool(keep)
        if projection is not None:
            assert projection["strategyEvidence"]["rollback.evidence.id"] == EVIDENCE_ID
            assert store.document("job-1-rollback-x", EVIDENCE_ID) == b"{}\n"
        assert sorted(r["jobId"] for r in store.list(100)) == (
            ["job-1", "job-1-rollback-x", "job-2"] if keep else ["job-2"]
        )
    finally:
        store.close()


def test_prune_selection_keeps_a_rollback_job_while_the_job_it_rolled_back_stays():
    finished = [("job-1", "RolledBack", "t3"), ("job-1-rb", "RolledBack", "t2"), ("job-9-rb", "RolledBack", "t1")]
    # job-9 (job-9-rb's source) is no longer stored: nothing holds job-9-rb
    sources = {"job-1-rb": "job-1"}
    assert [r[0] for r in _retention.prune_selection(finished, set(), "t9", 1, sources)] == ["job-9-rb"]
    assert [r[0] for r in _retention.prune_selection(finished, set(), "t9", 0, sources)] == [
        "job-9-rb",
        "job-1-rb",
        "job-1",
    ]
    assert [r[0] for r in _retention.prune_selection(finished, {"job-1"}, "t9", 0, sources)] == ["job-9-rb"]
