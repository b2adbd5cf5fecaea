"""The job store on both backends, real SQLite files and the lab's real PostgreSQL server.

Each test runs on both (``job_store_location``): the same behaviour, the same schema and migration
path. Two controllers are two processes with their own connections, writing at the same time.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys

import psycopg
import pytest

import labkit
import pgkit

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import PHASES
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection

T0 = "2026-01-01T00:00:00Z"
STELLA = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "stella.py"
)
LEGACY_STATUSES = ("unknown", "healthy", "unhealthy", "offline")


def job(job_id, names, project="shop"):
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": project} for n in names}
    return _job.new_job(
        job_id=job_id,
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=[list(names)],
        targets=targets,
        options={},
        now=T0,
    )


def _phases(location, name, count):
    store = _job_store.open_store(location)
    for index in range(count):
        store.update(
            "job-1",
            lambda r, i=index: _job.record_phase(
                r,
                name,
                entry=_job.phase_entry(PHASES[i], "passed", started_at=T0, completed_at=T0, duration_ms=1),
                now=T0,
            ),
        )
    store.close()


def _start_job(location, job_id, queue):
    store = _job_store.open_store(location)
    try:
        _stored, held = store.create(job(job_id, ["web-1", "web-2"]))
        queue.put((job_id, held))
    finally:
        store.close()


def run_all(target, arglists):
    context = multiprocessing.get_context("spawn")  # no connection crosses into a controller process
    procs = [context.Process(target=target, args=args) for args in arglists]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_the_same_behaviour_on_both_backends(job_store_location):
    store = _job_store.open_store(job_store_location)
    try:
        assert store.migration == {
            "from": 0,
            "to": _job_schema.SCHEMA_VERSION,
            "healthConstraint": "kept",
            "storeId": store.store_id,
        }
        stored, held = store.create(job("job-1", ["a", "b"]))
        assert held == {} and stored["revision"] == 1 and store.get("job-1") == stored
        with pytest.raises(StellaError) as info:
            store.create(job("job-1", ["a"]))
        assert info.value.code == "job_exists"
        with pytest.raises(StellaError):
            store.update("job-1", lambda r: _job.finish(r, T0))  # Pending cannot finish: nothing persisted
        assert store.get("job-1")["revision"] == 1
        running = store.update("job-1", lambda r: _job.start(r, T0))
        done = store.update(
            "job-1",
            lambda r: _job.finish_target(r, "a", succeeded=True, now=T0),
            lambda r: _job.finish_target(
                r, "b", succeeded=False, now=T0, reason="web unhealthy", code="service_unhealthy"
            ),
            lambda r: None,
        )
        assert (running["revision"], done["revision"]) == (2, 4)
        assert [h["status"] for h in store.history("job-1")] == ["Pending", "Running", "Running", "Running"]
        assert [r["jobId"] for r in store.unfinished()] == ["job-1"]
        assert {h["targetId"]: h["status"] for h in store.health()} == {"id-a": "healthy", "id-b": "unhealthy"}
        assert store.health(["id-b", "id-new"])[1] == {"targetId": "id-new", "status": "unknown"}
        with pytest.raises(StellaError) as info:
            store.update("nope", lambda r: r)
        assert info.value.code == "job_not_found"
    finally:
        store.close()
    again = _job_store.open_store(job_store_location)  # a second start-up migrates nothing
    assert again.migration == {
        "from": _job_schema.SCHEMA_VERSION,
        "to": _job_schema.SCHEMA_VERSION,
        "healthConstraint": "kept",
        "storeId": again.store_id,
    }
    again.close()


def test_two_controllers_writing_one_job_lose_no_update(job_store_location):
    store = _job_store.open_store(job_store_location)
    names = ["t%d" % i for i in range(6)]
    store.create(job("job-1", names))
    store.close()
    run_all(_phases, [(job_store_location, name, 5) for name in names])
    store = _job_store.open_store(job_store_location)
    final = store.get("job-1")
    assert final["revision"] == 1 + 5 * len(names)
    assert all(len(final["targets"][n]["phases"]) == 5 for n in names)
    assert [h["revision"] for h in store.history("job-1")] == list(range(1, 2 + 5 * len(names)))
    store.close()


def test_no_two_jobs_hold_the_same_project(job_store_location):
    queue = multiprocessing.get_context("spawn").Queue()
    run_all(_start_job, [(job_store_location, "job-%d" % i, queue) for i in range(5)])
    results = dict(queue.get(timeout=10) for _index in range(5))
    winners = [job_id for job_id, held in results.items() if not held]
    assert len(winners) == 1, results
    for job_id, held in results.items():
        if job_id != winners[0]:
            assert held == {"web-1": winners[0], "web-2": winners[0]}
    store = _job_store.open_store(job_store_location)
    try:
        assert set(store.claims().values()) == {winners[0]}
        _stored, held = store.create(job("job-other", ["web-1"], project="other"))  # another project: free
        assert held == {}
        store.update(
            winners[0],
            lambda r: _job.start(r, T0),
            lambda r: _job.finish_target(r, "web-1", succeeded=True, now=T0),
            lambda r: _job.finish_target(r, "web-2", succeeded=True, now=T0),
            lambda r: _job.finish(r, T0),
        )
        _stored, held = store.create(job("job-next", ["web-1", "web-2"]))  # the finished job let go
        assert held == {}
        assert store.claims() == {
            "id-web-1|other": "job-other",
            "id-web-1|shop": "job-next",
            "id-web-2|shop": "job-next",
        }
    finally:
        store.close()


def test_the_projection_shows_only_persisted_states_and_the_terminal_step_comes_last(job_store_location):
    store = _job_store.open_store(job_store_location)
    try:
        store.create(job("job-1", ["a"]))
        assert store.projection("job-1")["status"] == "Pending"
        store.update("job-1", lambda r: _job.start(r, T0))
        store.update("job-1", lambda r: dict(r, updatedAt="2026-01-01T00:00:01Z"))  # nothing it mirrors changed
        for phase in ("preflight", "prepare", "deploy"):
            store.update(
                "job-1",
                lambda r, p=phase: _job.record_phase(
                    r, "a", entry=_job.phase_entry(p, "passed", started_at=T0, completed_at=T0, duration_ms=1), now=T0
                ),
            )
        store.update(
            "job-1", lambda r: _job.finish_target(r, "a", succeeded=True, now=T0), lambda r: _job.finish(r, T0)
        )
        projection = store.projection("job-1")
        assert projection["status"] == "Running" and not projection["terminal"]  # the job is Succeeded
        assert projection["targets"]["a"]["status"] == "Succeeded"
        history = store.projection_history("job-1")
        persisted = {h["revision"]: h["status"] for h in store.history("job-1")}
        assert [h["jobRevision"] for h in history] == [1, 2, 4, 5, 6, 8]  # revision 3 changed nothing shown
        assert all(persisted[h["jobRevision"]] == h["status"] for h in history[:-1])
        record = store.get("job-1")
        final = store.project_terminal("job-1", _projection.strategy_evidence(record), "2026-01-01T00:01:00Z")
        assert final["status"] == "Succeeded" and final["terminal"] and final["jobRevision"] == record["revision"]
        assert store.projection_history("job-1")[-1]["terminal"] is True
    finally:
        store.close()


def _legacy_sqlite(path):
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE deployment_jobs (job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL,
            release_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, revision INTEGER NOT NULL,
            record TEXT NOT NULL);
        CREATE TABLE target_health (target_id TEXT PRIMARY KEY,
            status TEXT NOT NULL CHECK (status IN (%s)), updated_at TEXT);
    """
        % ", ".join("'%s'" % s for s in LEGACY_STATUSES)
    )
    db.executemany("INSERT INTO target_health VALUES (?, ?, ?)", ROWS)
    db.commit()
    db.close()


def _legacy_postgres(dsn):
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(
            "CREATE TABLE target_health (target_id TEXT PRIMARY KEY, status TEXT NOT NULL CHECK (status IN "
            "(%s)), updated_at TEXT)" % ", ".join("'%s'" % s for s in LEGACY_STATUSES)
        )
        for row in ROWS:
            db.execute("INSERT INTO target_health VALUES (%s, %s, %s)", row)


ROWS = [("id-a", "healthy", T0), ("id-b", "offline", T0), ("id-c", "unknown", T0)]


def test_a_legacy_health_constraint_is_refreshed_in_place_at_start_up_with_every_row_kept(job_store_location):
    if job_store_location.startswith("postgresql://"):
        _legacy_postgres(job_store_location)
        errors = psycopg.errors.CheckViolation
    else:
        _legacy_sqlite(job_store_location)
        errors = sqlite3.IntegrityError
    with pytest.raises(errors):  # the legacy check refuses the contract's newer statuses
        (_legacy_postgres_insert if job_store_location.startswith("postgresql://") else _legacy_sqlite_insert)(
            job_store_location, "degraded"
        )
    store = _job_store.open_store(job_store_location)
    try:
        assert store.migration == {
            "from": 0,
            "to": _job_schema.SCHEMA_VERSION,
            "healthConstraint": "refreshed",
            "storeId": store.store_id,
        }
        assert [(h["targetId"], h["status"], h["updatedAt"]) for h in store.health()] == ROWS
        store.create(job("job-1", ["d", "e"]))
        store.update(
            "job-1",
            lambda r: _job.start(r, T0),
            lambda r: _job.finish_target(r, "d", succeeded=True, now=T0),
            lambda r: _job.finish_target(r, "e", succeeded=False, now=T0, code="runtime_daemon_unavailable"),
            lambda r: _job.finish(r, T0),
            lambda r: _rollback.auto_rollback(r, T0),
        )
        assert {h["targetId"]: h["status"] for h in store.health()} == {
            "id-a": "healthy",
            "id-b": "offline",
            "id-c": "unknown",
            "id-d": "healthy",
            "id-e": "offline",
        }
    finally:
        store.close()
    for status in ("degraded", "unreachable"):
        (_legacy_postgres_insert if job_store_location.startswith("postgresql://") else _legacy_sqlite_insert)(
            job_store_location, status
        )
    with pytest.raises(errors):  # the refreshed check still refuses what the contract does not know
        (_legacy_postgres_insert if job_store_location.startswith("postgresql://") else _legacy_sqlite_insert)(
            job_store_location, "maintenance"
        )
    again = _job_store.open_store(job_store_location)
    assert again.migration["healthConstraint"] == "kept"
    again.close()


def _legacy_sqlite_insert(path, status):
    db = sqlite3.connect(path)
    try:
        db.execute("INSERT INTO target_health (target_id, status) VALUES (?, ?)", ("id-" + status, status))
        db.commit()
    finally:
        db.close()


def _legacy_postgres_insert(dsn, status):
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("INSERT INTO target_health (target_id, status) VALUES (%s, %s)", ("id-" + status, status))


def stella(*argv):
    """The ``stella`` command as an operator runs it (its own process, its own store connection)."""
    return subprocess.run(
        [sys.executable, STELLA] + list(argv), capture_output=True, text=True, timeout=120, check=False
    )


def test_an_operator_interrupts_a_job_of_a_gone_controller_and_reads_health(job_store_location):
    """job-1 was started by controller-b, which is gone: from this controller ``stella interrupt`` records it
    interrupted, releases its projects and closes its projection; ``stella health`` shows what it left."""
    store = _job_store.open_store(job_store_location)
    try:
        record = job("job-1", ["a", "b"])
        record["owner"] = {"host": "controller-b.example", "pid": 4242, "startTicks": 1}
        store.create(record)
        store.update("job-1", lambda r: _job.start(r, T0), lambda r: _job.finish_target(r, "a", succeeded=True, now=T0))
        assert store.create(job("job-2", ["a"]))[1] == {"a": "job-1"}  # refused: job-1 holds the project
    finally:
        store.close()

    done = stella("interrupt", "job-1", "--store", job_store_location, "--reason", "controller-b was replaced")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == "job job-1: Failed (job_interrupted); its projects are released\n"
    again = stella("interrupt", "job-1", "--store", job_store_location)
    assert (again.returncode, again.stdout) == (0, "job job-1 is already Failed: nothing to interrupt\n")

    store = _job_store.open_store(job_store_location)
    try:
        interrupted = store.get("job-1")
        assert (interrupted["status"], interrupted["code"]) == ("Failed", "job_interrupted")
        assert interrupted["reason"].endswith(": controller-b was replaced")
        assert store.claims() == {}
        assert store.projection("job-1")["terminal"] is True
        assert store.create(job("job-3", ["a"]))[1] == {}  # the project is free again
    finally:
        store.close()

    health = stella("health", "--store", job_store_location, "--json")
    assert health.returncode == 0, health.stderr
    # b's batch had started with a's, so b was under way when its controller went: interrupted, unhealthy
    assert {h["targetId"]: h["status"] for h in json.loads(health.stdout)["health"]} == {
        "id-a": "healthy",
        "id-b": "unhealthy",
    }
    check = stella("health", "id-a", "id-b", "id-c", "--store", job_store_location, "--check")
    assert check.returncode == 3 and "id-b" in check.stdout and "unhealthy" in check.stdout
    assert "unknown" in check.stdout  # id-c: never seen


def _finished(store, job_id, names, at, project="shop"):
    record = job(job_id, names, project)
    record.update(createdAt=at, updatedAt=at)
    store.create(record)
    store.update(
        job_id,
        lambda r: _job.start(r, at),
        *[lambda r, n=n: _job.finish_target(r, n, succeeded=True, now=at) for n in names],
        lambda r: _job.finish(r, at),
    )


def test_an_operator_prunes_old_finished_jobs(job_store_location, tmp_path):
    """``stella prune`` on both backends: old finished jobs go with their history and projection; the job a
    target's health names, an unfinished job and (with --keep) the newest stay."""
    store = _job_store.open_store(job_store_location)
    try:
        _finished(store, "job-old-1", ["a"], "2026-01-01T00:00:00.000000Z")
        _finished(store, "job-old-2", ["a"], "2026-01-02T00:00:00.000000Z")
        _finished(store, "job-old-3", ["a"], "2026-01-03T00:00:00.000000Z")  # a's health names it
        running = job("job-running", ["b"], project="other")
        store.create(running)
        store.update("job-running", lambda r: _job.start(r, T0))
    finally:
        store.close()

    evidence = tmp_path / "evidence"
    for relative in ("jobs/job-old-1", "shop/job-old-1", "jobs/job-old-2", "shop/job-old-3", "other/job-running"):
        (evidence / relative).mkdir(parents=True)
        (evidence / relative / "job.json").write_text("{}")
    dry = stella("prune", "--older-than", "30", "--store", job_store_location, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert [(j["jobId"], j["projects"]) for j in json.loads(dry.stdout)["jobs"]] == [
        ("job-old-1", ["shop"]),
        ("job-old-2", ["shop"]),
    ]
    kept = stella("prune", "--older-than", "30", "--keep", "2", "--store", job_store_location)
    assert kept.returncode == 0 and kept.stdout.splitlines()[1].split()[0] == "job-old-1", kept.stdout
    rest = stella("prune", "--older-than", "30", "--store", job_store_location, "--evidence-dir", str(evidence))
    assert rest.returncode == 0 and rest.stdout.startswith("removed 1 finished job "), rest.stdout
    assert "    evidence %s" % (evidence / "jobs" / "job-old-2") in rest.stdout.splitlines()
    assert sorted(str(p.relative_to(evidence)) for p in evidence.rglob("job.json")) == [
        "jobs/job-old-1/job.json",
        "other/job-running/job.json",
        "shop/job-old-1/job.json",
        "shop/job-old-3/job.json",
    ]  # job-old-1 went without --evidence-dir; the others stay

    store = _job_store.open_store(job_store_location)
    try:
        assert sorted(r["jobId"] for r in store.list(10)) == ["job-old-3", "job-running"]
        for gone in ("job-old-1", "job-old-2"):
            assert store.history(gone) == [] and store.projection(gone) is None
            assert store.projection_history(gone) == []
        assert store.health(["id-a"])[0]["jobId"] == "job-old-3"
        assert set(store.claims().values()) == {"job-running"}
    finally:
        store.close()


def test_the_store_reaches_postgresql_over_verified_tls(lab, pg_passfile, tmp_path):  # pylint: disable=unused-argument
    """libpq's TLS parameters in the DSN reach the server: with the lab CA and ``sslmode=verify-full`` the
    store works over TLS (the server says so); with a CA that did not sign the server's certificate it
    refuses to connect, in one line, and a password planted in the DSN appears nowhere."""
    ca_file = labkit.lab_path(lab, lab["postgres"]["ca_file"])
    with pgkit.fresh_database(lab) as dsn:
        tls = "%s?sslmode=verify-full&sslrootcert=%s" % (dsn, ca_file)
        store = _job_store.open_store(tls)
        try:
            store.create(job("job-1", ["a"]))
            assert store.get("job-1")["status"] == "Pending"
        finally:
            store.close()
        with psycopg.connect(tls) as db:
            assert db.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0] is True
        health = stella("health", "--store", tls, "--json")
        assert health.returncode == 0 and json.loads(health.stdout) == {"health": []}, health.stderr

        other_ca = tmp_path / "other-ca.crt"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=not-the-lab-ca",
                "-keyout",
                str(tmp_path / "other-ca.key"),
                "-out",
                str(other_ca),
            ],
            check=True,
            capture_output=True,
        )
        planted = dsn.replace(
            "postgresql://%s@" % lab["postgres"]["user"], "postgresql://%s:planted-pw-7731@" % lab["postgres"]["user"]
        )
        with pytest.raises(StellaError) as err:
            _job_store.open_store("%s?sslmode=verify-full&sslrootcert=%s" % (planted, other_ca))
        assert err.value.code == "job_store_failed" and "certificate verify failed" in err.value.reason
        assert "\n" not in err.value.reason and "planted-pw-7731" not in err.value.reason
        refused = stella("health", "--store", "%s?sslmode=verify-full&sslrootcert=%s" % (planted, other_ca))
        assert refused.returncode == 1 and refused.stderr.startswith("stella health: job_store_failed: ")
        assert "planted-pw-7731" not in refused.stderr + refused.stdout
