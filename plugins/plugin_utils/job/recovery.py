# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment an operator rollback job rolls back (its source): its recovery, in its record. Pure.

- When the rollback job is stored, the deployment goes ``RollingBack`` (:func:`recovery_started`).
- When the rollback job ends, the deployment goes ``RolledBack`` or ``Failed`` (:func:`recovery_ended`),
  with its restored targets and the ``recovery`` that names the rollback job.

While it is rolled back, the deployment's run is the rollback job's: it is never taken for gone itself
(:func:`recovering`). run/recovery.py persists these changes through the job store, with the deployment's
projection (job/projection.py reopens a terminal projection for it).
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobEvent, JobRecord, JobStatus
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import move_to, next_revision
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.rollback import rollback_of

ENDED = ("RollbackCompleted", "RollbackFailed")


def _next(record: JobRecord, now: str, status: JobStatus) -> JobRecord:
    new = next_revision(record, now)
    move_to(new, status)
    return new


def recovering(record: JobRecord) -> str | None:
    """The id of the operator rollback job that is rolling the deployment ``record`` back, else ``None``."""
    if record.get("kind") == "rollback" or record["status"] != "RollingBack":
        return None
    started = [e for e in record.get("events") or [] if e.get("rollbackJobId")]
    if not started or started[-1]["kind"] != "RollbackStarted":
        return None
    return started[-1].get("rollbackJobId")


def ended_by(record: JobRecord, rollback_job_id: str) -> bool:
    """Whether the operator rollback job ``rollback_job_id`` already ended its recovery of ``record``."""
    return any(e.get("rollbackJobId") == rollback_job_id and e.get("kind") in ENDED for e in record.get("events") or [])


def recovery_started(source: JobRecord, rollback_job: JobRecord, now: str) -> JobRecord:
    """The deployment ``source`` as an operator rollback job of it began: ``RollingBack``, with event
    ``RollbackStarted`` at the rollback's start (:func:`recovery_ended` writes its end)."""
    rollback = rollback_of(rollback_job)
    new = _next(source, now, "RollingBack")
    new["events"].append(
        {
            "kind": "RollbackStarted",
            "at": rollback["startedAt"],
            "targets": [n for batch in rollback["batches"] for n in batch],
            "rollbackJobId": rollback_job["jobId"],
        }
    )
    return new


def recovery_ended(source: JobRecord, rollback_job: JobRecord, now: str) -> JobRecord:
    """The deployment ``source`` once the operator rollback job ``rollback_job`` ended: ``RolledBack``
    when every planned target was restored, else ``Failed`` (``RollbackFailed``); each restored target is
    ``RolledBack`` (its status before kept), each other planned one carries its ``rollbackError``. The
    promotion and the original reason stay; ``recovery`` names the rollback job."""
    rollback = rollback_of(rollback_job)
    restored = rollback_job["status"] == "RolledBack"
    new = _next(source, now, "RolledBack" if restored else "Failed")
    planned = [n for batch in rollback["batches"] for n in batch]
    for name in planned:
        done = rollback_job["targets"][name]
        target = new["targets"][name]
        if done["status"] == "RolledBack":
            target["statusBeforeRollback"] = target["status"]
            target["status"] = "RolledBack"
        else:
            target["rollbackError"] = done.get("rollbackError") or done.get("reason") or "rollback failed"
        target["rollback"] = {**(done.get("rollback") or {}), "rollbackJobId": rollback_job["jobId"]}
    event: JobEvent = {
        "kind": "RollbackCompleted" if restored else "RollbackFailed",
        "at": now,
        "rollbackJobId": rollback_job["jobId"],
    }
    if restored:
        event["targets"] = planned
    else:
        event["error"] = rollback_job.get("reason") or "rollback failed"
    new["events"].append(event)
    new["recovery"] = {
        "rollbackJobId": rollback_job["jobId"],
        "status": "rolled_back" if restored else "rollback_failed",
        "reason": rollback.get("reason"),
        "startedAt": rollback["startedAt"],
        "completedAt": now,
    }
    return new
