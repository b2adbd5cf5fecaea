# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Traffic in the deployment job record. Pure: every function takes the record and returns a new one.

After each batch of a blue-green, canary or A/B job, and before the strategy gate, the job asks its
traffic adapter to shift (:func:`shift_step` says to what). The evidence lands in the record's
``traffic`` list and, flattened, in ``strategyEvidence`` (the latest value of each
``strategy.traffic.*`` key). A failed adapter, or a missing one when ``requireTrafficAdapter`` is
set, is ``trafficFailure``: the gate after that batch closes with its code. After the job's targets
were rolled back, :func:`rollback_step` asks the same adapter to put every request back on the
control slot; its evidence is ``strategy.traffic.rollback.*``.
"""

from __future__ import annotations

import copy
from typing import Any

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    Failure,
    JobRecord,
    JobRollback,
    TrafficFailure,
    TrafficShift,
    TrafficStep,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import AUTO_ROLLBACK_DISABLED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic import strategy as _traffic

DEFAULT_CONTROL_SLOT = "active"


def traffic_config(record: JobRecord) -> tuple[dict[str, Any], bool]:
    """``(strategy config, required)`` of the job."""
    config = record.get("strategyConfig") or {}
    return config, bool(config.get("requireTrafficAdapter"))


def treatment_slot(record: JobRecord) -> str:
    slots = sorted({t["slot"] for t in record["targets"].values() if t.get("slot")})
    return slots[0] if len(slots) == 1 else ",".join(slots)


def shift_step(record: JobRecord, batch: int) -> TrafficShift | None:
    """What the adapter is asked after batch ``batch``, or ``None`` when the strategy moves no
    traffic (rolling, all-at-once) or, for blue-green, before the last batch (the switch is one step)."""
    strategy = record.get("strategy")
    if strategy not in _traffic.TRAFFIC_STRATEGIES:
        return None
    batches = len(record["batches"])
    if strategy == "blue-green" and batch < batches - 1:
        return None
    config, _required = traffic_config(record)
    control, treatment = _traffic.step_weights(strategy, config, batch, batches)
    return {
        "batch": batch,
        "controlSlot": config.get("controlSlot") or DEFAULT_CONTROL_SLOT,
        "treatmentSlot": treatment_slot(record),
        "controlWeight": control,
        "treatmentWeight": treatment,
    }


def rollback_step(record: JobRecord, reason: str | None) -> TrafficShift | None:
    """Every request back on the control slot (``None`` when the strategy moves no traffic)."""
    if record.get("strategy") not in _traffic.TRAFFIC_STRATEGIES:
        return None
    config, _required = traffic_config(record)
    return {
        "batch": None,
        "controlSlot": config.get("controlSlot") or DEFAULT_CONTROL_SLOT,
        "treatmentSlot": treatment_slot(record),
        "controlWeight": 100,
        "treatmentWeight": 0,
        "rollback": True,
        "reason": reason,
    }


def puts_traffic_back(record: JobRecord) -> bool:
    """Whether the job's traffic rollback runs now (pure):

    - after a rollback of its targets (rolling back, or an operator rollback job): when every planned
      target was restored, and also when one was not (no revision to restore, a failed rollback) if this
      job shifted traffic: the control slot never ran the release being rolled back, so traffic it moved
      must not stay on a release the job failed (a first canary that took 10 %, then failed);
    - after a failed job whose targets were not rolled back (none retained a revision): when this job
      shifted traffic, for the same reason. Not when ``autoRollbackOnFailure`` is false: the job then
      stays as the failure left it.
    Never twice."""
    if record.get("trafficRollback"):
        return False
    rollback: JobRollback = record.get("rollback") or {}
    planned = [n for batch in rollback.get("batches") or [] for n in batch]
    shifted = any((step.get("evidence") or {}).get(_traffic.PREFIX + "shifted") for step in record.get("traffic") or [])
    if planned:
        restored = all(record["targets"][n]["status"] == "RolledBack" for n in planned)
        return record["status"] in ("RollingBack", "Running") and (restored or shifted)
    return record["status"] == "Failed" and shifted and rollback.get("skipReason") != AUTO_ROLLBACK_DISABLED


def job_facts(record: JobRecord) -> dict[str, Any]:
    """What a shift request says about the job."""
    return {
        "jobId": record.get("jobId"),
        "release": record.get("release"),
        "strategy": record.get("strategy"),
        "application": record.get("application"),
        "environment": record.get("environment"),
    }


def _copy(record: JobRecord, now: str) -> JobRecord:
    new = copy.deepcopy(record)
    new["updatedAt"] = now
    return new


def record_shift(
    record: JobRecord, step: TrafficShift, *, evidence: dict[str, Any], now: str, failure: Failure | None = None
) -> JobRecord:
    """Persist one traffic step (``failure``: ``{"code", "reason"}`` when the gate must close)."""
    new = _copy(record, now)
    entry: TrafficStep = {"batch": step["batch"], "at": now, "evidence": dict(evidence)}
    if failure:
        entry["failure"] = failure.copy()
        new["trafficFailure"] = {**failure, "batch": step["batch"]}
    new.setdefault("traffic", []).append(entry)
    new["strategyEvidence"] = {**(new.get("strategyEvidence") or {}), **evidence}
    return new


def record_rollback(
    record: JobRecord, *, evidence: dict[str, Any], now: str, failure: Failure | None = None
) -> JobRecord:
    """Persist the traffic rollback; a failure fails the rollback closed (the job ends ``Failed``). For a
    job already ``Failed`` (no target rolled back) a failure is added to its reason."""
    new = _copy(record, now)
    new["trafficRollback"] = {"at": now, "evidence": dict(evidence), "failure": failure.copy() if failure else None}
    if failure and new["status"] == "Failed":
        new["reason"] = "%s; traffic rollback failed: %s: %s" % (
            new.get("reason") or "deployment failed",
            failure["code"],
            failure["reason"],
        )
    new["strategyEvidence"] = {**(new.get("strategyEvidence") or {}), **evidence}
    return new


def gate_failure(record: JobRecord, batch: int) -> TrafficFailure | None:
    """``{"code", "reason"}`` of a traffic failure after ``batch`` (``None`` when there was none)."""
    failure = record.get("trafficFailure")
    return failure if failure and failure.get("batch") == batch else None
