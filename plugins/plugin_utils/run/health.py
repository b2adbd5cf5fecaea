# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``health``: the health status the job store keeps per target."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class Health(Step):
    """The health status the store keeps for ``targets`` (their target ids), or for every target."""

    name = "health"
    needs = ()
    check_mode = "read"
    recorded_job = False

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        # pylint: disable-next=import-outside-toplevel  # target identities come from planning
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import target_identity

        hostvars = ctx.hostvars
        ids = (
            [
                target_identity(name, dict(hostvars[name]) if name in hostvars else {}, None)["id"]
                for name in args["targets"]
            ]
            if args["targets"]
            else None
        )
        return {"health": store.health(ids)}
