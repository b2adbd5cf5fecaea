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

import os
import shlex
import signal
import subprocess
import time

from ansible_collections.stellaops.runtime.plugins.module_utils._canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError, redact_text

PHASES = ("pre-deploy", "post-deploy")
FAILURE_POLICIES = ("fail", "ignore", "continue", "warn")
REDACTION_POLICIES = ("redact", "none")
HOOK_KEYS = ("Name", "Phase", "Interpreter", "Command", "WorkingDirectory", "TimeoutSeconds", "FailurePolicy",
             "RedactionPolicy")
DEFAULT_INTERPRETER = "/bin/sh"
DEFAULT_TIMEOUT = 300
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
    if not isinstance(interpreter, str) or not shlex.split(interpreter):
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

    ``redact`` (default): a marker with only the byte length and SHA-256. ``none``: the text
    (known secret values still masked, capped at 64 KiB).
    """
    if data is None:
        data = b""
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    if policy != "none":
        return {"redacted": True, "length": len(data), "sha256": sha256_bytes(data)}
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


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_hook(hook, cwd, env=None, secrets=()):
    """Run one normalized hook; return its result entry (never raises for hook failures)."""
    argv = hook_argv(hook)
    workdir = hook["WorkingDirectory"] or cwd
    environ = dict(os.environ)
    environ.update(env or {})
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=workdir, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as exc:
        duration = (time.monotonic() - start) * 1000
        return build_result(hook, 127, False, duration, b"", b"", secrets,
                            error="cannot start %s: %s" % (argv[0], exc.strerror or exc))
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=hook["TimeoutSeconds"])
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            stdout, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # a descendant escaped the group and still holds the pipes: stop reading
            proc.kill()
            for stream in (proc.stdout, proc.stderr):
                stream.close()
            proc.wait()
            stdout, stderr = b"", b""
    finally:
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
    _kill_group(proc)  # no member of the hook's group outlives it
    duration = (time.monotonic() - start) * 1000
    return build_result(hook, proc.returncode, timed_out, duration, stdout, stderr, secrets)


def run_phase_hooks(hooks, phase, cwd, env=None, secrets=(), runner=run_hook):
    """Run every hook of ``phase`` in order; stop at the first blocking failure.

    Returns ``(results, blocking)`` where ``blocking`` is the failed result with
    ``FailurePolicy=fail`` (``None`` when the phase may go on).
    """
    results = []
    for hook in hooks_for_phase(hooks, phase):
        result = runner(hook, cwd, env, secrets)
        results.append(result)
        if result["outcome"] == "failed":
            return results, result
    return results, None


def run_phase(hooks, phase, cwd, env, secrets, hook_results, warnings):
    """Run ``phase``'s hooks with ``STELLA_PHASE`` set, append their results and warnings, and raise
    ``StellaError(hook_failed)`` when one fails under ``FailurePolicy=fail``."""
    results, blocking = run_phase_hooks(hooks, phase, cwd, dict(env, STELLA_PHASE=phase), secrets)
    hook_results.extend(results)
    warnings.extend(warnings_for(results))
    if blocking:
        raise StellaError("hook_failed", "%s hook %s failed (exit code %s%s, FailurePolicy=fail)" % (
            phase, blocking["name"], blocking["exitCode"], ", timed out" if blocking["timedOut"] else ""))


def warnings_for(results):
    """Human warnings for hooks that failed under a non-blocking policy."""
    out = []
    for result in results:
        if result["outcome"] in ("warned", "continued"):
            out.append("hook %s (%s) failed with exit code %s%s; FailurePolicy=%s recorded it and went on" % (
                result["name"], result["phase"], result["exitCode"], " after timing out" if result["timedOut"] else "",
                result["failurePolicy"]))
    return out
