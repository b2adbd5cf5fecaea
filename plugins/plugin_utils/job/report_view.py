# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the evidence report of a deployment job shows (docs/report.md): the data of its page. Pure, no I/O.

:func:`report_view` turns the job record (and, when known, the job's evidence files, its
``release.rollback.evidence.v1`` and each target's ``deployment.json``) into the values the page's template
(:mod:`.report`) lays out: the release, the batch plan and its gates, each target's phases, probes and
hashes, the traffic steps, the rollback and its proof, and the evidence files with relative links. Values
are raw here; the page escapes them and masks the secret ones.
"""

from __future__ import annotations

import json
import posixpath
import urllib.parse
from collections.abc import Container, Mapping
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import masked
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import verify_rollback_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord, TargetRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import (
    PhaseList,
    job_evidence,
    script_proof_digest,
)

# Banner colours: the job's status at a glance.
STATUS_COLOURS = {
    "Succeeded": "#1a7f37",
    "RolledBack": "#b45309",
    "Failed": "#b91c1c",
    "RollingBack": "#6d28d9",
    "Running": "#1d4ed8",
    "Pending": "#57606a",
}
BADGES = {
    "succeeded": "ok",
    "passed": "ok",
    "shifted": "ok",
    "restored": "ok",
    "complete": "ok",
    "proceed": "ok",
    "failed": "bad",
    "stop": "bad",
    "incomplete": "bad",
    "rolledback": "warn",
    "rollingback": "warn",
    "running": "info",
    "pending": "muted",
    "skipped": "muted",
    "not_shifted": "muted",
    "not_run": "muted",
}
ARTIFACT_KEYS = ("manifestHash", "composeLockHash", "versionStickerHash", "applyManifestHash", "currentDigest")
PHASE_COLOURS = {"ok": "#2da44e", "bad": "#cf222e", "muted": "#afb8c1", "warn": "#d97706", "info": "#218bff"}


def _flat(value: Mapping[str, Any] | None, prefix: str = "") -> list[tuple[str, str]]:
    """``[(dotted key, text)]`` of a mapping (pure)."""
    rows = []
    for key, item in sorted((value or {}).items()):
        name = "%s%s" % (prefix, key)
        if isinstance(item, dict) and item:
            rows.extend(_flat(item, name + "."))
        else:
            rows.append((name, item if isinstance(item, str) else json.dumps(item, sort_keys=True)))
    return rows


def _badge(status: object) -> str:
    return BADGES.get(str(status or "").lower().replace("-", "_"), "muted")


def _yes(value: object) -> str | None:
    return None if value is None else ("yes" if value else "no")


def _failure_text(failure: Mapping[str, Any] | None) -> str | None:
    if not failure:
        return None
    target = failure.get("target") or {}
    return "%s: %s" % (
        target.get("targetName") or target.get("targetId") or failure.get("moduleName"),
        failure.get("failureReason"),
    )


def _duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return "%d ms" % ms if ms < 1000 else "%.1f s" % (ms / 1000.0)


def _href(path: str | None, base: str | None) -> str | None:
    """A relative link to ``path`` from ``base`` (the report's directory), or ``None``."""
    if not path:
        return None
    if base is None:
        return None if posixpath.isabs(path) else urllib.parse.quote(path)
    return urllib.parse.quote(posixpath.relpath(path, base) if posixpath.isabs(path) else path)


def _document_href(document: str | None, job_id: str) -> str | None:
    """A link to a document of the job store from the job's report, as the two lie in an evidence
    directory (``stella evidence JOB --output DIR`` writes that tree), or ``None``."""
    if not document:
        return None
    return urllib.parse.quote(posixpath.relpath(document, job_evidence_dir("", job_id)))


def _phases(target: TargetRecord, key: PhaseList) -> dict[str, Any]:
    phases = target.get(key) or []
    total = sum(p.get("durationMs") or 0 for p in phases)
    rows = []
    for phase in phases:
        ms = phase.get("durationMs") or 0
        width = (100.0 * ms / total) if total else 100.0 / len(phases)
        rows.append(
            {
                "name": phase.get("name"),
                "status": phase.get("status"),
                "badge": _badge(phase.get("status")),
                "duration": _duration(ms),
                "completedAt": phase.get("completedAt"),
                "width": "%.2f%%" % max(width, 0.8),
                "colour": PHASE_COLOURS[_badge(phase.get("status"))],
            }
        )
    return {"rows": rows, "total": _duration(total) if phases else ""}


def _traffic(evidence: Mapping[str, Any] | None, prefix: str) -> dict[str, Any]:
    evidence = evidence or {}

    def get(key: str) -> Any:
        return evidence.get(prefix + key)

    known = ("mode", "status", "shifted", "adapter", "slot", "controlWeight", "treatmentWeight", "reason")
    extra = [
        (k[len(prefix) :], v)
        for k, v in _flat(evidence)
        if k.startswith(prefix) and k[len(prefix) :] not in known and not k[len(prefix) :].startswith("rollback.")
    ]
    return {
        "mode": get("mode"),
        "status": get("status"),
        "badge": _badge(get("status")),
        "adapter": get("adapter"),
        "shifted": get("shifted"),
        "slot": get("slot"),
        "control": get("controlWeight"),
        "treatment": get("treatmentWeight"),
        "reason": get("reason"),
        "extra": extra,
    }


def _hashes(target: TargetRecord, deployment: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``[(what, value)]``: the artifact hashes of one target, from the record and its deployment.json."""
    rows: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(what: str, value: str | None) -> None:
        if value and (what, value) not in seen:
            seen.add((what, value))
            rows.append((what, value))

    fields: Mapping[str, Any] = target  # the artifact keys, as the record and deployment.json name them
    artifacts = dict((deployment or {}).get("artifacts") or {})
    for key in ARTIFACT_KEYS:
        add(key, fields.get(key) or artifacts.get(key))
    add("rollbackDigest", (target.get("rollback") or {}).get("rollbackDigest"))
    for file_name, digest in sorted(
        dict(artifacts.get("artifactHashes") or {}, **(fields.get("artifactHashes") or {})).items()
    ):
        add(file_name, digest)
    for container in (deployment or {}).get("containers") or []:
        add("image %s" % container.get("service"), container.get("imageDigest"))
    if deployment and deployment.get("evidenceDigest"):
        add("deployment.json evidenceDigest", deployment["evidenceDigest"])
    return rows


def _corrupt(entry: Mapping[str, Any], corrupt: Container[str]) -> bool:
    """Whether the evidence file ``entry`` (``{"path", "document", "corrupt"}``) failed its check."""
    return bool(entry.get("corrupt") or any(entry.get(k) and entry[k] in corrupt for k in ("path", "document")))


def _target_view(
    record: JobRecord, name: str, deployment: Mapping[str, Any] | None, base: str | None, corrupt: Container[str]
) -> dict[str, Any]:
    target = record["targets"][name]
    probe = ((deployment or {}).get("health") or {}).get("probe") or {}
    files = [
        {
            "name": file_name,
            "sha256": entry.get("sha256"),
            "path": entry.get("path"),
            "href": _href(entry.get("path"), base) or _document_href(entry.get("document"), record["jobId"]),
            "corrupt": _corrupt(entry, corrupt),
        }
        for file_name, entry in sorted((target.get("evidence") or {}).items())
    ]
    rollback = target.get("rollback") or {}
    verify = next((p.get("status") for p in target.get("phases") or [] if p.get("name") == "verify"), None)
    return {
        "name": name,
        "status": target.get("status"),
        "badge": _badge(target.get("status")),
        "before": target.get("statusBeforeRollback"),
        "batch": (target.get("batch") or 0) + 1,
        "id": target.get("targetId"),
        "type": target.get("targetType"),
        "endpoint": target.get("endpoint"),
        "project": target.get("projectName"),
        "slot": target.get("slot"),
        "reason": target.get("reason"),
        "code": target.get("code"),
        "rollbackError": target.get("rollbackError"),
        "rollbackSkipped": target.get("rollbackSkipped"),
        "restored": rollback.get("restoredRevisionPath"),
        "previous": target.get("previousRevisionPath"),
        "appliedBy": target.get("appliedByJobId"),
        "phases": _phases(target, "phases"),
        "rollbackPhases": _phases(target, "rollbackPhases"),
        "probe": {
            "status": probe.get("healthProbe.status"),
            "badge": _badge(probe.get("healthProbe.status")),
            "rows": [(k, v) for k, v in _flat(probe) if k != "healthProbe.status"],
        }
        if probe
        else None,
        "verify": verify,
        "verifyBadge": _badge(verify),
        "hashes": _hashes(target, deployment),
        "files": files,
    }


def _rollback_view(record: JobRecord, evidence: Mapping[str, Any] | None) -> dict[str, Any]:
    rollback = record.get("rollback") or {}
    order = " \u2192 ".join(", ".join(batch) for batch in rollback.get("batches") or [])
    view: dict[str, Any] = {
        "status": rollback.get("status"),
        "badge": _badge(rollback.get("status")),
        "present": bool(rollback),
        "rows": [
            ("Attempted", _yes(rollback.get("attempted"))),
            ("Automatic", _yes(rollback.get("automatic"))),
            ("Skipped because", rollback.get("skipReason")),
            ("Setting from", rollback.get("source")),
            ("Reason", rollback.get("reason")),
            ("Order (reverse batch order)", order),
            ("Started", rollback.get("startedAt")),
            ("Completed", rollback.get("completedAt")),
        ],
        "skipped": sorted((rollback.get("skipped") or {}).items()),
        "proof": None,
    }
    if evidence:
        drift = verify_rollback_evidence(evidence)
        view["proof"] = {
            "proofStatus": evidence.get("proofStatus"),
            "proofBadge": _badge(evidence.get("proofStatus")),
            "proofDigest": evidence.get("proofDigest"),
            "orderProofStatus": evidence.get("orderProofStatus"),
            "orderBadge": _badge(evidence.get("orderProofStatus")),
            "orderProofDigest": evidence.get("orderProofDigest"),
            "drift": ", ".join(drift) if drift else None,
            "failure": _failure_text(evidence.get("failure")),
            "targets": [
                {
                    "name": t.get("targetName") or t.get("targetId"),
                    "id": t.get("targetId"),
                    "hasDigestProof": t.get("hasDigestProof"),
                    "missing": t.get("missingProofReason"),
                    "current": t.get("currentDigest"),
                    "rollback": t.get("rollbackDigest"),
                }
                for t in evidence.get("targets") or []
            ],
            "orders": [
                (
                    key,
                    [
                        (
                            e.get("batchIndex"),
                            (e.get("target") or {}).get("targetName"),
                            e.get("status"),
                            _badge(e.get("status")),
                        )
                        for e in evidence.get(key) or []
                    ],
                )
                for key in ("deploymentOrder", "rollbackOrder")
            ],
        }
    return view


def report_view(
    record: JobRecord,
    evidence_files: Mapping[str, Mapping[str, Any]] | None,
    rollback: Mapping[str, Any] | None,
    deployments: Mapping[str, Mapping[str, Any]] | None,
    base: str | None,
    corrupt: set[str],
) -> dict[str, Any]:
    release = record.get("release") or {}
    gates = {g.get("batch"): g for g in record.get("gates") or []}
    batches = []
    for index, batch in enumerate(record.get("batches") or []):
        gate = gates.get(index)
        verdict = None if gate is None else ("proceed" if gate.get("proceed") else "stop")
        decided: Mapping[str, Any] = gate or {}
        batches.append(
            {
                "number": index + 1,
                "targets": batch,
                "gate": verdict,
                "badge": _badge(verdict),
                "reason": decided.get("reason"),
                "at": decided.get("at"),
                "failed": ", ".join(decided.get("failedTargets") or []),
            }
        )
    traffic = [
        dict(
            _traffic(t.get("evidence"), "strategy.traffic."),
            batch=(t.get("batch") or 0) + 1,
            at=t.get("at"),
            failure=t.get("failure"),
        )
        for t in record.get("traffic") or []
    ]
    back = record.get("trafficRollback")
    if back:
        traffic.append(
            dict(
                _traffic(back.get("evidence"), "strategy.traffic.rollback."),
                batch="rollback",
                at=back.get("at"),
                failure=back.get("failure"),
            )
        )
    targets = [
        _target_view(record, name, (deployments or {}).get(name), base, corrupt)
        for name in record.get("targetOrder") or sorted(record.get("targets") or {})
    ]
    files = [
        {
            "name": name,
            "sha256": entry.get("sha256"),
            "href": _href(entry.get("path") or name, base) or urllib.parse.quote(name),
            "corrupt": _corrupt(entry, corrupt),
        }
        for name, entry in sorted((evidence_files or {}).items())
    ]
    job_hashes = [("job evidenceDigest", job_evidence(record)["evidenceDigest"])]
    graph_proof = script_proof_digest(record)
    if graph_proof:
        job_hashes.append(("scriptGraphProof proofDigest", graph_proof))
    if rollback:
        job_hashes += [
            ("rollback proofDigest", rollback.get("proofDigest")),
            ("rollback orderProofDigest", rollback.get("orderProofDigest")),
        ]
    job_hashes += [
        ("image %s" % ref, (info or {}).get("digest")) for ref, info in sorted((record.get("resolution") or {}).items())
    ]
    job_hashes += [("%s sha256" % f["name"], f["sha256"]) for f in files]
    status = record.get("status")
    return {
        "job": record.get("jobId"),
        "status": status,
        "statusClass": "st-" + (status if status in STATUS_COLOURS else "other").lower(),
        "promotion": record.get("promotion"),
        "reason": record.get("reason"),
        "code": record.get("code"),
        "kind": record.get("kind"),
        "strategy": record.get("strategy"),
        "sourceJob": record.get("sourceJobId"),
        "summary": [
            ("Release id", release.get("id")),
            ("Release", " ".join(str(release[k]) for k in ("name", "version") if release.get(k))),
            ("Tenant", record.get("tenant")),
            ("Environment", record.get("environment")),
            ("Application", record.get("application")),
            ("Strategy", record.get("strategy")),
            ("Job kind", record.get("kind")),
            ("Job id source", record.get("jobIdSource")),
            ("Created", record.get("createdAt")),
            ("Started", record.get("startedAt")),
            ("Completed", record.get("completedAt")),
            ("Record revision", record.get("revision")),
        ],
        "config": _flat(masked(record.get("strategyConfig") or {})),
        "options": _flat(masked(record.get("options") or {})),
        "batches": batches,
        "targets": targets,
        "traffic": traffic,
        "rollback": _rollback_view(record, rollback),
        "events": [
            (e.get("kind"), e.get("at"), ", ".join(e.get("targets") or []) or e.get("error"))
            for e in record.get("events") or []
        ],
        "signatures": [
            {
                "reference": ref,
                "status": (verdict or {}).get("status"),
                "badge": _badge("succeeded" if (verdict or {}).get("status") == "verified" else "skipped"),
                "image": (verdict or {}).get("image"),
                "key": " ".join(
                    str(v) for v in ((verdict or {}).get("keyFingerprint"), (verdict or {}).get("keyPath")) if v
                ),
                "source": (verdict or {}).get("source"),
                "signatureDigest": (verdict or {}).get("signatureDigest"),
                "identity": (verdict or {}).get("identity"),
            }
            for ref, verdict in sorted((record.get("signatures") or {}).items())
        ],
        "files": files,
        "jobHashes": [(k, v) for k, v in job_hashes if v],
        "corrupt": sorted(corrupt),
        "colours": STATUS_COLOURS,
        "phaseColours": PHASE_COLOURS,
    }
