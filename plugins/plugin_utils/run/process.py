# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the controller's operating system says of a process, through ``psutil`` (Linux and macOS alike):
whether a job's controller run is alive, stopped or gone, and when it started.

A process is told apart from a later one that reuses its pid by its start time, kept in a job's owner as
``startTicks``: clock ticks (``SC_CLK_TCK``) from boot to the process's start, the number Linux keeps in
``/proc/PID/stat``, so owners recorded by earlier versions still compare equal. Targets keep reading
``/proc`` (module_utils/host/procfs.py): they need nothing but the standard library.
"""

from __future__ import annotations

import os
from types import ModuleType

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

PSUTIL_MISSING = "psutil_missing"
RUNNING = "running"
STOPPED = "stopped"
GONE = "gone"


def _psutil() -> ModuleType:
    try:
        import psutil  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise StellaError(
            PSUTIL_MISSING,
            "the controller's Python cannot import psutil, which tells whether a job's "
            "run is alive: run python3 -m pip install psutil",
        ) from None
    return psutil


def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


def stat(pid: int) -> tuple[str, int] | None:
    """``(status, startTicks)`` of ``pid``: psutil's status (``running``, ``sleeping``, ``stopped``,
    ``zombie``...) and its start in clock ticks since boot; ``None`` when no such process exists."""
    psutil = _psutil()
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            status = process.status()
            started = process.create_time()
        booted = psutil.boot_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, OSError):
        return None
    return status, int(round((started - booted) * _ticks_per_second()))


def start_ticks(pid: int) -> int | None:
    """The start of ``pid`` in clock ticks since boot, or ``None`` when it does not exist."""
    found = stat(pid)
    return found[1] if found else None


def exited(status: str) -> bool:
    """Whether psutil's ``status`` is that of a process that has exited (a zombie not reaped yet, or dead)."""
    return status in ("zombie", "dead")


def state(pid: int, started: int | None) -> str:
    """``running``, ``stopped`` (SIGSTOP, a suspended terminal, a tracer) or ``gone`` (ended, a zombie, or
    its pid reused: it did not start at ``started`` ticks) for the process ``pid``."""
    found = stat(pid)
    if found is None or found[1] != started or exited(found[0]):
        return GONE
    return STOPPED if found[0] in ("stopped", "tracing-stop") else RUNNING
