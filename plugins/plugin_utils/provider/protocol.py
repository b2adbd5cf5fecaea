# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Compose provider protocol, as the ``stella`` command speaks it (no I/O of its own but the
streams it is given).

- :func:`parse_argv`: ``compose [--project-name=NAME | --project-name NAME] <command> --key=value ...
  [SERVICE]`` in every form released Compose versions send (options in any order, repeated flags
  for lists, unknown options kept aside, no service name from Compose 2.35).
- :data:`METADATA`: every option of every command (Compose passes only declared options).
- :class:`Channel`: JSON lines on stdout, gated by ``COMPOSE_PROVIDER_MESSAGES`` (absent: only
  ``info``, ``error``, ``setenv``, ``debug``), requests answered on stdin (EOF: the running Compose
  does not support provider requests).
- :class:`ChunkedReader`: the chunked ``image-stream`` of ``get-image``, decoded incrementally; a
  stream without its zero-length chunk is truncated and raises.
- :func:`release_from`: the release input of the deployment from the options and, when Compose
  answers ``get-service-config``, the service definition.
- :func:`setenv_lines`: the facts dependents receive, identical on every ``up``.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_KEEP_REVISIONS,
    DEFAULT_WORK_DIRECTORY,
    keep_revisions_problem,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.checks import split_port

BASE_MESSAGES = ("info", "error", "setenv", "debug")
FACTS = ("URL", "HOST", "PORT", "DIGEST", "SLOT", "PROJECT", "MANIFEST_HASH")
RELAY_MODES = ("auto", "off")
LOOPBACK = ("127.0.0.1", "::1", "localhost")
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
REPEATED_OPTIONS = set()


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
_CHUNK_SIZE = re.compile(rb"^[0-9A-Fa-f]{1,16}\Z")
_OPTION = re.compile(r"^--([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=(.*))?\Z", re.S)


class ProviderError(StellaError):
    """A failure reported to Compose as the one ``error`` line."""


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


# Messages that only render progress: left out when Compose does not announce them.
PROGRESS_MESSAGES = ("info", "debug")


def pull_decision(source, policy, known, digest=None):
    """What ``pull`` does (pure): ``"up_to_date"``, ``"load"`` (ask Compose for the local image's bytes)
    or ``"resolve"`` (resolve the reference in its registry). ``known``: the bookkeeping entry of the
    image (``{}`` when none); ``digest``: the local daemon cache's id Compose announced.

    - ``source=local``: the desired state is the local daemon's image, so the announced digest must be
      the one ingested, whatever the policy (an ``up --build`` that rebuilt the image is loaded again);
      without an announced digest, ``missing`` takes any version already ingested, ``always`` loads;
    - ``source=registry``: ``policy=missing`` (the ``up`` path) takes a version already ingested,
      ``policy=always`` (``docker compose pull``) resolves the reference anew.
    """
    if policy not in ("missing", "always"):
        raise ProviderError("invalid_option", "--policy must be missing or always, not %r" % (policy,))
    ingested = bool(known) and known.get("source") == source
    if source == "local":
        if ingested and (known.get("digest") == digest if digest else policy == "missing"):
            return "up_to_date"
        return "load"
    if ingested and policy == "missing" and known.get("digest"):
        return "up_to_date"
    return "resolve"


def allowed_messages(environ):
    """The message types this Compose accepts: ``COMPOSE_PROVIDER_MESSAGES``, else the base four."""
    announced = environ.get("COMPOSE_PROVIDER_MESSAGES")
    if announced is None:
        return frozenset(BASE_MESSAGES)
    return frozenset(item.strip() for item in announced.split(",") if item.strip())


class Channel:
    """JSON lines to Compose on ``out``; answers from Compose on ``inp`` (binary streams)."""

    def __init__(self, out, inp, environ):
        self.out = out
        self.inp = inp
        self.allowed = allowed_messages(environ)
        self.sent = []

    def can(self, kind):
        return kind in self.allowed

    def send(self, kind, message, **extra):
        """Emit one message; ``True`` when it was sent. A progress message (``info``, ``debug``) this
        Compose did not announce is left out (``False``): it only renders. Any other kind it did not
        announce fails loudly (``compose_unsupported``): the result would be incomplete without it."""
        if not self.can(kind):
            if kind in PROGRESS_MESSAGES:
                return False
            raise ProviderError(
                "compose_unsupported",
                "this Compose does not announce %s in COMPOSE_PROVIDER_MESSAGES, and the result needs it" % kind,
            )
        if kind in ("setenv", "rawsetenv") and "=" not in message:
            raise ProviderError("internal_error", "%s message without '=' would abort Compose" % kind)
        line = dict({"type": kind, "message": " ".join(str(message).split()) if kind == "error" else message}, **extra)
        self.out.write(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        self.out.flush()
        self.sent.append(line)
        return True

    def request(self, kind, message=None, **extra):
        """Send a request and read its one-line JSON answer; EOF means this Compose cannot answer."""
        if not self.can(kind):
            raise ProviderError(
                "compose_unsupported", "this Compose does not announce %s in COMPOSE_PROVIDER_MESSAGES" % kind
            )
        line = {"type": kind}
        if message is not None:
            line["message"] = message
        line.update(extra)
        self.out.write(json.dumps(line, sort_keys=True).encode("utf-8") + b"\n")
        self.out.flush()
        answer = self.inp.readline()
        if not answer:
            raise ProviderError(
                "compose_unsupported",
                "Compose did not answer %s (its stdin closed): this Compose "
                "version does not support provider requests" % kind,
            )
        try:
            return json.loads(answer)
        except ValueError:
            raise ProviderError("compose_protocol", "Compose answered %s with a line that is not JSON" % kind) from None


class TruncatedStream(ProviderError):
    pass


class ChunkedReader:
    """HTTP/1.1 chunked data from ``stream`` (RFC 9112 7.1) without trailers or a final CRLF: the byte
    after the zero-length chunk belongs to the next answer. :meth:`chunks` yields the data in pieces
    of at most ``piece`` bytes, so memory stays constant."""

    def __init__(self, stream, piece=1 << 16):
        self.stream = stream
        self.piece = piece
        self.total = 0

    def _line(self):
        line = self.stream.readline(4096)
        if not line.endswith(b"\n"):
            raise TruncatedStream(
                "image_stream_truncated",
                "the image stream ended before its last chunk (after %d bytes); it was discarded" % self.total,
            )
        return line

    def chunks(self):
        while True:
            header = self._line().rstrip(b"\r\n").split(b";", 1)[0]
            if not _CHUNK_SIZE.match(header):  # hex digits only: no sign, prefix, spaces or underscores
                raise ProviderError("image_stream_invalid", "bad chunk size line %r" % header[:40])
            size = int(header, 16)
            if size == 0:
                return
            left = size
            while left:
                data = self.stream.read(min(left, self.piece))
                if not data:
                    raise TruncatedStream(
                        "image_stream_truncated",
                        "the image stream ended inside a chunk (after %d bytes); it was discarded" % self.total,
                    )
                left -= len(data)
                self.total += len(data)
                yield data
            if self.stream.read(2) != b"\r\n":
                raise TruncatedStream(
                    "image_stream_truncated",
                    "a chunk of the image stream was not terminated (after %d bytes); it was discarded" % self.total,
                )


def keep_revisions(options):
    """The ``keep_revisions`` option as a count (``0``: keep all); anything else is ``invalid_option``."""
    value = options.get("keep_revisions")
    if value is None or value == "":
        return DEFAULT_KEEP_REVISIONS
    if keep_revisions_problem(value):
        raise ProviderError("invalid_option", keep_revisions_problem(value))
    return int(value)


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
