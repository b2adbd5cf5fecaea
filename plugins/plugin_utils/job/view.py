# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Views of a persisted job record: the human-readable text of ``job show``, the job's evidence
document, and its ``release.rollback.evidence.v1`` over every target. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord, TargetRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import LEASE_FIELD, TERMINAL, succeeded
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import build_rollback_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import masked

JOB_EVIDENCE_VERSION = "stella.job.evidence.v1"
_VOLATILE = ("owner", "revision", "updatedAt", LEASE_FIELD)
# The phase lists of a target's record: its deployment's and its rollback's.
PhaseList = Literal["phases", "rollbackPhases"]


def closing_line(job_id: str, status: str, reason: str | None) -> str:
    """The one line a closed job ends with: ``job <id> <status>`` and, when there is one, its reason (a
    rolled-back job says why it was rolled back: a rollback is recovery, not success)."""
    return "job %s %s: %s" % (job_id, status, reason) if reason else "job %s %s" % (job_id, status)


def job_evidence(record: JobRecord) -> dict[str, Any]:
    """The job record as evidence, with an ``evidenceDigest`` over everything but volatile fields."""
    body = {k: v for k, v in record.items() if k not in _VOLATILE}
    if "strategyConfig" in body:  # a record kept before new_job masked it (evidence/masking.py)
        body["strategyConfig"] = masked(body["strategyConfig"])
    body["evidenceVersion"] = JOB_EVIDENCE_VERSION
    body["evidenceDigest"] = digest_json({k: v for k, v in body.items() if k not in ("createdAt",)})
    return body


def outcome(record: JobRecord, files: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """What a job publishes for workflows (``set_stats``: AWX passes it to the next node as extra vars):
    the deployment id, status, whether it rolled back, the evidence files with their SHA-256 and the job
    evidence digest. Only facts of the record, which holds no secret (pure)."""
    rollback = record.get("rollback") or {}
    return {
        "deploymentId": record["jobId"],
        "jobIdSource": record.get("jobIdSource"),
        "status": record["status"],
        "succeeded": succeeded(record),
        "code": record.get("code"),
        "reason": record.get("reason"),
        "next": None if succeeded(record) else next_step(record.get("code")),
        "rolledBack": bool(rollback.get("attempted")),
        "rollbackStatus": rollback.get("status"),
        "targets": sorted(record.get("targets") or {}),
        "evidence": {name: dict(entry) for name, entry in sorted((files or {}).items())},
        "evidenceDigest": job_evidence(record)["evidenceDigest"],
    }


def _identity(target: TargetRecord) -> dict[str, Any]:
    return {
        "targetId": target.get("targetId"),
        "targetName": target.get("targetName"),
        "targetType": target.get("targetType"),
    }


def _completed(target: TargetRecord, key: PhaseList = "phases") -> str | None:
    times = [at for p in target.get(key) or [] if (at := p.get("completedAt"))]
    return max(times) if times else None


def script_proof_digest(record: JobRecord) -> str | None:
    """The ``proofDigest`` of the ``scriptGraphProof`` a record carries, ``None`` without one."""
    proof = record.get("scriptGraphProof")
    return proof.get("proofDigest") if isinstance(proof, dict) else None


def rollback_evidence(record: JobRecord, source: JobRecord | None = None) -> dict[str, Any] | None:
    """``release.rollback.evidence.v1`` for a job whose rollback ran (``None`` otherwise). For an
    operator rollback job, ``source`` is the deployment it rolls back: the evidence names that deployment
    (``deploymentId``), its order and failure, and the digest each target ran (``currentDigest``);
    ``rollbackJobId`` is the rollback job."""
    rollback = record.get("rollback") or {}
    if not rollback.get("attempted"):
        return None
    deployed = source or record
    planned = [name for batch in rollback.get("batches") or [] for name in batch]
    module = record.get("application") or "release"
    proof = script_proof_digest(deployed)
    deployment, failure = [], None
    for name in deployed["targetOrder"]:
        target = deployed["targets"][name]
        if target.get("statusBeforeRollback", target["status"]) == "Skipped" or not target.get("phases"):
            continue
        status = (target.get("statusBeforeRollback") or target["status"]).lower()
        deployment.append(
            {
                "moduleName": module,
                "target": _identity(target),
                "batchIndex": target["batch"],
                "startedAt": deployed.get("startedAt"),
                "completedAt": _completed(target),
                "status": status,
                "failureReason": target.get("reason"),
                "scriptProofDigest": proof,
            }
        )
        if status == "failed" and failure is None:
            failure = {"moduleName": module, "target": _identity(target), "failureReason": target.get("reason")}
    order = []
    for index, batch in enumerate(rollback.get("batches") or []):
        for name in batch:
            order.append(_rollback_entry(record, name, index, module, proof))
    targets = [
        dict(
            _identity(record["targets"][n]),
            currentDigest=deployed["targets"][n].get("currentDigest"),
            rollbackDigest=(record["targets"][n].get("rollback") or {}).get("rollbackDigest"),
        )
        for n in planned
    ]
    evidence: dict[str, Any] = build_rollback_evidence(
        targets,
        rollback.get("completedAt") or rollback.get("startedAt"),
        deployment_order=deployment,
        rollback_order=order,
        failure=failure,
        deployment_id=deployed["jobId"],
        rollback_job_id=record["jobId"] if source else record["jobId"] + "-rollback",
    )
    return evidence


def _rollback_entry(record: JobRecord, name: str, index: int, module: Any, proof: str | None) -> dict[str, Any]:
    """One target of the rollback order; ``batchIndex`` is the rollback's own batch (reverse batch order)."""
    rollback = record.get("rollback") or {}
    target = record["targets"][name]
    return {
        "moduleName": module,
        "target": _identity(target),
        "batchIndex": index,
        "startedAt": rollback.get("startedAt"),
        "completedAt": (target.get("rollback") or {}).get("completedAt"),
        "status": "succeeded" if target["status"] == "RolledBack" else "failed",
        "failureReason": target.get("rollbackError"),
        "scriptProofDigest": proof,
    }


def _phase_text(target: TargetRecord, key: PhaseList = "phases") -> str:
    return ", ".join("%s %s %dms" % (p["name"], p["status"], p.get("durationMs") or 0) for p in target.get(key) or [])


def render_text(record: JobRecord) -> str:
    """``job show``: the job, its batches and gates, and every target, in batch order."""
    kind = (
        ("rollback of job %s" % record.get("sourceJobId"))
        if record.get("kind") == "rollback"
        else ("promotion %s" % record.get("promotion"))
    )
    lines = [
        "job %s  %s  (%s)" % (record["jobId"], record["status"], kind),
        "release %s %s %s  strategy %s  created %s"
        % (
            (record.get("release") or {}).get("id"),
            (record.get("release") or {}).get("name"),
            (record.get("release") or {}).get("version"),
            record.get("strategy"),
            record.get("createdAt"),
        ),
    ]
    if record.get("reason"):
        lines.append("reason: %s" % record["reason"])
    if record.get("code") and next_step(record["code"]) and record["status"] not in ("Succeeded", "RolledBack"):
        lines.append("next: %s" % next_step(record["code"]))
    lease = (record.get("options") or {}).get("claimLeaseSeconds")
    if lease and record["status"] not in TERMINAL:
        owner: Mapping[str, Any] = record.get("owner") or {}
        lines.append(
            "claim lease %ss  run: controller %s pid %s  changed %s  renewed %s"
            % (lease, owner.get("host"), owner.get("pid"), record.get("updatedAt"), record.get(LEASE_FIELD) or "-")
        )
    for index, batch in enumerate(record["batches"]):
        gate = next((g for g in record.get("gates") or [] if g["batch"] == index), None)
        verdict = ""
        if gate is not None:
            verdict = "  gate: %s (%s)" % ("proceed" if gate["proceed"] else "stop", gate["reason"])
        lines.append("batch %d: %s%s" % (index + 1, ", ".join(batch), verdict))
        for step in (t for t in record.get("traffic") or [] if t["batch"] == index):
            lines.append("  traffic: " + _traffic_text(step["evidence"], "strategy.traffic."))
        for name in batch:
            target = record["targets"][name]
            lines.append("  %-20s %-10s %s" % (name, target["status"], target.get("projectName") or ""))
            if target.get("phases"):
                lines.append("    phases: " + _phase_text(target))
            if target.get("rollbackPhases"):
                lines.append("    rollback: " + _phase_text(target, "rollbackPhases"))
            if target.get("reason"):
                lines.append("    reason: %s" % target["reason"])
            if target.get("code") and next_step(target["code"]):
                lines.append("    next: %s" % next_step(target["code"]))
            if target.get("rollbackError"):
                lines.append("    rollback error: %s" % target["rollbackError"])
    if record.get("trafficRollback"):
        lines.append(
            "traffic rollback: " + _traffic_text(record["trafficRollback"]["evidence"], "strategy.traffic.rollback.")
        )
    for event in record.get("events") or []:
        lines.append("event %s at %s" % (event["kind"], event["at"]))
    return "\n".join(lines) + "\n"


def _traffic_text(evidence: Mapping[str, Any], prefix: str) -> str:
    """``shifted control 0 / treatment 100 to green (webhook)`` and the like."""
    status = evidence.get(prefix + "status")
    text = "%s %s" % (evidence.get(prefix + "mode"), status)
    if evidence.get(prefix + "controlWeight") is not None:
        text += " control %s / treatment %s" % (
            evidence.get(prefix + "controlWeight"),
            evidence.get(prefix + "treatmentWeight"),
        )
    text += " slot %s" % evidence.get(prefix + "slot")
    if evidence.get(prefix + "adapter"):
        text += " (%s)" % evidence[prefix + "adapter"]
    if evidence.get(prefix + "reason") and status != "shifted":
        text += ": %s" % evidence[prefix + "reason"]
    return text
