# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The command line Compose runs the provider with, and what the provider declares of it.

- :func:`parse_argv`: ``compose [--project-name=NAME | --project-name NAME] <command> --key=value ...
  [SERVICE]`` in every form released Compose versions send (options in any order, repeated flags
  for lists, unknown options kept aside, no service name from Compose 2.35).
- :data:`METADATA`: every option of every command (Compose passes only declared options), each value
  checked as declared (:func:`check_options`) before anything runs.
"""

from __future__ import annotations

import os
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_KEEP_REVISIONS,
    DEFAULT_WORK_DIRECTORY,
    keep_revisions_problem,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider.protocol import ProviderError

FACTS = ("URL", "HOST", "PORT", "DIGEST", "SLOT", "PROJECT", "MANIFEST_HASH")
RELAY_MODES = ("auto", "off")
COMMANDS = ("up", "down", "stop", "pull", "metadata")


def default_work_directory(environ=None, euid=None):
    """Where ``up`` puts project directories unless ``work_directory`` says: the contract's
    ``/var/lib/stella/projects`` for root; for any other user, who cannot write there, a directory of
    their own, ``$XDG_STATE_HOME/stella/projects`` (``~/.local/state/stella/projects`` when unset)."""
    environ = os.environ if environ is None else environ
    euid = (os.geteuid() if hasattr(os, "geteuid") else 0) if euid is None else euid
    if euid == 0:
        return DEFAULT_WORK_DIRECTORY
    state = environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):  # the XDG rule: a relative value is ignored
        state = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "stella", "projects")


# Options that may be given more than once (their values are collected into a list).
REPEATED = "repeated"
REPEATED_OPTIONS: set[str] = set()


def _param(name, description, kind="string", required=False, default=None, enum=None):
    """One parameter of the metadata. ``kind`` ``repeated`` is a string option that may be given more
    than once (the metadata's documented types are string, integer and boolean: it says ``string``)."""
    entry = {
        "name": name,
        "description": description,
        "required": required,
        "type": "string" if kind == REPEATED else kind,
    }
    if kind == REPEATED:
        REPEATED_OPTIONS.add(name)
    if default is not None:
        entry["default"] = default
    if enum:
        entry["enum"] = ",".join(enum)
    return entry


_DEPLOY = [
    _param(
        "image",
        "Image to deploy (registry/repository:tag, pinned to its digest at planning); required unless "
        "Compose answers get-service-config and the service has an image",
    ),
    _param("ports", "Published port HOST:CONTAINER (repeat the option for several)", REPEATED),
    _param("environment", "Container environment NAME=VALUE (repeat the option for several)", REPEATED),
    _param("version", "Release version recorded in the evidence", default="0.0.0"),
    _param("release_name", "Release name recorded in the evidence (default: the service name)"),
    _param("tenant", "Tenant of the deployment", default="default"),
    _param("environment_name", "Environment of the deployment", default="local"),
    _param(
        "strategy",
        "Deployment strategy",
        default="rolling",
        enum=("rolling", "all-at-once", "blue-green", "canary", "a-b"),
    ),
    _param("health_port", "Host port the post-deploy HTTP probe checks (default: the first published port)", "integer"),
    _param("health_path", "Path of the post-deploy HTTP probe", default="/"),
    _param("insecure_registries", "Registries reached over plain HTTP (repeat for several)", REPEATED),
    _param(
        "work_directory",
        "Project directory root on the host (default: %s for root, "
        "$XDG_STATE_HOME/stella/projects or ~/.local/state/stella/projects for any other user)"
        % DEFAULT_WORK_DIRECTORY,
        default=default_work_directory(),
    ),
    _param(
        "state_directory",
        "Where the provider keeps its job store and evidence",
        default="~/.local/state/stellaops/provider",
    ),
    _param("min_engine_version", "Oldest Docker Engine the preflight accepts", default=DEFAULT_MIN_ENGINE),
    _param("min_compose_version", "Oldest Compose plugin the preflight accepts", default=DEFAULT_MIN_COMPOSE),
    _param("auto_rollback", "Roll back automatically when the deployment fails", "boolean", default="true"),
    _param(
        "keep_revisions",
        "How many retained revisions of the project the host keeps (0: all)",
        "integer",
        default=str(DEFAULT_KEEP_REVISIONS),
    ),
    _param(
        "relay",
        "When Compose announces publish-endpoint: auto publishes each TCP port through a relay endpoint "
        "bound to the relay-link gateway only; off publishes nothing",
        default="auto",
        enum=RELAY_MODES,
    ),
    _param(
        "raw_environment",
        "NAME=FACT sent as rawsetenv NAME=<value> (FACT: %s); needs a Compose that announces "
        "rawsetenv (repeat the option for several)" % ", ".join(FACTS),
        REPEATED,
    ),
]
_PULL = [
    _param("image", "The image reference as Compose resolved it", required=True),
    _param(
        "source",
        "Compose's verdict: local (the local daemon's image) or registry",
        required=True,
        enum=("local", "registry"),
    ),
    _param(
        "policy", "missing (the up path) or always (docker compose pull)", required=True, enum=("missing", "always")
    ),
    _param("digest", "Id of the image in the local daemon cache, when it is there"),
    _param("created", "Creation time of the image in the local daemon cache, when it is there"),
    _param("insecure_registries", "Registries reached over plain HTTP (repeat for several)", REPEATED),
    _param("state_directory", "Where the provider keeps its bookkeeping", default="~/.local/state/stellaops/provider"),
]
METADATA = {
    "description": "Deploy the service with the stellaops.runtime Ansible collection under the Stella Ops "
    "runtime contract (digest-pinned, preflighted, verified, with evidence and rollback)",
    "up": {"parameters": _DEPLOY},
    "down": {"parameters": _DEPLOY},
    "stop": {"parameters": _DEPLOY},
    "pull": {"parameters": _PULL},
}
LIST_OPTIONS = frozenset(REPEATED_OPTIONS)
KNOWN = frozenset(p["name"] for p in _DEPLOY + _PULL)
# Compose's names: a project name is lower-case; a service name may not start with '.', '-' or '_'.
PROJECT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,127}\Z")
SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}\Z")
_OPTION = re.compile(r"^--([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=(.*))?\Z", re.S)


def parse_argv(argv):
    """``{"command", "project", "service", "options": {name: value or [values]}, "unknown": {...}}``.

    ``argv`` excludes the program name and may start with ``compose``. Every value is a string, as
    Compose sends it; list options collect repeated flags; an option Compose sends that this
    provider does not declare lands in ``unknown``.
    """
    args = list(argv)
    if args and args[0] == "compose":
        args.pop(0)
    project, command, service, options, unknown = None, None, None, {}, {}
    index = 0
    while index < len(args):
        arg = args[index]
        match = _OPTION.match(arg)
        if match:
            name, value = match.group(1), match.group(2)
            if value is None:
                if index + 1 < len(args) and not args[index + 1].startswith("--"):
                    value = args[index + 1]
                    index += 1
                else:
                    value = "true"
            if name == "project-name":
                project = value
            else:
                target = options if name in KNOWN else unknown
                if name in LIST_OPTIONS:
                    target.setdefault(name, []).append(value)
                elif name in target and target[name] != value:
                    raise ProviderError("invalid_option", "option --%s given twice with different values" % name)
                else:
                    target[name] = value
        elif command is None:
            command = arg
        elif service is None:
            service = arg
        else:
            raise ProviderError("invalid_arguments", "unexpected argument %r after service %r" % (arg, service))
        index += 1
    if command not in COMMANDS:
        raise ProviderError(
            "invalid_arguments",
            "usage: stella compose [--project-name=NAME] %s [--option=value ...] "
            "[SERVICE] (got command %r)" % ("|".join(COMMANDS), command),
        )
    if command != "metadata" and not project:
        raise ProviderError("invalid_arguments", "--project-name is required for %s" % command)
    if project is not None and not PROJECT_NAME.match(project):
        raise ProviderError(
            "invalid_arguments",
            "project name %r is not a Compose project name (lower-case letters, "
            "digits, '-' and '_', starting with a letter or digit)" % project[:80],
        )
    if service is not None and not SERVICE_NAME.match(service):
        raise ProviderError(
            "invalid_arguments",
            "service name %r is not a Compose service name (letters, digits, "
            "'.', '-' and '_', starting with a letter or digit)" % service[:80],
        )
    check_options(command, options)
    return {"command": command, "project": project, "service": service, "options": options, "unknown": unknown}


def check_options(command, options):
    """Every declared option's value as metadata declares it (pure): an ``integer`` is digits, a
    ``boolean`` is ``true`` or ``false``, an ``enum`` one of its values; ``invalid_option`` naming the
    option otherwise, before anything runs."""
    declared = {p["name"]: p for p in (METADATA.get(command) or {}).get("parameters") or []}
    for name, value in sorted(options.items()):
        param = declared.get(name)
        if param is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            if param["type"] == "integer" and not re.match(r"^[0-9]{1,9}\Z", item):
                raise ProviderError("invalid_option", "--%s=%s is not a whole number" % (name, item[:40]))
            if param["type"] == "boolean" and item not in ("true", "false"):
                raise ProviderError("invalid_option", "--%s=%s is not true or false" % (name, item[:40]))
            allowed = param.get("enum", "").split(",") if param.get("enum") else None
            if allowed and item not in allowed:
                raise ProviderError(
                    "invalid_option", "--%s=%s is not one of %s" % (name, item[:40], ", ".join(allowed))
                )


def keep_revisions(options):
    """The ``keep_revisions`` option as a count (``0``: keep all); anything else is ``invalid_option``."""
    value = options.get("keep_revisions")
    if value is None or value == "":
        return DEFAULT_KEEP_REVISIONS
    if keep_revisions_problem(value):
        raise ProviderError("invalid_option", keep_revisions_problem(value))
    return int(value)
