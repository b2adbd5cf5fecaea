# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``rollback_start``: an operator rollback of a finished deployment, a new job of kind
``rollback``; in check mode the same job is made and checked against the store, and not stored."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import PROJECT_BUSY, utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import recovery as _recovery
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import (
    StepArgs,
    StepContext,
    interrupt_gone_jobs,
    job_of,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import controller_owner, gone_why
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class RollbackStart(Step):
    """An operator rollback of job ``job_id``: a new job of kind ``rollback`` over the source job's targets
    that retained a revision, in reverse batch order; fails closed when none did. In check mode (it reads
    the store) the same job is made and checked, and not stored (job/preview.py ``rollback_start``)."""

    name = "rollback_start"
    check_mode = "read"

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        source = job_of(store, args)
        now = utc_timestamp()
        if not ctx.check_mode:
            interrupt_gone_jobs(store, now)
        record = _rollback.operator_rollback(
            source,
            job_id="%s-rollback-%s" % (source["jobId"], secrets.token_hex(3)),
            now=now,
            revision_paths=args["revision_paths"],
            reason=first_line(args["reason"]),
            owner=controller_owner(),
            wait_timeout=args["wait_timeout"],
        )
        held: dict[str, str]
        if ctx.check_mode:
            held = _preview.held_projects(
                record, store.claims(), {job["jobId"] for job in store.unfinished() if gone_why(job, now) is None}
            )
        else:
            record, held = store.create(record)
        if held:
            raise StellaError(
                PROJECT_BUSY,
                "job %s: project held by unfinished job %s" % (record["jobId"], ", ".join(sorted(set(held.values())))),
                phase="job",
            )
        if record["status"] == "Failed":
            raise StellaError(record["code"], "job %s: %s" % (record["jobId"], record["reason"]), phase="job")
        if not ctx.check_mode:  # the deployment is RollingBack from now on (run/recovery.py)
            _recovery.started(store, record, now)
        orders = _rollback.rollback_orders(record, source=source)
        return _preview.rollback_start(orders, record) if ctx.check_mode else orders
