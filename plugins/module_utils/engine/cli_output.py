# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What the Docker and Docker Compose v2 CLI print, read: JSON documents and JSON lines, versions,
the Compose plugin, addresses, container and image summaries, RepoDigests, and the stable code of an
error text.

Pure functions that unit tests drive with captured real output; :class:`engine.cli.DockerCli` runs the
commands and reads their output with them. Standard library only: this runs on target hosts.
"""

from __future__ import annotations

import json
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref

_DAEMON_DOWN_RE = re.compile(
    r"(Cannot connect to the Docker daemon|Is the docker daemon running|"
    r"error during connect|connect: no such file or directory)",
    re.I,
)
_COMPOSE_MISSING_RE = re.compile(
    r"('compose' is not a docker command|unknown command: docker compose|"
    r"unknown shorthand flag: 'f' in -f|is not a docker command)",
    re.I,
)


def ignore_warning(_message):
    """A ``warn`` that drops the message."""
    return None


def parse_json_documents(text, warn=ignore_warning):
    """Parse ``text`` as one JSON array/object or as JSON lines; return a list of objects.

    ``docker compose ps --format json`` printed one array before v2.21 and one object per line
    since; ``docker inspect`` prints an array. Lines that are not JSON become warnings.
    """
    text = (text or "").strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        value = None
        items = []
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                item = json.loads(line)
            except ValueError:
                warn("ignoring non-JSON output line: %s" % line[:200])
                continue
            if isinstance(item, list):
                items.extend(item)
            else:
                items.append(item)
        return [item for item in items if isinstance(item, dict)]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    if isinstance(value, dict):
        return [value]
    warn("ignoring unexpected JSON value of type %s" % type(value).__name__)
    return []


def parse_docker_version(text):
    """``docker version --format '{{json .}}'`` -> client/server versions (server ``None`` when down)."""
    docs = parse_json_documents(text)
    if not docs:
        raise StellaError("runtime_missing", "docker version printed no JSON")
    data = docs[0]
    client = data.get("Client") or {}
    server = data.get("Server") or {}
    components = {}
    for component in server.get("Components") or []:
        if isinstance(component, dict) and component.get("Name"):
            components[component["Name"]] = component.get("Version")
    return {
        "client": client.get("Version"),
        "clientApiVersion": client.get("ApiVersion"),
        "server": server.get("Version") if server else None,
        "serverApiVersion": server.get("ApiVersion") if server else None,
        "os": server.get("Os") if server else client.get("Os"),
        "arch": server.get("Arch") if server else client.get("Arch"),
        "components": components,
    }


def parse_compose_version(text):
    """``docker compose version --format json`` (or its plain form) -> ``"2.40.3"``."""
    text = (text or "").strip()
    version = None
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            version = value.get("version")
    except ValueError:
        match = re.search(r"v?(\d+\.\d+\.\d+[^\s,]*)", text)
        version = match.group(1) if match else None
    if not version:
        raise StellaError("compose_missing", "could not read the Docker Compose version from %r" % text[:200])
    return version[1:] if version.startswith("v") else version


def compose_plugin(info):
    """The Compose v2 plugin as ``docker info`` lists it among the CLI's plugins (pure).

    Returns ``(version, error)``: the version (``"2.40.3"``) when the plugin is listed and answered
    the CLI's metadata question, else ``None`` with why. ``(None, None)`` when the CLI lists no
    plugins at all (a CLI too old to say, or no JSON): then only ``docker compose version`` can tell.
    """
    plugins = ((info or {}).get("ClientInfo") or {}).get("Plugins")
    if not isinstance(plugins, list):
        return None, None
    for plugin in plugins:
        if isinstance(plugin, dict) and plugin.get("Name") == "compose":
            if plugin.get("Err"):
                return None, str(plugin["Err"])
            version = str(plugin.get("Version") or "")
            if not version:
                return None, "the compose plugin at %s reports no version" % plugin.get("Path")
            return (version[1:] if version.startswith("v") else version), None
    return None, "docker info lists no compose plugin ('compose' is not a docker command)"


def parse_ip_addresses(text):
    """``ip -j addr`` -> sorted list of the host's addresses (all families, loopback included)."""
    addresses = set()
    for iface in parse_json_documents(text):
        for info in iface.get("addr_info") or []:
            local = info.get("local")
            if local:
                addresses.add(local)
    return sorted(addresses)


def container_summary(inspect):
    """The evidence we keep about one container from its ``docker inspect`` entry."""
    state = inspect.get("State") or {}
    config = inspect.get("Config") or {}
    health = state.get("Health") or {}
    networks = ((inspect.get("NetworkSettings") or {}).get("Networks")) or {}
    ips = {}
    for net_name in sorted(networks):
        address = (networks[net_name] or {}).get("IPAddress")
        if address:
            ips[net_name] = address
    labels = config.get("Labels") or {}
    return {
        "id": inspect.get("Id"),
        "name": (inspect.get("Name") or "").lstrip("/"),
        "state": state.get("Status"),
        "running": bool(state.get("Running")),
        "exitCode": state.get("ExitCode"),
        "restarting": bool(state.get("Restarting")),
        "restartCount": inspect.get("RestartCount") or 0,
        "health": health.get("Status") or "none",
        "startedAt": state.get("StartedAt"),
        "imageId": inspect.get("Image"),
        "image": config.get("Image"),
        "labels": dict(labels),
        "ipAddresses": ips,
        "ipAddress": next(iter(ips.values()), None),
        "service": labels.get("com.docker.compose.service"),
        "project": labels.get("com.docker.compose.project"),
    }


def image_summary(inspect):
    """Id and RepoDigests of one ``docker image inspect`` entry."""
    return {
        "id": inspect.get("Id"),
        "repoDigests": list(inspect.get("RepoDigests") or []),
        "repoTags": list(inspect.get("RepoTags") or []),
        "architecture": inspect.get("Architecture"),
        "os": inspect.get("Os"),
    }


def _normalized_name(name):
    """``registry/repository`` with Docker Hub's implicit ``docker.io/library/`` made explicit."""
    ref = parse_image_ref(name)
    return ref.name


def repo_digests_contain(repo_digests, image_ref):
    """True when ``RepoDigests`` holds ``<registry/repository>@<pinned digest>`` of ``image_ref``."""
    ref = parse_image_ref(image_ref)
    if not ref.digest:
        return False
    for entry in repo_digests or []:
        name, sep, digest = entry.partition("@")
        if not sep or digest != ref.digest:
            continue
        try:
            if _normalized_name(name) == ref.name:
                return True
        except StellaError:
            continue
    return False


def classify_failure(stderr, default_code):
    """Map a Docker CLI error text to a stable code."""
    text = stderr or ""
    if _DAEMON_DOWN_RE.search(text):
        return "runtime_daemon_unavailable"
    if _COMPOSE_MISSING_RE.search(text):
        return "compose_missing"
    return default_code


def one_line(text, limit=400):
    """The most telling line of a tool's error output, on one line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [
        line for line in lines if re.search(r"error|denied|not found|unknown|failed|unhealthy|exited", line, re.I)
    ]
    line = (errors or lines or [""])[-1]
    return line[:limit]


def runtime_summary(docker, compose):
    """The runtime facts every result records (pure)."""
    return {
        "dockerClientVersion": docker["client"],
        "dockerServerVersion": docker["server"],
        "dockerApiVersion": docker["serverApiVersion"],
        "composeVersion": compose,
        "os": docker["os"],
        "arch": docker["arch"],
    }
