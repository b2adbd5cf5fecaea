# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``gate``: after a batch, whether the job proceeds (job/strategy.py ``gate``), recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import step_failure as _step_failure
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import strategy as _strategy
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, batch_of
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class Gate(Step):
    """The gate after a batch, decided from its targets' outcomes, the batch's traffic shift and any step
    failure, and recorded in the same transaction."""

    name = "gate"
    acting = True
    records_failure = True

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        found: dict[str, int] = {}

        def change(record: JobRecord) -> JobRecord:
            batch = found["batch"] = batch_of(record, args)
            outcomes: list[tuple[str, str, str | None]] = [
                (n, record["targets"][n]["status"], record["targets"][n]["reason"]) for n in record["batches"][batch]
            ]
            decision = _strategy.gate(
                batch, outcomes, _job_traffic.gate_failure(record, batch), _step_failure.gate_failure(record)
            )
            return _job.record_gate(record, decision, utc_timestamp())

        record: JobRecord = store.update(args["job_id"], change)
        decision = [g for g in record["gates"] if g["batch"] == found["batch"]][0]
        return {"jobId": args["job_id"], "proceed": decision["proceed"], "gate": decision}
