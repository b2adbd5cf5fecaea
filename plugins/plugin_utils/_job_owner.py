# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller run that owns a deployment job, and what happens when it is gone.

A job records its owner when it starts: the host name, the pid of the ``ansible-playbook`` process and
that process's start time (so a reused pid is told apart). On the owner's host a later job, or
``stella_job step=show``, can tell that the run is gone and records the job interrupted. On another
controller nothing can be told; an operator who knows the run is gone says so with
``stella interrupt JOB`` (docs/job-store.md).
"""

from __future__ import annotations

import os
import socket

from ansible_collections.stellaops.runtime.plugins.module_utils._contract import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils import _job, _projection


def process_start(pid):
    """The start time (clock ticks since boot) of ``pid``, or ``None`` when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid, "r", encoding="utf-8") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def controller_owner():
    """The ``ansible-playbook`` process this step belongs to (action plugins run in its forked workers)."""
    pid = os.getppid()
    return {"host": socket.gethostname(), "pid": pid, "startTicks": process_start(pid)}


def on_this_host(owner):
    return bool(owner) and owner.get("host") == socket.gethostname()


def owner_gone(owner):
    """True when ``owner`` ran on this controller and that process is gone (pid reuse included)."""
    if not on_this_host(owner):
        return False
    return process_start(owner["pid"]) != owner.get("startTicks")


def interrupted_why(record):
    """Why a job whose run is gone is recorded ``Failed`` (``job_interrupted``)."""
    return "interrupted: the controller run (pid %s) ended while the job was %s" % (
        (record.get("owner") or {}).get("pid"), record["status"])


def record_interrupted(store, job_id, why, now=None):
    """Record the unfinished job ``job_id`` interrupted (``Failed``, ``job_interrupted``), which releases
    its projects, and write its terminal projection: its run is gone, so nothing else will. A job that
    finished meanwhile is left as it is. Returns the stored record."""
    now = now or utc_timestamp()
    done = []

    def change(record):
        if record["status"] in _job.TERMINAL:
            return None
        done.append(True)
        return _job.interrupted(record, now, why)

    record = store.update(job_id, change)
    if done:
        store.project_terminal(job_id, _projection.strategy_evidence(record), now)
    return record
