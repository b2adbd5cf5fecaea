# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller run that owns a deployment job, and what happens when it is gone.

A job records its owner when it starts: the host name, the pid of the ``ansible-playbook`` process and
that process's start time (so a reused pid is told apart). On the owner's host a later job, or
``stella_job step=show``, can tell that the run is gone and records the job interrupted. On another
controller only the job's claim lease can tell: a job started with one (``claimLeaseSeconds``) whose
run has neither persisted a change nor renewed the lease (run/lease.py) for longer than the lease is
taken for gone by any controller sharing the store. Without a lease an operator who knows the run is
gone says so with ``stella interrupt JOB`` (docs/job-store.md).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    seconds_between,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import process as _process
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord, Owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.recovery import recovering
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import recovery as _recovery

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of ``pid``, or ``None`` when it does not exist (psutil)."""
    return _process.start_ticks(pid)


def controller_owner() -> Owner:
    """The ``ansible-playbook`` process this step belongs to (action plugins run in its forked workers)."""
    pid = os.getppid()
    return {"host": socket.gethostname(), "pid": pid, "startTicks": process_start(pid)}


def on_this_host(owner: Owner | None) -> TypeGuard[Owner]:
    if not owner:
        return False
    return owner.get("host") == socket.gethostname()


def owner_gone(owner: Owner | None) -> bool:
    """True when ``owner`` ran on this controller and that process is gone (pid reuse included)."""
    if not on_this_host(owner):
        return False
    return process_start(owner["pid"]) != owner.get("startTicks")


def owner_state(owner: Owner) -> str:
    """``"running"``, ``"stopped"`` (SIGSTOP, a suspended terminal, a tracer) or ``"gone"`` (ended, a zombie,
    or its pid reused) for the controller run ``owner`` of this host."""
    return _process.state(owner["pid"], owner.get("startTicks"))


def interrupted_why(record: JobRecord) -> str:
    """Why a job whose run is gone is recorded ``Failed`` (``job_interrupted``)."""
    owner: Mapping[str, Any] = record.get("owner") or {}
    return "interrupted: the controller run (pid %s) ended while the job was %s" % (
        owner.get("pid"),
        record["status"],
    )


def lease_seconds(record: JobRecord) -> int:
    """The claim lease ``record`` was started with, in seconds (0: none)."""
    return int((record.get("options") or {}).get("claimLeaseSeconds") or 0)


def idle_seconds(record: JobRecord, now: str) -> float | None:
    """Seconds since ``record`` last persisted a change or renewed its lease (``leaseRenewedAt``, as the
    store reads it); ``None`` when neither timestamp is readable."""
    found = [s for s in (seconds_between(record.get(k), now) for k in ("updatedAt", _job.LEASE_FIELD)) if s is not None]
    return min(found) if found else None


def lease_expired(record: JobRecord, now: str) -> bool:
    """True when the unfinished ``record`` has a claim lease and has not changed for longer than it."""
    lease = lease_seconds(record)
    if lease <= 0 or record["status"] in _job.TERMINAL:
        return False
    idle = idle_seconds(record, now)
    return idle is not None and idle > lease


def gone_why(record: JobRecord, now: str) -> str | None:
    """Why the unfinished ``record`` is recorded interrupted at ``now``: its run is gone on this host,
    or its claim lease expired; ``None`` while nothing says its run is gone. A deployment an operator
    rollback job is rolling back is run by that job: it is never taken for gone itself."""
    if record["status"] in _job.TERMINAL or recovering(record):
        return None
    if owner_gone(record.get("owner")):
        return interrupted_why(record)
    idle = idle_seconds(record, now)
    if idle is not None and lease_expired(record, now):
        owner: Mapping[str, Any] = record.get("owner") or {}
        return (
            "interrupted: no change or lease renewal for %ds, longer than its claim lease of %ds "
            "(controller %s, pid %s)" % (idle, lease_seconds(record), owner.get("host"), owner.get("pid"))
        )
    return None


def interrupt_gone(store: SqlJobStore, record: JobRecord, now: str | None = None) -> JobRecord:
    """Record ``record`` interrupted when :func:`gone_why` says its run is gone, and still says so of the
    record read again in the writing transaction (its run may have renewed its lease meanwhile); the
    stored record."""
    now = now or utc_timestamp()
    why = gone_why(record, now)
    return record_interrupted(store, record["jobId"], why, now, recheck=True) if why else record


def record_interrupted(
    store: SqlJobStore, job_id: str, why: str, now: str | None = None, recheck: bool = False
) -> JobRecord:
    """Record the unfinished job ``job_id`` interrupted (``Failed``, ``job_interrupted``), which releases
    its projects, and write its terminal projection: its run is gone, so nothing else will. A job that
    finished meanwhile is left as it is, and with ``recheck`` so is one whose run :func:`gone_why` no
    longer takes for gone. The deployment an interrupted operator rollback job was rolling back ends
    ``Failed`` (job/recovery.py). Returns the stored record."""
    now = now or utc_timestamp()
    done: list[bool] = []

    def change(record: JobRecord) -> JobRecord | None:
        if record["status"] in _job.TERMINAL or (recheck and gone_why(record, now) is None):
            return None
        done.append(True)
        return _job.interrupted(record, now, why)

    record: JobRecord = store.update(job_id, change)
    if done:
        store.project_terminal(job_id, _projection.strategy_evidence(record), now)
        _recovery.interrupted(store, record, now)
    return record
