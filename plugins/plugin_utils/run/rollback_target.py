# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``rollback_target``: one target's rollback recorded in one transaction; in check mode,
what the target would restore, left on it as a fact for ``close``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import clean
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import target as _job_target
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, needed
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.target import preview_answer

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class RollbackTarget(Step):
    """Record one target's rollback in one transaction: the agent's rollback phases, and whether the target
    counts as restored (the agent's verified restoration, job/target.py ``rollback_outcome``)."""

    name = "rollback_target"
    needs = ("job_id", "target")
    acting = True

    def preview(self, ctx: StepContext, args: StepArgs) -> Outcome:
        return preview_answer(args, _preview.rollback_target_preview(clean(args["result"]), clean(args["failure"])))

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        target = needed(args, "target")
        rollback = clean(args["result"]) or {}
        outcome = _job_target.rollback_outcome(rollback, clean(args["failure"]))
        now = utc_timestamp()

        def change(record: JobRecord) -> JobRecord:
            record = _job.record_phases(record, target, phases=outcome["phases"], now=now)
            return _rollback.finish_rollback_target(
                record,
                target,
                succeeded=outcome["succeeded"],
                now=now,
                reason=outcome["reason"],
                facts={
                    "restoredRevisionPath": rollback.get("restoredRevisionPath"),
                    "rollbackDigest": _job_target.services_digest(rollback),
                    "completedAt": now,
                },
            )

        record: JobRecord = store.update(args["job_id"], change)
        return {"jobId": args["job_id"], "targetName": target, "target": record["targets"][target]}
