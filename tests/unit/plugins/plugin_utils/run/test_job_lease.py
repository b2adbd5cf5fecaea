"""The claim lease (docs/job-store.md#claim-lease): when another controller may take a job's run for gone,
on real SQLite stores fed by real job changes, and what a run that was still alive does next."""

from __future__ import annotations

import datetime
import json
import sqlite3

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import (
    interrupt_gone_jobs,
    refuse_interrupted,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    seconds_between,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view

T0 = "2026-03-01T10:00:00.000000Z"
T1 = "2026-03-01T10:05:00.000000Z"
ELSEWHERE = {"host": "controller-b.invalid", "pid": 4242, "startTicks": 1}  # another controller's run


def at(seconds_after_t1):
    """The contract timestamp ``seconds_after_t1`` seconds after T1."""
    return utc_timestamp(
        datetime.datetime(2026, 3, 1, 10, 5, tzinfo=datetime.timezone.utc)
        + datetime.timedelta(seconds=seconds_after_t1)
    )


def pending_job(lease, owner=None):
    """job-1 (targets a, b of project shop) created at T0 with claim lease ``lease``, owned by ``owner``
    (default: a run on another controller)."""
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in ("a", "b")}
    return _job.new_job(
        job_id="job-1",
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=[["a"], ["b"]],
        targets=targets,
        options={"claimLeaseSeconds": lease},
        now=T0,
        owner=owner or ELSEWHERE,
    )


def job(lease, status="Running", owner=None, updated=T1):
    """A job record as the store keeps it: started at T0, last changed at ``updated``."""
    return dict(_job.start(pending_job(lease, owner), T0), status=status, updatedAt=updated)


def test_seconds_between_contract_timestamps():
    assert seconds_between(T0, T1) == 300.0
    assert seconds_between(T1, T0) == -300.0
    assert seconds_between("2026-03-01T10:00:00.250000Z", "2026-03-01T10:00:01.000000Z") == 0.75
    assert seconds_between(None, T1) is None
    assert seconds_between("yesterday", T1) is None


@pytest.mark.parametrize(
    "lease, status, now, expired",
    [
        (900, "Running", at(900), False),  # exactly the lease: still held
        (900, "Running", at(901), True),  # one second past it
        (900, "RollingBack", at(901), True),  # a rollback in progress is a run too
        (900, "Pending", at(901), True),
        (0, "Running", at(100000), False),  # no lease: never taken for gone from elsewhere
        (900, "Succeeded", at(100000), False),  # finished jobs hold nothing
        (900, "Failed", at(100000), False),
        (900, "Running", at(-60), False),  # a reader whose clock is behind
    ],
)
def test_lease_expired(lease, status, now, expired):
    assert _job_owner.lease_expired(job(lease, status), now) is expired


def test_a_job_without_readable_timestamps_is_not_taken_for_gone():
    assert _job_owner.lease_expired(job(60, updated="not a time"), at(10000)) is False


def test_gone_why_names_the_idle_time_the_lease_and_the_owner():
    assert _job_owner.gone_why(job(900), at(899)) is None
    assert _job_owner.gone_why(job(900), at(912)) == (
        "interrupted: no change or lease renewal for 912s, longer than its claim lease of 900s (controller "
        "controller-b.invalid, pid 4242)"
    )


def test_a_run_gone_on_this_host_is_interrupted_whatever_its_lease():
    gone_here = dict(_job_owner.controller_owner(), pid=2**22 + 7, startTicks=1)  # no such process
    assert _job_owner.gone_why(job(900, owner=gone_here), at(1)).startswith(
        "interrupted: the controller run (pid %d) ended" % gone_here["pid"]
    )


def stored(tmp_path, lease, updated=T1):
    """A store holding job-1 (targets a, b of project shop), Running since T0, last changed at
    ``updated``, owned by a run on another controller; target a is being deployed."""
    store = _job_store.open_store(str(tmp_path / "jobs.sqlite3"))
    store.create(pending_job(lease))
    store.update("job-1", lambda r: _job.start(r, T0))
    store.update(
        "job-1",
        lambda r: _job.record_phase(
            r, "a", entry=_job.phase_entry("prepare", "succeeded", completed_at=updated, duration_ms=10), now=updated
        ),
    )
    return store


def new_job_for_a(store, job_id, now):
    targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}}
    return store.create(
        _job.new_job(
            job_id=job_id,
            job_id_source=None,
            summary={"release": {"id": "r2"}},
            batches=[["a"]],
            targets=targets,
            options={},
            now=now,
        )
    )


def test_an_expired_lease_releases_the_projects_to_the_next_job(tmp_path):
    store = stored(tmp_path, 900)
    try:
        # within the lease the project stays held
        assert interrupt_gone_jobs(store, at(900)) == []
        assert new_job_for_a(store, "job-2", at(900))[1] == {"a": "job-1"}

        assert interrupt_gone_jobs(store, at(901)) == ["job-1"]
        record = store.get("job-1")
        assert (record["status"], record["promotion"], record["code"]) == ("Failed", "Failed", "job_interrupted")
        assert record["interrupted"] == {
            "at": at(901),
            "why": "interrupted: no change or lease renewal for 901s, "
            "longer than its claim lease of 900s (controller controller-b.invalid, "
            "pid 4242)",
        }
        assert (record["targets"]["a"]["status"], record["targets"]["b"]["status"]) == ("Failed", "Skipped")
        assert store.claims() == {}
        assert store.projection("job-1")["terminal"] is True
        _stored, held = new_job_for_a(store, "job-3", at(902))
        assert held == {} and store.claims() == {"id-a|shop": "job-3"}
        # a second pass has nothing left to do (job-3 has no lease)
        assert interrupt_gone_jobs(store, at(10**6)) == []
    finally:
        store.close()


def test_without_a_lease_another_controller_never_takes_the_job(tmp_path):
    store = stored(tmp_path, 0)
    try:
        assert interrupt_gone_jobs(store, at(10**6)) == []
        assert store.get("job-1")["status"] == "Running"
        assert new_job_for_a(store, "job-2", at(10**6))[1] == {"a": "job-1"}
    finally:
        store.close()


def test_every_step_renews_the_lease(tmp_path):
    store = stored(tmp_path, 900, updated=at(600))  # the last step persisted 600 s after T1
    try:
        assert interrupt_gone_jobs(store, at(1400)) == []
        assert interrupt_gone_jobs(store, at(1501)) == ["job-1"]
    finally:
        store.close()


def test_a_run_still_alive_stops_at_its_next_step(tmp_path):
    store = stored(tmp_path, 900)
    try:
        refuse_interrupted(store.get("job-1"))  # not interrupted: goes on
        interrupt_gone_jobs(store, at(901))
        with pytest.raises(StellaError) as caught:
            refuse_interrupted(store.get("job-1"))
        assert caught.value.code == "job_interrupted" and caught.value.phase == "job"
        assert caught.value.reason == (
            "job job-1 was recorded interrupted, this run stops: interrupted: no change "
            "or lease renewal for 901s, longer than its claim lease of 900s (controller "
            "controller-b.invalid, pid 4242)"
        )
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
        refuse_interrupted(record)
    assert caught.value.code == "job_interrupted"


def test_idle_time_counts_from_the_later_of_the_last_change_and_the_last_renewal():
    assert _job_owner.idle_seconds(dict(job(900), leaseRenewedAt=at(500)), at(600)) == 100
    assert _job_owner.idle_seconds(dict(job(900, updated=at(550)), leaseRenewedAt=at(500)), at(600)) == 50
    assert _job_owner.idle_seconds(dict(job(900, updated="not a time"), leaseRenewedAt=at(500)), at(600)) == 100
    assert _job_owner.idle_seconds(dict(job(900, updated="not a time")), at(600)) is None


def test_a_renewal_holds_the_job_without_writing_a_revision(tmp_path):
    store = stored(tmp_path, 900)
    try:
        before = store.get("job-1")
        assert "leaseRenewedAt" not in before
        assert store.renew_lease("job-1", at(800)) == "Running"
        renewed = store.get("job-1")
        assert renewed["leaseRenewedAt"] == at(800)
        assert renewed["revision"] == before["revision"] and renewed["updatedAt"] == before["updatedAt"]
        assert len(store.history("job-1")) == before["revision"]
        assert [r.get("leaseRenewedAt") for r in store.unfinished()] == [at(800)]
        assert [r.get("leaseRenewedAt") for r in store.list()] == [at(800)]
        # past the lease counted from the last change, within it counted from the renewal
        assert interrupt_gone_jobs(store, at(1700)) == []
        assert interrupt_gone_jobs(store, at(1701)) == ["job-1"]
        # the renewal is never part of the stored record, and a finished job holds no lease
        assert store.get("job-1").get("leaseRenewedAt") is None
        assert all("leaseRenewedAt" not in json.loads(r[0]) for r in store._read("SELECT record FROM deployment_jobs"))
        assert store._read("SELECT job_id FROM job_leases") == []
        assert store.renew_lease("job-1", at(1800)) == "Failed"
        assert store._read("SELECT job_id FROM job_leases") == []
        assert store.renew_lease("no-such-job", at(1800)) is None
    finally:
        store.close()


def test_a_step_after_a_renewal_keeps_the_renewal_out_of_the_record(tmp_path):
    store = stored(tmp_path, 900)
    try:
        store.renew_lease("job-1", at(800))
        seen = []
        after = store.update(
            "job-1",
            lambda r: (
                seen.append(r.get("leaseRenewedAt"))
                or _job.record_phase(
                    r,
                    "a",
                    entry=_job.phase_entry("deploy", "succeeded", completed_at=at(850), duration_ms=10),
                    now=at(850),
                )
            ),
        )
        assert seen == [at(800)]  # the change sees the renewal (an interrupt re-checks it)
        assert after["leaseRenewedAt"] == at(800)
        assert all("leaseRenewedAt" not in json.loads(r[0]) for r in store._read("SELECT record FROM deployment_jobs"))
    finally:
        store.close()


def test_a_renewal_between_the_look_and_the_write_keeps_the_job(tmp_path):
    """Another controller read the job when its lease had expired; before it wrote, the run renewed it."""
    store = stored(tmp_path, 900)
    try:
        looked = store.get("job-1")
        assert _job_owner.gone_why(looked, at(1000)) is not None
        store.renew_lease("job-1", at(999))
        assert _job_owner.interrupt_gone(store, looked, at(1000))["status"] == "Running"
        assert store.get("job-1").get("interrupted") is None and store.claims() == {
            "id-a|shop": "job-1",
            "id-b|shop": "job-1",
        }
    finally:
        store.close()


def test_a_store_made_before_leases_is_migrated_and_keeps_its_jobs(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(str(path))
    old.execute(_job_schema.VERSION_TABLE)
    for step in (1, 2):
        for statement in _job_schema.MIGRATIONS[step]:
            old.execute(statement)
    old.execute("INSERT INTO stella_schema (name, version) VALUES ('job_store', 2)")
    old.commit()
    old.close()
    store = _job_store.open_store(str(path))
    try:
        assert store.migration["from"] == 2 and store.migration["to"] == _job_schema.SCHEMA_VERSION == 7
        store.create(pending_job(900))
        store.update("job-1", lambda r: _job.start(r, T0))
        assert store.renew_lease("job-1", T1) == "Running" and store.get("job-1")["leaseRenewedAt"] == T1
    finally:
        store.close()


def test_job_show_names_the_lease_while_the_job_runs_and_evidence_leaves_the_renewal_out():
    running = dict(job(900), leaseRenewedAt=at(30))
    text = _job_view.render_text(running)
    assert (
        "claim lease 900s  run: controller controller-b.invalid pid 4242  changed %s  renewed %s" % (T1, at(30))
        in text.splitlines()
    )
    assert "claim lease" not in _job_view.render_text(job(0))
    assert "claim lease" not in _job_view.render_text(dict(running, status="Succeeded"))
    assert _job_view.job_evidence(running) == _job_view.job_evidence(job(900))
    assert "leaseRenewedAt" not in _job_view.job_evidence(running)
