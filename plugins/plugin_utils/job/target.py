# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One target's outcome in a job, from what its tasks returned. Pure, no I/O.

A target's play runs three tasks that do something: the agent's apply (preflight, prepare,
pre-deploy, deploy, verify by inspection, promote and post-deploy, as one transaction on the
target), the controller's probes (the rest of verify) and the record (evidence and cleanup). The
record hands their results, and the failure that stopped the play when one did, to
:func:`deployment_outcome`, which maps them to the contract's nine phases. Nothing here depends on
how a task, play or register is named: the failed phase comes from the results themselves.

A rollback is mapped the same way by :func:`rollback_outcome`: the agent's four rollback phases, and
the restoration evidence the agent must return before a target counts as restored.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    PHASES,
    ROLLBACK_PHASE_NAMES,
    UNREACHABLE_CODE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.deployment import project_digest
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    OutcomePhase,
    TargetOutcome,
    TargetRecord,
)

# Phases the agent reports; verify is also the controller's probes, evidence and cleanup are the record.
AGENT_PHASES = PHASES[: PHASES.index("post-deploy") + 1]
RECORDED = ("succeeded", "failed", "skipped")
DEPLOY_FAILED, PROBE_FAILED, ROLLBACK_FAILED = "deploy_failed", "health_probe_failed", "rollback_failed"
UNVERIFIED_ROLLBACK = "rollback_unverified"
# The registered result of a task (the agent's apply or rollback, the probes, the task that failed): free-form.
TaskResult = dict[str, Any]


def _failed(result: object) -> TypeGuard[TaskResult]:
    return isinstance(result, dict) and bool(result.get("failed"))


def unreachable(result: object) -> TypeGuard[TaskResult]:
    """A registered result of a task whose target stopped answering: its connection dropped
    (``ignore_unreachable``), or the task ran past its timeout (a host that hangs while its connection
    stays up)."""
    return isinstance(result, dict) and bool(result.get("unreachable") or result.get("timedout"))


def _unanswered(*results: TaskResult | None) -> TaskResult | None:
    """The first of ``results`` whose target stopped answering (:func:`unreachable`), ``None`` when none did."""
    return next((result for result in results if unreachable(result)), None)


def _first_failed(*results: TaskResult | None) -> TaskResult | None:
    """The first of ``results`` that failed, ``None`` when none did."""
    return next((result for result in results if _failed(result)), None)


def _ran(result: object) -> TypeGuard[TaskResult]:
    """A registered result of a task that ran (not skipped by a condition, not absent)."""
    return isinstance(result, dict) and bool(result) and not result.get("skipped")


def probe_status(probe: TaskResult | None) -> tuple[str, str | None]:
    """``(status of the probes, reason)``: ``passed``, ``failed``, ``skipped`` (``waitForHealthCheck=false``),
    ``none`` (no component asks for a probe) or ``not_run`` (the probe task did not run)."""
    if not _ran(probe):
        return "not_run", None
    evidence = probe.get("evidence") or {}
    status = evidence.get("healthProbe.status")
    if _failed(probe) or status == "failed":
        return "failed", first_line(probe.get("msg")) or evidence.get("healthProbe.reason")
    if status in ("passed", "skipped", "not_run"):
        return status, evidence.get("healthProbe.reason")
    return "none", None


def _agent_phases(result: TaskResult | None, names: tuple[str, ...] = AGENT_PHASES) -> dict[str, dict[str, Any]]:
    """The phases of ``names`` the agent ran (``not_run`` ones are not recorded), by name, in its order."""
    phases = {}
    for entry in (result or {}).get("deploymentPhases") or []:
        if entry.get("phase") in names and entry.get("status") in RECORDED:
            phases[entry["phase"]] = {"status": entry["status"], "durationMs": int(entry.get("durationMs") or 0)}
    return phases


def failed_phase(apply: TaskResult | None, probe: TaskResult | None, failure: TaskResult | None) -> str:
    """The contract phase a failure belongs to: the agent's own ``failurePhase`` (its failed phase) when
    the apply failed, ``verify`` when the probes failed, else the failure's ``failurePhase`` when it
    names a phase, else ``cleanup`` (the record itself failed)."""
    if _failed(apply):
        agent_failed = [name for name, entry in _agent_phases(apply).items() if entry["status"] == "failed"]
        if agent_failed:
            return agent_failed[0]
        named = apply.get("failurePhase") or ""
        return named if named in AGENT_PHASES else "deploy"
    if _failed(probe):
        return "verify"
    named = (failure or {}).get("failurePhase")
    if named in PHASES:
        return str(named)
    return "cleanup" if _ran(apply) else "preflight"


def deployment_outcome(
    apply: TaskResult | None,
    probe: TaskResult | None = None,
    failure: TaskResult | None = None,
    evidence_written: bool = False,
    probe_duration_ms: int = 0,
) -> TargetOutcome:
    """One target's outcome: ``{"succeeded", "phases", "failedPhase", "code", "reason"}``.

    ``apply``: the agent's result (``deploymentPhases``, ``failurePhase``, ``failed``); ``probe``: the
    probes' result; ``failure``: the result of the task that failed, when one did. ``phases`` lists,
    in the contract's order, only the phases that ran: the agent's, verify (the agent's inspection and
    the probes, with ``detail.probes`` saying whether probes passed, were skipped or none are
    configured), then, for a target that succeeded, evidence (``detail.in``: where its ``deployment.json``
    was kept: the job store and, with ``evidence_written``, the evidence directory) and cleanup. A failed
    target's phases end with the failed one. Entries: ``(name, status, durationMs, detail or None)``.
    """
    stopped = _unanswered(apply, failure)
    if stopped is not None:
        # The connection dropped while the apply ran: it may have finished on the target, or not. Only
        # the phase it started is recorded, and a rollback restores the target once it answers again.
        cause = first_line(stopped.get("msg")) or "no answer"
        return {
            "succeeded": False,
            "phases": [("preflight", "failed", 0, {"outcome": "unknown"})],
            "failedPhase": "preflight",
            "code": UNREACHABLE_CODE,
            "reason": "the target stopped answering while its apply ran (%s): the apply may have finished "
            "there; a rollback restores it once it answers again" % cause,
        }
    agent = _agent_phases(apply)
    probes, probe_reason = probe_status(probe)
    failing = _failed(apply) or _failed(probe) or _failed(failure)
    phase = failed_phase(apply, probe, failure) if failing else None
    out: list[OutcomePhase] = []
    for name in AGENT_PHASES:
        entry = agent.get(name)
        if name == "verify" and (entry is not None or probes != "not_run"):
            status = (entry or {}).get("status", "succeeded")
            if probes == "failed":
                status = "failed"
            detail: dict[str, Any] = {"probes": probes}
            if probe_reason:
                detail["reason"] = probe_reason
            out.append(("verify", status, (entry or {}).get("durationMs", 0) + int(probe_duration_ms or 0), detail))
        elif entry is not None:
            status = "failed" if name == phase else entry["status"]
            out.append((name, status, entry["durationMs"], None))
        elif name == phase:
            out.append((name, "failed", 0, None))
        if name == phase:
            break
    if phase in ("evidence", "cleanup"):
        out.append((phase, "failed", 0, None))
    elif phase is None:
        kept = ["job store", "evidence directory"] if evidence_written else ["job store"]
        out.append(("evidence", "succeeded", 0, {"written": "deployment.json", "in": kept}))
        out.append(("cleanup", "succeeded", 0, None))
    if phase is None:
        return {"succeeded": True, "phases": out, "failedPhase": None, "code": None, "reason": None}
    source = apply if _failed(apply) else probe if _failed(probe) else failure or {}
    default = PROBE_FAILED if source is probe else DEPLOY_FAILED
    return {
        "succeeded": False,
        "phases": out,
        "failedPhase": phase,
        "code": source.get("code") or default,
        "reason": first_line(source.get("msg")) or "the %s phase failed" % phase,
    }


def services_digest(result: TaskResult) -> str | None:
    """The digest over the services a target agent's result (or its evidence) reports, ``None`` without any."""
    digest: str | None = project_digest(result.get("services") or (result.get("evidence") or {}).get("services"))
    return digest


def target_facts(apply: TaskResult | None, files: dict[str, dict[str, Any]]) -> TargetRecord:
    """What the job keeps of a target's apply: the evidence files written for it, the artifact hashes it
    committed, its project, the digest it runs and, only when this job changed the target, the revision
    the apply retained (what a rollback restores). A target the apply did not change (a converged re-run,
    or a failure that changed nothing) is marked ``unchangedByJob``: a rollback of this job leaves it as it
    is, because what it ran before this job is what it runs. A target that stopped answering during its
    apply is ``outcomeUnknown``: it may run this job's release, so a rollback includes it."""
    apply = apply or {}
    facts: TargetRecord = {"evidence": dict(files)}
    if unreachable(apply):
        # what the target runs is unknown: the rollback restores the newest revision that is not this release
        facts["outcomeUnknown"] = True
        return facts
    artifacts = {
        key: apply[key]
        for key in ("versionStickerHash", "composeLockHash", "applyManifestHash", "manifestHash")
        if apply.get(key) and not apply.get("failed")
    }
    if artifacts:
        facts["artifacts"] = artifacts
    if apply.get("projectName"):
        facts["projectName"] = apply["projectName"]
    if apply.get("targetType"):
        facts["targetType"] = apply["targetType"]
    if apply.get("appliedByJobId"):
        facts["appliedByJobId"] = apply["appliedByJobId"]
    if apply.get("claimTakeover"):
        facts["claimTakeover"] = apply["claimTakeover"]
    if apply.get("claimFileRecreated"):
        facts["claimFileRecreated"] = apply["claimFileRecreated"]
    if _ran(apply):
        facts["applyRan"] = True  # the contract's eligibility asks whether the task ran
    if _ran(apply) and not apply.get("changed"):
        facts["unchangedByJob"] = True
    elif apply.get("previousRevisionPath"):
        facts["previousRevisionPath"] = apply["previousRevisionPath"]
    if apply.get("previousContainersRestored"):
        # docker.run failed and put the replaced containers back: nothing of this job runs there.
        facts["restoredInPlace"] = True
    digest = services_digest(apply)
    if digest:
        facts["currentDigest"] = digest
    return facts


def rollback_outcome(result: TaskResult | None, failure: TaskResult | None = None) -> TargetOutcome:
    """One target's rollback: ``{"succeeded", "phases", "reason"}``. The agent's rollback phases as it
    reports them (``not_run`` ones are not recorded); a target counts as restored only when the agent
    says so (``rollbackRestored``) and every service it verified runs its pinned digest."""
    result = result or {}
    stopped = _unanswered(result, failure)
    if stopped is not None:
        cause = first_line(stopped.get("msg")) or "no answer"
        return {
            "succeeded": False,
            "phases": [],
            "reason": "%s: the target did not answer (%s) and may still run the release being rolled back; "
            "roll it back once it answers (the rollback playbook)" % (UNREACHABLE_CODE, cause),
        }
    phases: list[OutcomePhase] = [
        (name, entry["status"], entry["durationMs"], None)
        for name, entry in _agent_phases(result, ROLLBACK_PHASE_NAMES).items()
    ]
    source = _first_failed(result, failure)
    if source is not None:
        return {
            "succeeded": False,
            "phases": phases,
            "reason": "%s: %s"
            % (source.get("code") or ROLLBACK_FAILED, first_line(source.get("msg")) or "rollback failed"),
        }
    services = result.get("services") or []
    verified = (
        result.get("rollbackRestored")
        and services
        and all(s.get("state") == "running" for s in services)
        and all(s.get("imageDigest") for s in services)
    )
    if not verified:
        return {
            "succeeded": False,
            "phases": phases,
            "reason": "%s: the target did not report a verified restoration" % UNVERIFIED_ROLLBACK,
        }
    return {"succeeded": True, "phases": phases, "reason": None}
