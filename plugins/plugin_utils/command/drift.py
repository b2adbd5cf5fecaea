# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella verify --live [PROJECT ...] --inventory INV [--json] [STORE]`` (docs/trust.md, "Drift"):
runs the ``stellaops.runtime.verify`` playbook through ansible-runner against the inventory given (each
target inspected read-only, compared with what its projects' last successful job recorded in the job store,
each target's health recorded), then prints one line per target and project. Exit status 0 when nothing
drifted, 3 when a target drifted, 1 with one line ``stella verify: CODE: REASON`` when the check could not
run, 2 on a usage error. ``command/verify.py`` hands its arguments here when ``--live`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import sys
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import (
    STORE_HELP,
    existing_store,
    fail_line,
    parse_command,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import playbook_environment
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import dependencies as _dependencies
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location

PLAYBOOK = "stellaops.runtime.verify"
DRIFTED_RC = 3
JOB_ACTIONS = ("stellaops.runtime.stella_job", "stella_job")
# the code of a playbook run that failed without a task saying why (its message says what failed)
RUN_FAILED = "drift_check_failed"


def live_parser():
    """``stella verify --live [PROJECT ...] --inventory INV [--json] [--store LOCATION]``."""
    parser = argparse.ArgumentParser(
        prog="stella verify --live",
        description="Check that the targets still run what their projects' last successful job recorded: "
        "runs the stellaops.runtime.verify playbook (read-only on the targets), records each target's health "
        "(a drifted target is degraded, code runtime_drift) and prints one line per target and project. "
        "Exit 0: nothing drifted; 3: a target drifted; 1: the check could not run (docs/trust.md).",
    )
    parser.add_argument("--live", action="store_true", help="compare the targets themselves (this command)")
    parser.add_argument(
        "projects",
        metavar="PROJECT",
        nargs="*",
        help="Compose projects to check (default: every project found on a target); a project named here "
        "that is gone from a target is drift",
    )
    parser.add_argument(
        "--inventory",
        "-i",
        metavar="INV",
        required=True,
        help="the Ansible inventory of the targets (required: the hosts of its group stella_targets are "
        "checked, as the job playbook deploys them)",
    )
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    parser.add_argument("--json", action="store_true", help="print the verdicts as one JSON document")
    return parser


class DriftEvents:
    """ansible-runner events: the ``drift`` step's result, and the last failure that was not ignored."""

    def __init__(self):
        self.result = None
        self.failure, self.code = None, None

    def __call__(self, event):
        data = event.get("event_data") or {}
        res = data.get("res") or {}
        kind = event.get("event")
        if kind == "runner_on_ok" and data.get("task_action") in JOB_ACTIONS and "verdicts" in res:
            self.result = res
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            self.failure = first_line(str(res.get("msg") or data.get("task") or "failed"))
            self.code = res.get("code") or self.code
        return True


def run_verify(inventory, extravars, events):
    """Run the verify playbook through ansible-runner in a private data directory removed afterwards;
    ``(rc, status)``."""
    import ansible_runner  # type: ignore[import-untyped]  # pylint: disable=import-outside-toplevel

    private = tempfile.mkdtemp(prefix="stella-verify-")
    try:
        os.chmod(private, stat.S_IRWXU)
        envvars = playbook_environment()
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=[{"name": "stella verify --live", "ansible.builtin.import_playbook": PLAYBOOK}],
            inventory=inventory,
            extravars=extravars,
            envvars=envvars,
            quiet=True,
            event_handler=events,
        )
        return runner.rc, runner.status
    finally:
        shutil.rmtree(private, ignore_errors=True)


def check_runner():
    """``provider_dependency_missing`` when this Python cannot run a playbook."""
    absent = _dependencies.missing((_dependencies.ANSIBLE_CORE, _dependencies.ANSIBLE_RUNNER))
    if absent:
        raise StellaError(
            _dependencies.DEPENDENCY_MISSING,
            "stella verify --live needs the Python modules %s, which %s cannot import: run %s"
            % (
                ", ".join(module for module, _package in absent),
                sys.executable,
                _dependencies.pip_line([package for _module, package in absent]),
            ),
        )


def live(argv, stdout=None, stderr=None, runner=run_verify):
    """``stella verify --live``: 0 when no target drifted, 3 when one did, 1 when the check could not run
    (one error line), 2 on a usage error. ``runner(inventory, extravars, events) -> (rc, status)``."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = live_parser()
    options, rc = parse_command(parser, list(argv))
    if options is None:
        return rc
    inventory = os.path.abspath(os.path.expanduser(options.inventory))
    if not os.path.exists(inventory):
        parser.print_usage(stderr)
        stderr.write("stella verify --live: error: no inventory at %s\n" % inventory)
        return 2
    try:
        where = _location.resolve(options)
        with existing_store(where.location, where.source):
            pass  # the check compares with a store that is there; it never creates one
        check_runner()
        extravars = {"stella_job_store": where.location, "stella_verify_fail_on_drift": False}
        if options.projects:
            extravars["stella_projects"] = sorted(set(options.projects))
        events = DriftEvents()
        run_rc, status = runner(inventory, extravars, events)
        if events.result is None or run_rc != 0:
            why = events.failure or "the verify playbook ended %s (rc %s) without verdicts" % (status, run_rc)
            raise StellaError(events.code or RUN_FAILED, "%s: %s" % (PLAYBOOK, why))
    except StellaError as exc:
        return fail_line(stderr, "verify", exc)
    result = events.result
    if options.json:
        shown = {key: result.get(key) for key in ("verdicts", "drifted", "checkedAt", "recorded")}
        stdout.write(json.dumps(shown, indent=2, sort_keys=True) + "\n")
    else:
        stdout.write("".join(line + "\n" for line in result.get("lines") or []))
    return DRIFTED_RC if result.get("drifted") else 0
