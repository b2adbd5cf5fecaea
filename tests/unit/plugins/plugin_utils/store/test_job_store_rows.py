"""The job store's row layout (store/rows.py): one row per target, so recording one target writes that
target's part; what a job writes per target does not grow with the fleet (measured by the store's meter)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import meter as _meter
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import rows as _rows
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection

T0 = "2026-01-01T00:00:00Z"
PHASES = ["preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy", "evidence", "cleanup"]


def names(count):
    return ["host-%03d" % i for i in range(count)]


def batches_of(hosts, size):
    return [hosts[i : i + size] for i in range(0, len(hosts), size)]


def new_record(count, size=None, job_id="job-1"):
    hosts = names(count)
    targets = {n: {"targetId": "id-" + n, "projectName": "shop-" + n} for n in hosts}
    return _job.new_job(
        job_id=job_id,
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=batches_of(hosts, size or count),
        targets=targets,
        options={"autoRollbackOnFailure": True},
        now=T0,
    )


def outcome(record, name, at):
    """One target's recorded outcome, as the record step writes it: nine phases and its facts (a
    realistic size: hashes of its sticker, lock and manifest, a revision path, per-phase detail)."""
    for index, phase in enumerate(PHASES):
        record = _job.record_phase(
            record,
            name,
            entry=_job.phase_entry(
                phase,
                "passed",
                started_at=at,
                completed_at=at,
                duration_ms=10 + index,
                detail={"probes": "passed"} if phase == "verify" else None,
            ),
            now=at,
        )
    facts = {
        "artifacts": {k: "sha256:%064x" % i for i, k in enumerate(("sticker", "lock", "manifest", "hash"))},
        "previousRevisionPath": "/var/lib/stella/projects/shop-%s/.stella/revisions/1" % name,
        "evidence": {"deployment.json": {"sha256": "%064x" % 7, "document": "shop/%s/deployment.json" % name}},
    }
    return _job.finish_target(record, name, succeeded=True, now=at, facts=facts)


def run_job(store, count, size):
    """A whole successful job through the store: create, start, each target's outcome (one update each),
    a gate after each batch, finish. Returns the final record."""
    stored, _held = store.create(new_record(count, size))
    store.update("job-1", lambda r: _job.start(r, T0))
    plan = batches_of(names(count), size)
    for index, batch in enumerate(plan):
        for name in batch:
            store.update("job-1", lambda r, n=name: outcome(r, n, T0))
        if index + 1 < len(plan):
            store.update(
                "job-1",
                lambda r, i=index: _job.record_gate(
                    r, {"batch": i, "proceed": True, "reason": "batch %d healthy" % i}, T0
                ),
            )
    return store.update("job-1", lambda r: _job.finish(r, T0))


def metered_bytes(tmp_path, monkeypatch, count, size, tag):
    meter = tmp_path / ("meter-%s" % tag)
    monkeypatch.setenv(_meter.VARIABLE, str(meter))
    store = _job_store.open_store(str(tmp_path / ("jobs-%s.sqlite3" % tag)))
    try:
        created = _meter.total(str(meter))  # the schema's creation
        final = run_job(store, count, size)
        assert final["status"] == "Succeeded" and store.get("job-1") == final
    finally:
        store.close()
    return _meter.total(str(meter)) - created


def test_a_record_reads_back_whole_in_batch_order_after_row_writes(tmp_path):
    store = _job_store.open_store(str(tmp_path / "jobs.sqlite3"))
    try:
        final = run_job(store, 7, 3)
        expected = new_record(7, 3)
        for change in [lambda r: _job.start(r, T0)] + [lambda r, n=n: outcome(r, n, T0) for n in names(7)]:
            expected = change(expected)
        assert list(final["targets"]) == names(7)
        assert final["targets"] == store.get("job-1")["targets"]
        assert {n: t["status"] for n, t in final["targets"].items()} == {n: "Succeeded" for n in names(7)}
        assert final["targets"]["host-004"]["artifacts"] == expected["targets"]["host-004"]["artifacts"]
        assert list(store.projection("job-1")["targets"]) == names(7)
        assert store.projection("job-1")["targets"]["host-006"]["progress"] == 100
        heads = store._read("SELECT record FROM deployment_jobs")
        assert all("targets" not in json.loads(h[0]) and "revision" not in json.loads(h[0]) for h in heads)
        assert len(store._read("SELECT name FROM job_targets WHERE job_id = 'job-1'")) == 7
    finally:
        store.close()


def test_recording_one_target_writes_its_row_only(tmp_path, monkeypatch):
    sizes = {}
    for count in (10, 100):
        meter = tmp_path / ("one-%d" % count)
        store = _job_store.open_store(str(tmp_path / ("one-%d.sqlite3" % count)))
        try:
            store.create(new_record(count))
            store.update("job-1", lambda r: _job.start(r, T0))
            monkeypatch.setenv(_meter.VARIABLE, str(meter))
            store._meter = _meter.Meter()
            store.update("job-1", lambda r: outcome(r, "host-003", T0))
            sizes[count] = _meter.total(str(meter))
        finally:
            store.close()
    assert sizes[10] > 1000
    assert sizes[100] == sizes[10]  # the same target's outcome, whatever the number of targets around it


@pytest.mark.parametrize("size_10, size_100", [(10, 100), (1, 10)], ids=["all-at-once", "rolling-10%"])
def test_bytes_written_per_target_stay_flat_from_10_to_100_targets(tmp_path, monkeypatch, size_10, size_100):
    small = metered_bytes(tmp_path, monkeypatch, 10, size_10, "10") / 10.0
    large = metered_bytes(tmp_path, monkeypatch, 100, size_100, "100") / 100.0
    assert large / small <= 1.25, (small, large)


def test_the_measure_sees_a_store_that_rewrites_the_whole_job(tmp_path, monkeypatch):
    """The meter would catch the old layout: with every target rewritten on every change, the bytes per
    target grow with the fleet."""
    everything = _rows.changed_parts

    def rewrite_all(before, after):
        head, _targets, gone = everything(before, after)
        return head, dict(after.get("targets") or {}), gone

    monkeypatch.setattr(_rows, "changed_parts", rewrite_all)
    small = metered_bytes(tmp_path, monkeypatch, 10, 10, "10") / 10.0
    large = metered_bytes(tmp_path, monkeypatch, 100, 100, "100") / 100.0
    assert large / small > 4, (small, large)


def test_recording_one_target_serialises_and_copies_that_target_only(tmp_path, monkeypatch):
    """The work of recording one target's outcome, not only its bytes, stays flat with the fleet: the
    target entries serialised to find what changed and the entries copied are the same at 10 and at
    100 targets (a job of 100 targets otherwise compares and copies 100 entries per recorded target)."""
    counts = {}
    for count in (10, 100):
        store = _job_store.open_store(str(tmp_path / ("work-%d.sqlite3" % count)))
        try:
            store.create(new_record(count))
            store.update("job-1", lambda r: _job.start(r, T0))
            seen = {"dumps": 0, "cloned": 0}
            dumps, clone = _rows.dumps, _job.clone

            def counted_dumps(document):
                seen["dumps"] += 1
                return dumps(document)

            def counted_clone(document):
                seen["cloned"] += len(document.get("targets") or {}) or 1
                return clone(document)

            monkeypatch.setattr(_rows, "dumps", counted_dumps)
            monkeypatch.setattr(_job, "clone", counted_clone)
            final = store.update("job-1", lambda r: outcome(r, "host-003", T0))
            monkeypatch.undo()
            assert final["targets"]["host-003"]["status"] == "Succeeded"
            assert store.get("job-1") == final
            counts[count] = seen
        finally:
            store.close()
    assert counts[10]["dumps"] > 0 and counts[10]["cloned"] > 0
    assert counts[100] == counts[10], counts


def test_a_target_entry_shared_with_the_previous_revision_is_not_compared(monkeypatch):
    before = new_record(3)
    one = _job.record_phase(
        before,
        "host-001",
        entry=_job.phase_entry("deploy", "passed", started_at=T0, completed_at=T0, duration_ms=1),
        now=T0,
    )
    assert one["targets"]["host-000"] is before["targets"]["host-000"]
    compared = []
    dumps = _rows.dumps
    monkeypatch.setattr(_rows, "dumps", lambda document: compared.append(document) or dumps(document))
    assert _rows.changed_parts(before, one)[1] == {"host-001": one["targets"]["host-001"]}
    assert before["targets"]["host-000"] not in compared and one["targets"]["host-001"] in compared
    # an equal entry that is another object is compared, and left unwritten
    copied = dict(one, targets=dict(one["targets"], **{"host-002": dict(one["targets"]["host-002"])}))
    assert _rows.changed_parts(one, copied)[1] == {}


def test_the_head_of_a_job_is_its_record_without_targets(tmp_path):
    store = _job_store.open_store(str(tmp_path / "head.sqlite3"))
    try:
        assert store.head("job-1") is None
        store.create(new_record(5))
        record = store.update("job-1", lambda r: _job.start(r, T0))
        head = store.head("job-1")
        assert "targets" not in head and head["targetOrder"] == names(5)
        assert head == {k: v for k, v in record.items() if k != "targets"}
    finally:
        store.close()


def test_a_header_is_rewritten_only_when_more_than_its_columns_changed():
    before = new_record(3)
    after = dict(before, revision=2, updatedAt="2026-01-01T00:00:01Z", status="Running")
    assert _rows.changed_parts(before, after) == (False, {}, [])
    gated = _job.record_gate(before, {"batch": 0, "proceed": True, "reason": "ok"}, T0)
    head, targets, gone = _rows.changed_parts(before, gated)
    assert head and targets == {} and gone == []
    one = _job.record_phase(
        before,
        "host-001",
        entry=_job.phase_entry("deploy", "passed", started_at=T0, completed_at=T0, duration_ms=1),
        now=T0,
    )
    assert _rows.changed_parts(before, one)[1] == {"host-001": one["targets"]["host-001"]}
    fewer = dict(before, targets={k: v for k, v in before["targets"].items() if k != "host-002"})
    assert _rows.changed_parts(before, fewer)[2] == ["host-002"]
    assert _rows.changed_parts(None, before) == (True, before["targets"], [])


def test_a_schema_5_store_is_split_into_rows_and_reads_back_the_same(tmp_path):
    path = tmp_path / "v5.sqlite3"
    old = sqlite3.connect(str(path))
    old.execute(_job_schema.VERSION_TABLE)
    for step in range(1, 6):
        for statement in _job_schema.MIGRATIONS[step]:
            old.execute(statement)
    old.execute("INSERT INTO stella_schema (name, version) VALUES ('job_store', 5)")
    record = dict(_job.start(new_record(4, 2), T0), revision=2)
    projection = _projection.initial(new_record(4, 2))
    old.execute(
        "INSERT INTO deployment_jobs (job_id, kind, status, release_id, created_at, updated_at, revision, "
        "record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("job-1", "deployment", "Running", "r1", T0, T0, 2, _rows.dumps(record)),
    )
    old.execute(
        "INSERT INTO deployments (deployment_id, status, terminal, job_revision, projection, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        ("job-1", "Pending", 0, 1, _rows.dumps(projection), T0),
    )
    old.commit()
    old.close()
    store = _job_store.open_store(str(path))
    try:
        assert store.migration == {
            "from": 5,
            "to": 7,
            "healthConstraint": store.migration["healthConstraint"],
            "storeId": store.store_id,
        }
        assert store.get("job-1") == record and list(store.get("job-1")["targets"]) == names(4)
        assert store.projection("job-1") == projection
        assert [n for (n,) in store._read("SELECT name FROM job_targets ORDER BY position")] == names(4)
        assert store.list(project="shop-host-002")[0]["jobId"] == "job-1"
        updated = store.update("job-1", lambda r: outcome(r, "host-000", T0))
        assert updated["targets"]["host-000"]["status"] == "Succeeded" and store.get("job-1") == updated
    finally:
        store.close()


def test_the_meter_is_off_without_its_variable_and_counts_values_when_on(tmp_path, monkeypatch):
    monkeypatch.delenv(_meter.VARIABLE, raising=False)
    off = _meter.Meter()
    off.count("INSERT INTO x VALUES (?)", ("abc",))
    off.committed()
    assert off.path is None and off.pending == 0
    on = _meter.Meter(str(tmp_path / "m"))
    on.count("SELECT ?", ("ignored",))
    on.count("  insert INTO x VALUES (?, ?, ?, ?)", ("é", b"\x00\x01", 12345, None))
    on.committed()
    on.count("UPDATE x SET y=?", ("rolled back",))
    on.discard()
    on.committed()
    assert (tmp_path / "m").read_text() == "9\n" and _meter.total(str(tmp_path / "m")) == 9
    assert _meter.total(str(tmp_path / "none")) == 0
