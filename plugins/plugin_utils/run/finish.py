# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``finish``: the deployment ends; a failed job decides its one automatic rollback."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, job_of
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def auto_rollback(record: JobRecord) -> JobRecord | None:
    """The automatic rollback decision of a failed deployment that has none yet; ``None`` otherwise."""
    if record["status"] == "Failed" and not record.get("isRollback") and record.get("rollback") is None:
        return _rollback.auto_rollback(record, utc_timestamp())
    return None


class Finish(Step):
    """End the deployment, and decide a failed job's automatic rollback in the same transaction: the job never
    shows Failed without its rollback decision (nor frees its projects)."""

    name = "finish"
    acting = True
    records_failure = True

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        record = job_of(store, args)
        if record["status"] == "Running":
            record = store.update(args["job_id"], lambda r: _job.finish(r, utc_timestamp()), auto_rollback)
        elif auto_rollback(record) is not None:
            record = store.update(args["job_id"], auto_rollback)
        return _rollback.rollback_orders(record)
