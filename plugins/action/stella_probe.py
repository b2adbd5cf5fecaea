# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller-side post-deploy health probes (documentation: plugins/modules/stella_probe.py).

Probes run where the control plane runs (the contract's orchestrator-side placement), so this is
an action plugin that never transfers or executes anything on the play's host. In check mode it
opens no connection: it reports what it would probe and passes no verdict
(``healthProbe.status=not_run``, ``healthProbe.reason=check_mode``).
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase

from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.verify import verify

ARGUMENT_SPEC = {
    "components": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "name": {"type": "str", "required": True},
            "config": {"type": "dict", "default": {}},
        },
    },
    "target": {"type": "dict", "default": {}},
    "wait_for_health_check": {"type": "bool", "default": True},
    "host_override": {"type": "str"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        started = time.monotonic()
        outcome = verify(
            args["components"],
            target=args["target"],
            wait_for_health_check=args["wait_for_health_check"],
            host_override=args["host_override"],
            check_mode=bool(self._task.check_mode),
        )
        result.update(outcome)
        result["durationMs"] = int((time.monotonic() - started) * 1000)
        # Probes only observe; nothing on the controller or the target changes.
        result["changed"] = False
        return result
