# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Test-only stdout callback: prints every task's per-host results as one JSON document at the end.

Shape: ``{"plays": [{"tasks": [{"task": {"name": NAME, "action": ACTION, "run_once": BOOL}, "hosts": {HOST: RESULT}}]}],
"stats": {HOST: SUMMARY}}`` (like ansible.posix.json,
which is not part of ansible-core, so the tests do not depend on it).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: json_results
type: stdout
short_description: Task results as one JSON document (tests only)
description:
  - Prints every task's per-host results as one JSON document when the run ends.
"""

import json

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "json_results"

    def __init__(self):
        super().__init__()
        self.tasks = []

    def _task(self, name):
        if not self.tasks or self.tasks[-1]["task"]["name"] != name:
            self.tasks.append({"task": {"name": name}, "hosts": {}})
        return self.tasks[-1]

    def v2_playbook_on_task_start(self, task, is_conditional):
        self.tasks.append(
            {"task": {"name": task.get_name(), "action": task.action, "run_once": bool(task.run_once)}, "hosts": {}}
        )

    def _record(self, result, **extra):
        data = dict(result._result)
        data.update(extra)
        self._task(result._task.get_name())["hosts"][result._host.get_name()] = data

    def v2_runner_on_ok(self, result):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, failed=True)

    def v2_runner_on_unreachable(self, result):
        self._record(result, unreachable=True, failed=True)

    def v2_runner_on_skipped(self, result):
        self._record(result, skipped=True)

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        document = {"plays": [{"tasks": self.tasks}], "stats": summary}
        self._display.display(json.dumps(document, indent=4, sort_keys=True, default=str))
