"""agent/hooks.py: entry validation, argv, outcomes, redaction, and real runs with process-group timeouts."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import hooks as _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError


def hook(**kw):
    entry = {"Name": "h", "Phase": "pre-deploy", "Command": "true"}
    entry.update(kw)
    return _hooks.normalize_hook(entry)


def test_defaults_applied():
    assert hook() == {
        "Name": "h",
        "Phase": "pre-deploy",
        "Interpreter": "/bin/sh",
        "Command": "true",
        "WorkingDirectory": None,
        "TimeoutSeconds": 300,
        "FailurePolicy": "fail",
        "RedactionPolicy": "redact",
    }


@pytest.mark.parametrize(
    "entry,needle",
    [
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "name": "lower"}, "unknown key"),
        ({"Phase": "pre-deploy", "Command": "x"}, "Name is required"),
        ({"Name": "h", "Phase": "during", "Command": "x"}, "Phase"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": ""}, "Command is required"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "TimeoutSeconds": 0}, "TimeoutSeconds"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "TimeoutSeconds": True}, "TimeoutSeconds"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "FailurePolicy": "explode"}, "FailurePolicy"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "RedactionPolicy": "partial"}, "RedactionPolicy"),
        ({"Name": "h", "Phase": "pre-deploy", "Command": "x", "Interpreter": "  "}, "Interpreter"),
        ("not a dict", "must be an object"),
    ],
    ids=[
        "unknown-key",
        "no-name",
        "bad-phase",
        "empty-command",
        "zero-timeout",
        "bool-timeout",
        "bad-policy",
        "bad-redaction",
        "blank-interpreter",
        "not-object",
    ],
)
def test_invalid_entries(entry, needle):
    with pytest.raises(StellaError) as err:
        _hooks.normalize_hook(entry, 3)
    assert err.value.code == "invalid_hook" and needle in err.value.reason and "Hooks[3]" in err.value.reason
    assert err.value.phase == "validate_payload"


def test_duplicate_names_per_phase_rejected_and_none_is_empty():
    assert _hooks.normalize_hooks(None) == []
    entries = [
        {"Name": "a", "Phase": "pre-deploy", "Command": "x"},
        {"Name": "a", "Phase": "post-deploy", "Command": "x"},
    ]
    assert len(_hooks.normalize_hooks(entries)) == 2
    with pytest.raises(StellaError):
        _hooks.normalize_hooks(entries + [{"Name": "a", "Phase": "pre-deploy", "Command": "y"}])
    with pytest.raises(StellaError):
        _hooks.normalize_hooks({"Name": "a"})


@pytest.mark.parametrize(
    "interpreter,argv",
    [
        ("/bin/sh", ["/bin/sh", "-c", "CMD"]),
        ("bash -e", ["bash", "-e", "-c", "CMD"]),
        ("/usr/bin/python3.11", ["/usr/bin/python3.11", "-c", "CMD"]),
        ("/opt/run-script", ["/opt/run-script", "CMD"]),
        ("/usr/bin/env node", ["/usr/bin/env", "node", "CMD"]),
    ],
    ids=["sh", "bash-args", "python-versioned", "other", "env"],
)
def test_hook_argv(interpreter, argv):
    assert _hooks.hook_argv(hook(Interpreter=interpreter, Command="CMD")) == argv


@pytest.mark.parametrize(
    "policy,code,timed_out,outcome",
    [
        ("fail", 0, False, "succeeded"),
        ("fail", 1, False, "failed"),
        ("ignore", 1, False, "ignored"),
        ("continue", 2, False, "continued"),
        ("warn", 3, False, "warned"),
        ("warn", 0, True, "warned"),
        ("fail", None, True, "failed"),
    ],
)
def test_outcome_for(policy, code, timed_out, outcome):
    assert _hooks.outcome_for(policy, code, timed_out) == outcome


def test_redact_output():
    marker = _hooks.redact_output(b"secret\n", "redact")
    assert marker == {"redacted": True, "length": 7}  # no digest: a guess of the secret cannot be confirmed
    assert "secret" not in repr(marker)
    assert _hooks.redact_output("plain", "none") == "plain"
    assert _hooks.redact_output(b"pw=hunter2", "none", secrets=["hunter2"]) == "pw=********"
    long_text = _hooks.redact_output(b"x" * (_hooks.MAX_OUTPUT_CHARS + 10), "none")
    assert long_text.endswith("[truncated]")
    assert _hooks.redact_output(None, "redact")["length"] == 0


def test_run_hook_success_failure_and_environment(tmp_path):
    ok = _hooks.run_hook(
        hook(Command="echo $STELLA_X; pwd", RedactionPolicy="none"), str(tmp_path), env={"STELLA_X": "value"}
    )
    assert ok["exitCode"] == 0 and ok["outcome"] == "succeeded" and not ok["timedOut"]
    assert ok["stdout"] == "value\n%s\n" % tmp_path
    bad = _hooks.run_hook(hook(Command="echo oops >&2; exit 4", FailurePolicy="warn"), str(tmp_path))
    assert bad["exitCode"] == 4 and bad["outcome"] == "warned"
    assert bad["stderr"] == {"redacted": True, "length": 5}
    workdir = tmp_path / "wd"
    workdir.mkdir()
    here = _hooks.run_hook(hook(Command="pwd", RedactionPolicy="none", WorkingDirectory=str(workdir)), str(tmp_path))
    assert here["stdout"].strip() == str(workdir)


def test_run_hook_missing_interpreter_is_a_failed_result(tmp_path):
    result = _hooks.run_hook(hook(Interpreter="/nonexistent/shell"), str(tmp_path))
    assert result["exitCode"] == 127 and result["outcome"] == "failed" and "cannot start" in result["error"]


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    result = _hooks.run_hook(
        hook(Command="sleep 120 & echo $! > %s; sleep 120" % pidfile, TimeoutSeconds=1), str(tmp_path)
    )
    assert time.monotonic() - start < 8
    assert result["timedOut"] is True and result["outcome"] == "failed" and result["exitCode"] == -9
    child = int(pidfile.read_text())
    time.sleep(0.2)
    gone = not os.path.exists("/proc/%d" % child) or open("/proc/%d/stat" % child).read().split()[2] == "Z"
    assert gone, "background child of the hook survived"


def test_run_phase_hooks_stops_at_first_blocking_failure(tmp_path):
    hooks = _hooks.normalize_hooks(
        [
            {"Name": "a", "Phase": "pre-deploy", "Command": "exit 1", "FailurePolicy": "continue"},
            {"Name": "b", "Phase": "post-deploy", "Command": "exit 0"},
            {"Name": "c", "Phase": "pre-deploy", "Command": "exit 2"},
            {"Name": "d", "Phase": "pre-deploy", "Command": "exit 0"},
        ]
    )
    results, blocking = _hooks.run_phase_hooks(hooks, "pre-deploy", str(tmp_path))
    assert [r["name"] for r in results] == ["a", "c"]
    assert blocking["name"] == "c"
    assert _hooks.warnings_for(results) and "FailurePolicy=continue" in _hooks.warnings_for(results)[0]
    results, blocking = _hooks.run_phase_hooks(hooks, "post-deploy", str(tmp_path))
    assert blocking is None and [r["outcome"] for r in results] == ["succeeded"]


def _gone(pid):
    if not os.path.exists("/proc/%d" % pid):
        return True
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_child_in_its_own_session_dies_at_the_timeout_and_the_output_is_kept(tmp_path):
    """A hook child that calls setsid escapes the process group; it is killed all the same, and the
    output the hook printed before the timeout is kept."""
    pidfile = tmp_path / "escaped"
    command = "echo before; setsid sh -c 'echo $$ > %s; exec sleep 120' & sleep 120" % pidfile
    start = time.monotonic()
    result = _hooks.run_hook(hook(Command=command, TimeoutSeconds=1, RedactionPolicy="none"), str(tmp_path))
    assert time.monotonic() - start < 5, "the escaped child kept the pipes open"
    assert result["timedOut"] is True and result["stdout"] == "before\n"
    escaped = int(pidfile.read_text())
    time.sleep(0.2)
    assert _gone(escaped), "the setsid child of the hook survived the timeout"


def test_a_hook_left_by_a_killed_task_is_killed_before_the_next_run(tmp_path):
    """The marker names the running hook; a later run kills what a SIGKILLed task left running."""
    import subprocess  # pylint: disable=import-outside-toplevel

    survivor = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        stat = _hooks._proc_stat(survivor.pid)  # pylint: disable=protected-access
        (tmp_path / ".stella-hook.json").write_text(
            '{"pid": %d, "startTime": %d, "hook": "h"}' % (survivor.pid, stat[3])
        )
        killed = _hooks.reap_stale_hooks(str(tmp_path))
        assert survivor.pid in killed
        assert survivor.wait(timeout=5) == -9
        assert not (tmp_path / ".stella-hook.json").exists()
        assert _hooks.reap_stale_hooks(str(tmp_path)) == []
    finally:
        if survivor.poll() is None:
            survivor.kill()


def test_a_recycled_pid_is_not_killed(tmp_path):
    """A marker whose pid now belongs to another process (other start time) kills nothing."""
    import subprocess  # pylint: disable=import-outside-toplevel

    other = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        stat = _hooks._proc_stat(other.pid)  # pylint: disable=protected-access
        (tmp_path / ".stella-hook.json").write_text(
            '{"pid": %d, "startTime": %d, "hook": "h"}' % (other.pid, stat[3] + 1)
        )
        assert _hooks.reap_stale_hooks(str(tmp_path)) == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("workdir", ["/srv/app/../../etc", "/..", "../x", "/srv/app/..", "/srv/./../etc"])
def test_a_working_directory_with_dot_dot_is_refused_as_planning_refuses_it(workdir):
    """The target refuses what planning refuses (a task built by hand, or by an older controller), with the
    code planning gives it."""
    with pytest.raises(StellaError) as err:
        _hooks.normalize_hook({"Name": "h", "Phase": "pre-deploy", "Command": "x", "WorkingDirectory": workdir}, 2)
    assert err.value.code == "release_invalid" and err.value.phase == "validate_payload"
    assert "Hooks[2]" in err.value.reason and "WorkingDirectory" in err.value.reason and ".." in err.value.reason
    assert hook(WorkingDirectory="/srv/app..d/x..y")["WorkingDirectory"] == "/srv/app..d/x..y"
