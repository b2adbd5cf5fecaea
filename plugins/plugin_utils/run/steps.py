# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The steps of ``stella_job`` (documentation: plugins/modules/stella_job.py), in the order a job runs them:
the table the action plugin looks a step up in (run/runner.py runs it)."""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.close import Close
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.drift import Drift
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.finish import Finish
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.gate import Gate
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.health import Health
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.rollback_start import RollbackStart
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.rollback_target import RollbackTarget
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.show import Show
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.start import Start
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.target import Target
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.traffic import Traffic, TrafficRollback

STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Start(),
        Target(),
        Traffic(),
        Gate(),
        Finish(),
        RollbackStart(),
        RollbackTarget(),
        TrafficRollback(),
        Close(),
        Show(),
        Health(),
        Drift(),
    )
}
