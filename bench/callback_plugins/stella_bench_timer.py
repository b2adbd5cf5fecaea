# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark-only callback: the wall time of every task of a playbook run, as one JSON document.

Not part of the collection (it lives under bench/ and is loaded by bench/role_bench.py with
``ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins ANSIBLE_CALLBACKS_ENABLED=stella_bench_timer``).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: stella_bench_timer
type: aggregate
short_description: Records the wall time of every task and writes it as JSON
description:
  - A task's time runs from its start event to the start of the next task (or the end of the play),
    so it includes the controller's templating, the module round trip and result processing.
  - Writes the document to the file named by E(STELLA_BENCH_TIMER_OUTPUT), or prints it as one line
    prefixed C(STELLA_BENCH_TIMER) when that variable is unset.
requirements:
  - enabled with callbacks_enabled
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "stella_bench_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._started = time.monotonic()
        self._tasks = []
        self._current = None

    def _close(self, now):
        if self._current is not None:
            self._current["seconds"] = round(now - self._current.pop("_start"), 6)
            self._current = None

    def _open(self, task, handler=False):
        now = time.monotonic()
        self._close(now)
        self._current = {
            "name": task.get_name(),
            "action": task.action,
            "handler": handler,
            "status": "not run",
            "changed": False,
            "_start": now,
        }
        self._tasks.append(self._current)

    def v2_playbook_on_start(self, playbook):
        self._started = time.monotonic()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._open(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._open(task, handler=True)

    def _result(self, result, status):
        if self._current is None:
            return
        # With several hosts or loop items the worst status wins: failed > unreachable > ok > skipped.
        order = ["not run", "skipped", "ok", "unreachable", "failed"]
        if order.index(status) > order.index(self._current["status"]):
            self._current["status"] = status
        if result._result.get("changed"):
            self._current["changed"] = True

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        now = time.monotonic()
        self._close(now)
        document = json.dumps({"playbook_seconds": round(now - self._started, 6), "tasks": self._tasks}, sort_keys=True)
        output = os.environ.get("STELLA_BENCH_TIMER_OUTPUT")
        if output:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(document + "\n")
        else:
            self._display.display("STELLA_BENCH_TIMER " + document)
