# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Rollback evidence (``release.rollback.evidence.v1``) and the separate recovery record.

:func:`build_rollback_evidence` records, per rollback target, the digest that was running
(``currentDigest``) and the digest restored by rollback (``rollbackDigest``). Missing proof is
never hidden: a target without both digests has ``hasDigestProof=false`` and a stable
``missingProofReason``, and the top-level ``proofStatus`` is ``incomplete``. The same payload
carries the order proof for multi-module releases (``deploymentOrder``, ``rollbackOrder``,
``failure``). Both digests are RFC 8785 ``sha256:`` digests over the proof fields only, so
replay and audit tooling can detect drift independent of ``createdAt``.

Pure functions, stdlib only; the caller passes ``createdAt``.
"""

from __future__ import annotations


from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DIGEST_RE
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

EVIDENCE_VERSION = "release.rollback.evidence.v1"

COMPLETE = "complete"
INCOMPLETE = "incomplete"

# Stable per-target missingProofReason values (checked in this order).
BOTH_DIGESTS_MISSING = "both_digests_missing"
CURRENT_DIGEST_MISSING = "current_digest_missing"
ROLLBACK_DIGEST_MISSING = "rollback_digest_missing"
CURRENT_DIGEST_INVALID = "current_digest_invalid"
ROLLBACK_DIGEST_INVALID = "rollback_digest_invalid"

# The outcomes of a rollback, as the suffix of a failed job's reason names them (suffixed_reason).
RECOVERY_ROLLED_BACK = "rolled_back"
RECOVERY_ROLLBACK_FAILED = "rollback_failed"
RECOVERY_ROLLBACK_SKIPPED = "rollback_skipped"

INPUT_INVALID = "rollback_evidence_input_invalid"

_IDENTITY = ("targetId", "targetName", "targetType")


def _invalid(detail):
    return StellaError(INPUT_INVALID, "Rollback evidence input invalid: %s" % detail)


def _opt_text(value, what):
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid("%s must be a string" % what)
    return value.strip() or None


def _digest_state(value):
    if value is None or (isinstance(value, str) and not value.strip()):
        return "missing", None
    if isinstance(value, str) and DIGEST_RE.match(value.strip()):
        return "ok", value.strip()
    # Keep what was reported (as text) so the evidence shows why it is not proof.
    return "invalid", value.strip() if isinstance(value, str) else repr(value)


def _identity(source, where):
    if not isinstance(source, dict):
        raise _invalid("%s must be an object" % where)
    identity = {name: _opt_text(source.get(name), "%s %s" % (where, name)) for name in _IDENTITY}
    if not identity["targetId"]:
        raise _invalid("%s targetId must be a non-empty string" % where)
    return identity


def rollback_target(target, index=0):
    """Normalize one rollback target and decide its digest proof."""
    identity = _identity(target, "targets[%d]" % index)
    current_state, current = _digest_state(target.get("currentDigest"))
    rollback_state, rollback = _digest_state(target.get("rollbackDigest"))
    if current_state == "missing" and rollback_state == "missing":
        reason = BOTH_DIGESTS_MISSING
    elif current_state == "missing":
        reason = CURRENT_DIGEST_MISSING
    elif rollback_state == "missing":
        reason = ROLLBACK_DIGEST_MISSING
    elif current_state == "invalid":
        reason = CURRENT_DIGEST_INVALID
    elif rollback_state == "invalid":
        reason = ROLLBACK_DIGEST_INVALID
    else:
        reason = None
    return dict(
        identity,
        currentDigest=current,
        rollbackDigest=rollback,
        hasDigestProof=reason is None,
        missingProofReason=reason,
    )


def _target_sort_key(target):
    return tuple(target[name] or "" for name in _IDENTITY)


def _order_entry(entry, where):
    if not isinstance(entry, dict):
        raise _invalid("%s must be an object" % where)
    module = _opt_text(entry.get("moduleName"), where + " moduleName")
    if not module:
        raise _invalid("%s moduleName must be a non-empty string" % where)
    batch = entry.get("batchIndex")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 0):
        raise _invalid("%s batchIndex must be a non-negative integer" % where)
    target = entry.get("target")
    if target is None:
        target = {name: entry.get(name) for name in _IDENTITY}
    deps = entry.get("dependencies") or []
    if not isinstance(deps, (list, tuple)) or not all(isinstance(d, str) for d in deps):
        raise _invalid("%s dependencies must be a list of module names" % where)
    status = _opt_text(entry.get("status"), where + " status")
    return {
        "moduleName": module,
        "target": _identity(target, where + " target"),
        "batchIndex": batch,
        "startedAt": _opt_text(entry.get("startedAt"), where + " startedAt"),
        "completedAt": _opt_text(entry.get("completedAt"), where + " completedAt"),
        "status": status.lower() if status else None,
        "dependencies": sorted({d.strip() for d in deps if d.strip()}),
        "failureReason": _opt_text(entry.get("failureReason"), where + " failureReason"),
        "scriptProofDigest": _opt_text(entry.get("scriptProofDigest"), where + " scriptProofDigest"),
    }


def _order_sort_key(entry):
    batch = entry["batchIndex"]
    return (
        batch is None,
        batch if batch is not None else 0,
        entry["startedAt"] or "",
        entry["completedAt"] or "",
        entry["moduleName"],
    ) + _target_sort_key(entry["target"])


def task_order(entries, name="order"):
    """Normalize a job's task/module order.

    Entries are ordered by ``(batchIndex, startedAt, completedAt, moduleName, target)`` so the
    order is reproducible from the persisted job, whatever order the tasks were read in.
    Timestamps are compared as text: pass them in one ISO 8601 UTC form.
    """
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise _invalid("%s must be a list" % name)
    normalized = [_order_entry(entry, "%s[%d]" % (name, index)) for index, entry in enumerate(entries)]
    return sorted(normalized, key=_order_sort_key)


def _failure(failure, deployment_order):
    if failure is None:
        failed = [entry for entry in deployment_order if entry["status"] == "failed"]
        if not failed:
            return None
        first = failed[0]
        return {"moduleName": first["moduleName"], "target": first["target"], "failureReason": first["failureReason"]}
    if not isinstance(failure, dict):
        raise _invalid("failure must be an object")
    module = _opt_text(failure.get("moduleName"), "failure moduleName")
    if not module:
        raise _invalid("failure moduleName must be a non-empty string")
    target = failure.get("target")
    return {
        "moduleName": module,
        "target": _identity(target, "failure target") if target is not None else None,
        "failureReason": _opt_text(failure.get("failureReason"), "failure failureReason"),
    }


def proof_fields(evidence):
    """The fields ``proofDigest`` covers."""
    return {name: evidence[name] for name in ("evidenceVersion", "targets", "proofStatus")}


def order_proof_fields(evidence):
    """The fields ``orderProofDigest`` covers."""
    return {
        name: evidence[name]
        for name in ("evidenceVersion", "deploymentOrder", "rollbackOrder", "failure", "orderProofStatus")
    }


def build_rollback_evidence(
    targets,
    created_at,
    deployment_order=None,
    rollback_order=None,
    failure=None,
    deployment_id=None,
    rollback_job_id=None,
):
    """Build the ``release.rollback.evidence.v1`` payload.

    ``targets``: ``[{targetId, targetName?, targetType?, currentDigest?, rollbackDigest?}]``.
    ``deployment_order`` / ``rollback_order``: task entries ``{moduleName, target: {targetId,
    targetName, targetType} (or those keys inline), batchIndex, startedAt, completedAt, status,
    dependencies, failureReason, scriptProofDigest}``. ``failure``: ``{moduleName, target?,
    failureReason?}``; when omitted, the first ``failed`` entry of the deployment order.
    ``created_at`` and the ids are recorded but never digested.
    """
    if not isinstance(targets, (list, tuple)):
        raise _invalid("targets must be a list")
    if not isinstance(created_at, str) or not created_at.strip():
        raise _invalid("createdAt must be a non-empty string")
    normalized = sorted((rollback_target(t, i) for i, t in enumerate(targets)), key=_target_sort_key)
    seen = set()
    for target in normalized:
        if target["targetId"] in seen:
            raise _invalid("duplicate rollback target %r" % target["targetId"])
        seen.add(target["targetId"])
    proof_status = COMPLETE if normalized and all(t["hasDigestProof"] for t in normalized) else INCOMPLETE

    deployment = task_order(deployment_order, "deploymentOrder")
    rollback = task_order(rollback_order, "rollbackOrder")
    failed = _failure(failure, deployment)
    order_status = COMPLETE if deployment and rollback and failed else INCOMPLETE

    evidence = {
        "evidenceVersion": EVIDENCE_VERSION,
        "createdAt": created_at.strip(),
        "targets": normalized,
        "proofStatus": proof_status,
        "deploymentOrder": deployment,
        "rollbackOrder": rollback,
        "failure": failed,
        "orderProofStatus": order_status,
    }
    if deployment_id is not None:
        evidence["deploymentId"] = deployment_id
    if rollback_job_id is not None:
        evidence["rollbackJobId"] = rollback_job_id
    evidence["proofDigest"] = digest_json(proof_fields(evidence))
    evidence["orderProofDigest"] = digest_json(order_proof_fields(evidence))
    return evidence


def verify_rollback_evidence(evidence):
    """Return the list of digest fields whose stored value no longer matches (drift check)."""
    drift = []
    if evidence.get("proofDigest") != digest_json(proof_fields(evidence)):
        drift.append("proofDigest")
    if evidence.get("orderProofDigest") != digest_json(order_proof_fields(evidence)):
        drift.append("orderProofDigest")
    return drift


_SUFFIX = {
    RECOVERY_ROLLED_BACK: " (auto-rollback restored the retained previous revision)",
    RECOVERY_ROLLBACK_SKIPPED: " (auto-rollback skipped: %s)",
    RECOVERY_ROLLBACK_FAILED: "; auto-rollback failed: %s",
}


def suffixed_reason(failure_reason, recovery_status, detail=None):
    """The original failure reason with the contract's automatic-rollback suffix for ``recovery_status``."""
    suffix = _SUFFIX[recovery_status]
    return failure_reason.strip() + (suffix % detail if "%s" in suffix else suffix)


def projection_keys(evidence, evidence_id=None):
    """The ``rollback.evidence.*`` keys a deployment projection carries in its strategy evidence, so
    tooling can navigate from a rollback result to the stored evidence packet (pure)."""
    keys = {
        "rollback.evidence.hash": digest_json(evidence),
        "rollback.evidence.proofDigest": evidence["proofDigest"],
        "rollback.evidence.proofStatus": evidence["proofStatus"],
        "rollback.evidence.orderProofDigest": evidence["orderProofDigest"],
        "rollback.evidence.orderProofStatus": evidence["orderProofStatus"],
    }
    if evidence_id is not None:
        keys["rollback.evidence.id"] = evidence_id
    return keys
