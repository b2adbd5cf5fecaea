# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``deployments`` read model: a projection of the persisted typed job, never a state machine.

- A new job is projected ``Pending``, from its first persisted revision.
- While the job runs, :func:`refresh` mirrors what the persisted job shows (its status and, per
  target, status, last recorded phase and progress) only when that differs from the projection; a
  terminal job status is never mirrored by a refresh.
- :func:`terminal` is the separate last step, after the job's terminal evidence exists: it carries
  the terminal status and the strategy evidence, with the ``rollback.evidence.*`` keys.
- An operator rollback of a finished deployment makes its record ``RollingBack`` when it starts: the
  refresh of that revision projects it ``RollingBack`` (no longer terminal); :func:`recovery` writes its
  end.

Progress is the share of the nine phases the job has persisted for a target, never an estimate. Where
the contract names a spelling, the projection uses it: ``deploymentStatus`` (``rolling_back``) next to
``status`` (``RollingBack``), and each target's ``error`` next to its ``reason``; ``status`` and
``reason`` stay for one release. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import PHASES
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import projection_keys
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord, TargetRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic.strategy import (
    PREFIX as TRAFFIC_PREFIX,
    ROLLBACK_PREFIX as TRAFFIC_ROLLBACK_PREFIX,
)

TERMINAL = ("Succeeded", "Failed", "RolledBack")
PROJECTION_VERSION = "stella.deployment.projection.v1"
# The contract's spelling of each job status (``deploymentStatus``); ``status`` keeps the job's, for one release.
DEPLOYMENT_STATUS = {
    "Pending": "pending",
    "Running": "running",
    "Succeeded": "succeeded",
    "Failed": "failed",
    "RollingBack": "rolling_back",
    "RolledBack": "rolled_back",
}
# A projection (the ``deployments`` row's document), and the strategy evidence it carries: free-form.
Projection = dict[str, Any]


def target_view(target: TargetRecord) -> dict[str, Any]:
    """One target's view: ``error`` is the contract's ``targets[].error``; ``reason`` (the same) is kept for
    one release."""
    recorded = [p["name"] for p in target.get("phases") or [] if p.get("name") in PHASES]
    return {
        "status": target.get("status"),
        "batch": target.get("batch"),
        "phase": recorded[-1] if recorded else None,
        "progress": int(100 * len(set(recorded)) / len(PHASES)),
        "code": target.get("code"),
        "error": target.get("reason"),
        "reason": target.get("reason"),
    }


def observe(record: JobRecord) -> dict[str, Any]:
    """What the projection mirrors of a persisted job record."""
    targets = record.get("targets") or {}
    return {
        "status": record["status"],
        "targets": {name: target_view(targets[name]) for name in record.get("targetOrder") or sorted(targets)},
    }


def _spelled(projection: Mapping[str, Any]) -> Projection:
    """``projection`` with ``deploymentStatus``: its status as the contract spells it (``rolling_back``)."""
    return dict(projection, deploymentStatus=DEPLOYMENT_STATUS.get(projection["status"]))


def initial(record: JobRecord) -> Projection:
    """The projection of a newly persisted job (which is ``Pending``)."""
    if record["status"] != "Pending":
        raise ValueError("a new deployment is projected from its pending job, not %s" % record["status"])
    return _spelled(
        dict(
            observe(record),
            deploymentId=record["jobId"],
            jobRevision=record.get("revision", 1),
            terminal=False,
            strategyEvidence=None,
        )
    )


def refresh(projection: Projection | None, record: JobRecord) -> Projection | None:
    """The new projection after ``record`` was persisted, or ``None`` when nothing it mirrors changed.
    A terminal job status waits for :func:`terminal`; the per-target view is still mirrored. A finished
    deployment that an operator rollback started rolling back (its record now ``RollingBack``) is projected
    ``RollingBack`` again, no longer terminal, until :func:`recovery`."""
    if projection is None:
        return None
    if projection.get("terminal"):
        if record["status"] != "RollingBack" or record["revision"] <= projection["jobRevision"]:
            return None
        return _spelled(dict(projection, jobRevision=record["revision"], terminal=False, **observe(record)))
    seen = observe(record)
    if seen["status"] in TERMINAL:
        seen["status"] = projection["status"]
    # a view that did not change stays the projection's own object: the store writes the changed ones only
    old = projection["targets"]
    seen["targets"] = {name: old[name] if old.get(name) == view else view for name, view in seen["targets"].items()}
    if (
        seen["status"] == projection["status"]
        and seen["targets"].keys() == old.keys()
        and all(view is old[name] for name, view in seen["targets"].items())
    ):
        return None
    return _spelled(dict(projection, jobRevision=record["revision"], **seen))


def traffic_keys(record: JobRecord) -> dict[str, Any]:
    """The contract's ``strategy.traffic.*`` keys: what the job's last traffic step recorded (the traffic
    as the job left it), and the ``strategy.traffic.rollback.*`` keys of its traffic rollback. Every
    step's evidence stays in the record's ``traffic[]``; a job without traffic steps has none."""
    keys: dict[str, Any] = {}
    steps = record.get("traffic") or []
    if steps:
        keys.update((k, v) for k, v in (steps[-1].get("evidence") or {}).items() if k.startswith(TRAFFIC_PREFIX))
        keys[TRAFFIC_PREFIX + "batch"] = steps[-1].get("batch")
    keys.update(_traffic_rollback_keys(record))
    return keys


def _traffic_rollback_keys(record: JobRecord) -> dict[str, Any]:
    """The ``strategy.traffic.rollback.*`` keys of the job's traffic rollback (none without one)."""
    back: Mapping[str, Any] = record.get("trafficRollback") or {}
    return {k: v for k, v in (back.get("evidence") or {}).items() if k.startswith(TRAFFIC_ROLLBACK_PREFIX)}


def strategy_evidence(
    record: JobRecord,
    rollback_evidence: Mapping[str, Any] | None = None,
    evidence_id: str | None = None,
    files: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The terminal strategy evidence: the strategy, its batches and gates, the ``strategy.traffic.*``
    keys (:func:`traffic_keys`), and for a job whose rollback ran, the ``rollback.evidence.*`` keys.
    ``rollback.evidence.id`` names the stored rollback evidence packet, so it is projected only with
    ``evidence_id``: when that packet was written."""
    rollback = record.get("rollback") or {}
    evidence = {
        "strategy": record.get("strategy"),
        "batches": record.get("batches"),
        "gates": [
            {"batch": g["batch"], "proceed": g["proceed"], "reason": g.get("reason")} for g in record.get("gates") or []
        ],
        "rollback.attempted": bool(rollback.get("attempted")),
        "rollback.status": rollback.get("status"),
        "evidenceFiles": {name: entry.get("sha256") for name, entry in sorted((files or {}).items())},
    }
    evidence.update(traffic_keys(record))
    if rollback_evidence is not None:
        evidence.update(projection_keys(rollback_evidence, evidence_id))
    return evidence


def recovery_keys(
    rollback_job: JobRecord, rollback_evidence: Mapping[str, Any] | None = None, evidence_id: str | None = None
) -> dict[str, Any]:
    """The keys an operator rollback job adds to the strategy evidence of the deployment it rolled back:
    ``rollback.attempted``, ``rollback.status``, ``rollback.jobId``, its ``rollback.evidence.*`` keys (with
    ``rollback_evidence``) and its traffic rollback's ``strategy.traffic.rollback.*`` keys."""
    rollback = rollback_job.get("rollback") or {}
    keys = {
        "rollback.attempted": True,
        "rollback.jobId": rollback_job["jobId"],
        "rollback.status": rollback.get("status") or ("failed" if rollback_job["status"] == "Failed" else None),
    }
    keys.update(_traffic_rollback_keys(rollback_job))
    if rollback_evidence is not None:
        keys.update(projection_keys(rollback_evidence, evidence_id))
    return keys


def recovery(projection: Projection | None, record: JobRecord, keys: Mapping[str, Any]) -> Projection:
    """The projection of a finished deployment after an operator rollback job ended: its status as the
    record now says (``RolledBack`` or ``Failed``) and its strategy evidence with the rollback's keys."""
    if record["status"] not in TERMINAL:
        raise ValueError(
            "job %s is %s: a recovery is projected for a finished job" % (record["jobId"], record["status"])
        )
    evidence = dict((projection or {}).get("strategyEvidence") or {}, **keys)
    return terminal(projection, record, evidence)


def terminal(projection: Projection | None, record: JobRecord, evidence: Mapping[str, Any]) -> Projection:
    """The terminal projection: only for a terminal job, once; ``evidence`` from :func:`strategy_evidence`."""
    if record["status"] not in TERMINAL:
        raise ValueError(
            "job %s is %s: the terminal projection waits for a terminal job" % (record["jobId"], record["status"])
        )
    base = projection or {"deploymentId": record["jobId"]}
    return _spelled(
        dict(base, jobRevision=record["revision"], terminal=True, strategyEvidence=evidence, **observe(record))
    )
