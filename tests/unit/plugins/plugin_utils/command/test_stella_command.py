"""The ``stella`` command line (docs/stella-command.md): its subcommands, ``--help`` and ``--version``,
``stella list`` and ``stella show`` on real SQLite stores fed by real job changes, and the store each
command reads (``--store``, the Compose provider's stores, ``STELLA_JOB_STORE``, the default)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import sys
import threading
import time

import pytest
import yaml

from docs_support import doc_commands, doc_text, options_in

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _provider_arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import cli as _provider_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import jobs as _jobs_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T = ["2026-03-01T10:0%d:00.000000Z" % minute for minute in range(10)]
COMMAND_NAMES = [command[0] for command in _command.COMMANDS]
STORE_COMMANDS = ["list", "show", "report", "evidence", "health", "verify", "interrupt", "close", "prune"]
PROVIDER_OPTIONS = {"--compose-project", "--service", "--state-directory"}


@pytest.fixture(autouse=True)
def no_store_from_the_environment(monkeypatch):
    monkeypatch.delenv(_location.STORE_ENV, raising=False)


def stella(argv, capsys):
    """``stella ARGV...`` as the launcher runs it: ``(exit status, stdout, stderr)``."""
    rc = _command.main(["stella"] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def targets_in(project, *names):
    return {n: {"targetId": "id-" + n, "targetName": n, "projectName": project} for n in names}


def add_job(store, job_id, at, project="shop", names=("a",), release=None, outcome="Succeeded"):
    """A job created at ``at`` over ``names`` in ``project``: ``Succeeded`` or ``Failed`` (every target
    done), ``Running`` (started), ``Pending`` (created)."""
    release = release or {"id": "web-1.0", "name": "web", "version": "1.0"}
    store.create(
        _job.new_job(
            job_id=job_id,
            job_id_source=None,
            summary={"release": release},
            batches=[list(names)],
            targets=targets_in(project, *names),
            options={},
            now=at,
        )
    )
    if outcome == "Pending":
        return
    store.update(job_id, lambda r: _job.start(r, at))
    if outcome == "Running":
        return
    for name in names:
        store.update(
            job_id,
            lambda r, n=name: _job.record_phase(
                r,
                n,
                entry=_job.phase_entry("preflight", "passed", started_at=at, completed_at=at, duration_ms=5),
                now=at,
            ),
            lambda r, n=name: _job.finish_target(r, n, succeeded=outcome == "Succeeded", now=at, reason="boom"),
        )
    store.update(job_id, lambda r: _job.finish(r, at))


def fleet_store(path):
    """job-1 (shop, Succeeded), job-2 (shop, Failed), job-3 (shop_b, Succeeded, two targets), job-4
    (shopxb, Running), job-5 (shop, Pending): created in that order."""
    store = _job_store.open_store(str(path))
    try:
        add_job(store, "job-1", T[1])
        add_job(store, "job-2", T[2], outcome="Failed")
        add_job(
            store,
            "job-3",
            T[3],
            project="shop_b",
            names=("b", "c"),
            release={"id": "api-2.0", "name": "api", "version": "2.0"},
        )
        add_job(store, "job-4", T[4], project="shopxb", names=("d",), outcome="Running")
        add_job(store, "job-5", T[5], names=("e",), outcome="Pending")
    finally:
        store.close()
    return str(path)


def read(path, job_id):
    store = _job_store.open_store(path)
    try:
        return store.get(job_id)
    finally:
        store.close()


# ------------------------------------------------------------------------------------ the command


def test_help_lists_every_command_and_exits_0(capsys):
    for flag in ("--help", "-h"):
        rc, out, err = stella([flag], capsys)
        assert (rc, err) == (0, "")
        assert out.startswith("usage: stella [-h] [--version] COMMAND ...\n")
        for name in COMMAND_NAMES:
            assert "\n  %-10s " % name in out and "       stella %s " % name in out, name
        assert "2 usage error" in out and "STELLA_JOB_STORE" in out


@pytest.mark.parametrize("command", COMMAND_NAMES)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_each_command_has_its_own_help(command, flag, capsys):
    rc, out, err = stella([command, flag], capsys)
    assert (rc, err) == (0, "")
    assert out.startswith("usage: stella %s " % command)
    if command in STORE_COMMANDS:  # every store command finds the provider's stores too
        assert {"--store"} | PROVIDER_OPTIONS <= options_in(out)


@pytest.mark.parametrize("command", [c for c in COMMAND_NAMES if c != "compose"])
def test_the_synopsis_names_exactly_each_commands_options(command, capsys):
    """``stella --help`` shows one line per command: the options it names are the ones the command takes."""
    line = next(line for line in _command.SYNOPSIS.splitlines() if line.strip().startswith("stella %s " % command))
    named = options_in(line) | (options_in(_command.SYNOPSIS.splitlines()[-1]) if "[STORE]" in line else set())
    assert (command in STORE_COMMANDS) is ("[STORE]" in line)
    action = [word for word in line.split()[2:3] if word.isalpha()]  # stella keys generate: the action's own
    _rc, out, _err = stella([command] + action + ["-h"], capsys)
    assert named == options_in(out.split("\n\n")[0]) - {"--help"}  # the command's own usage line


@pytest.mark.parametrize("argv", [["nope"], ["lsit"], ["--store", "x"]], ids=["unknown", "typo", "option-first"])
def test_an_unknown_command_is_a_usage_error(argv, capsys):
    rc, out, err = stella(argv, capsys)
    assert (rc, out) == (2, "")
    assert err.startswith("usage: stella [-h] [--version] COMMAND ...\n")
    assert err.splitlines()[-1].startswith("stella: error: ")
    if argv[0] != "--store":
        assert "invalid choice: %r" % argv[0] in err


def test_no_command_is_a_usage_error(capsys):
    rc, out, err = stella([], capsys)
    assert (rc, out) == (2, "") and err.endswith("stella: error: a command is required\n")


def test_version_is_the_collections_own(capsys):
    with open(os.path.join(_command.COLLECTION_ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    rc, out, err = stella(["--version"], capsys)
    assert (rc, out, err) == (0, "stella (stellaops.runtime) %s\n" % version, "")


def test_version_of_an_installed_collection_comes_from_its_manifest(tmp_path, monkeypatch, capsys):
    (tmp_path / "MANIFEST.json").write_text(
        json.dumps({"collection_info": {"namespace": "stellaops", "name": "runtime", "version": "9.8.7"}})
    )
    monkeypatch.setattr(_command, "COLLECTION_ROOT", str(tmp_path))
    assert stella(["--version"], capsys)[:2] == (0, "stella (stellaops.runtime) 9.8.7\n")
    (tmp_path / "MANIFEST.json").unlink()
    rc, out, err = stella(["--version"], capsys)
    assert (rc, out) == (1, "") and err.startswith("stella: version_unknown: no version in ")


def test_compose_keeps_its_own_arguments(capsys, monkeypatch):
    """Options argparse does not know reach the provider as Compose wrote them, also through the Docker
    CLI plugin; ``stella compose -h`` alone is help."""
    for argv in (
        ["stella", "compose", "--project-name", "shop", "metadata", "--bogus=1", "--x"],
        ["docker-stella", "stella", "compose", "metadata"],
    ):
        assert _command.main(argv) == 0
        out, _err = capsys.readouterr()
        assert json.loads(out) == _provider_arguments.METADATA
    assert stella(["compose", "-h"], capsys)[:2] == (0, _command.COMPOSE_HELP)
    seen = []
    monkeypatch.setattr(_provider_cli, "compose", lambda args, *_rest: seen.append(args) or 7)
    assert stella(["compose", "up", "--project-name=p", "-h", "--ports", "1:1", "web"], capsys)[0] == 7
    assert seen == [["compose", "up", "--project-name=p", "-h", "--ports", "1:1", "web"]]


def test_install_writes_both_launchers_and_refuses_unknown_options(tmp_path, capsys):
    rc, out, _err = stella(["install", "--bin-dir", str(tmp_path / "bin"), "--plugin-dir", str(tmp_path / "p")], capsys)
    assert rc == 0 and out == "installed %s, %s\n" % (tmp_path / "bin" / "stella", tmp_path / "p" / "docker-stella")
    assert os.access(tmp_path / "bin" / "stella", os.X_OK)
    assert "command.main import main" in (tmp_path / "p" / "docker-stella").read_text()
    rc, out, err = stella(["install", "--bin-dir"], capsys)
    assert (rc, out) == (2, "") and err.startswith("usage: stella install")


# ------------------------------------------------------------------------------------------- list


def listed(out):
    """The job ids of a ``stella list`` table, in its order."""
    return [line.split()[0] for line in out.splitlines()[2:]]


def test_list_shows_the_newest_jobs_first_and_the_store_it_read(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, err = stella(["list", "--store", path], capsys)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "store: %s (--store)" % path
    assert lines[1].split() == ["JOB", "KIND", "STATUS", "RELEASE", "VERSION", "TARGETS", "STARTED", "ENDED"]
    assert lines[2].split() == ["job-5", "deployment", "Pending", "web", "1.0", "1", "-", "-"]
    assert lines[4].split() == [
        "job-3",
        "deployment",
        "Succeeded",
        "api",
        "2.0",
        "2",
        "2026-03-01T10:03:00Z",
        "2026-03-01T10:03:00Z",
    ]
    assert listed(out) == ["job-5", "job-4", "job-3", "job-2", "job-1"]
    assert len({line.index(line.split()[2]) for line in lines[1:]}) == 1  # the columns line up


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--status", "Failed"], ["job-2"]),
        (["--status", "succeeded", "--status", "RUNNING"], ["job-4", "job-3", "job-1"]),
        (["--project", "shop"], ["job-5", "job-2", "job-1"]),
        (["--project", "shop_b"], ["job-3"]),  # `_` is no wildcard: shopxb is another project
        (["--project", "shop%"], []),
        (["--project", "shop", "--status", "Succeeded"], ["job-1"]),
        (["--limit", "2"], ["job-5", "job-4"]),
        (["--limit", "0"], ["job-5", "job-4", "job-3", "job-2", "job-1"]),
        (["--project", "shop", "--limit", "1"], ["job-5"]),
        (["--project", "shop_b", "--limit", "1"], ["job-3"]),  # the newer job-4 of shopxb takes no place
    ],
    ids=[
        "status",
        "statuses-any-case",
        "project",
        "project-underscore",
        "project-percent",
        "project-and-status",
        "limit",
        "limit-0-all",
        "project-and-limit",
        "project-underscore-and-limit",
    ],
)
def test_list_filters(tmp_path, capsys, argv, expected):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, _err = stella(["list", "--store", path] + argv, capsys)
    assert rc == 0
    assert (listed(out) if expected else out.splitlines()[1:]) == (expected or ["no jobs"])


def test_list_json_is_one_document_of_summaries(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, _err = stella(["list", "--store", "sqlite:///" + path, "--json", "--status", "Succeeded"], capsys)
    document = json.loads(out)
    assert rc == 0 and (document["store"], document["storeSource"]) == ("sqlite:///" + path, "--store")
    assert [job["jobId"] for job in document["jobs"]] == ["job-3", "job-1"]
    assert document["jobs"][0] == {
        "jobId": "job-3",
        "kind": "deployment",
        "status": "Succeeded",
        "code": None,
        "release": "api-2.0",
        "releaseName": "api",
        "version": "2.0",
        "targets": 2,
        "projects": ["shop_b"],
        "createdAt": T[3],
        "startedAt": T[3],
        "completedAt": T[3],
    }


def test_the_project_filter_checks_the_targets_not_only_the_records_text(tmp_path):
    """A release that names a project its targets are not in is not a job of that project."""
    store = _job_store.open_store(str(tmp_path / "jobs.sqlite3"))
    try:
        add_job(store, "job-1", T[1], project="other", release={"id": "r", "projectName": "shop"})
        add_job(store, "job-2", T[2], project="shop")
        assert [r["jobId"] for r in store.list(project="shop")] == ["job-2"]
        assert [r["jobId"] for r in store.list(project="other")] == ["job-1"]
        assert [r["jobId"] for r in store.list(statuses=("Failed",))] == []
    finally:
        store.close()


@pytest.mark.parametrize(
    "argv",
    [["--status", "Done"], ["--limit", "-1"], ["--limit", "x"], ["extra"]],
    ids=["status", "negative-limit", "not-a-number", "argument"],
)
def test_list_usage_errors(tmp_path, capsys, argv):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, err = stella(["list", "--store", path] + argv, capsys)
    assert (rc, out) == (2, "") and err.startswith("usage: stella list")


# ------------------------------------------------------------------------------------------- show


def test_show_prints_the_job_as_job_show_does(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, err = stella(["show", "job-2", "--store", path], capsys)
    assert (rc, err) == (0, "")
    # job-2 ended without its close (the store holds no job.json of it): the line after the job says so
    assert out == "store: %s (--store)\n" % path + _job_view.render_text(read(path, "job-2")) + (
        "evidence: missing: the job's close did not finish, so its job.json was never written; "
        "`stella close job-2` writes it\n"
    )
    assert "job job-2  Failed" in out and "reason: target a: boom" in out


def test_show_json_holds_the_record_and_its_projection(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, _err = stella(["show", "job-3", "--store", path, "--json"], capsys)
    document = json.loads(out)
    assert rc == 0 and document["job"] == read(path, "job-3")
    assert document["projection"]["deploymentId"] == "job-3" and document["store"] == path
    assert document["runGone"] is None


def test_show_of_an_unknown_job_or_store_is_one_error_line(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, err = stella(["show", "job-404", "--store", path], capsys)
    assert (rc, out, err) == (
        1,
        "",
        "stella show: job_not_found: no job job-404 in the job store %s; next: %s\n"
        % (path, next_step("job_not_found")),
    )
    missing = tmp_path / "none" / "jobs.sqlite3"
    rc, out, err = stella(["show", "job-1", "--store", str(missing), "--follow"], capsys)
    assert (rc, out, err) == (
        1,
        "",
        "stella show: job_store_missing: no job store at %s; next: %s\n" % (missing, next_step("job_store_missing")),
    )
    assert not missing.parent.exists()
    assert stella(["show", "--store", path], capsys)[0] == 2


class Screen:
    """A stdout that a second thread can wait on: what ``stella show --follow`` printed so far."""

    def __init__(self):
        self.text = ""
        self.changed = threading.Condition()

    def write(self, text):
        with self.changed:
            self.text += text
            self.changed.notify_all()

    def flush(self):
        pass

    def wait_for(self, text, timeout=10.0):
        with self.changed:
            return self.changed.wait_for(lambda: text in self.text, timeout)


def test_show_follow_prints_each_phase_as_it_is_recorded_and_exits_with_the_outcome(tmp_path, monkeypatch):
    """A second controller moves job-9 on only after the follower printed its last change, so each line
    is printed while the job runs, not at its end."""
    path = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(path)
    try:
        add_job(store, "job-9", T[0], outcome="Pending")
    finally:
        store.close()
    steps = [
        ("job job-9 Pending", lambda r: _job.start(r, T[1])),
        (
            "  a: Running",
            lambda r: _job.record_phase(
                r,
                "a",
                entry=_job.phase_entry("preflight", "passed", started_at=T[1], completed_at=T[2], duration_ms=5),
                now=T[2],
            ),
        ),
        (
            "  a: preflight passed 5ms",
            lambda r: _job.record_phase(
                r,
                "a",
                entry=_job.phase_entry("deploy", "passed", started_at=T[2], completed_at=T[3], duration_ms=7),
                now=T[3],
            ),
        ),
        ("  a: deploy passed 7ms", lambda r: _job.finish_target(r, "a", succeeded=True, now=T[4])),
        ("  a: Succeeded", lambda r: _job.finish(r, T[5])),
    ]
    screen = Screen()
    lagging = []

    def controller():
        writer = _job_store.open_store(path)
        try:
            for seen, change in steps:
                if not screen.wait_for(seen + "\n"):
                    lagging.append(seen)  # the follower is not following: end the job so the test ends
                    writer.update("job-9", lambda r: _job.interrupted(r, T[9], "the follower never printed it"))
                    return
                writer.update("job-9", change)
        finally:
            writer.close()

    monkeypatch.setattr(_jobs_cli, "FOLLOW_INTERVAL", 0.02)
    monkeypatch.setattr(sys, "stdout", screen)
    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    rc = _command.main(["stella", "show", "job-9", "--follow", "--store", path])
    thread.join(10)
    assert lagging == []
    final = read(path, "job-9")
    assert screen.text == "\n".join(
        [
            "store: %s (--store)" % path,
            "job job-9 Pending",
            "job job-9 Running",
            "  a: Running",
            "  a: preflight passed 5ms",
            "  a: deploy passed 7ms",
            "  a: Succeeded",
            "job job-9 Succeeded",
            "",
            "",
        ]
    ) + _job_view.render_text(final)
    assert rc == 0


def test_show_follow_of_a_failed_job_exits_1(tmp_path, capsys):
    path = fleet_store(tmp_path / "jobs.sqlite3")
    rc, out, _err = stella(["show", "job-2", "--follow", "--store", path], capsys)
    assert rc == 1
    assert out.splitlines()[1:4] == ["  a: preflight passed 5ms", "  a: Failed: boom", "job job-2 Failed"]
    assert out.endswith(_job_view.render_text(read(path, "job-2")))
    rc, out, _err = stella(["show", "job-1", "--follow", "--store", path, "--json"], capsys)
    events = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and [e["event"] for e in events] == ["store", "phase", "target", "job", "end"]
    assert events[-1]["succeeded"] is True and events[-1]["job"] == read(path, "job-1")


def test_show_follow_stops_when_the_jobs_run_is_gone(tmp_path, capsys, monkeypatch):
    """job-7's controller run on this host ended without finishing it: following it would never end."""
    monkeypatch.setattr(_jobs_cli, "FOLLOW_INTERVAL", 0.01)
    path = str(tmp_path / "jobs.sqlite3")
    gone = {"host": socket.gethostname(), "pid": 2**22 + 7, "startTicks": 1}  # above any pid_max
    store = _job_store.open_store(path)
    try:
        store.create(
            _job.new_job(
                job_id="job-7",
                job_id_source=None,
                summary={"release": {"id": "r"}},
                batches=[["a"]],
                targets=targets_in("shop", "a"),
                options={},
                now=T[0],
                owner=gone,
            )
        )
        store.update("job-7", lambda r: _job.start(r, T[0]))
    finally:
        store.close()
    rc, out, err = stella(["show", "job-7", "--follow", "--store", path], capsys)
    assert rc == 1 and out.splitlines()[1:] == ["job job-7 Running", "  a: Running"]
    assert err.startswith(
        "stella show: job_run_gone: job job-7 is Running, but the controller run (pid %d) ended" % gone["pid"]
    ) and err.endswith("`stella interrupt job-7` records it interrupted; next: %s\n" % next_step("job_run_gone"))
    assert read(path, "job-7")["status"] == "Running"  # show only reads
    rc, out, _err = stella(["show", "job-7", "--store", path], capsys)
    assert rc == 0 and out.splitlines()[-1].startswith("note: job job-7 is Running, but the controller run")


# ----------------------------------------------------------------------------- which store is read


def test_the_store_comes_from_the_environment_then_the_default(tmp_path, capsys, monkeypatch):
    path = fleet_store(tmp_path / "env.sqlite3")
    monkeypatch.setenv(_location.STORE_ENV, path)
    rc, out, _err = stella(["list"], capsys)
    assert rc == 0 and out.splitlines()[0] == "store: %s (STELLA_JOB_STORE)" % path and len(listed(out)) == 5
    other = str(tmp_path / "other.sqlite3")
    _job_store.open_store(other).close()
    rc, out, _err = stella(["list", "--store", other], capsys)
    assert out == "store: %s (--store)\nno jobs\n" % other  # --store wins over the environment
    monkeypatch.delenv(_location.STORE_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = tmp_path / "home" / ".local" / "state" / "stellaops" / "jobs.sqlite3"
    rc, out, err = stella(["list"], capsys)
    assert (rc, out) == (1, "")
    assert err == (
        "stella list: job_store_missing: no job store at %s (the default store; --store, "
        "--compose-project or $STELLA_JOB_STORE choose another); next: %s\n" % (default, next_step("job_store_missing"))
    )
    fleet_store(default)
    rc, out, _err = stella(["show", "job-1"], capsys)
    assert rc == 0 and out.splitlines()[0] == "store: %s (default)" % default


def fake_job_run(playbooks, extravars, _channel, _cancelled):
    """The deployment job as ansible-runner would run it for the provider: it records the job in the
    store ``up`` names, succeeded on localhost."""
    store = _job_store.open_store(extravars["stella_job_store"])
    try:
        target = {
            "localhost": {
                "targetId": "localhost",
                "targetName": "localhost",
                "projectName": "default-local-web",
                "currentDigest": "sha256:" + "1" * 64,
                "slot": "blue",
            }
        }
        job_id = extravars["stella_job_id"]
        store.create(
            _job.new_job(
                job_id=job_id,
                job_id_source="stella_job_id",
                summary={"release": extravars["stella_release"]["release"]},
                batches=[["localhost"]],
                targets=target,
                options={},
                now=T[0],
            )
        )
        store.update(
            job_id,
            lambda r: _job.start(r, T[0]),
            lambda r: _job.record_phase(
                r,
                "localhost",
                entry=_job.phase_entry("deploy", "passed", started_at=T[0], completed_at=T[1], duration_ms=9),
                now=T[1],
            ),
            lambda r: _job.finish_target(r, "localhost", succeeded=True, now=T[1]),
            lambda r: _job.finish(r, T[1]),
        )
    finally:
        store.close()
    assert playbooks == [_provider_cli.PLAYBOOKS["up"]]
    return 0, "successful", None, {}, None


def test_planning_s_own_code_reaches_compose(tmp_path, capsys, monkeypatch):
    """A job that could not be planned (no record): Compose sees planning's code, not a generic one."""
    message = "cannot resolve image registry.example/web:1.0: tag 1.0 not found"
    monkeypatch.setattr(_provider_cli, "run_playbook", lambda *_args: (2, "failed", message, {}, "image_unresolved"))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = _command.main(
            [
                "stella",
                "compose",
                "up",
                "--project-name",
                "shop",
                "--image=registry.example/web:1.0",
                "--state_directory=%s" % (tmp_path / "state"),
                "web",
            ]
        )
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert rc == 1 and last["type"] == "error"
    assert last["message"] == "image_unresolved: the deployment job did not start: %s; next: %s" % (
        message,
        next_step("image_unresolved"),
    )


def compose_up(capsys, state, project, service):
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = _command.main(
            [
                "stella",
                "compose",
                "up",
                "--project-name",
                project,
                "--image=registry.example/web:1.0",
                "--ports=18080:8080",
                "--version=1.0",
                "--state_directory=%s" % state,
                service,
            ]
        )
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    out, _err = capsys.readouterr()
    assert rc == 0, out
    return next(line for line in out.splitlines() if "deploying" in line).split("(job ")[1].split(")")[0]


def test_every_store_command_reads_the_store_compose_up_wrote(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_provider_cli, "run_playbook", fake_job_run)
    state = tmp_path / "state"
    job_id = compose_up(capsys, state, "shop", "web")
    written = state / "shop" / "web" / "jobs.sqlite3"
    assert written.is_file()
    located = ["--compose-project", "shop", "--state-directory", str(state)]
    rc, out, _err = stella(["list"] + located, capsys)  # the project's one service with a store
    assert rc == 0 and listed(out) == [job_id]
    assert out.splitlines()[0] == "store: %s (--compose-project shop (its one service with a store: web))" % written
    rc, out, _err = stella(["show", job_id, "--service", "web"] + located, capsys)
    assert rc == 0 and out.splitlines()[0] == "store: %s (--compose-project shop --service web)" % written
    assert out.splitlines()[1].startswith("job %s  Succeeded" % job_id)
    rc, out, _err = stella(["health", "--json"] + located, capsys)
    assert rc == 0 and [(h["targetId"], h["jobId"]) for h in json.loads(out)["health"]] == [("localhost", job_id)]
    rc, out, _err = stella(["report", job_id, "--output", str(tmp_path / "r.html")] + located, capsys)
    assert rc == 0 and (tmp_path / "r.html").read_text().count(job_id) > 0
    rc, out, _err = stella(["interrupt", job_id] + located, capsys)
    assert rc == 0 and out == "job %s is already Succeeded: nothing to interrupt\n" % job_id
    rc, out, _err = stella(["prune", "--older-than", "0", "--dry-run"] + located, capsys)
    assert rc == 0 and out.startswith("would remove 0 finished jobs")  # target health names the job


def test_the_provider_store_under_its_default_state_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_provider_cli, "run_playbook", fake_job_run)
    monkeypatch.setenv("HOME", str(tmp_path))
    state = tmp_path / ".local" / "state" / "stellaops" / "provider"
    job_id = compose_up(capsys, state, "shop", "web")  # the option as it defaults
    rc, out, _err = stella(["show", job_id, "--compose-project", "shop"], capsys)
    assert rc == 0 and out.startswith("store: %s " % (state / "shop" / "web" / "jobs.sqlite3"))


def test_a_compose_project_with_several_or_no_stores(tmp_path, capsys):
    state = tmp_path / "state"
    for service in ("web", "api"):
        fleet_store(state / "shop" / service / "jobs.sqlite3")
    located = ["--compose-project", "shop", "--state-directory", str(state)]
    rc, out, err = stella(["list"] + located, capsys)
    assert (rc, out) == (1, "")
    assert err == (
        "stella list: job_store_ambiguous: the Compose provider keeps job stores for several services of "
        "project shop under %s (api, web): choose one with --service; next: %s\n"
        % (state / "shop", next_step("job_store_ambiguous"))
    )
    assert stella(["list", "--service", "api"] + located, capsys)[0] == 0
    rc, out, err = stella(["health", "--compose-project", "cart", "--state-directory", str(state)], capsys)
    assert (rc, out) == (1, "") and err == (
        "stella health: job_store_missing: the Compose provider keeps no job "
        "store for project cart under %s; next: %s\n" % (state / "cart", next_step("job_store_missing"))
    )
    rc, _out, err = stella(["show", "job-1", "--service", "db"] + located, capsys)
    assert (
        rc == 1
        and err
        == "stella show: job_store_missing: no job store at %s (--compose-project shop --service db); next: %s\n"
        % (state / "shop" / "db" / "jobs.sqlite3", next_step("job_store_missing"))
    )
    assert not (state / "shop" / "db").exists()


@pytest.mark.parametrize("command", STORE_COMMANDS)
@pytest.mark.parametrize(
    "argv,why",
    [
        (["--store", "x.sqlite3", "--compose-project", "shop"], "--store and --compose-project choose two stores"),
        (["--service", "web"], "--service and --state-directory need --compose-project"),
        (["--state-directory", "/s"], "--service and --state-directory need --compose-project"),
        (["--compose-project", "../etc"], "--compose-project: not a Compose project name"),
        (["--compose-project", "Shop"], "--compose-project: not a Compose project name"),
        (["--compose-project", "shop", "--service", ".."], "--service: not a Compose service name"),
        (["--compose-project", "shop", "--service", "a/b"], "--service: not a Compose service name"),
    ],
    ids=[
        "two-stores",
        "service-alone",
        "state-alone",
        "project-path",
        "project-upper-case",
        "service-dots",
        "service-path",
    ],
)
def test_store_options_that_do_not_go_together_are_usage_errors(command, argv, why, capsys):
    required = {
        "show": ["job-1"],
        "report": ["job-1"],
        "evidence": ["job-1"],
        "interrupt": ["job-1"],
        "close": ["job-1"],
        "prune": ["--older-than", "1"],
        "verify": ["job-1", "--key", "k.pub"],
    }
    rc, out, err = stella([command] + required.get(command, []) + argv, capsys)
    assert (rc, out) == (2, "")
    assert err.startswith("usage: stella %s" % command) and ("stella %s: error: %s" % (command, why)) in err


def test_the_provider_layout_is_the_providers_own():
    parsed = {"project": "shop", "service": "web", "options": {"state_directory": "/s"}}
    expected = os.path.join(_location.state_dir(parsed), "jobs.sqlite3")
    assert _location.provider_store("shop", "web", "/s") == expected == "/s/shop/web/jobs.sqlite3"
    assert _location.provider_store("shop", None, "/s") == "/s/shop/service/jobs.sqlite3"  # Compose 2.35: no service


# ------------------------------------------------------------------------------------------- docs


def test_the_command_reference_documents_each_command_its_options_and_exit_statuses(capsys):
    doc = doc_text("stella-command.md")
    for command in COMMAND_NAMES:
        assert "## stella %s" % command in doc, command
        if command != "compose":
            _rc, out, _err = stella([command, "-h"], capsys)
            missing = options_in(out) - {"--help"} - options_in(doc)
            assert not missing, (command, missing)
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
        assert status in doc, status
    assert _location.STORE_ENV in doc and "--version" in doc
    assert "stella-command.md" in doc_text("provider.md")


def test_the_documented_list_and_show_commands_run_as_written(tmp_path, capsys, monkeypatch):
    doc = doc_text("stella-command.md")
    commands = [
        command for command in doc_commands(doc, "stella list") + doc_commands(doc, "stella show") if "[" not in command
    ]  # the synopsis lines of the usage block are no commands
    assert len(commands) >= 4, commands
    monkeypatch.setenv("HOME", str(tmp_path))
    path = fleet_store(tmp_path / ".local" / "state" / "stellaops" / "provider" / "shop" / "web" / "jobs.sqlite3")
    places = {"JOB": "job-1", "~/.local/state/stellaops/jobs.sqlite3": path}
    for command in commands:
        argv = [places.get(arg, arg) for arg in shlex.split(command)[1:]]
        if "--follow" in argv:
            argv.remove("--follow")  # job-1 is finished: --follow would print it and exit 0 just the same
        if "--compose-project" not in argv and "--store" not in argv:
            argv += ["--store", path]
        rc, out, err = stella(argv, capsys)
        assert (rc, err) == (0, ""), (command, err)
        assert out, command


def test_follow_waits_between_reads(tmp_path, monkeypatch, capsys):
    """``--follow`` reads the store once per ``FOLLOW_INTERVAL``, not in a busy loop."""
    path = fleet_store(tmp_path / "jobs.sqlite3")
    monkeypatch.setattr(_jobs_cli, "FOLLOW_INTERVAL", 0.05)
    waits = []
    real_sleep = time.sleep

    def sleep(seconds):
        waits.append(seconds)
        if len(waits) == 3:
            raise KeyboardInterrupt  # Ctrl-C
        real_sleep(0)

    monkeypatch.setattr(_jobs_cli.time, "sleep", sleep)
    rc, out, _err = stella(["show", "job-4", "--follow", "--store", path], capsys)
    assert rc == _jobs_cli.INTERRUPTED_RC == 130 and waits == [0.05, 0.05, 0.05]
    assert out.splitlines()[1:] == ["job job-4 Running", "  d: Running"]
