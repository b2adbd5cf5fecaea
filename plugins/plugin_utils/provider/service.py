# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The service Compose hands the provider, as the deployment sees it:

- :func:`release_from`: the release input of the deployment from the options and, when Compose
  answers ``get-service-config`` (:func:`service_config`), the service definition;
- its published ports (:func:`published_ports`, :func:`host_port`) and the relay endpoints that
  publish them (:func:`relay_forwards`, :func:`relay_listen`, :func:`publish_lines`);
- :func:`setenv_lines`, :func:`rawsetenv_lines`: the facts dependents receive, identical on every ``up``
  (:func:`raw_environment`: which fact each ``rawsetenv`` variable names).
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider.arguments import FACTS, default_work_directory
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider.protocol import ProviderError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.checks import split_port

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _pairs(values, what):
    out = {}
    for value in values or []:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise ProviderError("invalid_option", "%s %r is not NAME=VALUE" % (what, value))
        out[name] = rest
    return out


def _service_ports(config):
    ports = []
    for entry in (config or {}).get("ports") or []:
        if isinstance(entry, dict) and entry.get("target"):
            published = entry.get("published")
            ports.append("%s:%s" % (published, entry["target"]) if published else str(entry["target"]))
        elif isinstance(entry, str):
            ports.append(entry)
    return ports


def published_ports(ports):
    """``(host address or None, host port, container port)`` of each TCP port published on one host
    port (ranges and unpublished ports left out) (pure)."""
    out = []
    for entry in ports or []:
        address, host, container, protocol = split_port(entry)
        if protocol == "tcp" and host.isdigit() and container.isdigit():
            out.append((address or None, host, container))
    return out


def host_port(ports):
    """The host side of the first published TCP port (``None`` when no port is published) (pure)."""
    published = published_ports(ports)
    return published[0][1] if published else None


def relay_forwards(ports):
    """The ``stella_relay`` forwards of the published ports: the container port consumers know,
    reached on this host at the published port (pure)."""
    forwards = []
    for address, host, container in published_ports(ports):
        upstream = address if address and address not in ("0.0.0.0", "::") else "127.0.0.1"
        forwards.append(
            {"port": int(container), "upstream_host": upstream, "upstream_port": int(host), "listen_port": 0}
        )
    return forwards


def relay_listen(answer):
    """``(gateway or None, network name or None)`` from Compose's answer to ``get-relay-info``. The
    name is for logs only (under Docker Desktop it names no network) (pure)."""
    for network in (answer or {}).get("networks") or []:
        if isinstance(network, dict) and network.get("gateway"):
            return str(network["gateway"]), network.get("name")
    networks = (answer or {}).get("networks") or [{}]
    return None, networks[0].get("name") if isinstance(networks[0], dict) else None


def publish_lines(endpoints):
    """``publish-endpoint`` messages from the relay's endpoints: an address is published exactly as
    bound, a loopback one as ``localhost`` (Compose translates it to ``host.docker.internal``) (pure)."""
    lines = []
    for endpoint in endpoints or []:
        port, _sep, where = endpoint.partition("=")
        address, _sep, listen = where.rpartition(":")
        lines.append("%s=%s:%s" % (port, "localhost" if address in LOOPBACK else address, listen))
    return lines


def raw_environment(values):
    """``{NAME: FACT}`` from the ``raw_environment`` option, checked before anything runs (pure)."""
    out = _pairs(values, "raw_environment")
    for name, fact in sorted(out.items()):
        if fact not in FACTS:
            raise ProviderError(
                "invalid_option", "raw_environment %s=%s: the fact must be one of %s" % (name, fact, ", ".join(FACTS))
            )
    return out


def rawsetenv_lines(raw, facts):
    """``NAME=VALUE`` lines for ``rawsetenv``, sorted (facts without a value left out) (pure)."""
    return ["%s=%s" % (name, facts[raw[name]]) for name in sorted(raw) if facts.get(raw[name]) is not None]


def service_config(answer):
    """Compose's answer to ``get-service-config`` checked (pure): a JSON object whose ``image`` is a
    string, ``ports`` a list, ``environment`` an object or a list and ``healthcheck`` an object, each
    when present; ``compose_protocol`` otherwise."""
    if not isinstance(answer, dict):
        raise ProviderError(
            "compose_protocol", "Compose answered get-service-config with %s, not a JSON object" % type(answer).__name__
        )
    for key, kinds in (("image", (str,)), ("ports", (list,)), ("environment", (dict, list)), ("healthcheck", (dict,))):
        if answer.get(key) is not None and not isinstance(answer[key], kinds):
            raise ProviderError(
                "compose_protocol",
                "Compose answered get-service-config with a %s that is %s" % (key, type(answer[key]).__name__),
            )
    if isinstance(answer.get("environment"), list):
        answer = dict(answer, environment=_pairs(answer["environment"], "environment"))
    return answer


def release_from(parsed, service_config=None):
    """The release input (docs/release-input.md) of the provider service, from the options and, when
    given, Compose's resolved service definition (the options win)."""
    options = parsed["options"]
    config = service_config or {}
    image = options.get("image") or config.get("image")
    if not image:
        raise ProviderError(
            "provider_option_missing",
            "the provider option 'image' is required (provider: "
            "{type: stella, options: {image: registry/repository:tag}}): this Compose did not send "
            "the service definition",
        )
    ports = options.get("ports") or _service_ports(config)
    environment = dict(config.get("environment") or {})
    environment.update(_pairs(options.get("environment"), "environment"))
    component = {
        "name": parsed["service"] or "service",
        "image": image,
        "ports": list(ports),
        "config": {"env." + k: "" if v is None else str(v) for k, v in sorted(environment.items())},
    }
    health = (config.get("healthcheck") or {}).get("test")
    if health and not (config.get("healthcheck") or {}).get("disable"):
        component["config"]["healthcheck.test"] = health
    port = options.get("health_port") or host_port(ports)
    if port:
        component["config"].update(
            {
                "healthProbe.type": "http",
                "healthProbe.port": int(port),
                "healthProbe.path": options.get("health_path") or "/",
            }
        )
    service = parsed["service"] or "service"
    return {
        "release": {
            "id": "%s-%s" % (service, options.get("version") or "0.0.0"),
            "name": options.get("release_name") or service,
            "version": options.get("version") or "0.0.0",
        },
        "tenant": options.get("tenant") or "default",
        "environment": options.get("environment_name") or "local",
        "application": "%s-%s" % (parsed["project"], service),
        "strategy": options.get("strategy") or "rolling",
        "strategyConfig": {"autoRollbackOnFailure": options.get("auto_rollback", "true") != "false"},
        "workDirectory": options.get("work_directory") or default_work_directory(),
        "target": {"type": "ComposeHost"},
        "components": [component],
    }


def setenv_lines(facts):
    """``KEY=VALUE`` lines for dependents, sorted, from the deployment's facts (``None`` values left out)."""
    return ["%s=%s" % (key, facts[key]) for key in sorted(facts) if facts[key] is not None]
