# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Runs the target-side module stella_inspect (documentation: plugins/modules/stella_inspect.py) with the
collector paused while its payload is built (plugins/plugin_utils/run/target_action.py)."""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.target_action import TargetModuleAction


class ActionModule(TargetModuleAction):
    """The module stella_inspect, run on the target."""
