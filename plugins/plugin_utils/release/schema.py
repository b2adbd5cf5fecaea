# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The release input: its JSON Schema (the one copy), a small validator, and normalization.

``RELEASE_SCHEMA`` is the only place the schema lives. ``docs/schemas/release-input.schema.json``
is generated from it (``docs/schemas/generate.py``) and a unit test keeps the two equal and checks
that the ``jsonschema`` package agrees with :func:`schema_errors`. Stdlib only: targets and lean
controllers may not have ``jsonschema``.
"""

from __future__ import annotations

import copy
import json
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WORK_DIRECTORY,
    PROJECT_RE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.spec import (
    PREFIX as PROBE_PREFIX,
    validate_probe_config,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.checks import (
    check_hook,
    check_port,
    check_values,
    fail as _fail,
    field_path,
)

SCHEMA_ID = "urn:stellaops:runtime:release-input:v1"
STRATEGIES = ("rolling", "all-at-once", "canary", "blue-green", "a-b")
TARGET_TYPES = ("DockerHost", "ComposeHost")
HOOK_PHASES = ("pre-deploy", "post-deploy")
FAILURE_POLICIES = ("fail", "ignore", "continue", "warn")
REDACTION_POLICIES = ("redact", "none")
REACHABILITY_MODES = ("http", "tcp", "skip")

FIELD_PATH = field_path  # rendering of error locations; importable from here as before

_TEXT = r"^[^\u0000-\u001f\u007f]{1,128}$"
_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$"
_SLOT = r"^[a-z0-9][a-z0-9-]{0,31}$"
_COMPONENT = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
_CONFIG_KEY = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_PORT = (
    r"^(?:(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|\[[0-9A-Fa-f:]+\]):)?"
    r"(?:[0-9]{1,5}(?:-[0-9]{1,5})?:)?[0-9]{1,5}(?:-[0-9]{1,5})?(?:/(?:tcp|udp|sctp))?$"
)
_PROJECT = PROJECT_RE.pattern.replace("\\Z", "$")  # the JSON Schema form of the one project-name rule
_ABS_PATH = r"^/[^\u0000-\u001f\u007f]{0,4095}$"


def _text(description):
    return {"type": "string", "pattern": _TEXT, "description": description}


def _ident(description):
    return {"type": "string", "pattern": _ID, "description": description}


def _slot(description):
    return {"type": "string", "pattern": _SLOT, "description": description}


RELEASE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "Stella Ops runtime release input",
    "description": "What stellaops.runtime.stella_plan needs to plan one release on one target.",
    "type": "object",
    "required": ["release", "components", "target", "tenant", "environment", "application", "strategy"],
    "additionalProperties": False,
    "properties": {
        "release": {
            "type": "object",
            "description": "Release identity.",
            "required": ["id", "name", "version"],
            "additionalProperties": False,
            "properties": {
                "id": _ident("Release id."),
                "name": _text("Release name."),
                "version": _text("Release version."),
            },
        },
        "components": {
            "type": "array",
            "description": "Components; each becomes one Compose service (or one docker.run task).",
            "minItems": 1,
            "maxItems": 5000,
            "items": {
                "type": "object",
                "required": ["name", "image"],
                "additionalProperties": False,
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": _COMPONENT,
                        "description": "Component name = Compose service name.",
                    },
                    "image": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 512,
                        "description": "Full image reference registry/repository:tag[@sha256:...].",
                    },
                    "config": {
                        "type": "object",
                        "description": "Flat config keys: env.*, healthcheck.*, healthProbe.*, runtime.skipPull, ...",
                        "propertyNames": {"pattern": _CONFIG_KEY},
                        "additionalProperties": {
                            "type": ["string", "integer", "boolean", "array"],
                            "items": {"type": "string"},
                        },
                    },
                    "ports": {
                        "type": "array",
                        "description": "Compose short-syntax port mappings.",
                        "items": {"type": ["string", "integer"], "pattern": _PORT, "minimum": 1, "maximum": 65535},
                    },
                },
            },
        },
        "target": {
            "type": "object",
            "description": "Target identity, echoed in labels, payloads and evidence.",
            "required": ["id", "name", "type", "endpoint", "executionMode"],
            "additionalProperties": False,
            "properties": {
                "id": _ident("Target id."),
                "name": _text("Target name."),
                "type": {"type": "string", "enum": list(TARGET_TYPES)},
                "endpoint": {
                    "type": "string",
                    "pattern": r"^[^\u0000-\u001f\u007f\s]{1,512}$",
                    "description": "Target endpoint (URL userinfo is redacted).",
                },
                "executionMode": {
                    "type": "string",
                    "pattern": r"^[A-Za-z][A-Za-z0-9_-]{0,63}$",
                    "description": "How tasks reach the target (agent, ssh, lab-bridge, ...).",
                },
            },
        },
        "tenant": _text("Tenant."),
        "environment": _text("Environment."),
        "application": _text("Application."),
        "strategy": {"type": "string", "enum": list(STRATEGIES)},
        "strategyConfig": {
            "type": "object",
            "description": "Request strategy config; slot keys override the default slot.",
            "properties": {
                "slot": _slot("Slot requested by the strategy config."),
                "deployment.slot": _slot("Alias of slot."),
                "variantId": _slot("A/B variant id (becomes the slot)."),
                "activeSlot": _slot("Slot currently serving traffic."),
                "controlSlot": _slot(
                    "Slot that keeps the control traffic and gets it all back on a rollback (default active)."
                ),
                # JSON booleans only: a string such as "false" would otherwise read as on
                "autoRollbackOnFailure": {"type": "boolean", "description": "One automatic rollback (default true)."},
                "rollbackOnFailure": {"type": "boolean", "description": "Alias of autoRollbackOnFailure."},
                "waitForHealthCheck": {"type": "boolean", "description": "Run the post-deploy probes (default true)."},
                "requireTrafficAdapter": {
                    "type": "boolean",
                    "description": "Fail closed when no traffic adapter runs (default false).",
                },
            },
        },
        "slot": _slot("Explicit slot: active, canary, blue, green or a variant id."),
        "variantId": _slot("A/B variant id (becomes the slot)."),
        "activeSlot": _slot("Slot currently serving traffic (blue-green)."),
        "jobId": _ident("Deployment job id (default: derived from the inputs)."),
        "taskId": _ident("Deployment task id (default: derived from the inputs)."),
        "projectName": {
            "type": "string",
            "pattern": _PROJECT,
            "description": "Explicit Compose project; the non-active slot is appended.",
        },
        "workDirectory": {
            "type": "string",
            "pattern": _ABS_PATH,
            "description": "Absolute directory holding the project directories.",
        },
        "secretEnv": {
            "type": "object",
            "description": "Secret environment; values only reach .env.stella (mode 0600).",
            "propertyNames": {"pattern": _ENV_NAME},
            "additionalProperties": {"type": "string", "maxLength": 65536},
        },
        "hooks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "phase", "command"],
                "additionalProperties": False,
                "properties": {
                    "name": _text("Hook name."),
                    "phase": {"type": "string", "enum": list(HOOK_PHASES)},
                    "interpreter": {"type": "string", "pattern": r"^[^\u0000-\u001f\u007f]{1,256}$"},
                    "command": {"type": "string", "minLength": 1, "maxLength": 65536},
                    "workingDirectory": {"type": "string", "pattern": _ABS_PATH},
                    "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 86400},
                    "failurePolicy": {"type": "string", "enum": list(FAILURE_POLICIES)},
                    "redactionPolicy": {"type": "string", "enum": list(REDACTION_POLICIES)},
                },
            },
        },
        "scripts": {
            "type": "array",
            "description": "Release script/module nodes for the release.script.graph-proof.v1 proof; a failed proof "
            "fails planning.",
            "items": {
                "type": "object",
                "required": ["moduleName", "scriptId", "phase"],
                "additionalProperties": False,
                "properties": {
                    "moduleName": _text("Module the script belongs to."),
                    "scriptId": _text("Script id, unique within its module."),
                    "scriptVersion": _text("Script version."),
                    "phase": {"type": "string", "enum": ["start", "update"]},
                    "dependencies": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["moduleName", "scriptId"],
                            "additionalProperties": False,
                            "properties": {
                                "moduleName": _text("Depended-on module."),
                                "scriptId": _text("Depended-on script id."),
                                "scriptVersion": _text("Required version of the depended-on script (optional)."),
                            },
                        },
                    },
                },
            },
        },
        "imagePolicy": {
            "type": "object",
            "description": "Image signature policy (docs/trust.md): deploy only images whose cosign signatures "
            "verify with these keys; the job's image_policy keys win. Checked in full by planning "
            "(image_policy_invalid).",
            "additionalProperties": False,
            "properties": {
                "keys": {
                    "type": "array",
                    "description": "PEM public key files on the controller, trusted for every required component.",
                    "items": {"type": "string", "minLength": 1},
                },
                "require": {
                    "type": "boolean",
                    "description": "Signatures required (default true once a key is named).",
                },
                "identity": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Repository a signature must name (default: each component's own registry/repo).",
                },
                "signatureDirectory": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Offline sites: read sha256-<hex>.sig and .payload files here, not the registry.",
                },
                "components": {
                    "type": "object",
                    "description": "Per-component overrides by component name.",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "require": {"type": "boolean"},
                            "keys": {"type": "array", "items": {"type": "string", "minLength": 1}},
                            "identity": {"type": "string", "minLength": 1},
                        },
                    },
                },
            },
        },
        "pullImages": {"type": "boolean", "description": "false marks preloaded/offline images."},
        "backupExisting": {"type": "boolean", "description": "Retain the previous revision (default true)."},
        "emitComposeVersion": {"type": "boolean", "description": 'Emit version: "3.8" in the lock for old readers.'},
        "preflight": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "minimumFreeDiskBytes": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
                "registryReachabilityMode": {"type": "string", "enum": list(REACHABILITY_MODES)},
            },
        },
    },
}

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def schema_errors(instance, schema=None, path=()):
    """Every violation of the supported JSON Schema subset, as ``(path_tuple, message)``.

    Supported keywords: type, enum, pattern, minLength, maxLength, minimum, maximum, properties,
    required, additionalProperties, propertyNames, items, minItems, maxItems.
    """
    schema = RELEASE_SCHEMA if schema is None else schema
    errors = []
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_TYPES[name](instance) for name in names):
            errors.append((path, "must be of type %s" % " or ".join(names)))
            return errors
    if "enum" in schema and instance not in schema["enum"]:
        errors.append((path, "must be one of %s" % ", ".join(json.dumps(v) for v in schema["enum"])))
    if isinstance(instance, str):
        if "minLength" in schema and len(instance) < schema["minLength"]:
            errors.append((path, "must be at least %d characters" % schema["minLength"]))
        if "maxLength" in schema and len(instance) > schema["maxLength"]:
            errors.append((path, "must be at most %d characters" % schema["maxLength"]))
        if "pattern" in schema and not re.search(schema["pattern"], instance):
            errors.append((path, "does not match %s" % schema["pattern"]))
    if _TYPES["number"](instance):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append((path, "must be >= %s" % schema["minimum"]))
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append((path, "must be <= %s" % schema["maximum"]))
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            errors.append((path, "must have at least %d items" % schema["minItems"]))
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errors.append((path, "must have at most %d items" % schema["maxItems"]))
        if "items" in schema:
            for index, item in enumerate(instance):
                errors.extend(schema_errors(item, schema["items"], path + (index,)))
    if isinstance(instance, dict):
        for name in schema.get("required", ()):
            if name not in instance:
                errors.append((path + (name,), "is required"))
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key in sorted(instance, key=str):
            if "propertyNames" in schema:
                for _sub, message in schema_errors(key, schema["propertyNames"], ()):
                    errors.append((path + (key,), "property name " + message))
            if key in properties:
                errors.extend(schema_errors(instance[key], properties[key], path + (key,)))
            elif extra is False:
                errors.append((path + (key,), "is not an allowed property"))
            elif isinstance(extra, dict):
                errors.extend(schema_errors(instance[key], extra, path + (key,)))
    return errors


def validate_release(release):
    """Validate ``release`` against the schema and the semantic rules; raise ``StellaError(release_invalid)``.

    The message names the offending field (``components[0].image``) so a playbook author can fix it.
    Probe configuration (every ``healthProbe.*`` key) is checked here too, with the probe parser, and
    fails with ``health_probe_config_invalid`` naming the component and the key (``field`` in evidence).
    """
    errors = schema_errors(release)
    if errors:
        parts, message = errors[0]
        _fail(parts, message)
    _no_trailing_newline(release, RELEASE_SCHEMA, ())
    check_values(release)
    seen = {}
    for index, component in enumerate(release["components"]):
        name = component["name"]
        if name in seen:
            _fail(("components", index, "name"), "duplicates components[%d].name %r" % (seen[name], name))
        seen[name] = index
        try:
            parse_image_ref(component["image"])
        except StellaError as exc:
            _fail(("components", index, "image"), "is not a valid image reference: %s" % exc.reason)
        config = component.get("config", {})
        for key, value in config.items():
            here = ("components", index, "config", key)
            if key.startswith("env."):
                env = key[4:]
                if not re.fullmatch(_ENV_NAME[1:-1], env):
                    _fail(here, "must name an environment variable (env.NAME)")
                if env.upper().startswith("STELLA_"):
                    _fail(here, "uses the reserved STELLA_ prefix")
                if isinstance(value, list):
                    _fail(here, "must be a string, integer or boolean")
                if env in release.get("secretEnv", {}):
                    _fail(here, "is also a secretEnv key")
            elif key.startswith("healthcheck."):
                _check_healthcheck(here, key[12:], value)
            elif key.startswith(PROBE_PREFIX):
                continue  # the probe parser below owns every healthProbe.* value
            elif isinstance(value, list):
                _fail(here, "must be a string, integer or boolean (lists only for healthcheck.test)")
        for port_index, port in enumerate(component.get("ports", [])):
            check_port(port, ("components", index, "ports", port_index))
    for key in ("workDirectory",):
        if key in release and ("/../" in release[key] + "/" or "/./" in release[key] + "/"):
            _fail((key,), "must not contain . or .. segments")
    for index, hook in enumerate(release.get("hooks", [])):
        if "workingDirectory" in hook and "/../" in hook["workingDirectory"] + "/":
            _fail(("hooks", index, "workingDirectory"), "must not contain .. segments")
        check_hook(hook, index)
    validate_probe_config(release["components"])
    return release


def _no_trailing_newline(instance, schema, path):
    """Python's ``$`` (used by ``re.search`` here and in ``jsonschema``) also matches before a final
    newline; a patterned string must not end with one."""
    if isinstance(instance, str):
        if "pattern" in schema and instance.endswith("\n"):
            _fail(path, "must not end with a newline")
    elif isinstance(instance, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in instance.items():
            if "propertyNames" in schema and key.endswith("\n"):
                _fail(path + (key,), "property name must not end with a newline")
            sub = properties.get(key, extra if isinstance(extra, dict) else {})
            _no_trailing_newline(value, sub, path + (key,))
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(instance):
            _no_trailing_newline(item, schema["items"], path + (index,))


_DURATION = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|ms|s|m|h))+\Z")
HEALTHCHECK_KEYS = ("test", "interval", "timeout", "retries", "start_period", "start_interval", "disable")


def _check_healthcheck(here, name, value):
    if name not in HEALTHCHECK_KEYS:
        _fail(here, "is not a supported healthcheck key (%s)" % ", ".join(HEALTHCHECK_KEYS))
    if name == "test":
        if isinstance(value, list):
            if not value or value[0] not in ("CMD", "CMD-SHELL", "NONE"):
                _fail(here, "as a list must start with CMD, CMD-SHELL or NONE")
        elif not isinstance(value, str) or not value:
            _fail(here, "must be a non-empty string or a list")
    elif name == "retries":
        if isinstance(value, bool) or not (
            (isinstance(value, int) and value >= 0) or (isinstance(value, str) and re.fullmatch(r"[0-9]{1,15}", value))
        ):
            _fail(here, "must be a non-negative integer")
    elif name == "disable":
        if not isinstance(value, bool):
            _fail(here, "must be a boolean")
    elif not isinstance(value, str) or not _DURATION.match(value):
        _fail(here, "must be a Go duration such as 10s or 1m30s")


def normalize_release(release):
    """Validate and return a deep copy with defaults filled in (no I/O, input untouched)."""
    validate_release(release)
    data = copy.deepcopy(release)
    data.setdefault("workDirectory", DEFAULT_WORK_DIRECTORY)
    if len(data["workDirectory"]) > 1:
        data["workDirectory"] = data["workDirectory"].rstrip("/")
    data.setdefault("strategyConfig", {})
    data.setdefault("secretEnv", {})
    data.setdefault("hooks", [])
    data.setdefault("scripts", [])
    data.setdefault("backupExisting", True)
    data.setdefault("emitComposeVersion", False)
    data.setdefault("preflight", {})
    for component in data["components"]:
        component.setdefault("config", {})
        component["ports"] = [str(port) for port in component.get("ports", [])]
    return data


def schema_document():
    """The bytes of ``docs/schemas/release-input.schema.json`` (2-space indent, sorted keys, LF)."""
    return (json.dumps(RELEASE_SCHEMA, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode("utf-8")
