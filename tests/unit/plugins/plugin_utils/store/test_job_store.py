"""The SQLite job store: atomic updates from parallel writers, history, persisted state only."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00Z"
NAMES = ["t%02d" % i for i in range(12)]


def record(job_id="job-1"):
    return _job.new_job(
        job_id=job_id,
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=[NAMES],
        targets={n: {} for n in NAMES},
        options={},
        now=T0,
    )


def _phase(path, name):
    store = _job_store.open_store(path)
    for phase in ("preflight", "deploy", "verify"):
        store.update(
            "job-1",
            lambda r, p=phase: _job.record_phase(
                r, name, entry=_job.phase_entry(p, "passed", started_at=T0, completed_at=T0, duration_ms=1), now=T0
            ),
        )
    store.close()


def test_create_get_update_history(tmp_path):
    path = str(tmp_path / "state" / "jobs.sqlite3")
    store = _job_store.open_store(path)
    stored, held = store.create(record())
    assert held == {}
    assert stored["revision"] == 1 and store.get("job-1") == stored
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(StellaError) as info:
        store.create(record())
    assert info.value.code == "job_exists"
    running = store.update("job-1", lambda r: _job.start(r, T0))
    assert (running["status"], running["revision"]) == ("Running", 2)
    assert [h["status"] for h in store.history("job-1")] == ["Pending", "Running"]
    assert [r["jobId"] for r in store.unfinished()] == ["job-1"]
    assert store.get("nope") is None
    with pytest.raises(StellaError) as info:
        store.update("nope", lambda r: r)
    assert info.value.code == "job_not_found"


def test_a_failing_change_persists_nothing(tmp_path):
    store = _job_store.open_store(str(tmp_path / "j.db"))
    store.create(record())

    def bad(current):
        raise _job.job_error("no")

    with pytest.raises(StellaError):
        store.update("job-1", bad)
    assert store.get("job-1")["revision"] == 1


def test_parallel_writers_lose_no_update(tmp_path):
    path = str(tmp_path / "j.db")
    parent = _job_store.open_store(path)
    parent.create(record())
    parent.close()  # no SQLite connection may cross a fork
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_phase, args=(path, name)) for name in NAMES]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    final = _job_store.open_store(path).get("job-1")
    assert final["revision"] == 1 + 3 * len(NAMES)
    assert all([p["name"] for p in final["targets"][n]["phases"]] == ["preflight", "deploy", "verify"] for n in NAMES)


def test_unknown_store_kinds_are_refused_with_the_password_redacted(tmp_path):
    with pytest.raises(StellaError) as info:
        _job_store.open_store("mysql://stella:planted-secret@db/stella")
    assert info.value.code == "job_store_unsupported"
    assert "planted-secret" not in info.value.reason and "mysql" in info.value.reason
    assert _job_store.open_store("sqlite:///" + str(tmp_path / "x.db")).list() == []
    assert os.path.exists(str(tmp_path / "x.db"))


@pytest.mark.parametrize("damage", ["truncated", "removed"])
def test_a_store_a_job_wrote_that_vanished_is_an_error_never_a_new_store(tmp_path, damage):
    """A step of a recorded job finds its SQLite store truncated or removed: job_store_failed, and no
    empty store is created in its place (every job, claim and health row would be gone silently)."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner

    path = tmp_path / "jobs.sqlite3"
    store = _job_store.open_store(str(path))
    store.close()
    if damage == "truncated":
        path.write_bytes(b"")
    else:
        path.unlink()
    with pytest.raises(StellaError) as err:
        JobRunner({}, False).run({"step": "gate", "store": str(path), "job_id": "job-1", "targets": []})
    assert err.value.code == "job_store_failed" and "restore it from a backup" in err.value.reason
    assert (not path.exists()) if damage == "removed" else path.stat().st_size == 0
