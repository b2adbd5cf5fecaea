"""The claim lease (docs/job-store.md#claim-lease): when another controller may take a job's run for gone,
on real SQLite stores fed by real job changes, and what a run that was still alive does next."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ActionModule
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils._contract import seconds_between, utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils import _job, _job_owner, _job_store

T0 = "2026-03-01T10:00:00.000000Z"
T1 = "2026-03-01T10:05:00.000000Z"
ELSEWHERE = {"host": "controller-b.invalid", "pid": 4242, "startTicks": 1}  # another controller's run


def at(seconds_after_t1):
    """The contract timestamp ``seconds_after_t1`` seconds after T1."""
    return utc_timestamp(datetime.datetime(2026, 3, 1, 10, 5, tzinfo=datetime.timezone.utc)
                         + datetime.timedelta(seconds=seconds_after_t1))


def pending_job(lease, owner=None):
    """job-1 (targets a, b of project shop) created at T0 with claim lease ``lease``, owned by ``owner``
    (default: a run on another controller)."""
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in ("a", "b")}
    return _job.new_job("job-1", None, {"release": {"id": "r1"}}, [["a"], ["b"]], targets,
                        {"claimLeaseSeconds": lease}, T0, owner=owner or ELSEWHERE)


def job(lease, status="Running", owner=None, updated=T1):
    """A job record as the store keeps it: started at T0, last changed at ``updated``."""
    return dict(_job.start(pending_job(lease, owner), T0), status=status, updatedAt=updated)


def test_seconds_between_contract_timestamps():
    assert seconds_between(T0, T1) == 300.0
    assert seconds_between(T1, T0) == -300.0
    assert seconds_between("2026-03-01T10:00:00.250000Z", "2026-03-01T10:00:01.000000Z") == 0.75
    assert seconds_between(None, T1) is None
    assert seconds_between("yesterday", T1) is None


@pytest.mark.parametrize("lease, status, now, expired", [
    (900, "Running", at(900), False),       # exactly the lease: still held
    (900, "Running", at(901), True),        # one second past it
    (900, "RollingBack", at(901), True),    # a rollback in progress is a run too
    (900, "Pending", at(901), True),
    (0, "Running", at(100000), False),      # no lease: never taken for gone from elsewhere
    (900, "Succeeded", at(100000), False),  # finished jobs hold nothing
    (900, "Failed", at(100000), False),
    (900, "Running", at(-60), False),       # a reader whose clock is behind
])
def test_lease_expired(lease, status, now, expired):
    assert _job_owner.lease_expired(job(lease, status), now) is expired


def test_a_job_without_readable_timestamps_is_not_taken_for_gone():
    assert _job_owner.lease_expired(job(60, updated="not a time"), at(10000)) is False


def test_gone_why_names_the_idle_time_the_lease_and_the_owner():
    assert _job_owner.gone_why(job(900), at(899)) is None
    assert _job_owner.gone_why(job(900), at(912)) == (
        "interrupted: no change for 912s, longer than its claim lease of 900s (controller controller-b.invalid, "
        "pid 4242)")


def test_a_run_gone_on_this_host_is_interrupted_whatever_its_lease():
    gone_here = dict(_job_owner.controller_owner(), pid=2 ** 22 + 7, startTicks=1)  # no such process
    assert _job_owner.gone_why(job(900, owner=gone_here), at(1)).startswith(
        "interrupted: the controller run (pid %d) ended" % gone_here["pid"])


def stored(tmp_path, lease, updated=T1):
    """A store holding job-1 (targets a, b of project shop), Running since T0, last changed at
    ``updated``, owned by a run on another controller; target a is being deployed."""
    store = _job_store.open_store(str(tmp_path / "jobs.sqlite3"))
    store.create(pending_job(lease))
    store.update("job-1", lambda r: _job.start(r, T0))
    store.update("job-1", lambda r: _job.record_phase(r, "a", "prepare", "succeeded", None, updated, 10, updated))
    return store


def new_job_for_a(store, job_id, now):
    targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}}
    return store.create(_job.new_job(job_id, None, {"release": {"id": "r2"}}, [["a"]], targets, {}, now))


def test_an_expired_lease_releases_the_projects_to_the_next_job(tmp_path):
    store = stored(tmp_path, 900)
    try:
        # within the lease the project stays held
        assert ActionModule._interrupt_gone_jobs(store, at(900)) == []
        assert new_job_for_a(store, "job-2", at(900))[1] == {"a": "job-1"}

        assert ActionModule._interrupt_gone_jobs(store, at(901)) == ["job-1"]
        record = store.get("job-1")
        assert (record["status"], record["promotion"], record["code"]) == ("Failed", "Failed", "job_interrupted")
        assert record["interrupted"] == {"at": at(901), "why": "interrupted: no change for 901s, longer than its "
                                         "claim lease of 900s (controller controller-b.invalid, pid 4242)"}
        assert (record["targets"]["a"]["status"], record["targets"]["b"]["status"]) == ("Failed", "Skipped")
        assert store.claims() == {}
        assert store.projection("job-1")["terminal"] is True
        _stored, held = new_job_for_a(store, "job-3", at(902))
        assert held == {} and store.claims() == {"id-a|shop": "job-3"}
        # a second pass has nothing left to do (job-3 has no lease)
        assert ActionModule._interrupt_gone_jobs(store, at(10 ** 6)) == []
    finally:
        store.close()


def test_without_a_lease_another_controller_never_takes_the_job(tmp_path):
    store = stored(tmp_path, 0)
    try:
        assert ActionModule._interrupt_gone_jobs(store, at(10 ** 6)) == []
        assert store.get("job-1")["status"] == "Running"
        assert new_job_for_a(store, "job-2", at(10 ** 6))[1] == {"a": "job-1"}
    finally:
        store.close()


def test_every_step_renews_the_lease(tmp_path):
    store = stored(tmp_path, 900, updated=at(600))  # the last step persisted 600 s after T1
    try:
        assert ActionModule._interrupt_gone_jobs(store, at(1400)) == []
        assert ActionModule._interrupt_gone_jobs(store, at(1501)) == ["job-1"]
    finally:
        store.close()


def test_a_run_still_alive_stops_at_its_next_step(tmp_path):
    store = stored(tmp_path, 900)
    try:
        ActionModule._refuse_interrupted(store.get("job-1"))  # not interrupted: goes on
        ActionModule._interrupt_gone_jobs(store, at(901))
        with pytest.raises(StellaError) as caught:
            ActionModule._refuse_interrupted(store.get("job-1"))
        assert caught.value.code == "job_interrupted" and caught.value.phase == "job"
        assert caught.value.reason == ("job job-1 was recorded interrupted, this run stops: interrupted: no change "
                                       "for 901s, longer than its claim lease of 900s (controller "
                                       "controller-b.invalid, pid 4242)")
    finally:
        store.close()


def test_an_interrupted_rollback_is_refused_although_its_code_is_the_failure_s(tmp_path):
    """A job interrupted while rolling back keeps the code of the failure that started the rollback;
    ``interrupted`` still stops the run."""
    record = job(900)
    record = dict(record, status="RollingBack", code="service_unhealthy", reason="svc failed")
    record = _job.interrupted(record, at(901), "interrupted: lease")
    assert record["code"] == "service_unhealthy"
    with pytest.raises(StellaError) as caught:
        ActionModule._refuse_interrupted(record)
    assert caught.value.code == "job_interrupted"
