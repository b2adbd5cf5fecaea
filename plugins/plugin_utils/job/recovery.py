# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment an operator rollback job rolls back (its source): its recovery.

- When the rollback job is stored, the deployment goes ``RollingBack`` (:func:`started`): its record and,
  in the same transaction, its projection (job/projection.py reopens a terminal projection for it).
- When the rollback job ends, the deployment goes ``RolledBack`` or ``Failed`` and its projection
  carries the rollback's keys (:func:`ended`); a rollback job recorded interrupted ends it ``Failed``
  (:func:`interrupted`).

While it is rolled back, the deployment's run is the rollback job's: it is never taken for gone itself
(:func:`recovering`). :func:`recovery_started` and :func:`recovery_ended` are pure; the others write
through the job store.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import clone
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job

ENDED = ("RollbackCompleted", "RollbackFailed")


def _next(record, now, status):
    new = clone(record)
    new["updatedAt"] = now
    if status not in _job.TRANSITIONS[new["status"]]:
        raise _job.job_error(
            "job %s cannot go from %s to %s" % (new["jobId"], new["status"], status), code="job_state_invalid"
        )
    new["status"] = status
    return new


def recovering(record):
    """The id of the operator rollback job that is rolling the deployment ``record`` back, else ``None``."""
    if record.get("kind") == "rollback" or record["status"] != "RollingBack":
        return None
    started = [e for e in record.get("events") or [] if e.get("rollbackJobId")]
    last = started[-1] if started else {}
    return last.get("rollbackJobId") if last.get("kind") == "RollbackStarted" else None


def ended_by(record, rollback_job_id):
    """Whether the operator rollback job ``rollback_job_id`` already ended its recovery of ``record``."""
    return any(e.get("rollbackJobId") == rollback_job_id and e.get("kind") in ENDED for e in record.get("events") or [])


def recovery_started(source, rollback_job, now):
    """The deployment ``source`` as an operator rollback job of it began: ``RollingBack``, with event
    ``RollbackStarted`` at the rollback's start (:func:`recovery_ended` writes its end)."""
    rollback = rollback_job["rollback"]
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


def recovery_ended(source, rollback_job, now):
    """The deployment ``source`` once the operator rollback job ``rollback_job`` ended: ``RolledBack``
    when every planned target was restored, else ``Failed`` (``RollbackFailed``); each restored target is
    ``RolledBack`` (its status before kept), each other planned one carries its ``rollbackError``. The
    promotion and the original reason stay; ``recovery`` names the rollback job."""
    rollback = rollback_job["rollback"]
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
        target["rollback"] = dict(done.get("rollback") or {}, rollbackJobId=rollback_job["jobId"])
    event = {
        "kind": "RollbackCompleted" if restored else "RollbackFailed",
        "at": now,
        "rollbackJobId": rollback_job["jobId"],
    }
    event.update({"targets": planned} if restored else {"error": rollback_job.get("reason") or "rollback failed"})
    new["events"].append(event)
    new["recovery"] = {
        "rollbackJobId": rollback_job["jobId"],
        "status": "rolled_back" if restored else "rollback_failed",
        "reason": rollback.get("reason"),
        "startedAt": rollback["startedAt"],
        "completedAt": now,
    }
    return new
