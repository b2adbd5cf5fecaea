# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` steps ``traffic`` and ``traffic_rollback``: the job's traffic adapter shifts to a batch's
weights after the batch, and puts every request back on the control slot after a rollback (one adapter
runner for both)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import redact_text
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import Failure, JobRecord, TrafficShift
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import (
    StepArgs,
    StepContext,
    batch_of,
    job_of,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def run_adapter(
    ctx: StepContext, record: JobRecord, step: TrafficShift, args: StepArgs
) -> tuple[dict[str, Any], Failure | None]:
    """``(evidence, failure or None)`` of one traffic step through the job's adapter (options from
    ``traffic_options``). Without a runnable adapter: the no-adapter evidence, and a failure only when
    ``requireTrafficAdapter`` is set."""
    # pylint: disable=import-outside-toplevel  # the adapters (and requests) only where traffic is shifted
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import plain
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic import adapters as traffic

    config, required = _job_traffic.traffic_config(record)
    options = plain(args["traffic_options"], "traffic_options")
    ctx.secrets.extend(traffic.header_values(options))
    adapter, why = traffic.resolve(config, options)
    if adapter is None:
        failure: Failure | None = {"code": why, "reason": "no traffic adapter ran: %s" % why} if required else None
        return traffic.no_adapter_evidence(why, step), failure
    try:
        return traffic.evidence_json(adapter.shift(_job_traffic.job_facts(record), step)), None
    except traffic.TrafficError as exc:
        failure = {"code": exc.code, "reason": redact_text(exc.reason, ctx.secrets)}
        return traffic.evidence_json(exc.evidence), failure


class Traffic(Step):
    """After a batch, before its gate: the traffic adapter shifts to the batch's weights (only when every
    target of the batch succeeded); without one, standby-only evidence."""

    name = "traffic"
    acting = True
    records_failure = True

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        record = job_of(store, args)
        batch = batch_of(record, args)
        step = _job_traffic.shift_step(record, batch)
        if step is None or any(record["targets"][n]["status"] != "Succeeded" for n in record["batches"][batch]):
            return {"jobId": record["jobId"], "batch": batch, "skipped": True, "failure": None}
        evidence, failure = run_adapter(ctx, record, step, args)
        store.update(
            record["jobId"],
            lambda r: _job_traffic.record_shift(r, step, evidence=evidence, now=utc_timestamp(), failure=failure),
        )
        return {"jobId": record["jobId"], "batch": batch, "skipped": False, "traffic": evidence, "failure": failure}


class TrafficRollback(Step):
    """After the targets were rolled back, or after a failed job that shifted traffic and rolled no target
    back (job/traffic.py ``puts_traffic_back``): every request back on the control slot, through the same
    adapter. A required adapter that is missing or fails fails the rollback closed."""

    name = "traffic_rollback"
    acting = True

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        record = job_of(store, args)
        step = _job_traffic.rollback_step(record, record.get("reason"))
        if step is None or not _job_traffic.puts_traffic_back(record):
            return {"jobId": record["jobId"], "skipped": True}
        evidence, failure = run_adapter(ctx, record, step, args)
        store.update(
            record["jobId"],
            lambda r: _job_traffic.record_rollback(r, evidence=evidence, now=utc_timestamp(), failure=failure),
        )
        return {"jobId": record["jobId"], "skipped": False, "traffic": evidence, "failure": failure}
