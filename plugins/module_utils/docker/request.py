# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""A DockerHost deployment's request: its ``docker.run`` payloads (one per container, all of one
release, target and project) parsed into one deployment, and the ``docker run`` arguments each
container is started with, its healthcheck included. Pure and standard library only.
"""

from __future__ import annotations

import json
import os
import shlex

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import hooks as _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import DOCKER_RUN
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CONTAINER_NAME_RE,
    LABEL_MANIFEST_HASH,
    invalid,
)


def parse_request(payload=None, options=None):
    """One container's ``docker.run`` request from the verbatim payload and/or options."""
    request = DOCKER_RUN.parse(payload, options)
    if not parse_image_ref(request["image"]).digest:
        raise invalid("Image %r must be pinned by digest (registry/repository:tag@sha256:...)" % request["image"])
    if not CONTAINER_NAME_RE.match(request["name"]):
        raise invalid("Name %r is not a valid container name" % request["name"])
    request["hooks"] = _hooks.normalize_hooks(request["hooks"])
    request["ports"] = [str(p) for p in request["ports"]]
    request["manifest_hash"] = request["manifest_hash"] or request["labels"].get(LABEL_MANIFEST_HASH)
    variables = request.pop("Variables") or {}
    request["project_name"] = variables.get("projectName") or request["name"]
    request["service"] = variables.get("componentName") or request["name"]
    directory = variables.get("projectDirectory") or os.path.join(request["work_directory"], request["project_name"])
    if not isinstance(directory, str) or not directory.startswith("/") or ".." in directory.split("/"):
        raise invalid("project directory %r must be an absolute path without '..'" % (directory,))
    request["project_directory"] = directory
    request["env_file"] = request.pop("EnvFile")
    request["config"] = request.pop("Config", None) or {}
    return request


def parse_deployment(payloads, options=None, version_sticker=None):
    """The containers of one DockerHost release on this target (one ``docker.run`` payload each).

    Every payload must name the same target, project directory, manifest hash and hooks (hooks run
    once per deployment), with distinct container names. ``version_sticker``: the release's
    ``stella.version.json``, committed after every container verified.
    """
    if not payloads:
        raise invalid("docker.run needs at least one payload")
    requests = [parse_request(payload, options) for payload in payloads]
    first = requests[0]
    for request in requests[1:]:
        for key in ("target", "project_directory", "manifest_hash", "hooks", "project_name"):
            if request[key] != first[key]:
                raise invalid(
                    "docker.run payloads of one deployment differ in %s (%s and %s)"
                    % (key, first["name"], request["name"])
                )
    names = [r["name"] for r in requests]
    if len(set(names)) != len(names):
        raise invalid("docker.run payloads name the same container twice: %s" % ", ".join(sorted(names)))
    sticker = None
    if version_sticker is not None:
        sticker = version_sticker.encode("utf-8")
        try:
            parsed = json.loads(sticker)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise invalid("the version sticker is not a JSON object")
        for key, want in (("manifestHash", first["manifest_hash"]), ("projectName", first["project_name"])):
            if parsed.get(key) != want:
                raise invalid("the version sticker's %s is %r, the payloads say %r" % (key, parsed.get(key), want))
    return {
        "containers": requests,
        "target": first["target"],
        "project_name": first["project_name"],
        "project_directory": first["project_directory"],
        "manifest_hash": first["manifest_hash"],
        "hooks": first["hooks"],
        "sticker": sticker,
    }


def container_run_argv(request, name=None):
    """``docker run`` arguments (after ``run --detach``) for a docker.run request (pure)."""
    argv = ["--name", name or request["name"], "--restart", "unless-stopped"]
    for key in sorted(request["labels"]):
        argv += ["--label", "%s=%s" % (key, request["labels"][key])]
    argv += ["--label", "stella.container.name=%s" % request["name"]]
    for key in sorted(request["environment"]):
        argv += ["--env", "%s=%s" % (key, request["environment"][key])]
    if request.get("env_file"):
        argv += ["--env-file", request["env_file"]]
    for port in request["ports"]:
        argv += ["--publish", port]
    argv += health_argv(request.get("config") or {})
    argv.append(request["image"])
    return argv


def health_argv(config):
    """``docker run`` healthcheck flags from the component's ``healthcheck.*`` config keys (pure), the
    same keys the Compose lock renders: ``test`` (a shell string, or a ``CMD``/``CMD-SHELL`` list),
    ``interval``, ``timeout``, ``start_period``, ``start_interval``, ``retries``, ``disable``."""
    keys = {key[len("healthcheck.") :]: value for key, value in config.items() if key.startswith("healthcheck.")}
    if keys.get("disable") in (True, "true"):
        return ["--no-healthcheck"]
    argv = []
    test = keys.get("test")
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        test = test[1] if test[0] == "CMD-SHELL" and len(test) == 2 else shlex.join(str(t) for t in test[1:])
    elif isinstance(test, list):
        test = shlex.join(str(t) for t in test)
    if test:
        argv += ["--health-cmd", str(test)]
    for name in ("interval", "timeout", "start_period", "start_interval"):
        if name in keys:
            argv += ["--health-%s" % name.replace("_", "-"), str(keys[name])]
    if "retries" in keys:
        argv += ["--health-retries", str(int(keys["retries"]))]
    return argv
