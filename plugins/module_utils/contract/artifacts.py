# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Desired state, version sticker, apply manifest and the ``.env.stella`` artifact.

Stdlib only: the target-side deploy and rollback code imports :func:`build_apply_manifest`,
:func:`verify_artifact_set` and :func:`render_env_artifact` from here.

Hash chain (no cycles): ``manifestHash = digest_json(desiredState)`` -> lock carries it in labels ->
``composeHash = sha256(lock)`` -> sticker carries both -> apply manifest hashes every artifact file.
"""

from __future__ import annotations

import json
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import (
    digest_json,
    pretty_json,
    sha256_bytes,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    APPLY_MANIFEST_SCHEMA,
    ARTIFACT_FILES,
    DESIRED_STATE_SCHEMA,
    ENV_FILE,
    LOCK_FILE,
    MANIFEST_FILE as APPLY_MANIFEST_FILE,
    STICKER_FILE,
    STICKER_JOB_KEYS,
    STICKER_SCHEMA,
)

_MANIFEST_LABEL_RE = re.compile(r'^\s+stella\.manifest\.hash: "(sha256:[0-9a-f]{64})"$', re.M)


def secret_digests(secret_env):
    """``{NAME: sha256(value)}``: what desired state records instead of secret values."""
    return {name: sha256_bytes(value.encode("utf-8")) for name, value in sorted(secret_env.items())}


def build_desired_state(scope, slot, role, project, components, secret_env):
    """The canonical desired state.

    ``scope``: ``{release, target, tenant, environment, application}``; ``components``:
    ``[{name, image (pinned), config, ports}]`` in any order. Secret values become digests.
    """
    return {
        "schema": DESIRED_STATE_SCHEMA,
        "release": dict(scope["release"]),
        "target": dict(scope["target"]),
        "tenant": scope["tenant"],
        "environment": scope["environment"],
        "application": scope["application"],
        "slot": slot,
        "trafficRole": role,
        "projectName": project,
        "components": [
            {"name": item["name"], "image": item["image"], "config": dict(item["config"]), "ports": list(item["ports"])}
            for item in sorted(components, key=lambda item: item["name"])
        ],
        "secretEnv": secret_digests(secret_env),
    }


def manifest_hash(desired_state):
    return digest_json(desired_state)


def _dotenv_quote(value):
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "$":
            out.append("\\$")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render_env_artifact(secret_env):
    """``.env.stella`` bytes: ``NAME="value"`` lines sorted by name, escaped so Compose's dotenv parser
    reads every value back verbatim (no interpolation). ``None`` when there are no secrets."""
    if not secret_env:
        return None
    lines = ["%s=%s\n" % (name, _dotenv_quote(secret_env[name])) for name in sorted(secret_env)]
    return "".join(lines).encode("utf-8")


def build_sticker(fields):
    """The ``stella.version.json`` object (no timestamps); ``fields`` carries the plan values."""
    sticker = {"schema": STICKER_SCHEMA}
    sticker.update(fields)
    return sticker


def render_json(value):
    return pretty_json(value)


def build_apply_manifest(project_name, manifest_hash_value, artifacts):
    """``apply-manifest.json`` object: ``artifacts`` maps file name to bytes (``None`` = absent)."""
    hashes = {}
    for name in sorted(artifacts):
        data = artifacts[name]
        if data is None:
            continue
        if name not in ARTIFACT_FILES:
            raise StellaError("artifact_unknown", "artifact %r is not part of the Stella artifact set" % (name,))
        hashes[name] = sha256_bytes(data)
    for required in (LOCK_FILE, STICKER_FILE):
        if required not in hashes:
            raise StellaError("artifact_missing", "artifact set lacks %s" % required)
    return {
        "schema": APPLY_MANIFEST_SCHEMA,
        "projectName": project_name,
        "manifestHash": manifest_hash_value,
        "artifacts": hashes,
    }


def lock_manifest_hashes(lock_bytes):
    """Every ``stella.manifest.hash`` label value in a compose lock as the planner renders it (stdlib only)."""
    return sorted(set(_MANIFEST_LABEL_RE.findall(lock_bytes.decode("utf-8", "replace"))))


def verify_artifact_set(apply_manifest, artifacts, project_name=None, expected_manifest_hash=None):
    """Check a complete artifact set; return a list of problems (empty when it is consistent).

    ``apply_manifest`` is the parsed object or the file bytes; ``artifacts`` maps file name to bytes
    (``None`` or missing = file absent). Checks: schema, project name, every listed hash, no unlisted
    artifact, the lock's ``stella.manifest.hash`` labels, and the sticker's ``manifestHash``,
    ``composeHash`` and ``projectName``.
    """
    problems = []
    if isinstance(apply_manifest, (bytes, str)):
        try:
            apply_manifest = json.loads(apply_manifest)
        except ValueError as exc:
            return ["%s is not JSON: %s" % (APPLY_MANIFEST_FILE, exc)]
    if not isinstance(apply_manifest, dict) or apply_manifest.get("schema") != APPLY_MANIFEST_SCHEMA:
        return ["%s has no schema %s" % (APPLY_MANIFEST_FILE, APPLY_MANIFEST_SCHEMA)]
    listed = apply_manifest.get("artifacts") or {}
    mhash = apply_manifest.get("manifestHash")
    if project_name is not None and apply_manifest.get("projectName") != project_name:
        problems.append("projectName %r != expected %r" % (apply_manifest.get("projectName"), project_name))
    if expected_manifest_hash is not None and mhash != expected_manifest_hash:
        problems.append("manifestHash %s != expected %s" % (mhash, expected_manifest_hash))
    for name in (LOCK_FILE, STICKER_FILE):
        if name not in listed:
            problems.append("%s is not listed in %s" % (name, APPLY_MANIFEST_FILE))
    for name in sorted(set(listed) | {n for n, d in artifacts.items() if d is not None}):
        data = artifacts.get(name)
        if name not in listed:
            problems.append("%s is present but not listed in %s" % (name, APPLY_MANIFEST_FILE))
        elif data is None:
            problems.append("%s is listed but missing" % name)
        elif sha256_bytes(data) != listed[name]:
            problems.append("%s hash %s != listed %s" % (name, sha256_bytes(data), listed[name]))
    lock = artifacts.get(LOCK_FILE)
    if lock is not None:
        labels = lock_manifest_hashes(lock)
        if labels != [mhash]:
            problems.append("%s stella.manifest.hash labels %s != %s" % (LOCK_FILE, labels, mhash))
    sticker_bytes = artifacts.get(STICKER_FILE)
    if sticker_bytes is not None:
        try:
            sticker = json.loads(sticker_bytes)
        except ValueError as exc:
            problems.append("%s is not JSON: %s" % (STICKER_FILE, exc))
        else:
            if sticker.get("manifestHash") != mhash:
                problems.append("%s manifestHash %s != %s" % (STICKER_FILE, sticker.get("manifestHash"), mhash))
            if lock is not None and sticker.get("composeHash") != sha256_bytes(lock):
                problems.append(
                    "%s composeHash %s != %s" % (STICKER_FILE, sticker.get("composeHash"), sha256_bytes(lock))
                )
            if sticker.get("projectName") != apply_manifest.get("projectName"):
                problems.append(
                    "%s projectName %r != %r"
                    % (STICKER_FILE, sticker.get("projectName"), apply_manifest.get("projectName"))
                )
    return problems


_UNQUOTE = {"\\": "\\", '"': '"', "$": "$", "n": "\n", "r": "\r", "t": "\t"}


def env_artifact_values(env_bytes):
    """The values of a ``.env.stella`` artifact rendered by :func:`render_env_artifact` (the secrets to mask)."""
    values = []
    for line in (env_bytes or b"").decode("utf-8", "replace").splitlines():
        _name, sep, quoted = line.partition("=")
        if not sep:
            continue
        if len(quoted) >= 2 and quoted[0] == quoted[-1] == '"':
            out, chars = [], iter(quoted[1:-1])
            for ch in chars:
                out.append(_UNQUOTE.get(next(chars, ""), "") if ch == "\\" else ch)
            quoted = "".join(out)
        if quoted:
            values.append(quoted)
    return values


def listed_env_hash(manifest_bytes):
    """The ``.env.stella`` hash an apply manifest lists (``None`` when it lists none or is not JSON)."""
    try:
        return (json.loads(manifest_bytes).get("artifacts") or {}).get(ENV_FILE)
    except (ValueError, AttributeError):
        return None


def applied_release(sticker_bytes):
    """The sticker without the keys naming the job that applied it (``None`` when not a JSON object)."""
    try:
        sticker = json.loads(sticker_bytes)
    except (TypeError, ValueError):
        return None
    if not isinstance(sticker, dict):
        return None
    return {key: value for key, value in sticker.items() if key not in STICKER_JOB_KEYS}


def same_release(committed_sticker, planned_sticker):
    """True when two stickers record the same release on the same target, whichever job applied it."""
    committed = applied_release(committed_sticker)
    return committed is not None and committed == applied_release(planned_sticker)
