# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Deployment hooks: contract entries, argv execution with a process-group timeout, policies, redaction.

A hook entry uses the contract's exact property names (``Name``, ``Phase``, ``Interpreter``,
``Command``, ``WorkingDirectory``, ``TimeoutSeconds``, ``FailurePolicy``, ``RedactionPolicy``).
It runs as an argv list (interpreter + command), never through a shell string chosen by us, in its
own session; on timeout the whole process group is killed. Output is redacted by default: only its
length and SHA-256 are kept unless ``RedactionPolicy=none``. Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import signal
import subprocess
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_text
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_HOOK_INTERPRETER as DEFAULT_INTERPRETER,
    DEFAULT_HOOK_TIMEOUT as DEFAULT_TIMEOUT,
    HOOK_MARKER,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, read_bytes

PHASES = ("pre-deploy", "post-deploy")
FAILURE_POLICIES = ("fail", "ignore", "continue", "warn")
REDACTION_POLICIES = ("redact", "none")
HOOK_KEYS = (
    "Name",
    "Phase",
    "Interpreter",
    "Command",
    "WorkingDirectory",
    "TimeoutSeconds",
    "FailurePolicy",
    "RedactionPolicy",
)
MAX_OUTPUT_CHARS = 65536
_POLICY_OUTCOME = {"fail": "failed", "ignore": "ignored", "continue": "continued", "warn": "warned"}
# Interpreters that take an inline program after ``-c``.
_INLINE_INTERPRETERS = ("sh", "bash", "dash", "ash", "zsh", "ksh", "busybox", "python", "python3", "perl", "ruby")


def _invalid(index, message):
    return StellaError("invalid_hook", "Hooks[%d]: %s" % (index, message), phase="validate_payload")


def normalize_hook(entry, index=0):
    """Validate one contract hook entry; return it with defaults applied (same key names)."""
    if not isinstance(entry, dict):
        raise _invalid(index, "must be an object, got %s" % type(entry).__name__)
    unknown = sorted(set(entry) - set(HOOK_KEYS))
    if unknown:
        raise _invalid(index, "unknown key(s) %s (allowed: %s)" % (", ".join(unknown), ", ".join(HOOK_KEYS)))
    for key in ("Name", "Phase", "Command"):
        if not isinstance(entry.get(key), str) or not entry.get(key).strip():
            raise _invalid(index, "%s is required and must be a non-empty string" % key)
    phase = entry["Phase"]
    if phase not in PHASES:
        raise _invalid(index, "Phase %r is not one of %s" % (phase, ", ".join(PHASES)))
    interpreter = entry.get("Interpreter") or DEFAULT_INTERPRETER
    if not isinstance(interpreter, str):
        raise _invalid(index, "Interpreter must be a non-empty string")
    try:
        words = shlex.split(interpreter)
    except ValueError as exc:
        raise _invalid(index, "Interpreter %r cannot be split into words: %s" % (interpreter, exc))
    if not words:
        raise _invalid(index, "Interpreter must be a non-empty string")
    timeout = entry.get("TimeoutSeconds")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise _invalid(index, "TimeoutSeconds must be a positive number, got %r" % (timeout,))
    failure = entry.get("FailurePolicy") or "fail"
    if failure not in FAILURE_POLICIES:
        raise _invalid(index, "FailurePolicy %r is not one of %s" % (failure, ", ".join(FAILURE_POLICIES)))
    redaction = entry.get("RedactionPolicy") or "redact"
    if redaction not in REDACTION_POLICIES:
        raise _invalid(index, "RedactionPolicy %r is not one of %s" % (redaction, ", ".join(REDACTION_POLICIES)))
    workdir = entry.get("WorkingDirectory")
    if workdir is not None and (not isinstance(workdir, str) or not workdir):
        raise _invalid(index, "WorkingDirectory must be a non-empty string when given")
    if workdir is not None and ".." in workdir.split("/"):
        # the code planning gives the same directory (release input field hooks[].workingDirectory)
        raise StellaError(
            "release_invalid",
            "Hooks[%d]: WorkingDirectory %r must not contain .. segments" % (index, workdir),
            phase="validate_payload",
        )
    return {
        "Name": entry["Name"],
        "Phase": phase,
        "Interpreter": interpreter,
        "Command": entry["Command"],
        "WorkingDirectory": workdir,
        "TimeoutSeconds": timeout,
        "FailurePolicy": failure,
        "RedactionPolicy": redaction,
    }


def normalize_hooks(entries):
    """Validate a ``Hooks`` list (``None`` means no hooks); names must be unique per phase."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise StellaError("invalid_hook", "Hooks must be a list", phase="validate_payload")
    hooks = [normalize_hook(entry, index) for index, entry in enumerate(entries)]
    seen = set()
    for index, hook in enumerate(hooks):
        key = (hook["Phase"], hook["Name"])
        if key in seen:
            raise _invalid(index, "duplicate hook name %r in phase %s" % (hook["Name"], hook["Phase"]))
        seen.add(key)
    return hooks


def hooks_for_phase(hooks, phase):
    return [hook for hook in hooks if hook["Phase"] == phase]


def hook_argv(hook):
    """argv for a hook: the interpreter's words, ``-c`` for inline interpreters, then the command."""
    words = shlex.split(hook["Interpreter"])
    base = os.path.basename(words[0])
    stem = base.rstrip("0123456789.") or base
    if base in _INLINE_INTERPRETERS or stem in _INLINE_INTERPRETERS:
        return words + ["-c", hook["Command"]]
    return words + [hook["Command"]]


def outcome_for(policy, exit_code, timed_out):
    """``succeeded`` for exit 0 within the timeout, else the policy's outcome."""
    if exit_code == 0 and not timed_out:
        return "succeeded"
    return _POLICY_OUTCOME[policy]


def redact_output(data, policy, secrets=()):
    """What a hook result keeps of one output stream.

    ``redact`` (default): a marker with only the byte length: no digest of the output is kept, since an
    unsalted digest of a short secret line would let anyone confirm a guess of it. ``none``: the text
    (known secret values still masked, capped at 64 KiB).
    """
    if data is None:
        data = b""
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    if policy != "none":
        return {"redacted": True, "length": len(data)}
    text = redact_text(data.decode("utf-8", "replace"), secrets)
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS] + "\n[truncated]"
    return text


def build_result(hook, exit_code, timed_out, duration_ms, stdout, stderr, secrets=(), error=None):
    """The ``hookResults`` entry of one run (pure)."""
    result = {
        "name": hook["Name"],
        "phase": hook["Phase"],
        "exitCode": exit_code,
        "timedOut": bool(timed_out),
        "durationMs": int(duration_ms),
        "failurePolicy": hook["FailurePolicy"],
        "redactionPolicy": hook["RedactionPolicy"],
        "outcome": outcome_for(hook["FailurePolicy"], exit_code, timed_out),
        "stdout": redact_output(stdout, hook["RedactionPolicy"], secrets),
        "stderr": redact_output(stderr, hook["RedactionPolicy"], secrets),
    }
    if error:
        result["error"] = error
    return result


# --------------------------------------------------------------------------- process lifetime
# A hook never outlives the task that started it: the module makes itself a child subreaper (orphaned
# descendants, even those that called setsid, are re-parented to it and can be found and killed), each
# hook gets a parent-death signal, and a marker file names the running hook so that a later run of a
# task that was killed outright (SIGKILL) kills what survived before it starts anything.

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value):
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _child_setup():
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _proc_stat(pid):
    """``(ppid, pgid, sid, starttime)`` of a process from ``/proc/<pid>/stat`` (``None`` when gone)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _all_stats():
    stats = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = _proc_stat(int(name))
                if stat:
                    stats[int(name)] = stat
    return stats


def descendants(root, stats=None):
    """Pids whose parent chain leads to ``root`` (pure over ``{pid: (ppid, ...)}``)."""
    stats = _all_stats() if stats is None else stats
    children = {}
    for pid, stat in stats.items():
        children.setdefault(stat[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill(pids):
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _kill_tree(proc):
    """Kill the hook's process group and every descendant of this process (the hook's escapees)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    others = [pid for pid in descendants(os.getpid()) if pid != proc.pid]
    _kill(others + [proc.pid])
    for pid in others:  # orphans re-parented to this subreaper: reap them (never the hook, Popen owns it)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def reap_stale_hooks(directory):
    """Kill what a hook of a killed earlier task left running (its session and group); return the pids."""
    path = os.path.join(directory, HOOK_MARKER)
    data = read_bytes(path)
    if data is None:
        return []
    try:
        marker = json.loads(data.decode("utf-8"))
        leader, started = int(marker["pid"]), int(marker["startTime"])
    except (ValueError, KeyError, TypeError):
        leader, started = None, None
    killed = []
    if leader:
        stats = _all_stats()
        stat = stats.get(leader)
        # A live process with the leader's pid but another start time took a recycled pid: the kernel
        # reuses no pid while a session or group of that id exists, so nothing of the hook is left.
        if stat is None or stat[3] == started:
            killed = sorted(
                pid for pid, st in stats.items() if pid != os.getpid() and (st[2] == leader or st[1] == leader)
            )
            _kill(killed)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return killed


def run_hook(hook, cwd, env=None, secrets=(), marker_dir=None):
    """Run one normalized hook; return its result entry (never raises for hook failures)."""
    argv = hook_argv(hook)
    workdir = hook["WorkingDirectory"] or cwd
    environ = dict(os.environ)
    environ.update(env or {})
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_child_setup,
        )  # pylint: disable=subprocess-popen-preexec-fn
    except OSError as exc:
        duration = (time.monotonic() - start) * 1000
        return build_result(
            hook, 127, False, duration, b"", b"", secrets, error="cannot start %s: %s" % (argv[0], exc.strerror or exc)
        )
    marker = os.path.join(marker_dir, HOOK_MARKER) if marker_dir else None
    if marker:
        stat = _proc_stat(proc.pid)
        atomic_write(
            marker,
            json.dumps({"pid": proc.pid, "startTime": stat[3] if stat else 0, "hook": hook["Name"]}).encode("utf-8"),
            mode=0o600,
        )
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=hook["TimeoutSeconds"])
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc)
        try:
            stdout, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            for stream in (proc.stdout, proc.stderr):
                stream.close()
            proc.wait()
            stdout, stderr = b"", b""
    finally:
        if proc.poll() is None:
            _kill_tree(proc)
            proc.wait()
        if marker:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)
    _kill_tree(proc)  # nothing the hook started outlives it
    duration = (time.monotonic() - start) * 1000
    return build_result(hook, proc.returncode, timed_out, duration, stdout, stderr, secrets)


def run_phase_hooks(hooks, phase, cwd, env=None, secrets=(), runner=run_hook, marker_dir=None):
    """Run every hook of ``phase`` in order; stop at the first blocking failure.

    Returns ``(results, blocking)`` where ``blocking`` is the failed result with
    ``FailurePolicy=fail`` (``None`` when the phase may go on).
    """
    results = []
    for hook in hooks_for_phase(hooks, phase):
        result = runner(hook, cwd, env, secrets, marker_dir) if marker_dir else runner(hook, cwd, env, secrets)
        results.append(result)
        if result["outcome"] == "failed":
            return results, result
    return results, None


def run_phase(hooks, phase, cwd, env, secrets, hook_results, warnings):
    """Run ``phase``'s hooks with ``STELLA_PHASE`` set, append their results and warnings, and raise
    ``StellaError(hook_failed)`` when one fails under ``FailurePolicy=fail``. ``cwd`` is the
    Stella-owned project directory: it also holds the running hook's marker."""
    results, blocking = run_phase_hooks(hooks, phase, cwd, dict(env, STELLA_PHASE=phase), secrets, marker_dir=cwd)
    hook_results.extend(results)
    warnings.extend(warnings_for(results))
    if blocking:
        raise StellaError(
            "hook_failed",
            "%s hook %s failed (exit code %s%s, FailurePolicy=fail)"
            % (phase, blocking["name"], blocking["exitCode"], ", timed out" if blocking["timedOut"] else ""),
        )


def warnings_for(results):
    """Human warnings for hooks that failed under a non-blocking policy."""
    out = []
    for result in results:
        if result["outcome"] in ("warned", "continued"):
            out.append(
                "hook %s (%s) failed with exit code %s%s; FailurePolicy=%s recorded it and went on"
                % (
                    result["name"],
                    result["phase"],
                    result["exitCode"],
                    " after timing out" if result["timedOut"] else "",
                    result["failurePolicy"],
                )
            )
    return out
