# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What Linux's ``/proc`` says of a process, for both sides (standard library only): the relay on a
target waits for its old forwarder, the controller tells whether a job's run is alive."""

from __future__ import annotations

import os

EXITED = ("Z", "X", "x")  # a zombie (exited, not reaped yet) or dead


def stat(pid, thread=None):
    """``(state, start)`` of ``pid`` (or of its ``thread``): the state letter and the start time in clock
    ticks since boot, from ``/proc/PID/stat``; ``None`` when it does not exist."""
    path = "/proc/%d/stat" % pid if thread is None else "/proc/%d/task/%s/stat" % (pid, thread)
    try:
        with open(path, "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces and ")"
        return fields[0].decode("ascii"), int(fields[19])
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None


def any_thread_alive(pid):
    """Whether a thread of ``pid`` has not exited. A thread group leader can be a zombie while its other
    threads still exit; they share its open files, so its sockets stay bound until the last is gone."""
    try:
        threads = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return False
    return any((stat(pid, thread) or ("X",))[0] not in EXITED for thread in threads)
