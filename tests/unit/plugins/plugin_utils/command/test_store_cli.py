"""``stella health`` and ``stella interrupt``: the job store from a shell, on real SQLite stores fed by
real job changes (docs/job-store.md)."""

from __future__ import annotations

import datetime
import json
import os
import shlex

import pytest

from docs_support import doc_commands, doc_section, doc_text, options_in, parser_options

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import reads as _store_reads
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import retention as _retention
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import close as _close_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import health as _health_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import prune as _prune_cli

T0 = "2026-03-01T10:00:00.000000Z"
T1 = "2026-03-01T10:05:00.000000Z"


def fed_store(tmp_path):
    """A store where job-1 left target a healthy and target b unhealthy (a failed deployment)."""
    path = str(tmp_path / "jobs.sqlite3")
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in ("a", "b")}
    store = _job_store.open_store(path)
    try:
        store.create(
            _job.new_job(
                job_id="job-1",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a", "b"]],
                targets=targets,
                options={},
                now=T0,
            )
        )
        store.update("job-1", lambda r: _job.start(r, T0))
        store.update(
            "job-1",
            lambda r: _job.finish_target(r, "a", succeeded=True, now=T1),
            lambda r: _job.finish_target(
                r, "b", succeeded=False, now=T1, reason="web  is\nunhealthy", code="service_unhealthy"
            ),
        )
    finally:
        store.close()
    return path


def run(command, argv, capsys):
    """``stella COMMAND ARGV...`` as the launcher runs it: ``(exit status, stdout, stderr)``."""
    rc = _command.main(["stella", command] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def cli(argv, capsys):
    return run("health", argv, capsys)


def test_stella_health_prints_every_target_the_store_knows(tmp_path, capsys):
    store = fed_store(tmp_path)
    rc, out, err = cli(["--store", store], capsys)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["TARGET", "NAME", "STATUS", "JOB", "UPDATED", "REASON"]
    assert lines[1].split() == ["id-a", "a", "healthy", "job-1", T1] + "job job-1: target Succeeded".split()
    assert lines[2].split()[:5] == ["id-b", "b", "unhealthy", "job-1", T1]
    assert lines[2].endswith("service_unhealthy: web is unhealthy")  # one line, whitespace folded
    assert len(lines) == 3
    assert len({line.index("STATUS") if i == 0 else line.index(line.split()[2]) for i, line in enumerate(lines)}) == 1


def test_stella_health_json_names_targets_and_check_tells_monitoring(tmp_path, capsys):
    store = fed_store(tmp_path)
    rc, out, _err = cli(["id-a", "id-new", "--store", "sqlite:///" + store, "--json"], capsys)
    assert rc == 0
    rows = json.loads(out)["health"]
    assert [(r["targetId"], r["status"]) for r in rows] == [("id-a", "healthy"), ("id-new", "unknown")]
    assert cli(["id-a", "--store", store, "--check"], capsys)[0] == 0
    assert cli(["id-b", "--store", store, "--check"], capsys)[0] == _health_cli.NOT_HEALTHY_RC
    assert cli(["--store", store, "--check"], capsys)[0] == _health_cli.NOT_HEALTHY_RC


def test_stella_health_never_creates_a_store_and_fails_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "jobs.sqlite3"
    rc, out, err = cli(["--store", str(missing)], capsys)
    assert (rc, out) == (1, "")
    assert err == "stella health: job_store_missing: no job store at %s; next: %s\n" % (
        missing,
        next_step("job_store_missing"),
    )
    assert not missing.parent.exists()
    assert cli(["--no-such-option"], capsys)[0] == 2


def test_the_documented_health_command_and_options_exist(tmp_path, capsys):
    doc = doc_text("job-store.md")
    commands = doc_commands(doc, "stella health")
    assert commands, "docs/job-store.md shows no stella health command"
    assert options_in(doc_section(doc, "Reading health")) == parser_options(_health_cli.health_parser())
    store = fed_store(tmp_path)
    for command in commands:  # each example runs as written against the documented store
        argv = command.replace("~/.local/state/stellaops/jobs.sqlite3", store).split()[2:]
        rc, out, err = cli(argv, capsys)
        assert rc in (0, _health_cli.NOT_HEALTHY_RC) and err == "" and out, command


@pytest.mark.parametrize("command", ["report", "health", "interrupt", "prune"])
def test_the_usage_line_names_every_store_command(command, capsys):
    assert _command.main(["stella", "nope"]) == 2
    assert "stella %s " % command in capsys.readouterr().err


def running_job(tmp_path, owner):
    """A store holding job-2, Running with target a done and b running, owned by ``owner``; job-3 for the
    same project is refused while job-2 holds it."""
    path = str(tmp_path / "jobs.sqlite3")
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in ("a", "b")}
    store = _job_store.open_store(path)
    try:
        store.create(
            _job.new_job(
                job_id="job-2",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"], ["b"]],
                targets=targets,
                options={},
                now=T0,
                owner=owner,
            )
        )
        store.update("job-2", lambda r: _job.start(r, T0))
        store.update("job-2", lambda r: _job.finish_target(r, "a", succeeded=True, now=T1))
        only_a = {"a": targets["a"]}
        _stored, held = store.create(
            _job.new_job(
                job_id="job-3",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"]],
                targets=only_a,
                options={},
                now=T1,
            )
        )
        assert held == {"a": "job-2"}
    finally:
        store.close()
    return path


def interrupt_cli(argv, capsys):
    return run("interrupt", argv, capsys)


def test_stella_interrupt_records_a_gone_run_and_releases_its_projects(tmp_path, capsys):
    """The run that owns job-2 ran on another controller: the operator says it is gone."""
    store_path = running_job(tmp_path, {"host": "controller-b.example", "pid": 4242, "startTicks": 1})
    rc, out, err = interrupt_cli(["job-2", "--store", store_path, "--reason", "controller-b\nwas  replaced"], capsys)
    assert (rc, err) == (0, "")
    assert out == "job job-2: Failed (job_interrupted); its projects are released\n"
    store = _job_store.open_store(store_path)
    try:
        record = store.get("job-2")
        assert (record["status"], record["code"]) == ("Failed", "job_interrupted")
        assert record["reason"].endswith(
            "(the controller run, pid 4242 on controller-b.example, is gone): controller-b was replaced"
        )
        assert record["targets"]["a"]["status"] == "Succeeded"
        assert record["targets"]["b"]["status"] == "Skipped"  # never started
        assert store.claims() == {}
        projection = store.projection("job-2")
        assert projection["terminal"] is True and projection["status"] == "Failed"
        _stored, held = store.create(
            _job.new_job(
                job_id="job-4",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"]],
                targets={"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}},
                options={},
                now=T1,
            )
        )
        assert held == {}
    finally:
        store.close()
    # a second interrupt has nothing left to do
    rc, out, _err = interrupt_cli(["job-2", "--store", store_path], capsys)
    assert rc == 0 and out == "job job-2 is already Failed: nothing to interrupt\n"


def test_stella_interrupt_refuses_a_run_alive_on_this_host(tmp_path, capsys):
    alive = _job_owner.controller_owner()
    alive.update(pid=os.getpid(), startTicks=_job_owner.process_start(os.getpid()))
    store_path = running_job(tmp_path, alive)
    rc, out, err = interrupt_cli(["job-2", "--store", store_path], capsys)
    assert (rc, out) == (1, "")
    assert (
        err == "stella interrupt: job_running: the controller run of job job-2 (pid %d) is still running on "
        "this host; next: %s\n" % (os.getpid(), next_step("job_running"))
    )
    store = _job_store.open_store(store_path)
    try:
        assert store.get("job-2")["status"] == "Running" and set(store.claims().values()) == {"job-2"}
    finally:
        store.close()


def test_stella_interrupt_of_an_unknown_job_or_store(tmp_path, capsys):
    store_path = running_job(tmp_path, None)
    rc, out, err = interrupt_cli(["job-404", "--store", store_path], capsys)
    assert (rc, out, err) == (
        1,
        "",
        "stella interrupt: job_not_found: no job job-404 in the job store; next: %s\n" % next_step("job_not_found"),
    )
    rc, _out, err = interrupt_cli(["job-2", "--store", str(tmp_path / "none.sqlite3")], capsys)
    assert rc == 1 and err.startswith("stella interrupt: job_store_missing:")
    assert interrupt_cli([], capsys)[0] == 2


def test_the_documented_interrupt_command_and_options_exist(tmp_path, capsys):
    commands = doc_commands(doc_text("job-store.md"), "stella interrupt JOB")
    assert len(commands) == 1, "docs/job-store.md shows no stella interrupt example"
    assert options_in(commands[0]) == parser_options(_close_cli.interrupt_parser())
    store_path = running_job(tmp_path, {"host": "controller-b.example", "pid": 4242, "startTicks": 1})
    argv = shlex.split(
        commands[0].replace("~/.local/state/stellaops/jobs.sqlite3", store_path).replace("JOB", "job-2")
    )[2:]
    rc, out, err = interrupt_cli(argv, capsys)
    assert (rc, err) == (0, "") and "job_interrupted" in out


# -------------------------------------------------------------------------------------------- prune

OLD = ("2026-01-01T09:00:00.000000Z", "2026-02-01T09:00:00.000000Z")


def finished_job(store, job_id, target, at, succeeded=True):
    targets = {target: {"targetId": "id-" + target, "targetName": target, "projectName": "shop-" + target}}
    store.create(
        _job.new_job(
            job_id=job_id,
            job_id_source=None,
            summary={"release": {"id": "r-" + job_id}},
            batches=[[target]],
            targets=targets,
            options={},
            now=at,
        )
    )
    store.update(
        job_id,
        lambda r: _job.start(r, at),
        lambda r: _job.finish_target(r, target, succeeded=succeeded, now=at),
        lambda r: _job.finish(r, at),
    )


def history_store(tmp_path, recent=None):
    """job-1 (succeeded) and job-2 (failed), old, then job-5, ``recent`` (default: now), all on target a,
    so a's health names job-5; job-3 on target b, old and still running (it holds its project)."""
    path = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(path)
    try:
        finished_job(store, "job-1", "a", OLD[0])
        finished_job(store, "job-2", "a", OLD[1], succeeded=False)
        store.create(
            _job.new_job(
                job_id="job-3",
                job_id_source=None,
                summary={"release": {"id": "r3"}},
                batches=[["b"]],
                targets={"b": {"targetId": "id-b", "targetName": "b", "projectName": "shop-b"}},
                options={},
                now=OLD[0],
            )
        )
        store.update("job-3", lambda r: _job.start(r, OLD[0]))
        finished_job(store, "job-5", "a", recent or utc_timestamp())
    finally:
        store.close()
    return path


def prune_cli(argv, capsys):
    return run("prune", argv, capsys)


def job_ids(path):
    store = _job_store.open_store(path)
    try:
        return sorted(r["jobId"] for r in store.list(100))
    finally:
        store.close()


@pytest.mark.parametrize(
    "keep,protected,before,expected",
    [
        (0, set(), "2026-03-01", ["j1", "j2", "j4"]),
        (0, set(), "2026-01-15T00:00:00.000000Z", ["j1"]),
        (0, {"j2"}, "2026-03-01", ["j1", "j4"]),
        (1, set(), "2026-03-01", ["j1", "j2"]),  # j4 is the newest finished job
        (3, set(), "2026-03-01", []),
        (0, set(), "2025-01-01", []),
    ],
    ids=["all-old", "cutoff-between", "protected", "keep-newest", "keep-all", "none-old-enough"],
)
def test_prune_selection(keep, protected, before, expected):
    finished = [
        ("j2", "Failed", "2026-01-20T00:00:00.000000Z"),
        ("j1", "Succeeded", "2026-01-10T00:00:00.000000Z"),
        ("j4", "RolledBack", "2026-02-10T00:00:00.000000Z"),
    ]
    chosen = _retention.prune_selection(finished, protected, before, keep)
    assert [row[0] for row in chosen] == expected
    assert [row[2] for row in chosen] == sorted(row[2] for row in chosen)  # oldest first


def test_prune_cutoff_is_in_the_store_format():
    now = datetime.datetime(2026, 4, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
    assert _prune_cli.cutoff(now, 30) == "2026-03-02T12:00:00.000000Z"
    assert _prune_cli.cutoff(now, 0.5) == "2026-04-01T00:00:00.000000Z"
    assert _prune_cli.cutoff(now, 0) == "2026-04-01T12:00:00.000000Z"


def test_stella_prune_removes_old_finished_jobs_with_their_history_and_projection(tmp_path, capsys):
    path = history_store(tmp_path)
    rc, out, err = prune_cli(["--older-than", "30", "--store", path], capsys)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("removed 2 finished jobs last updated before 2026-")
    assert [line.split() for line in lines[1:]] == [["job-1", "Succeeded", OLD[0]], ["job-2", "Failed", OLD[1]]]
    assert job_ids(path) == ["job-3", "job-5"]  # the running job and the recent one stay
    store = _job_store.open_store(path)
    try:
        for gone in ("job-1", "job-2"):
            assert store.get(gone) is None and store.history(gone) == []
            assert store.projection(gone) is None and store.projection_history(gone) == []
        assert store.history("job-5") and store.projection("job-5")["deploymentId"] == "job-5"
        assert [(h["targetId"], h["jobId"]) for h in store.health()] == [("id-a", "job-5")]
        assert store.claims() == {"id-b|shop-b": "job-3"}
    finally:
        store.close()
    # nothing is left to remove
    rc, out, _err = prune_cli(["--older-than", "30", "--store", path], capsys)
    assert rc == 0 and out.startswith("removed 0 finished jobs")


def test_stella_prune_keeps_the_job_a_target_health_names_and_the_newest(tmp_path, capsys):
    path = history_store(tmp_path, recent="2026-02-20T09:00:00.000000Z")  # every job is old now
    rc, out, _err = prune_cli(["--older-than", "1", "--store", path, "--dry-run", "--json"], capsys)
    assert rc == 0
    document = json.loads(out)
    assert document["dryRun"] is True and [j["jobId"] for j in document["jobs"]] == ["job-1", "job-2"]
    assert job_ids(path) == ["job-1", "job-2", "job-3", "job-5"]  # a dry run removes nothing
    rc, out, _err = prune_cli(["--older-than", "1", "--keep", "2", "--store", path], capsys)
    assert rc == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["job-1"]
    assert job_ids(path) == ["job-2", "job-3", "job-5"]


@pytest.mark.parametrize(
    "argv",
    [[], ["--older-than", "-1"], ["--older-than", "x"], ["--older-than", "1", "--keep", "-2"]],
    ids=["no-age", "negative-age", "not-a-number", "negative-keep"],
)
def test_stella_prune_usage_errors_change_nothing(tmp_path, capsys, argv):
    path = history_store(tmp_path)
    assert prune_cli(argv + ["--store", path], capsys)[0] == 2
    assert job_ids(path) == ["job-1", "job-2", "job-3", "job-5"]


def test_stella_prune_never_creates_a_store(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "jobs.sqlite3"
    rc, out, err = prune_cli(["--older-than", "30", "--store", str(missing)], capsys)
    assert (rc, out) == (1, "") and err == "stella prune: job_store_missing: no job store at %s; next: %s\n" % (
        missing,
        next_step("job_store_missing"),
    )
    assert not missing.parent.exists()


def test_the_documented_prune_commands_and_options_exist(tmp_path, capsys):
    doc = doc_text("job-store.md")
    commands = doc_commands(doc, "stella prune")
    assert commands, "docs/job-store.md shows no stella prune command"
    assert options_in(doc_section(doc, "Retention")) == parser_options(_prune_cli.prune_parser())
    for command in commands:  # each example runs as written against the documented store
        path = history_store(tmp_path / str(commands.index(command)))
        command = command.replace("~/stella-evidence", str(tmp_path / "evidence"))
        rc, out, err = prune_cli(
            shlex.split(command.replace("~/.local/state/stellaops/jobs.sqlite3", path))[2:], capsys
        )
        assert (rc, err) == (0, "") and "2026-" in out, command
        assert ("job-1" in out) is ("--keep" not in command), command  # --keep 50 keeps this small store whole


def test_stella_prune_deletes_in_chunks(tmp_path, capsys, monkeypatch):
    """More jobs than one DELETE takes: every chunk goes, the running and the recent job stay."""
    monkeypatch.setattr(_store_reads, "ID_CHUNK", 1)
    path = history_store(tmp_path)
    rc, out, _err = prune_cli(["--older-than", "30", "--store", path], capsys)
    assert rc == 0 and out.startswith("removed 2 finished jobs")
    assert job_ids(path) == ["job-3", "job-5"]


def evidence_tree(root):
    """Evidence as the job playbook writes it for the jobs of :func:`history_store`, and a stranger."""
    paths = [
        "jobs/job-1/job.json",
        "shop-a/job-1/deployment.json",
        "jobs/job-2/job.json",
        "jobs/job-2/rollback-evidence.json",
        "shop-a/job-2/deployment.json",
        "shop-a/job-5/deployment.json",
        "jobs/job-5/job.json",
        "jobs/job-3/job.json",
        "shop-b/job-3/deployment.json",
        "notes/readme.txt",
    ]
    for relative in paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    return root


def tree(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_stella_prune_with_evidence_dir_removes_the_pruned_jobs_evidence(tmp_path, capsys):
    path = history_store(tmp_path)
    root = evidence_tree(tmp_path / "evidence")
    before = tree(root)
    rc, out, err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root), "--dry-run"], capsys)
    assert (rc, err) == (0, "") and tree(root) == before  # a dry run only lists
    assert "    evidence %s" % (root / "jobs" / "job-1") in out.splitlines()

    rc, out, err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root)], capsys)
    assert (rc, err) == (0, "")
    assert out.splitlines()[1:] == [
        "  job-1  Succeeded  %s" % OLD[0],
        "    evidence %s" % (root / "jobs" / "job-1"),
        "    evidence %s" % (root / "shop-a" / "job-1"),
        "  job-2  Failed  %s" % OLD[1],
        "    evidence %s" % (root / "jobs" / "job-2"),
        "    evidence %s" % (root / "shop-a" / "job-2"),
    ]
    # the running job's and the recent job's evidence stay, and so does what is not a job's
    assert tree(root) == [
        "jobs/job-3/job.json",
        "jobs/job-5/job.json",
        "notes/readme.txt",
        "shop-a/job-5/deployment.json",
        "shop-b/job-3/deployment.json",
    ]
    assert job_ids(path) == ["job-3", "job-5"]


def test_stella_prune_never_follows_a_symlinked_parent_out_of_the_evidence_root(tmp_path, capsys):
    """A project directory of the evidence root that is a link to elsewhere: what lies behind it stays."""
    path = history_store(tmp_path)
    root = evidence_tree(tmp_path / "evidence")
    outside = tmp_path / "elsewhere"
    (root / "shop-a").rename(outside)
    (root / "shop-a").symlink_to(outside)
    behind = sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*"))
    assert "job-1" in behind
    rc, out, err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root)], capsys)
    assert (rc, err) == (0, "")
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == behind
    assert "    evidence %s" % (root / "jobs" / "job-1") in out.splitlines()
    assert "shop-a" not in out


def test_stella_prune_json_names_each_jobs_projects_and_evidence(tmp_path, capsys):
    path = history_store(tmp_path)
    root = evidence_tree(tmp_path / "evidence")
    (root / "shop-a" / "job-5").rename(root / "shop-a" / "kept")  # shop-a now holds no pruned job ...
    rc, out, _err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root), "--json"], capsys)
    document = json.loads(out)
    assert rc == 0 and document["evidenceDir"] == str(root)
    assert [(j["jobId"], j["projects"], j["evidence"]) for j in document["jobs"]] == [
        ("job-1", ["shop-a"], [str(root / "jobs" / "job-1"), str(root / "shop-a" / "job-1")]),
        ("job-2", ["shop-a"], [str(root / "jobs" / "job-2"), str(root / "shop-a" / "job-2")]),
    ]
    assert (root / "shop-a" / "kept").is_dir()  # ... but is not empty, so it stays
    (root / "shop-a" / "kept" / "deployment.json").unlink()
    (root / "shop-a" / "kept").rmdir()
    store = _job_store.open_store(path)
    try:  # an old job of target a in project shop-c
        store.create(
            _job.new_job(
                job_id="job-6",
                job_id_source=None,
                summary={"release": {"id": "r6"}},
                batches=[["a"]],
                targets={"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop-c"}},
                options={},
                now=OLD[0],
            )
        )
        store.update(
            "job-6",
            lambda r: _job.start(r, OLD[0]),
            lambda r: _job.finish_target(r, "a", succeeded=True, now=OLD[0]),
            lambda r: _job.finish(r, OLD[0]),
        )
        finished_job(store, "job-7", "a", utc_timestamp())  # a's health names the newest job
    finally:
        store.close()
    (root / "shop-c" / "job-6").mkdir(parents=True)
    rc, out, _err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root)], capsys)
    assert rc == 0 and not (root / "shop-c").exists()  # a project directory left empty goes


@pytest.mark.parametrize(
    "job, expected",
    [
        ({"jobId": "job-1", "projects": ["shop"]}, ["R/jobs/job-1", "R/shop/job-1"]),
        ({"jobId": "awx-42", "projects": []}, ["R/jobs/awx-42"]),
        ({"jobId": "../etc", "projects": ["shop"]}, []),
        ({"jobId": "a/b", "projects": ["shop"]}, []),
        ({"jobId": ".hidden", "projects": []}, []),
        ({"jobId": "job-1", "projects": ["..", "ok", "x/y"]}, ["R/jobs/job-1", "R/ok/job-1"]),
    ],
)
def test_evidence_dirs_are_plain_names_under_the_root(job, expected):
    assert _prune_cli.evidence_dirs("R", job) == expected


def test_evidence_that_cannot_be_removed_is_one_error_line(tmp_path, capsys, monkeypatch):
    path = history_store(tmp_path)
    root = evidence_tree(tmp_path / "evidence")

    def refuse(directory):
        raise PermissionError(13, "Permission denied", directory)

    monkeypatch.setattr(_prune_cli.shutil, "rmtree", refuse)
    rc, out, err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root)], capsys)
    assert rc == 1 and out.startswith("removed 2 finished jobs")
    assert err.startswith(
        "stella prune: evidence_remove_failed: the jobs are removed from the store, but not all "
        "of their evidence: %s: Permission denied" % (root / "jobs" / "job-1")
    )
    assert err.count("\n") == 1 and job_ids(path) == ["job-3", "job-5"]


def test_evidence_behind_a_symbolic_link_is_left_alone(tmp_path, capsys):
    path = history_store(tmp_path)
    root = tmp_path / "evidence"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "job.json").parent.mkdir(parents=True)
    (elsewhere / "job.json").write_text("{}")
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "job-1").symlink_to(elsewhere)
    rc, out, _err = prune_cli(["--older-than", "30", "--store", path, "--evidence-dir", str(root)], capsys)
    assert rc == 0 and "evidence" not in out.replace("evidence_", "")
    assert (elsewhere / "job.json").exists() and (root / "jobs" / "job-1").is_symlink()
