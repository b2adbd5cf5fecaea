# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller's half of the fence: right before a job's work is sent to a target, the job store says
whether the job still holds the target's project.

A job recorded interrupted (its run was taken for gone: another controller took its claim lease over),
a job that is no longer unfinished, a project now held by another job, or a newer claim generation
handed out for the project: the work is refused with ``claim_superseded`` and the target is not
contacted. The target keeps its own half (module_utils/host/claim.py) for work already on its way;
what it refused is recorded on the job even when the job was recorded interrupted meanwhile.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CLAIM_SUPERSEDED,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, needed
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store


def refusal(
    claim: Mapping[str, Any], status: str | None, interrupted: object, holder: str | None, generation: int | None
) -> str | None:
    """Why the work of ``claim`` (``{"jobId", "generation", "projectKey"}``) must not be sent, given what
    the store holds (:meth:`SqlJobStore.standing`); ``None`` when it may (pure)."""
    job_id = claim["jobId"]
    if status is None:
        return "job %s is not in the job store" % job_id
    if interrupted:
        return "job %s was recorded interrupted (another controller took its claim lease over)" % job_id
    if status not in _job_store.UNFINISHED:
        return "job %s has already ended (%s)" % (job_id, status)
    if holder != job_id:
        return "project %s is held by %s" % (claim["projectKey"], "job %s" % holder if holder else "no job")
    if generation is not None and generation > claim["generation"]:
        return "project %s was claimed again (generation %d, this job's %d)" % (
            claim["projectKey"],
            generation,
            claim["generation"],
        )
    return None


def check(location: str | None, claim: Mapping[str, Any]) -> None:
    """Refuse (``claim_superseded``) the work of ``claim`` unless its job still holds the project."""
    store = _job_store.open_store(location, existing=True)
    try:
        why = refusal(claim, *store.standing(claim["jobId"], claim["projectKey"]))
    finally:
        store.close()
    if why:
        raise StellaError(
            CLAIM_SUPERSEDED,
            "%s: nothing was sent to the target; `stella show %s` shows the job" % (why, claim["jobId"]),
            phase="preflight",
        )


def refused_work(failure: object) -> dict[str, Any] | None:
    """The failure of a target's work (the apply's failed result) when the target refused it because
    the job's claim was superseded (host/claim.py), else ``None`` (pure)."""
    return failure if isinstance(failure, dict) and failure.get("code") == CLAIM_SUPERSEDED else None


def fenced(record: JobRecord, target: str, reason: str, now: str) -> JobRecord:
    """A job already recorded interrupted whose late work on ``target`` the fence refused: the target
    and the job end with ``claim_superseded``, the reason saying nothing was changed there (pure)."""
    new = copy.deepcopy(record)
    new["updatedAt"] = now
    new["targets"][target].update({"status": "Failed", "code": CLAIM_SUPERSEDED, "reason": reason})
    new.update(
        {
            "code": CLAIM_SUPERSEDED,
            "reason": "%s; its work on %s was refused: %s" % (new.get("reason") or "job interrupted", target, reason),
        }
    )
    return new


def record_refusal(store: _job_store.SqlJobStore, args: StepArgs, failure: Mapping[str, Any]) -> dict[str, Any]:
    """Record on the interrupted job ``args["job_id"]`` that the fence refused its work on ``args["target"]``;
    the target's entry, as the ``target`` step answers."""
    target = needed(args, "target")
    reason = first_line(str(failure.get("msg") or "")) or "claim superseded"
    record: JobRecord = store.update(args["job_id"], lambda r: fenced(r, target, reason, utc_timestamp()))
    return {"jobId": args["job_id"], "targetName": target, "target": record["targets"][target]}
