# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Target health: the contract's status set and the rules that move a target between statuses.

The job store keeps one status per target id. It changes only from persisted job facts, compared
before and after each job change (:func:`health_events`), so health never runs ahead of the job:

============================================  ===============  =========================================
persisted fact                                new status       reason
============================================  ===============  =========================================
target failed readiness (``target_unreachable``)  ``unreachable``  the readiness check's one line
job left ``Pending`` for ``Running``          ``unknown``      only for a target that was ``unreachable``
                                                               (it answers again; its runtime is unproven)
target failed with a runtime code             ``offline``      host answers, runtime missing or stopped
(``runtime_missing``, ``runtime_daemon_unavailable``, ``compose_missing``)
target ``Succeeded`` (verified, probes passed)  ``healthy``
target ``Succeeded``, its probes skipped       ``unknown``      ``waitForHealthCheck=false``: nothing verified
(``waitForHealthCheck=false``)                                 the services' health
target ``RolledBack``                         ``degraded``     the retained revision runs, not the release
target failed otherwise (or its rollback did)  ``unhealthy``
target ``Skipped``, or refused ``project_busy``  unchanged
============================================  ===============  =========================================

A target the store has never seen is ``unknown``. Pure, no I/O.

The ``drift`` step (run/drift.py, job/drift.py) compares what a target runs with its project's last
successful job: a target that drifted becomes ``degraded`` with code ``runtime_drift`` and the differences
as its reason (:func:`drift_event`); one found in sync again while its status is still that drift gets
back the status its last job gave (:func:`in_sync_event`: ``healthy``, or ``unknown`` when that job's
probes were skipped). A verdict ``unknown`` changes nothing.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    HEALTH_STATUSES,
    OFFLINE_CODES,
    PROJECT_BUSY,
    UNREACHABLE_CODE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import HealthEvent, JobRecord, TargetRecord

UNKNOWN = "unknown"
DRIFT_CODE = "runtime_drift"


def check_status(status: str) -> str:
    if status not in HEALTH_STATUSES:
        raise ValueError("health status %r is not one of %s" % (status, ", ".join(HEALTH_STATUSES)))
    return status


def probes_skipped(target: TargetRecord) -> bool:
    """The target's verify phase ran no probe because ``waitForHealthCheck`` is false."""
    verify = [p for p in target.get("phases") or [] if p.get("name") == "verify"]
    return bool(verify) and (verify[-1].get("detail") or {}).get("probes") == "skipped"


def target_status(target: TargetRecord) -> str | None:
    """The health status a target's persisted outcome implies, or ``None`` for no change."""
    status = target.get("status")
    if status == "Succeeded":
        # a deployment whose probes were switched off says nothing about the services' health
        return UNKNOWN if probes_skipped(target) else "healthy"
    if status == "RolledBack":
        return "degraded"
    if status == "Failed":
        code = target.get("code")
        if code == PROJECT_BUSY:  # refused before anything ran: says nothing about the target
            return None
        if code == UNREACHABLE_CODE:
            return "unreachable"
        if code in OFFLINE_CODES:
            return "offline"
        return "unhealthy"
    return None


def _event(record: JobRecord, name: str, target: TargetRecord, status: str, reason: str) -> HealthEvent:
    return {
        "targetId": target.get("targetId") or name,
        "targetName": target.get("targetName") or name,
        "status": check_status(status),
        "reason": reason,
        "code": target.get("code"),
        "jobId": record["jobId"],
        "at": record.get("updatedAt"),
    }


def started(before: JobRecord | None, after: JobRecord) -> bool:
    """The job left ``Pending`` for ``Running`` with this change: every target answered its readiness check."""
    return before is not None and before.get("status") == "Pending" and after["status"] == "Running"


def health_events(
    before: JobRecord | None, after: JobRecord, current: dict[str, str] | None = None
) -> list[HealthEvent]:
    """The health changes that persisting ``after`` (the job record; ``before`` is what was stored,
    ``None`` for a new job) implies. ``current``: ``{targetId: status}`` the store holds now, for the
    rule that a target which answers again leaves ``unreachable``."""
    current = current or {}
    events: list[HealthEvent] = []
    old_targets = (before.get("targets") if before else None) or {}
    answered = started(before, after)
    for name in after.get("targetOrder") or sorted(after.get("targets") or {}):
        target = after["targets"][name]
        old: TargetRecord = old_targets.get(name) or {}
        status = target_status(target) if target.get("status") != old.get("status") else None
        if status is not None:
            reason = target.get("reason") or "job %s: target %s" % (after["jobId"], target["status"])
            if status == UNKNOWN and probes_skipped(target):
                reason = (
                    "job %s: deployed with its probes skipped (waitForHealthCheck=false), health not verified"
                    % (after["jobId"])
                )
            events.append(_event(after, name, target, status, reason))
        elif answered and current.get(target.get("targetId") or name) == "unreachable":
            events.append(
                _event(
                    after,
                    name,
                    target,
                    UNKNOWN,
                    "answered the readiness check of job %s; the runtime is not yet proven" % after["jobId"],
                )
            )
    return events


def drift_event(target_id: str, target_name: str, reason: str, job_id: str, at: str) -> HealthEvent:
    """A target that no longer runs what job ``job_id`` recorded: ``degraded``, ``runtime_drift``."""
    return {
        "targetId": target_id,
        "targetName": target_name,
        "status": check_status("degraded"),
        "reason": reason,
        "code": DRIFT_CODE,
        "jobId": job_id,
        "at": at,
    }


def in_sync_event(target: TargetRecord, name: str, job_id: str, at: str) -> HealthEvent:
    """A target that runs what job ``job_id`` recorded again: the status that job's outcome gave it
    (``target``: its record in that job). The store writes it only over a ``runtime_drift`` status."""
    status = target_status(target) or UNKNOWN
    return {
        "targetId": target.get("targetId") or name,
        "targetName": target.get("targetName") or name,
        "status": check_status(status),
        "reason": "runs what job %s recorded again (drift check)" % job_id,
        "code": None,
        "jobId": job_id,
        "at": at,
    }
