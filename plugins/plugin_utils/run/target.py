# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``target``: one target's outcome recorded in one transaction; in check mode, what the
target would do, left on it as a fact for ``close``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    deployment_evidence_dir,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    DEPLOYMENT_EVIDENCE_FILE,
    clean,
    keep_documents,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import target as _job_target
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, need, needed
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def preview_answer(args: StepArgs, outcome: dict[str, Any]) -> dict[str, Any]:
    """A recording step's answer in check mode: the target's preview, also set as its fact
    (``PREVIEW_FACT``, which ``close`` reads)."""
    return {
        "jobId": args["job_id"],
        "checkMode": True,
        "targetName": args["target"],
        "preview": outcome,
        "ansible_facts": {_preview.PREVIEW_FACT: outcome},
    }


class Target(Step):
    """Record one target's outcome in one transaction: the nine phases as they ran (derived from the apply,
    the probes and the failure that stopped the target's play, job/target.py), its facts, and its
    ``deployment.json``, kept in the job store in the same transaction (and written first to the evidence
    directory when the job has one, ``evidence_dir``)."""

    name = "target"
    needs = ("job_id", "target")
    acting = True
    records_failure = True

    def preview(self, ctx: StepContext, args: StepArgs) -> Outcome:
        return preview_answer(args, _preview.target_preview(clean(args["result"]), clean(args["failure"])))

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        # pylint: disable-next=import-outside-toplevel  # the one step that assembles deployment evidence
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence import deployment as evidence

        need(args, "plan")
        target = needed(args, "target")
        apply, probe = clean(args["result"]) or {}, clean(args["probe"])
        failure, plan = clean(args["failure"]), clean(args["plan"])
        now = utc_timestamp()
        document = evidence.deployment_record(
            plan, apply, now, preflight=evidence.preflight_evidence(apply), probe=probe
        )
        directory = deployment_evidence_dir(
            "", plan.get("projectName"), plan.get("jobId"), (plan.get("target") or {}).get("id")
        )
        files, stored = keep_documents(args["evidence_dir"], directory, {DEPLOYMENT_EVIDENCE_FILE: document})
        outcome = _job_target.deployment_outcome(
            apply,
            probe,
            failure,
            evidence_written=bool(args["evidence_dir"]),
            probe_duration_ms=(probe or {}).get("durationMs") or 0,
        )

        def change(record: JobRecord) -> JobRecord:
            record = _job.record_phases(record, target, phases=outcome["phases"], now=now)
            return _job.finish_target(
                record,
                target,
                succeeded=outcome["succeeded"],
                now=now,
                reason=outcome["reason"],
                code=outcome["code"],
                facts=_job_target.target_facts(apply, files),
            )

        record: JobRecord = store.update(args["job_id"], change, documents=stored)
        return {"jobId": args["job_id"], "targetName": target, "target": record["targets"][target]}
