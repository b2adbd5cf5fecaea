# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``show``: one job as the store keeps it, a job whose run is gone first recorded
interrupted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, job_of
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import interrupt_gone
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class Show(Step):
    """Read a job. A job whose controller run is gone (or whose claim lease expired) is first recorded as
    interrupted (``Failed``), so no job is shown ``Running`` when nothing runs it; not in check mode, which
    shows the record as it is."""

    name = "show"
    check_mode = "read"
    recorded_job = False

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        record = job_of(store, args)
        if not ctx.check_mode:
            record = interrupt_gone(store, record)
        return {
            "jobId": record["jobId"],
            "job": record,
            "text": _job_view.render_text(record),
            "projection": store.projection(record["jobId"]),
        }
