# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A deployment job in check mode: a preview. Pure, no I/O.

``ansible-playbook stellaops.runtime.job --check`` plans the job as a real run would (the release
validated, tags resolved, every target's artifacts and batches), then runs each target's preflight and
its apply in check mode, in the job's batches. Nothing is persisted: no job store is opened or created,
no record, evidence, report, traffic shift or rollback. The steps that would record the job answer
from the plan and from the plan and from what each target's recording step was handed (the apply's check-mode result,
and the failure that stopped its play), and ``close`` sums up what each target would do.

``ansible-playbook stellaops.runtime.rollback --check`` reads the job store (the job to roll back and
the projects other jobs hold) and makes the rollback job as a real run would, without storing it; each
target's rollback runs in check mode in the rollback's batches, and ``close`` sums up what each target
would restore (:func:`rollback_start`, :func:`rollback_close`).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import PHASES, ROLLBACK_PHASE_NAMES
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    JobOptions,
    JobRecord,
    PlanOutcome,
    RollbackOrder,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.projects import project_keys
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.target import TaskResult, failed_phase
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import closing_line

PREVIEW_STATUS = "Preview"
# What one target's preview says it would do: ``outcome`` and ``summary``, and what it would change.
Preview = dict[str, Any]
NOT_REACHED: Preview = {"outcome": "not_run", "summary": "not reached (the play did not run on it)"}
# The fact the recording steps (``target``, ``rollback_target``) set on their target in a preview: what
# that target would do, which ``close`` reads (a target that has none was not reached).
PREVIEW_FACT = "stella_job_preview"


def start(
    job_id: str, source: str | None, planned: PlanOutcome, options: JobOptions, unreachable: Mapping[str, str]
) -> dict[str, Any]:
    """The ``start`` outcome of a preview: the plan (job/plan.py ``plan_outcome``), and no record. Under an
    image policy, ``signatures`` is each image's signature verdict (docs/trust.md), as a run would record it."""
    reason = None
    if unreachable:
        reason = "target readiness failed: %s unreachable" % ", ".join(sorted(unreachable))
    signatures = next((p["signatures"] for p in planned["plans"].values() if p.get("signatures")), None)
    extra = {"signatures": signatures} if signatures else {}
    return dict(
        planned,
        **extra,
        jobId=job_id,
        jobIdSource=source,
        checkMode=True,
        proceed=not unreachable,
        status=PREVIEW_STATUS,
        reason=reason,
        code="target_unreachable" if unreachable else None,
        options=options,
        interruptedJobs=[],
        leaseKeeperPid=None,
        unreachable=dict(unreachable),
    )


def passing(step: str, job_id: str, batch: int | None = None) -> dict[str, Any]:
    """The outcome of a recording step in a preview: nothing recorded; gates proceed (a preview visits
    every batch) and no rollback is decided."""
    outcome: dict[str, Any] = {"jobId": job_id, "checkMode": True}
    if step == "gate":
        outcome.update(
            proceed=True, gate={"batch": batch, "proceed": True, "reason": "check mode: every batch is previewed"}
        )
    elif step == "finish":
        outcome.update(
            status=PREVIEW_STATUS,
            reason=None,
            rollbackBatches=[],
            rollbackSerial=[],
            rollbackOrder=[],
            rollbackTargets={},
        )
    elif step in ("traffic", "traffic_rollback"):
        outcome["skipped"] = True
    return outcome


def _failure(result: object, phase: str) -> str | None:
    """``<phase>: <code>: <first line of msg>`` of a failed task result, ``None`` otherwise."""
    if not isinstance(result, dict) or not result.get("failed"):
        return None
    return "%s: %s: %s" % (
        result.get("failurePhase") if result.get("failurePhase") in PHASES + ROLLBACK_PHASE_NAMES else phase,
        result.get("code") or "failed",
        first_line(result.get("msg")) or "failed",
    )


def target_preview(apply: TaskResult | None, failure: TaskResult | None = None) -> Preview:
    """What one target would do: its apply's check-mode result (``apply``) and the failure that stopped
    its play, when one did."""
    apply = apply if isinstance(apply, dict) else {}
    if apply.get("failed") or (failure or {}).get("failed"):
        failed = apply if apply.get("failed") else failure
        return {
            "outcome": "would_fail",
            "summary": "would fail at %s" % _failure(failed, failed_phase(apply, None, failure)),
        }
    if not apply or apply.get("skipped"):
        return {"outcome": "not_run", "summary": "not reached (the apply did not run on it)"}
    files = list(apply.get("wouldChangeFiles") or [])
    containers = list(apply.get("wouldReplaceContainers") or [])
    if not apply.get("changed"):
        by = apply.get("appliedByJobId")
        return {
            "outcome": "converged",
            "summary": "converged: nothing would change%s" % (" (applied by job %s)" % by if by else ""),
        }
    what = ["%s would change" % ", ".join(files)] if files else []
    what += ["containers %s would be replaced" % ", ".join(containers)] if containers else []
    if apply.get("wouldRetainRevision"):
        what.append("the committed release would be retained as a revision")
    return {
        "outcome": "would_deploy",
        "summary": "would deploy (%s)" % ("; ".join(what) or "the release"),
        "wouldChangeFiles": files,
        "wouldReplaceContainers": containers,
        "wouldRetainRevision": bool(apply.get("wouldRetainRevision")),
    }


def close(run: Mapping[str, Any], previews: Mapping[str, Preview]) -> dict[str, Any]:
    """The ``close`` outcome of a preview: per target what it would do, and whether the job would run
    through (every target reached, none would fail). ``previews``: per target that recorded one, what
    its ``target`` step said it would do (:data:`PREVIEW_FACT`)."""
    targets, failing = _per_target(run.get("targetOrder") or [], run.get("batches") or [], previews)
    reason = run.get("reason") or ("%s would not deploy" % ", ".join(failing) if failing else None)
    header = [
        "job %s (check mode: a preview, nothing was recorded or changed)" % run["jobId"],
        "  batches: %s" % " | ".join(", ".join(batch) for batch in run.get("batches") or []),
    ]
    return _closed(
        run,
        header,
        targets,
        [],
        reason,
        not failing and run.get("proceed", False),
        {"jobIdSource": run.get("jobIdSource")},
    )


def _per_target(
    order: Sequence[str], batches: Sequence[Sequence[str]], previews: Mapping[str, Preview]
) -> tuple[dict[str, Preview], list[str]]:
    """``({target: what its preview says it would do, with its batch index}, [the targets that would fail
    or were not reached])`` for the targets of ``order``."""
    targets = {
        name: dict(
            previews.get(name) or NOT_REACHED, batch=next((i for i, batch in enumerate(batches) if name in batch), None)
        )
        for name in order
    }
    return targets, sorted(n for n, t in targets.items() if t["outcome"] in ("would_fail", "not_run"))


def _closed(
    run: Mapping[str, Any],
    header: list[str],
    targets: dict[str, Preview],
    notes: list[str],
    reason: str | None,
    succeeded: bool,
    outcome_extra: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The ``close`` outcome of a preview: the text (``header``, a line per target, ``notes``, the
    reason), the outcome for workflows (with ``outcome_extra``) and ``extra``; nothing recorded."""
    lines = (
        header
        + [
            "  %s (batch %s): %s" % (name, "-" if t["batch"] is None else t["batch"] + 1, t["summary"])
            for name, t in targets.items()
        ]
        + notes
        + (["  %s" % reason] if reason else [])
    )
    outcome = dict(
        outcome_extra or {},
        deploymentId=run["jobId"],
        status=PREVIEW_STATUS,
        succeeded=succeeded,
        checkMode=True,
        code=run.get("code"),
        reason=reason,
        rolledBack=False,
        targets=sorted(targets),
        evidence={},
    )
    return dict(
        extra,
        jobId=run["jobId"],
        checkMode=True,
        status=PREVIEW_STATUS,
        reason=reason,
        succeeded=succeeded,
        msg=closing_line(run["jobId"], PREVIEW_STATUS, reason),
        preview=targets,
        evidenceFiles={},
        outcome=outcome,
        text="\n".join(lines),
    )


def held_projects(record: JobRecord, claims: Mapping[str, str], alive: Container[str]) -> dict[str, str]:
    """``{target: job}`` for the projects of ``record`` that another unfinished job holds, as the store's
    claim would find them. ``claims``: the store's ``{project key: job id}``; ``alive``: the ids of the
    unfinished jobs whose run is not gone (a real run records the others interrupted first)."""
    return {
        name: claims[key]
        for name, key in project_keys(record).items()
        if claims.get(key) in alive and claims[key] != record["jobId"]
    }


def rollback_start(orders: RollbackOrder, record: JobRecord) -> dict[str, Any]:
    """The ``rollback_start`` outcome of a preview: the rollback job's orders (job/rollback.py :func:`rollback_orders`)
    and what the preview shows of it; nothing is stored."""
    rollback = record.get("rollback") or {}
    return dict(
        orders,
        checkMode=True,
        kind="rollback",
        status=PREVIEW_STATUS,
        sourceJobId=record.get("sourceJobId"),
        skipped=dict(rollback.get("skipped") or {}),
    )


def rollback_target_preview(result: TaskResult | None, failure: TaskResult | None = None) -> Preview:
    """What one target's rollback would do: its rollback's check-mode result and the failure that
    stopped its play, when one did."""
    result = result if isinstance(result, dict) else {}
    failed = _failure(result, "rollback") or _failure(failure, "rollback")
    if failed:
        return {"outcome": "would_fail", "summary": "would fail at %s" % failed}
    if not result or result.get("skipped"):
        return dict(NOT_REACHED)
    path = result.get("restoredRevisionPath")
    if not result.get("changed"):
        return {"outcome": "converged", "summary": "converged: the revision at %s already runs" % path}
    return {
        "outcome": "would_restore",
        "summary": "would restore the revision at %s" % path,
        "restoredRevisionPath": path,
        "restoredManifestHash": result.get("restoredManifestHash"),
    }


def rollback_close(run: Mapping[str, Any], previews: Mapping[str, Preview]) -> dict[str, Any]:
    """The ``close`` outcome of a rollback preview: per target what it would restore, and whether the
    rollback would run through. ``run``: :func:`rollback_start`'s outcome."""
    targets, failing = _per_target(run.get("rollbackOrder") or [], run["rollbackBatches"], previews)
    skipped = dict(run.get("skipped") or {})
    header = [
        "rollback job %s of job %s (check mode: a preview, nothing was recorded or changed)"
        % (run["jobId"], run.get("sourceJobId")),
        "  batches, in reverse batch order: %s" % " | ".join(", ".join(b) for b in run["rollbackBatches"]),
    ]
    return _closed(
        run,
        header,
        targets,
        ["  %s: skipped: %s" % item for item in sorted(skipped.items())],
        "%s would not be rolled back" % ", ".join(failing) if failing else None,
        not failing,
        skipped=skipped,
    )
