# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The skeleton every target-side task shares: phases, evidence, error shaping.

A manager lists its steps; :class:`Manager` records each step's duration and outcome, maps every
failure (a contract ``StellaError`` or an ``OSError`` such as a full disk) to a stable code and the
failing step, and returns one result shape: ``{"changed", "evidence", "warnings"}``. Warnings (for
example of hooks that failed under a non-blocking policy) travel with a failure too.
Standard library only.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEPLOYMENT_PHASES,
    target_evidence,
)

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def io_error(exc, phase):
    """A stable code for an ``OSError`` (``disk_full``, ``workdir_not_writable`` or ``io_error``)."""
    if exc.errno in _DISK_FULL:
        code = "disk_full"
    elif exc.errno in _NOT_WRITABLE:
        code = "workdir_not_writable"
    else:
        code = "io_error"
    where = " (%s)" % exc.filename if getattr(exc, "filename", None) else ""
    return StellaError(code, "%s%s: %s" % (phase or "task", where, exc.strerror or exc), phase=phase)


def deployment_phases(completed, durations, failure_phase, skipped=(), groups=DEPLOYMENT_PHASES):
    """High-level phase list from the implementation steps (status, durationMs) (pure)."""
    out = []
    for name, parts in groups:
        relevant = [p for p in parts if p in completed or p == failure_phase or p in durations or p in skipped]
        if not relevant:
            continue
        if failure_phase in parts:
            status = "failed"
        elif all(p in skipped for p in relevant):
            status = "skipped"
        elif all(p in completed or p in skipped for p in relevant):
            status = "succeeded"
        else:
            status = "not_run"
        out.append({"phase": name, "status": status, "durationMs": int(sum(durations.get(p, 0) for p in relevant))})
    return out


class PhaseRecorder:
    """Records completed steps, durations and the failing step; turns ``OSError`` into contract errors."""

    def __init__(self, groups=DEPLOYMENT_PHASES):
        self.groups = groups
        self.completed = []
        self.durations = {}
        self.skipped = []
        self.failure_phase = None
        self.current = None
        self.carried = {}

    def carry(self, name, milliseconds):
        """Time spent on step ``name``'s behalf before it starts (a wait that decided how it runs),
        counted in its duration when it runs; not counted when it never runs."""
        self.carried[name] = self.carried.get(name, 0) + int(milliseconds)

    @contextlib.contextmanager
    def phase(self, name, record=True):
        """Run a step; ``record=False`` names the phase of its failures without listing the step
        (the target identity and runtime check that precedes every task)."""
        start = time.monotonic()
        self.current = name
        try:
            yield
        except StellaError as exc:
            exc.phase = exc.phase or name
            self.failure_phase = exc.phase
            raise
        except OSError as exc:
            self.failure_phase = name
            raise io_error(exc, name) from exc
        finally:
            if record:
                self.durations[name] = (
                    self.durations.get(name, 0) + int((time.monotonic() - start) * 1000) + self.carried.pop(name, 0)
                )
            self.current = None
        if record:
            self.completed.append(name)

    def skip(self, *names):
        for name in names:
            self.skipped.append(name)
            self.durations.setdefault(name, 0)

    def evidence(self):
        return {
            "completedPhases": list(self.completed),
            "phaseDurationsMs": dict(self.durations),
            "deploymentPhases": deployment_phases(
                self.completed, self.durations, self.failure_phase, self.skipped, self.groups
            ),
            "failurePhase": self.failure_phase,
        }


class Manager(abc.ABC):
    """Base of the target-side tasks: subclasses set ``groups`` and implement :meth:`execute`."""

    # The product phases this task reports and the steps each is made of (``deployment_phases``).
    groups: tuple[tuple[str, tuple[str, ...]], ...] = DEPLOYMENT_PHASES
    # The job's claim on the project (host/claim.py), fenced where the task takes the project lock.
    claim = None

    def __init__(self, cli, run_command, warn=None, secrets=()):
        self.cli = cli
        self.run_command = run_command
        self.warn = warn or (lambda _m: None)
        self.secrets = tuple(s for s in secrets if s)

    def initial_evidence(self, request):
        return dict(target_evidence(request["target"]))

    @abc.abstractmethod
    def execute(self, request, rec, result, check_mode, diff):
        """Run the task's steps inside ``rec.phase(...)`` blocks, filling ``result``."""

    def run(self, request, check_mode=False, diff=False):
        """``{"changed", "evidence", "warnings"[, "diff"]}``; a failure raises ``StellaError`` whose
        evidence holds everything recorded so far, ``changed`` and the warnings."""
        rec = PhaseRecorder(self.groups)
        result = {"changed": False, "evidence": self.initial_evidence(request), "warnings": []}
        try:
            self.execute(request, rec, result, check_mode, diff)
        except (StellaError, OSError) as exc:
            error = exc if isinstance(exc, StellaError) else io_error(exc, rec.current or "prepare")
            error.phase = error.phase or rec.failure_phase or rec.current
            result["evidence"].update(rec.evidence())
            result["evidence"]["failurePhase"] = error.phase
            error.evidence = dict(result["evidence"], **(error.evidence or {}))
            error.evidence["changed"] = result["changed"]
            error.warnings = list(result["warnings"])
            if error is exc:
                raise
            raise error from exc
        result["evidence"].update(rec.evidence())
        return result
