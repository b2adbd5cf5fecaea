# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The typed deployment job record and its state machine. Pure: every function takes the record and
returns a new one (the input is never changed); the job store persists each result.

Job status: ``Pending`` -> ``Running`` -> ``Succeeded`` | ``Failed``; a failed job may go on
``Failed`` -> ``RollingBack`` -> ``RolledBack`` | ``Failed``. Target status: ``Pending``, ``Running``,
``Succeeded``, ``Failed``, ``Skipped``, ``RolledBack``. ``promotion`` keeps the deployment's own
outcome: it stays ``Failed`` after a successful rollback (rollback is recovery, not success).
Automatic rollback follows the contract: one attempt, eligible targets (a retained previous
revision) in reverse batch order, the job stamped ``isRollback`` before dispatch, and the reason
suffixed exactly as the contract writes it.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import clone
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WAIT_TIMEOUT,
    JOB_INTERRUPTED,
    PHASES,
    ROLLBACK_PHASE_NAMES,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import ROLLBACK_TASKS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.timeouts import task_timeout
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import (
    RECOVERY_ROLLBACK_FAILED,
    RECOVERY_ROLLBACK_SKIPPED,
    RECOVERY_ROLLED_BACK,
    suffixed_reason,
)

JOB_SCHEMA = "stella.job.v1"
JOB_STATUSES = ("Pending", "Running", "Succeeded", "Failed", "RollingBack", "RolledBack")
TARGET_STATUSES = ("Pending", "Running", "Succeeded", "Failed", "Skipped", "RolledBack")
TERMINAL = ("Succeeded", "Failed", "RolledBack")
UNFINISHED = ("Pending", "Running", "RollingBack")  # a job in one of these holds its projects
# The last renewal of a job's claim lease, in records read from the store (never in the stored JSON).
LEASE_FIELD = "leaseRenewedAt"
TRANSITIONS = {
    # a rollback job starts rolling back; a deployment an operator rolls back goes Succeeded -> RollingBack
    "Pending": ("Running", "Failed", "RollingBack"),
    "Running": ("Succeeded", "Failed"),
    "Failed": ("RollingBack",),
    "RollingBack": ("RolledBack", "Failed"),
    "Succeeded": ("RollingBack",),
    "RolledBack": (),
}
EVENTS = ("RollbackStarted", "RollbackCompleted", "RollbackFailed")
ROLLBACK_FAILED_CODE = "rollback_failed"
ROLLBACK_ALREADY_DONE = "rollback_already_done"
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


def succeeded(record):
    """Whether the job did what it was for: a deployment ``Succeeded``; an operator rollback job (recovery,
    never a deployment) ``RolledBack``. A deployment that was rolled back did not succeed."""
    return record["status"] == ("RolledBack" if record.get("kind") == "rollback" else "Succeeded")


def job_error(message, code="job_invalid"):
    return StellaError(code, message, phase="job")


def job_id_from(variables):
    """``(job id, source)`` from the caller: AWX / Automation Platform job ids, then ``stella_job_id``.

    ``None`` when none is set (the caller then generates one)."""
    for name in JOB_ID_SOURCES:
        value = variables.get(name)
        if value not in (None, ""):
            text = str(value)
            return (text if name == "stella_job_id" else "%s-%s" % (name.split("_", 1)[0], text)), name
    return None, None


def new_job(job_id, job_id_source, summary, batches, targets, options, now, owner=None, kind="deployment"):
    """A ``Pending`` job. ``targets`` maps each target name to its identity/plan facts."""
    order = [name for batch in batches for name in batch]
    if sorted(order) != sorted(targets):
        raise job_error("the batch plan and the targets differ")
    record = {
        "schema": JOB_SCHEMA,
        "jobId": job_id,
        "jobIdSource": job_id_source,
        "kind": kind,
        "isRollback": kind == "rollback",
        "status": "Pending",
        "promotion": "Pending",
        "reason": None,
        "code": None,
        "options": dict(options),
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
    }
    record.update(summary)
    for index, batch in enumerate(batches):
        for name in batch:
            entry = {
                "batch": index,
                "order": order.index(name),
                "status": "Pending",
                "phases": [],
                "reason": None,
                "code": None,
                "evidence": {},
            }
            entry.update(targets[name])
            record["targets"][name] = entry
    return record


def _copy(record, now, target=None):
    """``record``'s next revision at ``now``: a deep copy; for a change of one ``target``, that target copied
    and the rest shared (nothing here changes a record in place), at a cost that is not the job's size."""
    if target is None:
        new = clone(record)
    else:
        new = dict(record, targets=dict(record["targets"], **{target: clone(_target(record, target))}))
    new["updatedAt"] = now
    return new


def _move(record, status):
    if status not in TRANSITIONS[record["status"]]:
        raise job_error(
            "job %s cannot go from %s to %s" % (record["jobId"], record["status"], status), code="job_state_invalid"
        )
    record["status"] = status


def _target(record, name):
    try:
        return record["targets"][name]
    except KeyError:
        raise job_error("job %s has no target %r" % (record["jobId"], name)) from None


def _batch_running(record, index):
    """The targets of batch ``index`` that have not started are ``Running``: their batch started (a
    deployment job's targets are recorded once, when they end, so this is what says they are under way)."""
    if record["kind"] == "deployment" and 0 <= index < len(record["batches"]):
        for name in record["batches"][index]:
            if record["targets"][name]["status"] == "Pending":
                record["targets"][name]["status"] = "Running"


def start(record, now):
    """The job runs; a deployment job's first batch starts."""
    new = _copy(record, now)
    _move(new, "Running")
    new["promotion"] = "Running"
    new["startedAt"] = now
    _batch_running(new, 0)
    return new


def record_phase(record, name, phase, status, started_at, completed_at, duration_ms, now, detail=None):
    """A phase of one target ran (``status`` passed/failed/skipped); the target becomes Running."""
    if phase not in PHASES + ROLLBACK_PHASE_NAMES:
        raise job_error("unknown phase %r" % phase)
    new = _copy(record, now, name)
    target = _target(new, name)
    if target["status"] == "Pending":
        target["status"] = "Running"
    entry = {
        "name": phase,
        "status": status,
        "startedAt": started_at,
        "completedAt": completed_at,
        "durationMs": int(duration_ms),
    }
    if detail:
        entry["detail"] = detail
    key = "rollbackPhases" if phase in ROLLBACK_PHASE_NAMES else "phases"
    phases = [p for p in target.get(key, []) if p["name"] != phase]
    phases.append(entry)
    order = PHASES + ROLLBACK_PHASE_NAMES
    target[key] = sorted(phases, key=lambda p: order.index(p["name"]))
    return new


def finish_target(record, name, succeeded, now, reason=None, code=None, facts=None):
    """The target's deployment ended: ``Succeeded`` or ``Failed`` with reason and code."""
    new = _copy(record, now, name)
    target = _target(new, name)
    if target["status"] not in ("Pending", "Running"):
        raise job_error("target %s already ended as %s" % (name, target["status"]), code="job_state_invalid")
    target["status"] = "Succeeded" if succeeded else "Failed"
    target["reason"] = None if succeeded else (reason or "deployment failed")
    target["code"] = None if succeeded else (code or "deploy_failed")
    if not succeeded and next_step(target["code"]):
        target["next"] = next_step(target["code"])
    target.update(facts or {})
    return new


def record_gate(record, decision, now):
    """Persist the continuation decision after a batch: an open gate starts the next batch, a closed one
    skips every later target."""
    new = _copy(record, now)
    entry = dict(decision, at=now)
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


def fail_closed(record, code, reason, failed_targets, now):
    """The job fails before any target is changed (e.g. a target is unreachable): the named targets
    are ``Failed`` with ``code``, every other target ``Skipped``."""
    new = _copy(record, now)
    for name, target in new["targets"].items():
        if name in failed_targets:
            target.update(status="Failed", code=code, reason=failed_targets[name])
        elif target["status"] in ("Pending", "Running"):  # nothing was changed: none started
            target.update(status="Skipped", reason="not started: %s" % reason)
    _move(new, "Failed")
    new.update(promotion="Failed", reason=reason, code=code, completedAt=now)
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


def finish(record, now):
    """End the deployment: ``Succeeded`` when every target succeeded, else ``Failed`` with the first
    failure's reason (batch order). Targets never started are ``Skipped``."""
    new = _copy(record, now)
    failed = []
    for name in new["targetOrder"]:
        target = new["targets"][name]
        if target["status"] in ("Pending", "Running"):
            if target["status"] == "Running":
                target.update(status="Failed", reason="the target's deployment did not finish", code="deploy_failed")
            else:
                target.update(status="Skipped", reason=target.get("reason") or "not started")
        if target["status"] == "Failed":
            failed.append(name)
    gate = next((g for g in new["gates"] if not g["proceed"]), None)
    traffic = (new.get("trafficRollback") or {}).get("failure")
    if traffic and not (failed or gate):
        gate = {"reason": "traffic rollback failed: %s" % traffic["reason"], "code": traffic["code"]}
    if new.get("stepFailure") and not (failed or gate):  # a controller step failed (job/step_failure.py)
        gate = {
            "reason": "controller step %(step)s failed: %(reason)s" % new["stepFailure"],
            "code": new["stepFailure"]["code"],
        }
    if failed or gate:
        first = new["targets"][failed[0]] if failed else {}
        reason = ("target %s: %s" % (failed[0], first["reason"])) if failed else gate["reason"]
        _move(new, "Failed")
        new.update(
            promotion="Failed",
            reason=reason,
            code=first.get("code") or (gate or {}).get("code") or "strategy_gate_closed",
        )
    else:
        _move(new, "Succeeded")
        new["promotion"] = "Succeeded"
    new["completedAt"] = now
    return new


def eligible(target):
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


def skip_reason(target):
    """Why a rollback leaves a target that is not :func:`eligible` as it is (no retained revision only when
    that is known: the target's deployment ended)."""
    if target["status"] not in ("Succeeded", "Failed"):
        return NOT_STARTED
    if target.get("unchangedByJob"):
        return UNCHANGED
    return RESTORED_IN_PLACE if target.get("restoredInPlace") else NO_REVISION


def rollback_plan(record):
    """``{"batches": [[name, ...], ...] (reverse batch order), "skipped": {name: reason}}``."""
    batches, skipped = [], {}
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


def auto_rollback(record, now):
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
    new = _copy(record, now)
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
    return begin_rollback(new, plan, now, automatic=True)


def begin_rollback(record, plan, now, automatic=False, reason=None):
    new = _copy(record, now)
    new["isRollback"] = True
    _move(new, "RollingBack")
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


def _rolled_back(source):
    """Why ``source`` is no deployment an operator may roll back now, else ``None``."""
    if source.get("kind") == "rollback":
        return "is a rollback job"
    return {
        "RolledBack": "is RolledBack: it was already rolled back",
        "RollingBack": "is RollingBack: a rollback of it is under way",
    }.get(source["status"])


def operator_rollback(
    source, job_id, now, revision_paths=None, reason=None, owner=None, wait_timeout=DEFAULT_WAIT_TIMEOUT
):
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
    batches, skipped = [], {}
    for batch in reversed(source["batches"]):
        chosen = [n for n in batch if paths.get(n) or eligible(source["targets"][n])]
        skipped.update({n: skip_reason(source["targets"][n]) for n in batch if n not in chosen})
        if chosen:
            batches.append(chosen)
    targets = {}
    for name, target in source["targets"].items():
        entry = {
            k: v
            for k, v in target.items()
            if k in ("targetId", "targetName", "targetType", "endpoint", "projectName", "slot", "manifestHash")
        }
        entry["previousRevisionPath"] = paths.get(name) or target.get("previousRevisionPath")
        targets[name] = entry
    summary = {
        k: source.get(k) for k in ("release", "tenant", "environment", "application", "strategy", "strategyConfig")
    }
    summary.update(sourceJobId=source["jobId"], reason=reason)
    record = new_job(
        job_id,
        "operator",
        summary,
        batches,
        {n: targets[n] for b in batches for n in b},
        {"autoRollbackOnFailure": False, "waitTimeout": wait_timeout},
        now,
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
            "rollback_no_eligible_target",
            "no target of job %s retained a revision to restore" % source["jobId"],
            {},
            now,
        )
    # A rollback job is recovery, never a deployment: it goes Pending -> RollingBack -> RolledBack (or
    # Failed), and its promotion is the one of the deployment it recovers (rollback promotes nothing).
    new = begin_rollback(record, {"batches": batches, "skipped": skipped}, now, reason=reason)
    new.update(promotion=source.get("promotion"), startedAt=now)
    return new


def rollback_orders(record, source=None):
    """The rollback the playbook runs next (nothing unless the job is rolling back or is a rollback job
    that runs): its batches, ``serial``, host order, and per target the revision, payload and task;
    ``source``: the job a rollback job rolls back, whose targets carry the rollback payloads. Each
    target's entry is all its play reads: what the rollback entry point of ``roles/deploy`` takes
    (``deploy_rollback``), with the job id and the reason of the rollback."""
    targets = (source or record)["targets"]
    plan = (record.get("rollback") or {}).get("batches") or [] if record["status"] in ("RollingBack", "Running") else []
    wait = record["options"].get("waitTimeout") or DEFAULT_WAIT_TIMEOUT
    timeout = (
        record["options"].get("taskTimeout")
        or ((source or {}).get("options") or {}).get("taskTimeout")
        or task_timeout(wait)
    )
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


def finish_rollback_target(record, name, succeeded, now, reason=None, facts=None):
    new = _copy(record, now, name)
    target = _target(new, name)
    if succeeded:
        target["statusBeforeRollback"] = target["status"]
        target["status"] = "RolledBack"
    elif new["kind"] == "rollback":
        target.update(
            status="Failed",
            reason=reason or "rollback failed",
            code="rollback_failed",
            rollbackError=reason or "rollback failed",
        )
    else:
        target["rollbackError"] = reason or "rollback failed"
    target["rollback"] = dict(facts or {}, succeeded=bool(succeeded))
    return new


def finish_rollback(record, now):
    """``RolledBack`` when every planned target was restored, else ``Failed`` with the combined reason."""
    new = _copy(record, now)
    planned = [n for batch in new["rollback"]["batches"] for n in batch]
    errors = [
        (n, new["targets"][n].get("rollbackError") or "not rolled back")
        for n in planned
        if new["targets"][n]["status"] != "RolledBack"
    ]
    traffic = (new.get("trafficRollback") or {}).get("failure")
    if traffic:
        errors.append(("traffic", "%s: %s" % (traffic["code"], traffic["reason"])))
    new["rollback"]["completedAt"] = now
    base = new["reason"] or "deployment failed"
    if errors:
        _move(new, "Failed")
        detail = "; ".join("%s: %s" % item for item in errors)
        if new["rollback"]["automatic"]:
            new["reason"] = suffixed_reason(base, RECOVERY_ROLLBACK_FAILED, detail)
        else:
            new.update(reason="%s; rollback failed: %s" % (base, detail), code=new.get("code") or ROLLBACK_FAILED_CODE)
        new["rollback"]["status"] = "failed"
        new["events"].append({"kind": "RollbackFailed", "at": now, "error": detail})
    else:
        _move(new, "RolledBack")
        if new["rollback"]["automatic"]:
            new["reason"] = suffixed_reason(base, RECOVERY_ROLLED_BACK)
        new["rollback"]["status"] = "succeeded"
        new["events"].append({"kind": "RollbackCompleted", "at": now, "targets": planned})
    new["completedAt"] = now
    return new


def interrupted(record, now, why):
    """A job whose controller run ended before it finished: ``Failed`` (never Running forever), with
    ``interrupted`` saying when and why (a run still alive reads it and stops). A deployment's targets
    that were under way are ``outcomeUnknown`` (their apply may have changed them: :func:`eligible`), and
    a deployment that had no rollback decision gets one: no automatic rollback (no run is left to run
    it, ``skipReason: job_interrupted``), with the batches and skipped targets an operator's would have."""
    new = _copy(record, now)
    deployment = new["kind"] == "deployment"
    for target in new["targets"].values():
        if target["status"] == "Running":
            target.update(status="Failed", code=JOB_INTERRUPTED, reason=why)
            if deployment:
                target["outcomeUnknown"] = True
        elif target["status"] == "Pending":
            target.update(status="Skipped", reason="not started: " + why)
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
        reason=(new["reason"] + "; " + why) if new["reason"] else why,
        code=new["code"] or JOB_INTERRUPTED,
        completedAt=now,
        interrupted={"at": now, "why": why},
    )
    return new
