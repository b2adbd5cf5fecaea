# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The agent task payload schemas, defined once for the controller and the target agent.

``compose.up``, ``docker.run``, ``compose.rollback``, ``docker.rollback`` and ``compose.preflight``:
the controller builds payloads with :meth:`TaskSchema.payload` and the target parses them with
:meth:`TaskSchema.parse`, so a key exists in exactly one place. One payload-versus-option rule
everywhere: a value given both as a payload key and as the matching snake_case option must be equal,
else the task is refused. The terms the keys carry (paths, project names, the target identity) are
checked by :mod:`contract.vocabulary`. Pure and standard library only.
"""

from __future__ import annotations

import copy
import posixpath

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_MINIMUM_FREE_DISK_BYTES,
    DEFAULT_REACHABILITY_MODE,
    DEFAULT_WORK_DIRECTORY,
    DIGEST_RE,
    check_project_name,
    check_work_directory,
    invalid,
    parse_target,
)


def _check(kind, value, key):
    if kind == "text":
        if not isinstance(value, str) or not value:
            raise invalid("%s must be a non-empty string" % key)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise invalid("%s must be a boolean, got %r" % (key, value))
    elif kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise invalid("%s must be a non-negative integer, got %r" % (key, value))
    elif kind in ("dict", "strdict"):
        if not isinstance(value, dict):
            raise invalid("%s must be an object" % key)
        if kind == "strdict" and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise invalid("%s must be an object of strings" % key)
    elif kind == "list":
        if not isinstance(value, list):
            raise invalid("%s must be a list" % key)
    elif kind == "digest":
        if not isinstance(value, str) or not DIGEST_RE.match(value):
            raise invalid("%s %r must be sha256:<64 hex>" % (key, value))
    elif kind == "workdir":
        return check_work_directory(value, key)
    elif kind == "project":
        return check_project_name(value, key)
    elif kind == "target":
        return parse_target(value, key)
    return value


class Field:
    """One payload key: its contract name, the snake_case option, its kind, requiredness, default."""

    def __init__(self, key, option, kind, required=False, default=None):
        self.key = key
        self.option = option
        self.kind = kind
        self.required = required
        self.default = default


class TaskSchema:
    """One agent task payload schema, used by the controller's builder and the target's parser."""

    def __init__(self, name, fields):
        self.name = name
        self.fields = tuple(fields)
        self.keys = tuple(f.key for f in self.fields)
        self.options = tuple(f.option for f in self.fields if f.option)

    def payload(self, **values):
        """Build a payload from values named by payload key; unknown keys are a programming error."""
        unknown = sorted(set(values) - set(self.keys))
        if unknown:
            raise ValueError("%s has no key(s) %s" % (self.name, ", ".join(unknown)))
        missing = [f.key for f in self.fields if f.required and values.get(f.key) is None]
        if missing:
            raise ValueError("%s needs %s" % (self.name, ", ".join(missing)))
        return {f.key: values[f.key] for f in self.fields if values.get(f.key) is not None}

    def parse(self, payload=None, options=None):
        """``{option: value}`` from a verbatim payload and/or snake_case options.

        Payload keys are case-exact; an unknown payload key is refused; a key given both ways must be
        equal; required keys must be present one way or the other; defaults fill the rest.
        """
        options = options or {}
        if payload is not None and not isinstance(payload, dict):
            raise invalid("%s payload must be an object, got %s" % (self.name, type(payload).__name__))
        from_payload = bool(payload)
        payload = payload or {}
        unknown = sorted(set(payload) - set(self.keys))
        if unknown:
            raise invalid(
                "%s payload has unknown key(s) %s; allowed keys (case-exact): %s"
                % (self.name, ", ".join(unknown), ", ".join(self.keys))
            )
        out = {}
        for f in self.fields:
            given = payload.get(f.key)
            option = options.get(f.option) if f.option else None
            if given is not None and option is not None and _comparable(f, given) != _comparable(f, option):
                raise invalid("%s payload key %s conflicts with option %s" % (self.name, f.key, f.option))
            value = given if given is not None else option
            if value is None:
                # A required key with a default is required of payloads; snake_case options may omit it.
                if f.required and (f.default is None or from_payload):
                    raise invalid(
                        "%s lacks required %s (payload key %s%s)"
                        % (self.name, f.key, f.key, ", option %s" % f.option if f.option else "")
                    )
                out[f.option or f.key] = copy.deepcopy(f.default)
                continue
            out[f.option or f.key] = _check(f.kind, value, f.key)
        return out


def _comparable(field, value):
    if field.kind == "target" and isinstance(value, dict):
        try:
            return parse_target(value)
        except StellaError:
            return value
    if field.kind == "workdir" and isinstance(value, str):
        return posixpath.normpath("/" + value.lstrip("/"))
    return value


_COMMON = (
    Field("WorkDirectory", "work_directory", "workdir", default=DEFAULT_WORK_DIRECTORY),
    Field("Target", "target", "target", required=True),
    Field("Variables", None, "dict", default={}),
)

COMPOSE_UP = TaskSchema(
    "compose.up",
    (
        Field("ProjectName", "project_name", "project", required=True),
        Field("ComposeLock", "compose_lock", "text", required=True),
        Field("VersionSticker", "version_sticker", "text", required=True),
        Field("ApplyManifest", "apply_manifest", "text"),
        Field("PullImages", "pull_images", "bool", required=True, default=True),
        Field("BackupExisting", "backup_existing", "bool", required=True, default=True),
        Field("Hooks", "hooks", "list", default=[]),
        Field("ManifestHash", "manifest_hash", "digest"),
    )
    + _COMMON,
)

DOCKER_RUN = TaskSchema(
    "docker.run",
    (
        Field("Image", "image", "text", required=True),
        Field("Name", "name", "text", required=True),
        Field("PullImage", "pull_image", "bool", required=True, default=True),
        Field("Hooks", "hooks", "list", default=[]),
        Field("Labels", "labels", "strdict", default={}),
        Field("Environment", "environment", "strdict", default={}),
        Field("Ports", "ports", "list", default=[]),
        Field("Config", None, "dict", default={}),
        Field("ManifestHash", "manifest_hash", "digest"),
        Field("EnvFile", None, "text"),
    )
    + _COMMON,
)

COMPOSE_ROLLBACK = TaskSchema(
    "compose.rollback",
    (
        Field("ProjectName", "project_name", "project", required=True),
        Field("RevisionPath", "revision_path", "text"),
        Field("Reason", "reason", "text"),
        Field("ManifestHash", "manifest_hash", "digest"),
    )
    + _COMMON,
)

COMPOSE_PREFLIGHT = TaskSchema(
    "compose.preflight",
    (
        Field("WorkDirectory", "work_directory", "workdir", default=DEFAULT_WORK_DIRECTORY),
        Field("ImageReference", "image_reference", "text"),
        Field("MinimumFreeDiskBytes", "minimum_free_disk_bytes", "int", default=DEFAULT_MINIMUM_FREE_DISK_BYTES),
        Field("RegistryReachabilityMode", "registry_reachability_mode", "text", default=DEFAULT_REACHABILITY_MODE),
        Field("RequireCompose", "require_compose", "bool"),
    ),
)

DOCKER_ROLLBACK = TaskSchema(
    "docker.rollback",
    (
        Field("ProjectName", "project_name", "project", required=True),
        Field("Names", "names", "list", required=True),
        Field("RevisionPath", "revision_path", "text"),
        Field("Reason", "reason", "text"),
        Field("ManifestHash", "manifest_hash", "digest"),
    )
    + _COMMON,
)

TASKS = {
    schema.name: schema for schema in (COMPOSE_UP, DOCKER_RUN, COMPOSE_ROLLBACK, DOCKER_ROLLBACK, COMPOSE_PREFLIGHT)
}
ROLLBACK_TASKS = {"ComposeHost": COMPOSE_ROLLBACK.name, "DockerHost": DOCKER_ROLLBACK.name}
