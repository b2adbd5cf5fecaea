# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An error inside one of the controller's steps of a running job, recorded so the job still ends.

A step that raised would fail its task, and a batch whose every host failed ends the whole playbook
before the job is finished: the job would stay ``Running``, with no rollback decided. Instead, the
error becomes part of the job (``stepFailure``): the target whose record step failed is ``Failed``
(its outcome unknown, so the automatic rollback may restore it), the gate after the batch closes with
the step's code, and ``finish`` fails the job, whose automatic rollback is then decided as for any
failed job. When ``finish`` itself fails, the job is failed with its automatic rollback skipped, the
reason naming the step's error. Pure (each function returns a new record); run/step_failure.py persists
the error through the job store.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import (
    RECOVERY_ROLLBACK_SKIPPED,
    suffixed_reason,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import Failure, JobRecord

INTERNAL_ERROR = "internal_error"
SKIP_REASON = "controller_step_failed"


def _copy(record: JobRecord, now: str) -> JobRecord:
    new = copy.deepcopy(record)
    new["updatedAt"] = now
    return new


def step_failed(
    record: JobRecord,
    *,
    step: str,
    code: str,
    reason: str,
    now: str,
    batch: int | None = None,
    target: str | None = None,
) -> JobRecord:
    """Record that the controller's step ``step`` failed with ``code`` / ``reason`` (after ``batch``,
    or while recording ``target``). The first failure is kept; a target still unfinished is ``Failed``."""
    new = _copy(record, now)
    new.setdefault("stepFailure", {"step": step, "code": code, "reason": reason, "batch": batch, "at": now})
    found = new["targets"].get(target) if target else None
    if found is not None and found["status"] in ("Pending", "Running"):
        # what the target runs is not known: its apply may have changed it before the record failed
        found.update(
            {
                "status": "Failed",
                "code": code,
                "reason": "the controller could not record this target: %s" % reason,
                "outcomeUnknown": True,
            }
        )
    return new


def gate_failure(record: JobRecord) -> Failure | None:
    """``{"code", "reason"}`` that closes the gate after a failed step (``None`` when no step failed)."""
    failure = record.get("stepFailure")
    if not failure:
        return None
    return {"code": failure["code"], "reason": "controller step %s failed: %s" % (failure["step"], failure["reason"])}


def abandoned(record: JobRecord, *, code: str, reason: str, now: str) -> JobRecord:
    """The job whose ``finish`` failed: ``Failed``, unfinished targets ended, its automatic rollback
    skipped (decided, with the reason), so it never stays ``Running``."""
    new = _copy(record, now)
    for target in new["targets"].values():
        if target["status"] == "Running":
            target.update(
                {
                    "status": "Failed",
                    "code": code,
                    "reason": "the target's deployment did not finish: %s" % reason,
                    "outcomeUnknown": True,
                }
            )
        elif target["status"] == "Pending":
            target.update({"status": "Skipped", "reason": "not started: %s" % reason})
    failure = new.get("reason") if new["status"] == "Failed" else None
    new.update(
        {
            "status": "Failed",
            "promotion": "Failed",
            "code": new.get("code") if failure else code,
            "completedAt": new.get("completedAt") or now,
            "reason": suffixed_reason(
                failure or "controller step finish failed: %s" % reason,
                RECOVERY_ROLLBACK_SKIPPED,
                "the controller's finish step failed: %s" % reason,
            ),
        }
    )
    new["rollback"] = {"attempted": False, "skipReason": SKIP_REASON, "error": {"code": code, "reason": reason}}
    return new


def answer(record: JobRecord, step: str, target: str | None, batch: int | None) -> dict[str, Any]:
    """What step ``step`` answers after its error was recorded: what it answers when the job failed."""
    failure = record["stepFailure"].copy()
    if step == "target":
        return {
            "jobId": record["jobId"],
            "targetName": target,
            "target": record["targets"].get(target) if target is not None else None,
        }
    if step == "traffic":
        return {"jobId": record["jobId"], "batch": batch, "skipped": False, "failure": failure}
    return {
        "jobId": record["jobId"],
        "proceed": False,
        "gate": {**(gate_failure(record) or {}), "batch": batch, "proceed": False},
    }
