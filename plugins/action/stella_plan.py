# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Action plugin for ``stellaops.runtime.stella_plan``: plan a release on the controller.

Validates the release input and its image policy, resolves tags to digests against the registries and,
under an image policy, checks each required image's signature with the same resolver (the only I/O
besides reading the policy's keys and the optional ``dest`` write), calls the pure :func:`plan_release`,
and returns the plan with each image's signature verdict (``signatures``). Secret values (``secretEnv``,
registry passwords) and key material never appear in the result.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    ENV_FILE,
    ENV_FILE_MODE,
    LOCK_FILE,
    MANIFEST_FILE as APPLY_MANIFEST_FILE,
    STICKER_FILE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, read_bytes
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import (
    load_credentials,
    plain,
    resolve_and_verify,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.policy import image_policy
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import FILES_KEY, plan_release
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import validate_release

ARGUMENT_SPEC = dict(
    release=dict(type="dict", required=True),
    registry_credentials=dict(type="dict", no_log=True, default={}),
    insecure_registries=dict(type="list", elements="str", default=[]),
    resolved=dict(type="dict", default={}),
    resolve=dict(type="bool", default=True),
    dest=dict(type="path"),
    timeout=dict(type="float", default=15.0),
    target_types=dict(type="list", elements="str", choices=["ComposeHost", "DockerHost"]),
    image_policy=dict(type="dict", default={}),
)
WRITE_ORDER = (ENV_FILE, LOCK_FILE, STICKER_FILE, APPLY_MANIFEST_FILE)


def write_artifacts(dest, files, check_mode):
    """Write the artifact set atomically (each file temp+fsync+rename; apply manifest last).

    Returns ``(changed, written, before_lock)``. A stale ``.env.stella`` is removed when the plan has none.
    """
    before_lock = read_bytes(os.path.join(dest, LOCK_FILE)) if os.path.isdir(dest) else None
    changed, written = False, []
    for name in WRITE_ORDER:
        path = os.path.join(dest, name)
        data = files.get(name)
        current = read_bytes(path) if os.path.isdir(dest) else None
        mode = ENV_FILE_MODE if name == ENV_FILE else 0o644
        if data is None:
            if current is not None:
                changed = True
                written.append(name)
                if not check_mode:
                    os.unlink(path)
            continue
        if current == data and (name != ENV_FILE or (os.stat(path).st_mode & 0o777) == ENV_FILE_MODE):
            continue
        changed = True
        written.append(name)
        if not check_mode:
            os.makedirs(dest, exist_ok=True)
            atomic_write(path, data, mode=mode)
    return changed, written, before_lock


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_diff = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        secrets = []
        try:
            release = plain(args["release"])
            for value in (release.get("secretEnv") or {}).values():
                secrets.append(str(value))
            credentials = load_credentials(plain(args["registry_credentials"], "registry_credentials"))
            secrets.extend(credentials.secrets())
            job_policy = plain(args["image_policy"], "image_policy") or None
            image_policy(release, job_policy)  # image_policy_invalid before the schema's release_invalid
            validate_release(release)
            if args["target_types"] and release["target"]["type"] not in args["target_types"]:
                raise StellaError(
                    "target_type_unsupported",
                    "release target %s is a %s; this step deploys %s"
                    % (release["target"]["id"], release["target"]["type"], " or ".join(args["target_types"])),
                    phase="plan",
                )
            try:
                resolved, resolution, signatures = resolve_and_verify(
                    release,
                    credentials,
                    args["insecure_registries"],
                    plain(args["resolved"], "resolved"),
                    args["resolve"],
                    args["timeout"],
                    job_policy=job_policy,
                )
            finally:
                secrets.extend(credentials.secrets())  # what the Docker config's helpers answered
            for warning in credentials.warnings:
                self._display.warning(warning)
            plan = plan_release(release, resolved)
        except StellaError as exc:
            result.update(with_next(dict(failed=True, msg=redact_text(redact_url(exc.reason), secrets), code=exc.code)))
            if exc.phase:
                result["failurePhase"] = exc.phase
            for key, value in exc.evidence.items():
                result.setdefault(key, redact_text(redact_url(value), secrets) if isinstance(value, str) else value)
            return result
        files = plan.pop(FILES_KEY)
        result.update(plan)
        result["resolution"] = resolution
        if signatures:
            result["signatures"] = signatures
        result["changed"] = False
        if args["dest"]:
            dest = args["dest"]
            try:
                changed, written, before = write_artifacts(dest, files, self._task.check_mode)
            except OSError as exc:
                raise AnsibleActionFail("cannot write artifacts to %s: %s" % (dest, exc.strerror or exc))
            result.update(changed=changed, dest=dest, written=written)
            if self._task.diff and changed:
                result["diff"] = {
                    "before": (before or b"").decode("utf-8", "replace"),
                    "after": files[LOCK_FILE].decode("utf-8"),
                    "before_header": os.path.join(dest, LOCK_FILE) + (" (absent)" if before is None else ""),
                    "after_header": os.path.join(dest, LOCK_FILE),
                }
        return result
