# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The typed deployment job record and its state machine. Pure: every function takes the record and
returns a new one (the input is never changed); the job store persists each result.

Job status: ``Pending`` -> ``Running`` -> ``Succeeded`` | ``Failed``; a failed job may go on
``Failed`` -> ``RollingBack`` -> ``RolledBack`` | ``Failed``. Target status: ``Pending``, ``Running``,
``Succeeded``, ``Failed``, ``Skipped``, ``RolledBack``. ``promotion`` keeps the deployment's own
outcome: it stays ``Failed`` after a successful rollback (rollback is recovery, not success).

Here, the job from its making to its end: its targets' phases and outcomes, the strategy gates, a job
failed closed before any target changed, a job whose run was interrupted; and which targets a rollback
restores (:func:`eligible`, :func:`rollback_plan`), which the end of a failed job records. The rollback
itself (the automatic decision, an operator's rollback job, its orders, its end) is job/rollback.py; the
documents' types are job/model.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import clone
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    JOB_INTERRUPTED,
    PHASES,
    ROLLBACK_PHASE_NAMES,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import (
    RECOVERY_ROLLBACK_SKIPPED,
    suffixed_reason,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    Failure,
    GateDecision,
    JobKind,
    JobOptions,
    JobRecord,
    JobStatus,
    JobSummary,
    OutcomePhase,
    Owner,
    PhaseEntry,
    RollbackPlan,
    TargetRecord,
)

JOB_SCHEMA = "stella.job.v1"
JOB_STATUSES = ("Pending", "Running", "Succeeded", "Failed", "RollingBack", "RolledBack")
TARGET_STATUSES = ("Pending", "Running", "Succeeded", "Failed", "Skipped", "RolledBack")
TERMINAL = ("Succeeded", "Failed", "RolledBack")
UNFINISHED = ("Pending", "Running", "RollingBack")  # a job in one of these holds its projects
# The last renewal of a job's claim lease, in records read from the store (never in the stored JSON).
LEASE_FIELD = "leaseRenewedAt"
TRANSITIONS: dict[JobStatus, tuple[JobStatus, ...]] = {
    # a rollback job starts rolling back; a deployment an operator rolls back goes Succeeded -> RollingBack
    "Pending": ("Running", "Failed", "RollingBack"),
    "Running": ("Succeeded", "Failed"),
    "Failed": ("RollingBack",),
    "RollingBack": ("RolledBack", "Failed"),
    "Succeeded": ("RollingBack",),
    "RolledBack": (),
}
JOB_ID_SOURCES = ("awx_job_id", "tower_job_id", "stella_job_id")
NONE_ELIGIBLE = "no target retained a previous revision to restore"
AUTO_ROLLBACK_DISABLED = "autoRollbackOnFailure=false"
NO_REVISION = "no retained revision: the deployment retained no previous revision on this target"
NOT_STARTED = "not started by this job: it runs what it ran before, nothing to roll back"
RESTORED_IN_PLACE = "restored in place: the target agent's failed transaction put the previous release back"
UNCHANGED = (
    "unchanged by this job: the target already ran the release (or the failed apply changed nothing), "
    "so it keeps running what it ran before this job"
)


def succeeded(record: JobRecord) -> bool:
    """Whether the job did what it was for: a deployment ``Succeeded``; an operator rollback job (recovery,
    never a deployment) ``RolledBack``. A deployment that was rolled back did not succeed."""
    return record["status"] == ("RolledBack" if record.get("kind") == "rollback" else "Succeeded")


def job_error(message: str, code: str = "job_invalid") -> StellaError:
    return StellaError(code, message, phase="job")


def job_id_from(variables: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(job id, source)`` from the caller: AWX / Automation Platform job ids, then ``stella_job_id``.

    ``None`` when none is set (the caller then generates one)."""
    for name in JOB_ID_SOURCES:
        value = variables.get(name)
        if value not in (None, ""):
            text = str(value)
            return (text if name == "stella_job_id" else "%s-%s" % (name.split("_", 1)[0], text)), name
    return None, None


def new_job(
    *,
    job_id: str,
    job_id_source: str | None,
    summary: JobSummary,
    batches: list[list[str]],
    targets: dict[str, TargetRecord],
    options: JobOptions,
    now: str,
    owner: Owner | None = None,
    kind: JobKind = "deployment",
) -> JobRecord:
    """A ``Pending`` job. ``targets`` maps each target name to its identity/plan facts; ``summary`` is what
    the job says of its release (it is copied into the record)."""
    order = [name for batch in batches for name in batch]
    if sorted(order) != sorted(targets):
        raise job_error("the batch plan and the targets differ")
    record: JobRecord = {
        "schema": JOB_SCHEMA,
        "jobId": job_id,
        "jobIdSource": job_id_source,
        "kind": kind,
        "isRollback": kind == "rollback",
        "status": "Pending",
        "promotion": "Pending",
        "reason": None,
        "code": None,
        "options": options.copy(),
        "batches": [list(batch) for batch in batches],
        "targetOrder": order,
        "targets": {},
        "gates": [],
        "events": [],
        "rollback": None,
        "owner": owner,
        "createdAt": now,
        "updatedAt": now,
        "startedAt": None,
        "completedAt": None,
        **summary,
    }
    for index, batch in enumerate(batches):
        for name in batch:
            record["targets"][name] = {
                "batch": index,
                "order": order.index(name),
                "status": "Pending",
                "phases": [],
                "reason": None,
                "code": None,
                "evidence": {},
                **targets[name],
            }
    return record


def next_revision(record: JobRecord, now: str, target: str | None = None) -> JobRecord:
    """``record``'s next revision at ``now``: a deep copy; for a change of one ``target``, that target copied
    and the rest shared (nothing here changes a record in place), at a cost that is not the job's size."""
    new: JobRecord
    if target is None:
        new = clone(record)
    else:
        copied: TargetRecord = clone(target_of(record, target))
        new = record.copy()
        new["targets"] = {**record["targets"], target: copied}
    new["updatedAt"] = now
    return new


def move_to(record: JobRecord, status: JobStatus) -> None:
    """The job (a revision being made) goes to ``status``, when its state machine allows it."""
    if status not in TRANSITIONS[record["status"]]:
        raise job_error(
            "job %s cannot go from %s to %s" % (record["jobId"], record["status"], status), code="job_state_invalid"
        )
    record["status"] = status


def target_of(record: JobRecord, name: str) -> TargetRecord:
    """The record of the job's target ``name`` (``job_invalid`` when the job has none)."""
    try:
        return record["targets"][name]
    except KeyError:
        raise job_error("job %s has no target %r" % (record["jobId"], name)) from None


def _batch_running(record: JobRecord, index: int) -> None:
    """The targets of batch ``index`` that have not started are ``Running``: their batch started (a
    deployment job's targets are recorded once, when they end, so this is what says they are under way)."""
    if record["kind"] == "deployment" and 0 <= index < len(record["batches"]):
        for name in record["batches"][index]:
            if record["targets"][name]["status"] == "Pending":
                record["targets"][name]["status"] = "Running"


def start(record: JobRecord, now: str) -> JobRecord:
    """The job runs; a deployment job's first batch starts."""
    new = next_revision(record, now)
    move_to(new, "Running")
    new["promotion"] = "Running"
    new["startedAt"] = now
    _batch_running(new, 0)
    return new


def phase_entry(
    name: str,
    status: str,
    *,
    duration_ms: int,
    completed_at: str | None,
    started_at: str | None = None,
    detail: dict[str, Any] | None = None,
) -> PhaseEntry:
    """A phase of a target as the record keeps it (``detail`` only when there is one)."""
    entry: PhaseEntry = {
        "name": name,
        "status": status,
        "startedAt": started_at,
        "completedAt": completed_at,
        "durationMs": int(duration_ms),
    }
    if detail:
        entry["detail"] = detail
    return entry


def record_phase(record: JobRecord, target: str, *, entry: PhaseEntry, now: str) -> JobRecord:
    """A phase of one target ran (``entry``: its name, status passed/failed/skipped, times, duration and
    detail, :func:`phase_entry`); the target becomes Running. A phase recorded again replaces the first."""
    if entry["name"] not in PHASES + ROLLBACK_PHASE_NAMES:
        raise job_error("unknown phase %r" % entry["name"])
    new = next_revision(record, now, target)
    found = target_of(new, target)
    if found["status"] == "Pending":
        found["status"] = "Running"
    kept = phase_entry(
        entry["name"],
        entry["status"],
        duration_ms=entry["durationMs"],
        completed_at=entry["completedAt"],
        started_at=entry["startedAt"],
        detail=entry.get("detail"),
    )
    key: Literal["phases", "rollbackPhases"] = "rollbackPhases" if kept["name"] in ROLLBACK_PHASE_NAMES else "phases"
    phases = [p for p in found.get(key, []) if p["name"] != kept["name"]]
    phases.append(kept)
    order = PHASES + ROLLBACK_PHASE_NAMES
    found[key] = sorted(phases, key=lambda p: order.index(p["name"]))
    return new


def record_phases(record: JobRecord, target: str, *, phases: Sequence[OutcomePhase], now: str) -> JobRecord:
    """Each phase of a target's outcome (job/target.py: ``(name, status, duration ms, detail)``), recorded in
    order as completed at ``now``."""
    for name, status, duration, detail in phases:
        entry = phase_entry(name, status, duration_ms=duration, completed_at=now, detail=detail)
        record = record_phase(record, target, entry=entry, now=now)
    return record


def finish_target(
    record: JobRecord,
    target: str,
    *,
    succeeded: bool,
    now: str,
    reason: str | None = None,
    code: str | None = None,
    facts: TargetRecord | None = None,
) -> JobRecord:
    """The target's deployment ended: ``Succeeded`` or ``Failed`` with reason and code; ``facts``: what its
    apply left (job/target.py ``target_facts``)."""
    new = next_revision(record, now, target)
    found = target_of(new, target)
    if found["status"] not in ("Pending", "Running"):
        raise job_error("target %s already ended as %s" % (target, found["status"]), code="job_state_invalid")
    found["status"] = "Succeeded" if succeeded else "Failed"
    found["reason"] = None if succeeded else (reason or "deployment failed")
    found["code"] = None if succeeded else (code or "deploy_failed")
    if not succeeded and next_step(found["code"]):
        found["next"] = next_step(found["code"])
    if facts:
        found.update(facts)
    return new


def record_gate(record: JobRecord, decision: GateDecision, now: str) -> JobRecord:
    """Persist the continuation decision after a batch: an open gate starts the next batch, a closed one
    skips every later target."""
    new = next_revision(record, now)
    entry: GateDecision = {**decision, "at": now}
    new["gates"] = [g for g in new["gates"] if g["batch"] != decision["batch"]] + [entry]
    if decision["proceed"]:
        _batch_running(new, decision["batch"] + 1)
    else:
        for later in new["batches"][decision["batch"] + 1 :]:
            for name in later:
                target = new["targets"][name]
                if target["status"] == "Pending":
                    target["status"] = "Skipped"
                    target["reason"] = "not started: %s" % decision["reason"]
    return new


def fail_closed(record: JobRecord, *, code: str, reason: str, failed_targets: dict[str, str], now: str) -> JobRecord:
    """The job fails before any target is changed (e.g. a target is unreachable): the targets named in
    ``failed_targets`` (with their reasons) are ``Failed`` with ``code``, every other target ``Skipped``."""
    new = next_revision(record, now)
    for name, target in new["targets"].items():
        if name in failed_targets:
            target.update({"status": "Failed", "code": code, "reason": failed_targets[name]})
        elif target["status"] in ("Pending", "Running"):  # nothing was changed: none started
            target.update({"status": "Skipped", "reason": "not started: %s" % reason})
    move_to(new, "Failed")
    new.update({"promotion": "Failed", "reason": reason, "code": code, "completedAt": now})
    if new["options"].get("autoRollbackOnFailure", True):
        # no target was changed, so none is eligible: the contract's skipped automatic rollback
        new["reason"] = suffixed_reason(reason, RECOVERY_ROLLBACK_SKIPPED, NONE_ELIGIBLE)
        new["rollback"] = {"attempted": False, "skipReason": "no_eligible_target", "skipped": {}}
    else:
        new["rollback"] = {
            "attempted": False,
            "skipReason": AUTO_ROLLBACK_DISABLED,
            "source": new["options"].get("autoRollbackSource"),
        }
    return new


def traffic_rollback_failure(record: JobRecord) -> Failure | None:
    """How the job's traffic rollback failed (job/traffic.py), ``None`` when it did not run or did not fail."""
    traffic = record.get("trafficRollback")
    return traffic.get("failure") if traffic else None


def finish(record: JobRecord, now: str) -> JobRecord:
    """End the deployment: ``Succeeded`` when every target succeeded, else ``Failed`` with the first
    failure's reason (batch order). Targets never started are ``Skipped``."""
    new = next_revision(record, now)
    failed = []
    for name in new["targetOrder"]:
        target = new["targets"][name]
        if target["status"] in ("Pending", "Running"):
            if target["status"] == "Running":
                target.update(
                    {"status": "Failed", "reason": "the target's deployment did not finish", "code": "deploy_failed"}
                )
            else:
                target.update({"status": "Skipped", "reason": target.get("reason") or "not started"})
        if target["status"] == "Failed":
            failed.append(name)
    # (reason, code) of what stopped the job besides its targets: a closed gate, else a failed traffic
    # rollback, else a failed controller step (job/step_failure.py)
    stop: tuple[str, str | None] | None = None
    gate = next((g for g in new["gates"] if not g["proceed"]), None)
    if gate is not None:
        stop = gate["reason"], gate.get("code")
    traffic = traffic_rollback_failure(new)
    if traffic and not (failed or stop):
        stop = "traffic rollback failed: %s" % traffic["reason"], traffic["code"]
    step = new.get("stepFailure")
    if step and not (failed or stop):
        stop = "controller step %s failed: %s" % (step["step"], step["reason"]), step["code"]
    ended = stop
    if failed:
        first = new["targets"][failed[0]]
        ended = "target %s: %s" % (failed[0], first["reason"]), first.get("code") or (stop[1] if stop else None)
    if ended is not None:
        reason, code = ended
        move_to(new, "Failed")
        new.update({"promotion": "Failed", "reason": reason, "code": code or "strategy_gate_closed"})
    else:
        move_to(new, "Succeeded")
        new["promotion"] = "Succeeded"
    new["completedAt"] = now
    return new


def eligible(target: TargetRecord) -> bool:
    """The contract's retained-revision rule: the target's task ran and its result carries a previous
    revision, or the target is a ComposeHost (its agent then resolves the revision, and a rollback with
    none to restore fails there, with evidence), or it stopped answering during its apply
    (``outcomeUnknown``: it may run this job's release). A target the job did not change, or whose failed
    transaction already put the previous release back, is left as it is (:func:`skip_reason`)."""
    if target["status"] not in ("Succeeded", "Failed") or target.get("unchangedByJob") or target.get("restoredInPlace"):
        return False
    return bool(
        target.get("previousRevisionPath")
        or target.get("outcomeUnknown")
        or (target.get("applyRan") and target.get("targetType") == "ComposeHost")
    )


def skip_reason(target: TargetRecord) -> str:
    """Why a rollback leaves a target that is not :func:`eligible` as it is (no retained revision only when
    that is known: the target's deployment ended)."""
    if target["status"] not in ("Succeeded", "Failed"):
        return NOT_STARTED
    if target.get("unchangedByJob"):
        return UNCHANGED
    return RESTORED_IN_PLACE if target.get("restoredInPlace") else NO_REVISION


def rollback_plan(record: JobRecord) -> RollbackPlan:
    """``{"batches": [[name, ...], ...] (reverse batch order), "skipped": {name: reason}}``."""
    batches: list[list[str]] = []
    skipped: dict[str, str] = {}
    for batch in reversed(record["batches"]):
        chosen = []
        for name in batch:
            target = record["targets"][name]
            if eligible(target):
                chosen.append(name)
            elif target["status"] in ("Succeeded", "Failed"):
                skipped[name] = skip_reason(target)
        if chosen:
            batches.append(chosen)
    return {"batches": batches, "skipped": skipped}


def interrupted(record: JobRecord, now: str, why: str) -> JobRecord:
    """A job whose controller run ended before it finished: ``Failed`` (never Running forever), with
    ``interrupted`` saying when and why (a run still alive reads it and stops). A deployment's targets
    that were under way are ``outcomeUnknown`` (their apply may have changed them: :func:`eligible`), and
    a deployment that had no rollback decision gets one: no automatic rollback (no run is left to run
    it, ``skipReason: job_interrupted``), with the batches and skipped targets an operator's would have."""
    new = next_revision(record, now)
    deployment = new["kind"] == "deployment"
    for target in new["targets"].values():
        if target["status"] == "Running":
            target.update({"status": "Failed", "code": JOB_INTERRUPTED, "reason": why})
            if deployment:
                target["outcomeUnknown"] = True
        elif target["status"] == "Pending":
            target.update({"status": "Skipped", "reason": "not started: " + why})
    if new["status"] == "RollingBack":
        new["events"].append({"kind": "RollbackFailed", "at": now, "error": why})
    elif deployment and new.get("rollback") is None:
        plan = rollback_plan(new)
        new["rollback"] = {
            "attempted": False,
            "skipReason": JOB_INTERRUPTED,
            "batches": plan["batches"],
            "skipped": plan["skipped"],
        }
    new["status"] = "Failed"
    if new["promotion"] in ("Pending", "Running"):
        new["promotion"] = "Failed"
    new.update(
        {
            "reason": (new["reason"] + "; " + why) if new["reason"] else why,
            "code": new["code"] or JOB_INTERRUPTED,
            "completedAt": now,
            "interrupted": {"at": now, "why": why},
        }
    )
    return new
