# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The action of the target-side modules: run the module on the target, as ``ansible.builtin.normal``
does, with CPython's cyclic garbage collector paused for the task and the module's payload reused from
an earlier run when nothing it is made of changed (:mod:`._payload_cache`).

Before a module runs, its task's worker process builds the module's payload: Ansible parses every file
of the module's ``module_utils`` closure into an abstract syntax tree (77 files for
``stella_compose_deploy``, about half of them Ansible's own) to find what to ship. Those trees are
about 76,000 young nodes, so the cyclic collector runs again and again while they are built, over
objects that reference counting frees anyway. Measured in the role's worker on this
project's 2-core machine: the payload build of ``stella_compose_deploy`` took 0.25 to 0.41 s with
the collector running and 0.18 to 0.27 s with it paused.

The worker is a process forked for this one task and gone after it; the collector is restored as it
was found when the task ends, also when it fails.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from ansible import constants as C
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_text
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import payload_cache as _payload_cache
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import credentials as _credentials


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block, restoring it as it was found."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def scrubbed(value: Any, secrets: list[str]) -> Any:
    """``value`` (a module result) with every secret of ``secrets`` replaced in every string."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {key: scrubbed(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item, secrets) for item in value]
    return value


def refused(exc: StellaError, phase: str | None) -> dict[str, Any]:
    """The failed result of a task whose work was refused before the module ran, with its next step."""
    result: dict[str, Any] = with_next(
        {"failed": True, "msg": exc.reason, "code": exc.code, "failurePhase": phase, "changed": False}
    )
    return result


class TargetModuleAction(NormalAction):  # type: ignore[misc]  # ansible-core ships no type information
    """Runs the module of the task's name on the target (check mode, diff and async as
    ``ansible.builtin.normal``), with the collector paused (:func:`collector_paused`) and the payload
    store of :mod:`._payload_cache` around Ansible's build of the module.

    A module whose options include a preflight (``PREFLIGHT_OPTION``: the options themselves, or the
    name of the option holding them) gets the registry credentials that preflight needs, looked up here
    on the controller (:func:`.release.credentials.with_preflight_credentials`); the values found are
    scrubbed from the result as well."""

    PREFLIGHT_OPTION: str | None = None

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        module = type(self).__module__.rpartition(".")[2]  # each action plugin runs the module of its name
        secrets: list[str] = []
        if self.PREFLIGHT_OPTION is not None:
            try:
                secrets = self._add_registry_credentials()
            except StellaError as exc:
                return refused(exc, "preflight")
        try:
            self._check_claim(task_vars or {})
        except StellaError as exc:
            return refused(exc, exc.phase)
        with collector_paused(), _payload_cache.reused(module, C.DEFAULT_LOCAL_TMP, Display().vvvv):
            result: dict[str, Any] = scrubbed(super().run(tmp, task_vars), secrets)
            return result

    def _check_claim(self, task_vars: dict[str, Any]) -> None:
        """With a job's ``claim``, the job store's word that the job still holds the project, read right
        before the work is sent (run/fencing.py); ``job_store`` is read here and never sent."""
        args = dict(self._task.args)
        location = args.pop("job_store", None) or task_vars.get("stella_job_store")
        self._task.args = args
        claim = args.get("claim")
        if isinstance(claim, dict) and claim.get("projectKey") and claim.get("jobId") and not self._task.check_mode:
            from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import fencing  # pylint: disable=import-outside-toplevel

            fencing.check(location, claim)

    def _add_registry_credentials(self) -> list[str]:
        """Put the registry credentials the task's preflight needs into its options; their secrets."""
        args = dict(self._task.args)
        options = args if self.PREFLIGHT_OPTION == "" else args.get(self.PREFLIGHT_OPTION)
        if not isinstance(options, dict):
            return []
        secrets: list[str]
        options, secrets, warnings = _credentials.with_preflight_credentials(options)
        for warning in warnings:
            Display().warning(warning)
        if self.PREFLIGHT_OPTION == "":
            args = options
        else:
            args[self.PREFLIGHT_OPTION] = options
        self._task.args = args
        return secrets
