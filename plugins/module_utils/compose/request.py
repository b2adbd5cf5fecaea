# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""A ``compose.up`` request: parsed from the verbatim payload and/or the snake_case options, and its
artifact set (lock, version sticker, apply manifest, env artifact) checked for consistency with
itself and with the task before anything on the host changes. Pure and standard library only.
"""

from __future__ import annotations

import json

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import hooks as _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import (
    build_apply_manifest,
    lock_manifest_hashes,
    verify_artifact_set,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import COMPOSE_UP
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    ENV_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    STICKER_FILE,
    invalid,
    keep_revisions_problem,
)


def parse_request(payload=None, options=None):
    """A ``compose.up`` request from the verbatim payload and/or the snake_case options."""
    keep = (options or {}).get("keep_revisions")
    if keep is not None and keep_revisions_problem(keep):
        raise invalid(keep_revisions_problem(keep))
    request = COMPOSE_UP.parse(payload, options)
    request["hooks"] = _hooks.normalize_hooks(request["hooks"])
    return request


def _mismatch(problems):
    return StellaError(
        "artifact_hash_mismatch", "; ".join(problems), phase="validate_payload", evidence={"problems": problems}
    )


def variable_problems(request, actual):
    """The payload's ``Variables`` must agree with what the task carries (pure): a variable that names
    another project, release hash, artifact or target than the task itself is refused."""
    variables = request.get("Variables") or {}
    return [
        "Variables.%s is %r, the task carries %r" % (key, variables[key], actual[key])
        for key in sorted(actual)
        if key in variables and variables[key] != actual[key]
    ]


def check_artifacts(request, env_bytes=None):
    """Pure consistency checks of the artifact set before any change.

    Returns ``(files, sticker)``: ``files`` maps the three revision files to their bytes (the apply
    manifest is built when the request carries none, else verified byte for byte).
    """
    lock = request["compose_lock"].encode("utf-8")
    sticker_bytes = request["version_sticker"].encode("utf-8")
    try:
        sticker = json.loads(sticker_bytes)
    except ValueError as exc:
        raise StellaError("artifact_invalid", "VersionSticker is not JSON: %s" % exc, phase="validate_payload")
    if not isinstance(sticker, dict):
        raise StellaError("artifact_invalid", "VersionSticker must be a JSON object", phase="validate_payload")
    mhash = sticker.get("manifestHash")
    problems = []
    if sticker.get("composeHash") != sha256_bytes(lock):
        problems.append(
            "sticker composeHash %s != sha256 of the lock %s" % (sticker.get("composeHash"), sha256_bytes(lock))
        )
    if lock_manifest_hashes(lock) != [mhash]:
        problems.append(
            "lock stella.manifest.hash labels %s != sticker manifestHash %s" % (lock_manifest_hashes(lock), mhash)
        )
    if request.get("manifest_hash") and request["manifest_hash"] != mhash:
        problems.append("ManifestHash %s != sticker manifestHash %s" % (request["manifest_hash"], mhash))
    recorded = sticker.get("target")
    wanted = dict(request["target"], endpoint=redact_url(request["target"]["endpoint"]))
    if isinstance(recorded, dict) and recorded != wanted:
        problems.append(
            "Target %s differs from the sticker's target %s"
            % (json.dumps(request["target"], sort_keys=True), json.dumps(recorded, sort_keys=True))
        )
    if sticker.get("projectName") != request["project_name"]:
        problems.append(
            "sticker projectName %r != ProjectName %r" % (sticker.get("projectName"), request["project_name"])
        )
    if sticker.get("workDirectory") not in (None, request["work_directory"]):
        problems.append(
            "sticker workDirectory %r != WorkDirectory %r" % (sticker.get("workDirectory"), request["work_directory"])
        )
    problems.extend(
        variable_problems(
            request,
            {
                "projectName": request["project_name"],
                "workDirectory": request["work_directory"],
                "manifestHash": mhash,
                "composeHash": sha256_bytes(lock),
                "versionStickerHash": sha256_bytes(sticker_bytes),
                "targetId": request["target"]["id"],
                "targetName": request["target"]["name"],
                "targetType": request["target"]["type"],
                "targetEndpoint": request["target"]["endpoint"],
                "targetExecutionMode": request["target"]["executionMode"],
            },
        )
    )
    if problems:
        raise _mismatch(problems)
    artifacts = {LOCK_FILE: lock, STICKER_FILE: sticker_bytes, ENV_FILE: env_bytes}
    if request.get("apply_manifest"):
        manifest = request["apply_manifest"].encode("utf-8")
    else:
        manifest = pretty_json(build_apply_manifest(request["project_name"], mhash, artifacts))
    problems = verify_artifact_set(manifest, artifacts, request["project_name"], mhash)
    # An env artifact the manifest lists but the task does not carry may already be on the target.
    problems = [p for p in problems if not (env_bytes is None and p.startswith(ENV_FILE + " is listed"))]
    if problems:
        raise _mismatch(problems)
    return {LOCK_FILE: lock, STICKER_FILE: sticker_bytes, MANIFEST_FILE: manifest}, sticker
