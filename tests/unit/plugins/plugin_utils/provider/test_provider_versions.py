"""The provider and the released Compose versions: ``debug`` only to a Compose that accepts it (2.36.1+,
told by the calling Compose binary's ``version --short``), ``down``/``stop`` checking only the options
that name the project, and a Compose that stopped reading cancelling the run."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import caller
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import protocol as pv


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2.40.3\n", (2, 40, 3)),
        ("v2.36.0", (2, 36, 0)),
        ("2.40.3-desktop.1", (2, 40, 3)),
        ("5.1.4", (5, 1, 4)),
        ("", None),
        ("Docker Compose version", None),
        (None, None),
    ],
)
def test_parse_version(text, expected):
    assert caller.parse_version(text) == expected


@pytest.mark.parametrize(
    "version, debug",
    [
        ((2, 35, 1), False),
        ((2, 36, 0), False),
        ((2, 36, 1), True),
        ((2, 36, 2), True),
        ((2, 40, 3), True),
        ((5, 0, 0), True),
        (None, False),
    ],
)
def test_debug_only_from_2_36_1_and_never_when_unknown(version, debug):
    allowed = pv.allowed_messages({}, version)
    assert {"info", "error", "setenv"} <= allowed and ("debug" in allowed) is debug
    assert "rawsetenv" not in allowed


def test_announced_messages_win_over_the_version():
    assert pv.allowed_messages({"COMPOSE_PROVIDER_MESSAGES": "error,debug"}, None) == {"error", "debug"}
    assert "debug" not in pv.allowed_messages({"COMPOSE_PROVIDER_MESSAGES": "error,info"}, (2, 40, 3))


def test_a_2_36_0_channel_drops_debug_and_keeps_info():
    out = io.BytesIO()
    chan = pv.Channel(out, io.BytesIO(), {}, (2, 36, 0))
    assert chan.send("debug", "task: x") is False and chan.send("info", "deploying") is True
    assert [json.loads(line)["type"] for line in out.getvalue().splitlines()] == ["info"]


def _fake_proc(tmp_path, chain):
    """A /proc of ``chain``: [(pid, ppid, exe)] from this process up."""
    proc = tmp_path / "proc"
    for pid, ppid, exe in chain:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text("%d (name with ) paren) S %d 1 1" % (pid, ppid))
        if exe:
            os.symlink(exe, proc / str(pid) / "exe")
    return str(proc)


def _exe(tmp_path, name):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_compose_binary_is_the_nearest_compose_ancestor(tmp_path):
    compose = _exe(tmp_path, "docker-compose")
    python = _exe(tmp_path, "python3")
    proc = _fake_proc(tmp_path, [(10, 20, python), (20, 30, python), (30, 1, compose)])
    assert caller.compose_binary(10, proc) == compose
    assert caller.compose_binary(10, proc, depth=1) is None
    assert caller.compose_binary(10, _fake_proc(tmp_path / "b", [(10, 20, python), (20, 1, python)])) is None
    assert caller.compose_binary(10, str(tmp_path / "absent")) is None


def test_compose_version_asks_the_binary_and_is_none_when_it_cannot_tell(tmp_path):
    compose = _exe(tmp_path, "docker-compose")
    proc = _fake_proc(tmp_path, [(10, 20, None), (20, 1, compose)])
    os.symlink(_exe(tmp_path, "python3"), os.path.join(proc, "10", "exe"))
    asked = []

    def run(argv, **_kw):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, b"2.36.0\n", b"")

    assert caller.compose_version(10, proc, run) == (2, 36, 0) and asked == [[compose, "version", "--short"]]

    def failed(argv, **_kw):
        return subprocess.CompletedProcess(argv, 1, b"", b"boom")

    assert caller.compose_version(10, proc, failed) is None

    def hangs(argv, **_kw):
        raise subprocess.TimeoutExpired(argv, 10)

    assert caller.compose_version(10, proc, hangs) is None


@pytest.mark.parametrize("command", ["down", "stop"])
@pytest.mark.parametrize(
    "option", ["--keep_revisions=abc", "--health_port=abc", "--auto_rollback=maybe", "--relay=sideways"]
)
def test_down_and_stop_do_not_check_deploy_options(command, option):
    parsed = _arguments.parse_argv(["compose", "--project-name=shop", command, option, "web"])
    assert parsed["command"] == command
    with pytest.raises(pv.ProviderError) as err:
        _arguments.parse_argv(["compose", "--project-name=shop", "up", option, "web"])
    assert err.value.code == "invalid_option"


@pytest.mark.parametrize("command", ["down", "stop"])
def test_down_still_checks_what_names_the_project(command):
    with pytest.raises(pv.ProviderError) as err:
        _arguments.parse_argv(["compose", "--project-name=shop", command, "--strategy=sideways", "web"])
    assert err.value.code == "invalid_option" and "strategy" in err.value.reason


def _run(monkeypatch, argv, out, version=(2, 40, 3)):
    seen = {}

    def fake_run(playbooks, extravars, channel, cancelled):
        seen.update(extravars=extravars, playbooks=playbooks)
        channel.send("debug", "task: one")
        seen["cancelled"] = cancelled["flag"]
        return 0, "successful", None, {}, None

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = cli.compose(argv, io.BytesIO(), out, {}, detect=lambda: version)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return rc, seen


def test_a_bad_deploy_option_down_releases_the_project(monkeypatch, tmp_path):
    out = io.BytesIO()
    argv = [
        "compose",
        "--project-name=shop",
        "down",
        "--keep_revisions=abc",
        "--environment=NOT-A-PAIR",
        "--health_port=abc",
        "--work_directory=%s" % tmp_path,
        "--state_directory=%s" % tmp_path,
        "web",
    ]
    rc, seen = _run(monkeypatch, argv, out)
    types = [json.loads(line)["type"] for line in out.getvalue().splitlines()]
    assert rc == 0 and types == ["debug", "info"], out.getvalue()
    assert seen["extravars"]["stella_teardown_state"] == "absent"
    assert seen["extravars"]["stella_work_directory"] == str(tmp_path)
    assert seen["extravars"]["stella_teardown_project"]


def test_down_to_2_36_0_sends_no_debug(monkeypatch, tmp_path):
    out = io.BytesIO()
    argv = ["compose", "--project-name=shop", "down", "--unknown=1", "--state_directory=%s" % tmp_path, "web"]
    rc, _seen = _run(monkeypatch, argv, out, version=(2, 36, 0))
    assert rc == 0 and [json.loads(line)["type"] for line in out.getvalue().splitlines()] == ["info"]


class Closed(io.BytesIO):
    def write(self, data):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_compose_that_stopped_reading_cancels_the_run(monkeypatch, tmp_path):
    argv = ["compose", "--project-name=shop", "down", "--state_directory=%s" % tmp_path, "web"]
    rc, seen = _run(monkeypatch, argv, Closed())
    assert seen["cancelled"] is True and rc == 0


def test_a_closed_channel_is_gone_and_sends_nothing_more():
    gone = []
    chan = pv.Channel(
        Closed(),
        io.BytesIO(b'{"a": 1}\n'),
        {"COMPOSE_PROVIDER_MESSAGES": "info,get-relay-info"},
        on_gone=lambda: gone.append(1),
    )
    assert chan.send("info", "x") is False and chan.gone and gone == [1]
    assert chan.send("info", "y") is False and gone == [1] and chan.sent == []
    with pytest.raises(pv.ProviderError) as err:
        chan.request("get-relay-info")
    assert err.value.code == "compose_unsupported"
