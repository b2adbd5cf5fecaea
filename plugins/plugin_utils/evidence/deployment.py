# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Deployment completion evidence (contract: "Success Boundary", "Completion Evidence").

:func:`deployment_record` turns what the controller holds after one target's run (the plan, the
preflight, the target agent's apply result and the probe result) into one record that says whether
the deployment may be reported successful, and why not. Pure; ``createdAt`` is passed in and is not
covered by ``evidenceDigest``, so the same run replayed gives the same digest.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import redact_url

DEPLOYMENT_EVIDENCE_VERSION = "stella.deployment.evidence.v1"
TARGET_KEYS = ("targetId", "targetName", "targetType", "targetEndpoint", "targetExecutionMode")
ARTIFACT_KEYS = (
    "projectDirectory",
    "composePath",
    "composeLockPath",
    "composeLockHash",
    "versionStickerPath",
    "versionStickerHash",
    "applyManifestPath",
    "applyManifestHash",
    "manifestHash",
    "artifactHashes",
)
CONTAINER_KEYS = ("service", "containerId", "containerName", "state", "health", "image", "imageDigest", "labels")
PHASE_KEYS = ("deploymentPhases", "completedPhases", "phaseDurationsMs", "failurePhase", "hookResults")


def _failed(result):
    return bool(result) and bool(result.get("failed"))


def _pick(source, keys):
    return {key: source[key] for key in keys if source and source.get(key) is not None}


def _target(plan, apply):
    target = _pick(apply, TARGET_KEYS)
    if not target and plan:
        ident = plan.get("target") or {}
        target = {
            "targetId": ident.get("id"),
            "targetName": ident.get("name"),
            "targetType": ident.get("type"),
            "targetEndpoint": redact_url(ident.get("endpoint")),
            "targetExecutionMode": ident.get("executionMode"),
        }
    return target


def _probe_verified(probe):
    """``True`` only when probes ran and passed; ``None`` when nothing was probed (no probe task, the
    ``waitForHealthCheck=false`` kill switch, no ``healthProbe.*`` keys), so evidence never implies
    that the service was verified."""
    if probe is None:
        return None
    status = (probe.get("evidence") or {}).get("healthProbe.status")
    if _failed(probe) or status == "failed":
        return False
    return True if status == "passed" else None


def success_boundary(preflight, plan, apply, probe):
    """The contract's five success conditions, each as a boolean (``None``: not known)."""
    services = (apply or {}).get("services") or []
    completed = set((apply or {}).get("completedPhases") or [])
    return {
        "preflightPassed": None if preflight is None else not _failed(preflight),
        "imagesPinnedAndPulled": bool(apply)
        and not _failed(apply)
        and bool(services)
        and all(s.get("imageDigest") for s in services),
        "workloadRunning": bool(services) and all(s.get("state") == "running" for s in services),
        "runtimeVerified": bool(apply)
        and not _failed(apply)
        and bool(completed & {"inspect_services", "inspect_container"}),
        "stickerRecorded": bool(apply) and not _failed(apply) and bool(apply.get("versionStickerHash")),
        "serviceHealthVerified": _probe_verified(probe),
    }


def _failure(preflight, apply, probe):
    for stage, result in (("preflight", preflight), ("deploy", apply), ("verify", probe)):
        if _failed(result):
            reason = result.get("msg") or "failed"
            return {
                "stage": stage,
                "code": result.get("code")
                or (
                    "preflight_failed"
                    if stage == "preflight"
                    else "health_probe_failed"
                    if stage == "verify"
                    else "deploy_failed"
                ),
                "reason": reason.splitlines()[0] if reason else reason,
                "failurePhase": result.get("failurePhase"),
            }
    return None


def preflight_evidence(apply):
    """The preflight that ran first inside the apply task (its ``preflight`` option), shaped as the
    preflight's own result (``failed``, ``preflight``, ``failures``, and the first failure's ``code``
    and ``msg``); ``None`` when the apply ran no preflight."""
    if not apply or apply.get("preflight") is None:
        return None
    failures = list(apply.get("preflightFailures") or [])
    evidence = {"failed": bool(failures), "preflight": apply["preflight"], "failures": failures}
    if failures:
        evidence.update(code=failures[0].get("code"), msg=failures[0].get("reason"))
    return evidence


def deployment_record(plan, apply, created_at, preflight=None, probe=None, deployment_id=None):
    """Build a ``stella.deployment.evidence.v1`` record for one target."""
    plan = plan or {}
    apply = apply or {}
    boundary = success_boundary(preflight, plan, apply, probe)
    failure = _failure(preflight, apply, probe)
    # The success boundary starts with a passed preflight on the target: without one, no success.
    succeeded = (
        failure is None
        and boundary["preflightPassed"] is True
        and all(value is not False for value in boundary.values())
    )
    services = apply.get("services") or []
    record = {
        "evidenceVersion": DEPLOYMENT_EVIDENCE_VERSION,
        "deploymentId": deployment_id or plan.get("jobId"),
        "taskId": plan.get("taskId"),
        "release": plan.get("release"),
        "target": _target(plan, apply),
        "projectName": apply.get("projectName") or plan.get("projectName"),
        "slot": apply.get("slot") or plan.get("slot"),
        "trafficRole": apply.get("trafficRole") or plan.get("trafficRole"),
        "runtime": apply.get("runtime") or ((preflight or {}).get("preflight") or {}).get("docker"),
        "services": sorted({s.get("service") for s in services if s.get("service")}),
        "containers": [{key: s.get(key) for key in CONTAINER_KEYS} for s in services],
        "images": plan.get("components"),
        "artifacts": _pick(apply, ARTIFACT_KEYS),
        "phases": _pick(apply, PHASE_KEYS),
        "health": {
            "containers": {s.get("containerName"): s.get("health") for s in services},
            "probe": (probe or {}).get("evidence"),
        },
        "rollbackBaseline": apply.get("previousRevisionPath"),
        # A run that found the release already running and verified it changes nothing; the sticker
        # it kept names the job that applied the release.
        "changed": bool(apply.get("changed")),
        "appliedByJobId": apply.get("appliedByJobId")
        or (plan.get("jobId") if apply.get("versionStickerHash") and not _failed(apply) else None),
        "preflight": None
        if preflight is None
        else {
            "status": "failed" if _failed(preflight) else "passed",
            "failures": preflight.get("failures") or [],
        },
        "successBoundary": boundary,
        "status": "succeeded" if succeeded else "failed",
        "failure": failure,
    }
    if apply.get("appliedBecause"):
        # why the apply ran: nothing committed yet, another release, or this one not verified at first look
        record["appliedBecause"] = list(apply["appliedBecause"])
    if apply.get("startingWaitMs"):
        # DockerHost: how long a container of the release, still starting at the first look, was waited for
        record["startingWaitMs"] = dict(apply["startingWaitMs"])
    if plan.get("signatures"):
        # the image policy's verdict of each image (docs/trust.md): key path and fingerprint, never the key
        record["signatures"] = plan["signatures"]
    if plan.get("scriptGraphProof"):
        record["scriptGraphProofDigest"] = plan["scriptGraphProof"]["proofDigest"]
    record["evidenceDigest"] = digest_json(record)
    record["createdAt"] = created_at
    return record


def verify_record(record):
    """True when ``evidenceDigest`` still matches the record (``createdAt`` excluded)."""
    body = {k: v for k, v in record.items() if k not in ("evidenceDigest", "createdAt")}
    return digest_json(body) == record.get("evidenceDigest")


def project_digest(services):
    """One digest for what a target runs: the image digest of a single service, or, for several
    services, ``digest_json`` over the ``{service: image digest}`` map (``None`` if any is unknown)."""
    digests = {}
    for entry in services or []:
        if not entry.get("imageDigest"):
            return None
        digests[entry["service"]] = entry["imageDigest"]
    if not digests:
        return None
    if len(digests) == 1:
        return next(iter(digests.values()))
    return digest_json(digests)
