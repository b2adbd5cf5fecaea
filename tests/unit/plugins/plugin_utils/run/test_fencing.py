"""The controller's half of the fence: claim generations that only grow per project, handed out when a
job claims its projects; the store's word right before work is sent; what the target refused recorded on
a job that was meanwhile recorded interrupted. On a real SQLite store."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import fencing as _fencing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00.000000Z"


def new(job_id, targets=("a", "b")):
    return _job.new_job(
        job_id=job_id,
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=[list(targets)],
        targets={n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in targets},
        options={},
        now=T0,
    )


@pytest.fixture
def store(tmp_path):
    opened = _job_store.open_store(str(tmp_path / "jobs.sqlite3"))
    yield opened
    opened.close()


def finish(store, job_id):
    store.update(job_id, lambda r: _job.start(r, T0), lambda r: _job.finish(r, T0))


def test_each_claimed_project_gets_the_next_generation_and_generations_only_grow(store):
    store.clock = lambda: 1000.0  # generations are at least the store's clock in milliseconds
    first, held = store.create(new("job-1"))
    assert held == {}
    assert first["targets"]["a"]["claim"] == {
        "jobId": "job-1",
        "generation": 1000000,
        "projectKey": "id-a|shop",
        "storeId": store.store_id,
    }
    assert store.get("job-1")["targets"]["b"]["claim"]["generation"] == 1000000  # persisted with the record
    busy, held = store.create(new("job-2", ("a",)))
    assert held == {"a": "job-1"} and "claim" not in busy["targets"]["a"]  # a refused job claims nothing
    finish(store, "job-1")
    third, _held = store.create(new("job-3", ("a",)))
    assert third["targets"]["a"]["claim"]["generation"] == 1000001  # the clock did not move: the last one plus one
    finish(store, "job-3")
    fourth, _held = store.create(new("job-4", ("a", "b")))
    assert [fourth["targets"][n]["claim"]["generation"] for n in ("a", "b")] == [1000002, 1000001]  # per project
    finish(store, "job-4")
    store.clock = lambda: 2000.5
    assert store.create(new("job-5", ("a",)))[0]["targets"]["a"]["claim"]["generation"] == 2000500
    finish(store, "job-5")
    store.clock = lambda: 10.0  # a clock set back: generations still only grow
    assert store.create(new("job-6", ("a",)))[0]["targets"]["a"]["claim"]["generation"] == 2000501


def test_a_store_restored_from_a_backup_never_hands_out_a_generation_twice(tmp_path):
    """The backup keeps the store's id and its old counters; the clock has moved on since it was taken."""
    location = tmp_path / "jobs.sqlite3"
    store = _job_store.open_store(str(location))
    store.clock = lambda: 1000.0
    finish_claim = store.create(new("job-1", ("a",)))[0]["targets"]["a"]["claim"]
    finish(store, "job-1")
    store.close()
    backup = tmp_path / "backup.sqlite3"
    backup.write_bytes(location.read_bytes())
    store = _job_store.open_store(str(location))
    store.clock = lambda: 1005.0
    handed = []
    for n in (2, 3):
        handed.append(store.create(new("job-%d" % n, ("a",)))[0]["targets"]["a"]["claim"])
        finish(store, "job-%d" % n)
    store.close()
    for suffix in ("-wal", "-shm"):
        (tmp_path / ("jobs.sqlite3" + suffix)).unlink(missing_ok=True)
    location.write_bytes(backup.read_bytes())
    restored = _job_store.open_store(str(location))
    try:
        restored.clock = lambda: 1010.0
        after = restored.create(new("job-4", ("a",)))[0]["targets"]["a"]["claim"]
    finally:
        restored.close()
    assert [c["generation"] for c in handed] == [1005000, 1005001]
    assert after["generation"] == 1010000 > max(c["generation"] for c in handed)
    assert after["storeId"] == finish_claim["storeId"] == handed[0]["storeId"]


def test_a_store_has_an_id_of_its_own_kept_with_it(tmp_path):
    first = _job_store.open_store(str(tmp_path / "one.sqlite3"))
    second = _job_store.open_store(str(tmp_path / "two.sqlite3"))
    try:
        ids = (first.store_id, second.store_id)
        assert ids[0] != ids[1] and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
        first._execute("DELETE FROM store_identity")  # a store whose tables were emptied gets a new id
    finally:
        first.close()
        second.close()
    again = _job_store.open_store(str(tmp_path / "two.sqlite3"))
    emptied = _job_store.open_store(str(tmp_path / "one.sqlite3"))
    try:
        assert again.store_id == ids[1] and emptied.store_id not in ids
    finally:
        again.close()
        emptied.close()


def test_the_caller_s_record_is_left_as_it_was(store):
    record = new("job-1")
    store.create(record)
    assert "claim" not in record["targets"]["a"]


def test_the_store_says_whether_a_job_still_holds_its_project(store, tmp_path):
    claim = store.create(new("job-1"))[0]["targets"]["a"]["claim"]
    store.update("job-1", lambda r: _job.start(r, T0))
    location = str(tmp_path / "jobs.sqlite3")
    assert store.standing("job-1", "id-a|shop") == ("Running", False, "job-1", claim["generation"])
    _fencing.check(location, claim)  # it does
    store.update("job-1", lambda r: _job.interrupted(r, T0, "its claim lease expired"))
    with pytest.raises(StellaError) as err:
        _fencing.check(location, claim)
    assert err.value.code == "claim_superseded" and "recorded interrupted" in err.value.reason
    assert "nothing was sent to the target" in err.value.reason


@pytest.mark.parametrize(
    "standing, why",
    [
        ((None, False, None, None), "is not in the job store"),
        (("Running", True, "job-1", 1), "recorded interrupted"),
        (("Succeeded", False, None, 1), "has already ended (Succeeded)"),
        (("Running", False, "job-2", 2), "is held by job job-2"),
        (("Running", False, None, 1), "is held by no job"),
        (("Running", False, "job-1", 2), "was claimed again (generation 2, this job's 1)"),
    ],
)
def test_what_refuses_the_work(standing, why):
    claim = {"jobId": "job-1", "generation": 1, "projectKey": "t|p"}
    assert why in _fencing.refusal(claim, *standing)


def test_a_job_that_still_holds_its_project_may_send_its_work():
    claim = {"jobId": "job-1", "generation": 1, "projectKey": "t|p"}
    assert _fencing.refusal(claim, "Running", False, "job-1", 1) is None
    assert _fencing.refusal(claim, "RollingBack", False, "job-1", 1) is None


def test_work_the_target_refused_is_recorded_on_a_job_recorded_interrupted(store, tmp_path):
    store.create(new("job-1", ("a",)))
    store.update(
        "job-1",
        lambda r: _job.start(r, T0),
        lambda r: _job.interrupted(r, T0, "not renewed for longer than its claim lease of 6s"),
    )
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    failure = {"failed": True, "code": "claim_superseded", "msg": "job job-1 (claim generation 1) was superseded"}
    args.update(step="target", store=str(tmp_path / "jobs.sqlite3"), job_id="job-1", target="a", failure=failure)
    answer = JobRunner({}, False).run(args)
    assert answer["target"]["code"] == "claim_superseded"
    record = store.get("job-1")
    assert (record["status"], record["code"]) == ("Failed", "claim_superseded")
    assert "its work on a was refused: job job-1 (claim generation 1) was superseded" in record["reason"]
    assert record["interrupted"]["why"].startswith("not renewed")
    args.update(failure={"failed": True, "code": "deploy_failed", "msg": "x"})  # any other outcome is refused
    with pytest.raises(StellaError) as err:
        JobRunner({}, False).run(args)
    assert err.value.code == "job_interrupted"
