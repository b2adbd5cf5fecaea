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

Registry credentials are looked up here, on the controller (:class:`.release.credentials.RegistryCredentials`:
the play's ``registry_credentials``, then the controller's Docker client config and credential helpers),
and each target gets only those its own images' registries need: its preflight the entries of the
registries it asks, and the apply of :data:`PULL_CREDENTIALS_OPTIONS` (unless the task says
``lend_registry_credentials: false``, a controller-only option) the entries of its images' registries as
the ``no_log`` option ``pull_credentials``, which the target writes to a temporary Docker config for its
pull (``module_utils/host/dockerconfig.py``). Every value looked up is scrubbed from the result.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import yaml

from ansible import constants as C
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_text
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import payload_cache as _payload_cache
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import credentials as _credentials


# The modules whose apply pulls, and the option the registry credentials lent for the pull go in.
PULL_CREDENTIALS_OPTIONS = {"stella_compose_deploy": "pull_credentials"}
# A controller-only option of those tasks (popped here, never sent): false lends nothing.
LEND_OPTION = "lend_registry_credentials"


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


def lock_images(lock_text: Any) -> list[str]:
    """The images of a Compose lock's services (``[]`` when it does not read as one)."""
    try:
        document = yaml.safe_load(lock_text) if isinstance(lock_text, str) else None
    except yaml.YAMLError:
        return []
    services = document.get("services") if isinstance(document, dict) else None
    if not isinstance(services, dict):
        return []
    return [str(s["image"]) for s in services.values() if isinstance(s, dict) and isinstance(s.get("image"), str)]


def target_images(args: dict[str, Any]) -> list[str]:
    """The images an apply task's options name: the ``compose.up`` payload's (or option's) lock, the
    ``docker.run`` payload's or payloads' ``Image`` (or option ``image``)."""
    given = args.get("payload")
    payload: dict[str, Any] = given if isinstance(given, dict) else {}
    images = lock_images(payload.get("ComposeLock") or args.get("compose_lock"))
    for item in [payload] + [p for p in args.get("payloads") or [] if isinstance(p, dict)]:
        if isinstance(item.get("Image"), str):
            images.append(item["Image"])
    if isinstance(args.get("image"), str):
        images.append(args["image"])
    return images


def image_registries(images: list[str]) -> list[str]:
    """The registries of ``images`` (an image id pin, which no registry holds, or a reference that does
    not parse, has none)."""
    found = set()
    for image in images:
        if image.startswith("sha256:"):
            continue
        try:
            found.add(parse_image_ref(image).registry)
        except StellaError:
            continue
    return sorted(found)


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
        if self.PREFLIGHT_OPTION is not None or module in PULL_CREDENTIALS_OPTIONS:
            try:
                secrets = self._add_registry_credentials(PULL_CREDENTIALS_OPTIONS.get(module))
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

    def _add_registry_credentials(self, pull_option: str | None = None) -> list[str]:
        """Put the registry credentials the task's preflight needs into its options, and those its pull
        needs into ``pull_option`` (:meth:`_lend`); their secrets."""
        args = dict(self._task.args)
        lend = args.pop(LEND_OPTION, True) if pull_option else False
        options = None
        if self.PREFLIGHT_OPTION is not None:
            options = args if self.PREFLIGHT_OPTION == "" else args.get(self.PREFLIGHT_OPTION)
        explicit = options.get("registry_credentials") if isinstance(options, dict) else None
        credentials = _credentials.RegistryCredentials(explicit or {})
        if isinstance(options, dict):
            options = dict(options)
            options.pop("registry_credentials", None)
            entries = credentials.for_registries(_credentials.preflight_registries(options))
            if entries:
                options["registry_credentials"] = entries
            if self.PREFLIGHT_OPTION == "":
                args = options
            else:
                args[self.PREFLIGHT_OPTION] = options
        args.pop(LEND_OPTION, None)
        if pull_option:
            args.pop(pull_option, None)  # only the controller lends
            if self._lends(lend):
                args[pull_option] = self._lend(credentials, args)
        for warning in credentials.warnings:
            Display().warning(warning)
        self._task.args = args
        secrets: list[str] = credentials.secrets()
        return secrets

    def _lends(self, lend: Any) -> bool:
        """Whether this run lends: asked (true unless ``lend_registry_credentials`` says false), and not in
        check mode (nothing is pulled)."""
        if isinstance(lend, str):
            lend = lend.strip().lower() not in ("false", "no", "0", "off", "n", "f")
        return bool(lend) and not getattr(self._task, "check_mode", False)

    @staticmethod
    def _lend(credentials: Any, args: dict[str, Any]) -> dict[str, Any]:
        """``{registry: entry or None}`` for every registry of the task's images (``None``: nothing held)."""
        registries = image_registries(target_images(args))
        found = credentials.for_registries(registries)
        return {registry: found.get(registry) for registry in registries}
