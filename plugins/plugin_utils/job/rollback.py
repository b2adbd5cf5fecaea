# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rollback of a deployment job in its record. Pure: every function takes the record and returns a new
one (the input is never changed); the job store persists each result.

Automatic rollback follows the contract: one attempt, eligible targets (a retained previous revision,
job/record.py :func:`~.record.eligible`) in reverse batch order, the job stamped ``isRollback`` before
dispatch, and the reason suffixed exactly as the contract writes it (:func:`auto_rollback`). An operator
rolls a deployment back with a job of its own, of kind ``rollback`` (:func:`operator_rollback`). Either
way the playbook runs the orders of :func:`rollback_orders`, each target's end is
:func:`finish_rollback_target` and the rollback's end :func:`finish_rollback`.
"""

from __future__ import annotations

from typing import cast

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WAIT_TIMEOUT
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import ROLLBACK_TASKS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import (
    RECOVERY_ROLLBACK_FAILED,
    RECOVERY_ROLLBACK_SKIPPED,
    RECOVERY_ROLLED_BACK,
    suffixed_reason,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    JobOptions,
    JobRecord,
    JobRollback,
    JobSummary,
    Owner,
    RollbackOrder,
    RollbackPlan,
    TargetRecord,
    TargetRollback,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import (
    AUTO_ROLLBACK_DISABLED,
    NONE_ELIGIBLE,
    eligible,
    fail_closed,
    job_error,
    move_to,
    new_job,
    next_revision,
    rollback_plan,
    skip_reason,
    target_of,
    traffic_rollback_failure,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.timeouts import task_timeout

ROLLBACK_FAILED_CODE = "rollback_failed"
ROLLBACK_ALREADY_DONE = "rollback_already_done"
# What an operator rollback job keeps of each target of the deployment it rolls back.
IDENTITY_KEYS = ("targetId", "targetName", "targetType", "endpoint", "projectName", "slot", "manifestHash")


def rollback_of(record: JobRecord) -> JobRollback:
    """The job's rollback decision (``job_state_invalid`` when it has none yet)."""
    rollback = record["rollback"]
    if rollback is None:
        raise job_error("job %s has no rollback decision" % record["jobId"], code="job_state_invalid")
    return rollback


def auto_rollback(record: JobRecord, now: str) -> JobRecord:
    """Decide the automatic rollback of a ``Failed`` job (one attempt). Returns the new record.

    Disabled: the job stays Failed, untouched, with the skip recorded. No eligible target: the job
    stays Failed with the reason suffixed. Otherwise the job is stamped ``isRollback`` and goes to
    ``RollingBack`` with event ``RollbackStarted``; ``record["rollback"]["batches"]`` is the order."""
    if record["status"] != "Failed" or record.get("isRollback"):
        raise job_error(
            "job %s is %s%s: no automatic rollback"
            % (record["jobId"], record["status"], ", already a rollback" if record.get("isRollback") else ""),
            code="job_state_invalid",
        )
    new = next_revision(record, now)
    if not new["options"].get("autoRollbackOnFailure", True):
        new["rollback"] = {
            "attempted": False,
            "skipReason": AUTO_ROLLBACK_DISABLED,
            "source": new["options"].get("autoRollbackSource"),
        }
        return new
    plan = rollback_plan(new)
    if not plan["batches"]:
        new["reason"] = suffixed_reason(new["reason"] or "deployment failed", RECOVERY_ROLLBACK_SKIPPED, NONE_ELIGIBLE)
        new["rollback"] = {"attempted": False, "skipReason": "no_eligible_target", "skipped": plan["skipped"]}
        return new
    return begin_rollback(new, plan, now=now, automatic=True)


def begin_rollback(
    record: JobRecord, plan: RollbackPlan, *, now: str, automatic: bool = False, reason: str | None = None
) -> JobRecord:
    """The job is ``RollingBack`` along ``plan`` (event ``RollbackStarted``); each target the plan skips
    carries why (``rollbackSkipped``)."""
    new = next_revision(record, now)
    new["isRollback"] = True
    move_to(new, "RollingBack")
    new["rollback"] = {
        "attempted": True,
        "automatic": automatic,
        "batches": plan["batches"],
        "skipped": plan["skipped"],
        "reason": reason,
        "startedAt": now,
        "completedAt": None,
    }
    for name, why in plan["skipped"].items():
        if name in new["targets"]:  # an operator rollback job holds only the targets it rolls back
            new["targets"][name]["rollbackSkipped"] = why
    new["events"].append(
        {"kind": "RollbackStarted", "at": now, "targets": [n for batch in plan["batches"] for n in batch]}
    )
    return new


def _rolled_back(source: JobRecord) -> str | None:
    """Why ``source`` is no deployment an operator may roll back now, else ``None``."""
    if source.get("kind") == "rollback":
        return "is a rollback job"
    return {
        "RolledBack": "is RolledBack: it was already rolled back",
        "RollingBack": "is RollingBack: a rollback of it is under way",
    }.get(source["status"])


def operator_rollback(
    source: JobRecord,
    *,
    job_id: str,
    now: str,
    revision_paths: dict[str, str] | None = None,
    reason: str | None = None,
    owner: Owner | None = None,
    wait_timeout: int = DEFAULT_WAIT_TIMEOUT,
) -> JobRecord:
    """A ``rollback`` job for an operator: the source job's targets that retained a revision (or were
    given one in ``revision_paths``), in reverse batch order; the others are ``Skipped`` with the
    no-revision reason. ``Failed`` (code ``rollback_no_eligible_target``) when no target is eligible.
    ``rollback_already_done`` (raised, nothing made) for a deployment already rolled back, one whose
    rollback is under way, or a rollback job."""
    done = _rolled_back(source)
    if done:
        raise job_error(
            "job %s %s: it is not rolled back again (nothing was stored or changed)" % (source["jobId"], done),
            code=ROLLBACK_ALREADY_DONE,
        )
    paths = dict(revision_paths or {})
    unknown = sorted(set(paths) - set(source["targets"]))
    if unknown:
        raise job_error("job %s has no target %s" % (source["jobId"], ", ".join(unknown)))
    batches: list[list[str]] = []
    skipped: dict[str, str] = {}
    for batch in reversed(source["batches"]):
        chosen = [n for n in batch if paths.get(n) or eligible(source["targets"][n])]
        skipped.update({n: skip_reason(source["targets"][n]) for n in batch if n not in chosen})
        if chosen:
            batches.append(chosen)
    targets: dict[str, TargetRecord] = {}
    for name, target in source["targets"].items():
        entry = cast(TargetRecord, {k: v for k, v in target.items() if k in IDENTITY_KEYS})
        entry["previousRevisionPath"] = paths.get(name) or target.get("previousRevisionPath")
        targets[name] = entry
    summary: JobSummary = {
        "release": source.get("release"),
        "tenant": source.get("tenant"),
        "environment": source.get("environment"),
        "application": source.get("application"),
        "strategy": source.get("strategy"),
        "strategyConfig": source.get("strategyConfig"),
        "sourceJobId": source["jobId"],
        "reason": reason,
    }
    options: JobOptions = {"autoRollbackOnFailure": False, "waitTimeout": wait_timeout}
    record = new_job(
        job_id=job_id,
        job_id_source="operator",
        summary=summary,
        batches=batches,
        targets={n: targets[n] for b in batches for n in b},
        options=options,
        now=now,
        owner=owner,
        kind="rollback",
    )
    record["reason"] = reason
    if not batches:
        record["rollback"] = {
            "attempted": False,
            "automatic": False,
            "batches": [],
            "skipped": skipped,
            "reason": reason,
        }
        return fail_closed(
            record,
            code="rollback_no_eligible_target",
            reason="no target of job %s retained a revision to restore" % source["jobId"],
            failed_targets={},
            now=now,
        )
    # A rollback job is recovery, never a deployment: it goes Pending -> RollingBack -> RolledBack (or
    # Failed), and its promotion is the one of the deployment it recovers (rollback promotes nothing).
    new = begin_rollback(record, {"batches": batches, "skipped": skipped}, now=now, reason=reason)
    new.update({"promotion": source.get("promotion"), "startedAt": now})
    return new


def rollback_orders(record: JobRecord, source: JobRecord | None = None) -> RollbackOrder:
    """The rollback the playbook runs next (nothing unless the job is rolling back or is a rollback job
    that runs): its batches, ``serial``, host order, and per target the revision, payload and task;
    ``source``: the job a rollback job rolls back, whose targets carry the rollback payloads. Each
    target's entry is all its play reads: what the rollback entry point of ``roles/deploy`` takes
    (``deploy_rollback``), with the job id and the reason of the rollback."""
    targets = (source or record)["targets"]
    rollback = record.get("rollback")
    plan: list[list[str]] = []
    if record["status"] in ("RollingBack", "Running") and rollback:
        plan = rollback.get("batches") or []
    wait = record["options"].get("waitTimeout") or DEFAULT_WAIT_TIMEOUT
    source_options: JobOptions = (source.get("options") or {}) if source else {}
    timeout = record["options"].get("taskTimeout") or source_options.get("taskTimeout") or task_timeout(wait)
    return {
        "jobId": record["jobId"],
        "status": record["status"],
        "reason": record["reason"],
        "rollbackBatches": plan,
        "rollbackSerial": [len(b) for b in plan],
        "rollbackOrder": [n for b in plan for n in b],
        "rollbackTargets": {
            n: {
                "revisionPath": record["targets"][n].get("previousRevisionPath"),
                "payload": targets[n].get("rollbackPayload"),
                "task": ROLLBACK_TASKS[targets[n].get("targetType") or "ComposeHost"],
                "target": targets[n].get("target"),
                "waitTimeout": wait,
                "taskTimeout": timeout,
                "claim": record["targets"][n].get("claim"),
                "jobId": record["jobId"],
                "reason": record["reason"] or "",
            }
            for b in plan
            for n in b
        },
    }


def finish_rollback_target(
    record: JobRecord,
    target: str,
    *,
    succeeded: bool,
    now: str,
    reason: str | None = None,
    facts: TargetRollback | None = None,
) -> JobRecord:
    """One target's rollback ended: restored (``RolledBack``, its status before kept) or not (the reason in
    ``rollbackError``; a rollback job's target is then ``Failed``). ``facts``: what the agent reported."""
    new = next_revision(record, now, target)
    found = target_of(new, target)
    if succeeded:
        found["statusBeforeRollback"] = found["status"]
        found["status"] = "RolledBack"
    elif new["kind"] == "rollback":
        found.update(
            {
                "status": "Failed",
                "reason": reason or "rollback failed",
                "code": "rollback_failed",
                "rollbackError": reason or "rollback failed",
            }
        )
    else:
        found["rollbackError"] = reason or "rollback failed"
    found["rollback"] = {**(facts or {}), "succeeded": bool(succeeded)}
    return new


def finish_rollback(record: JobRecord, now: str) -> JobRecord:
    """``RolledBack`` when every planned target was restored, else ``Failed`` with the combined reason."""
    new = next_revision(record, now)
    rollback = rollback_of(new)
    planned = [n for batch in rollback["batches"] for n in batch]
    errors = [
        (n, new["targets"][n].get("rollbackError") or "not rolled back")
        for n in planned
        if new["targets"][n]["status"] != "RolledBack"
    ]
    traffic = traffic_rollback_failure(new)
    if traffic:
        errors.append(("traffic", "%s: %s" % (traffic["code"], traffic["reason"])))
    rollback["completedAt"] = now
    base = new["reason"] or "deployment failed"
    if errors:
        move_to(new, "Failed")
        detail = "; ".join("%s: %s" % item for item in errors)
        if rollback["automatic"]:
            new["reason"] = suffixed_reason(base, RECOVERY_ROLLBACK_FAILED, detail)
        else:
            new.update(
                {"reason": "%s; rollback failed: %s" % (base, detail), "code": new.get("code") or ROLLBACK_FAILED_CODE}
            )
        rollback["status"] = "failed"
        new["events"].append({"kind": "RollbackFailed", "at": now, "error": detail})
    else:
        move_to(new, "RolledBack")
        if rollback["automatic"]:
            new["reason"] = suffixed_reason(base, RECOVERY_ROLLED_BACK)
        rollback["status"] = "succeeded"
        new["events"].append({"kind": "RollbackCompleted", "at": now, "targets": planned})
    new["completedAt"] = now
    return new
