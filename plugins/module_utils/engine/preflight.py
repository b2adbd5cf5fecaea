# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target runtime preflight (contract: "Runtime Modes", "Preflight Evidence").

Two halves:

* :class:`engine.preflight_observer.HostObserver` gathers raw observations on the target (read-only,
  apart from the work directory write probe). All external commands go through an injected
  ``run_command(argv)``.
* :func:`evaluate` is pure: it turns observations and the request into evidence and a list of
  ``{code, reason}`` failures. Every check runs even when an earlier one fails.
"""

from __future__ import annotations

import shutil
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    human_bytes,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    PREFLIGHT_CODES,
    REACHABILITY_MODES,
    TARGET_TYPES,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import COMPOSE_PREFLIGHT
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (
    oci_architecture,
    parse_image_ref,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_observer import HostObserver
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import (
    redacted,
    registry_access,
    registry_evidence,
    request_credentials,
    secrets_of,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_client import RegistryClient
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
    normalize_version,
    parse_version,
    version_at_least,
)

CODES = PREFLIGHT_CODES

# The preflight options (module stella_preflight; suboptions of stella_compose_deploy's preflight).
ARGUMENT_SPEC = dict(
    payload=dict(type="dict"),
    target_type=dict(type="str", choices=["DockerHost", "ComposeHost"], default="ComposeHost"),
    work_directory=dict(type="path"),
    image_reference=dict(type="str"),
    minimum_free_disk_bytes=dict(type="int"),
    registry_reachability_mode=dict(type="str", choices=["http", "tcp", "skip"]),
    require_compose=dict(type="bool"),
    min_engine_version=dict(type="str", default=DEFAULT_MIN_ENGINE),
    min_compose_version=dict(type="str", default=DEFAULT_MIN_COMPOSE),
    registry_url=dict(type="str", no_log=True),
    registry_username=dict(type="str"),
    registry_password=dict(type="str", no_log=True),
    registry_credentials=dict(type="dict", no_log=True),
    insecure_registries=dict(type="list", elements="str", default=[]),
    timeout=dict(type="float", default=10),
)


# --------------------------------------------------------------------------------------------
# Request
# --------------------------------------------------------------------------------------------


def build_request(params):
    """The preflight request from the ``compose.preflight`` payload and the snake_case options.

    Payload keys and their options follow the contract's one rule (a key given both ways must be
    equal); defaults are applied afterwards. Raises ``StellaError("invalid_request", ...)``.
    """
    req = dict(params)
    try:
        req.update(COMPOSE_PREFLIGHT.parse(req.pop("payload", None), params))
    except StellaError as exc:
        raise StellaError("invalid_request", exc.reason)
    if req.get("target_type") not in TARGET_TYPES:
        raise StellaError("invalid_request", "target_type must be one of %s" % ", ".join(TARGET_TYPES))
    if req.get("require_compose") is None:
        req["require_compose"] = req["target_type"] == "ComposeHost"
    mode = req["registry_reachability_mode"].lower()
    if mode not in REACHABILITY_MODES:
        raise StellaError(
            "invalid_request", "registry_reachability_mode must be one of %s" % ", ".join(REACHABILITY_MODES)
        )
    req["registry_reachability_mode"] = mode
    for option, default in (("min_engine_version", DEFAULT_MIN_ENGINE), ("min_compose_version", DEFAULT_MIN_COMPOSE)):
        req[option] = req.get(option) or default
        if parse_version(req[option]) is None:
            raise StellaError("invalid_request", "%s %r is not a version" % (option, req[option]))
    req["registry"] = None
    source = "registry_username"
    if req.get("registry_url"):
        req["registry"], url_user, url_password = split_registry_url(req["registry_url"])
        if url_user and not req.get("registry_username"):
            req["registry_username"], req["registry_password"] = url_user, url_password
            source = "registry_url"
    req["image"] = parse_image_ref(req["image_reference"]) if req.get("image_reference") else None
    req["credentials"] = request_credentials(req, source)
    return req


def split_registry_url(url):
    """``https://user:pw@host:5000/`` -> ``("host:5000", "user", "pw")``; plain HTTP URLs mark the registry insecure."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise StellaError("invalid_request", "registry_url %s is not an http(s) URL" % redact_url(url))
    host = parsed.hostname + (":%d" % parsed.port if parsed.port else "")
    user = urllib.parse.unquote(parsed.username) if parsed.username else None
    password = urllib.parse.unquote(parsed.password) if parsed.password else None
    return host, user, password


# --------------------------------------------------------------------------------------------
# Evaluation (pure)
# --------------------------------------------------------------------------------------------


def evaluate(req, obs):
    """Return ``(evidence, failures)`` for observations ``obs`` under request ``req``. Pure."""
    failures = []
    checks = []

    def check(name, code, ok, reason):
        checks.append({"name": name, "status": "passed" if ok else "failed", **({} if ok else {"code": code})})
        if not ok:
            failures.append(with_next({"code": code, "reason": reason}))

    def skip(name, why):
        checks.append({"name": name, "status": "skipped", "reason": why})

    host = obs["host"]
    arch = oci_architecture(host.get("machine"))
    docker = obs["docker"]
    client = docker.get("client") or {}
    server = docker.get("server") or {}
    engine = server.get("Version")

    # runtime binary, daemon, engine version
    check(
        "runtime",
        "runtime_missing",
        bool(docker.get("binary")),
        "docker CLI %r not found on PATH" % (req.get("docker_cli") or "docker"),
    )
    if docker.get("binary"):
        check(
            "daemon",
            "runtime_daemon_unavailable",
            bool(server),
            "Docker daemon at %s does not answer: %s"
            % (docker.get("host"), docker.get("error") or "no server version"),
        )
    else:
        skip("daemon", "runtime_missing")
    if server:
        check(
            "engine_version",
            "runtime_version_too_old",
            version_at_least(engine, req["min_engine_version"]),
            "Docker Engine %s is older than the required %s" % (engine, req["min_engine_version"]),
        )
    else:
        skip("engine_version", "no daemon answered")

    # compose v2 plugin
    compose = obs["compose"]
    plugin = compose.get("plugin")
    standalone = compose.get("standalone")
    if req["require_compose"]:
        if plugin:
            check("compose", "compose_missing", True, "")
            check(
                "compose_version",
                "runtime_version_too_old",
                version_at_least(plugin, req["min_compose_version"]),
                "Docker Compose plugin %s is older than the required %s" % (plugin, req["min_compose_version"]),
            )
        else:
            extra = ""
            if standalone:
                extra = " (found standalone docker-compose %s, which is not Compose v2 as 'docker compose')" % (
                    standalone.get("version") or "?"
                )
            check(
                "compose",
                "compose_missing",
                False,
                "Docker Compose v2 plugin ('docker compose') is not available%s" % extra,
            )
            skip("compose_version", "compose_missing")
    else:
        skip("compose", "require_compose=false")
        skip("compose_version", "require_compose=false")

    # registry reachability
    registry = obs["registry"]
    if registry.get("skipped"):
        skip("registry", registry["skipped"])
    else:
        reason = registry.get("reason") or "registry %s did not answer" % registry.get("registry")
        check(
            "registry",
            "registry_unreachable",
            bool(registry.get("reachable")),
            "registry %s unreachable: %s" % (registry.get("registry"), reason),
        )

    # registry access: the credentials given for the registry, pull access to the image's repository
    pull = obs.get("pull") or {"skipped": "not observed"}
    status, code, reason = registry_access(registry, pull)
    if status == "skipped":
        skip("registry_access", reason)
    else:
        check("registry_access", code, status == "passed", reason)

    # platform
    wanted = "linux/%s" % arch
    plat = obs["platform"]
    if plat.get("skipped"):
        skip("platform", plat["skipped"])
        compatible = None
    elif plat.get("error"):
        compatible = False
        check(
            "platform",
            "platform_unsupported",
            False,
            "cannot read platforms of %s: %s" % (req["image"].render(), plat["error"]),
        )
    else:
        platforms = plat.get("platforms") or []
        compatible = any(_platform_matches(p, "linux", arch) for p in platforms)
        check(
            "platform",
            "platform_unsupported",
            compatible,
            "image %s offers %s, none for this host's %s"
            % (req["image"].render(), ", ".join(_platform_str(p) for p in platforms) or "no platform", wanted),
        )

    # work directory
    workdir = obs["workDirectory"]
    check(
        "workdir",
        "workdir_not_writable",
        bool(workdir.get("writable")),
        "work directory %s is not writable: %s" % (workdir.get("path"), workdir.get("error")),
    )

    # disk space
    disk = obs["disk"]
    enough = disk["freeBytes"] >= req["minimum_free_disk_bytes"]
    check(
        "disk",
        "disk_space_low",
        enough,
        "%s free at %s, %s required"
        % (human_bytes(disk["freeBytes"]), disk["path"], human_bytes(req["minimum_free_disk_bytes"])),
    )

    evidence = {
        "os": {
            k: host.get(k)
            for k in ("system", "kernel", "distribution", "distributionVersion", "prettyName", "hostname")
        },
        "architecture": arch,
        "machine": host.get("machine"),
        "docker": {
            "binary": docker.get("binary"),
            "host": docker.get("host"),
            "clientVersion": client.get("Version"),
            "clientApiVersion": client.get("ApiVersion"),
            "serverVersion": engine,
            "serverApiVersion": server.get("ApiVersion"),
            "daemonStatus": "missing" if not docker.get("binary") else ("running" if server else "unavailable"),
            "daemonError": None if server else docker.get("error"),
        },
        "compose": {
            "command": "docker compose",
            "available": bool(plugin),
            "version": normalize_version(plugin),
            "rawVersion": plugin,
            "error": compose.get("pluginError"),
            "standalone": standalone,
            "required": req["require_compose"],
        },
        "registry": registry_evidence(req, registry, pull),
        "platform": {
            "imageReference": req["image"].render() if req["image"] else None,
            "requested": wanted,
            "available": [_platform_str(p) for p in plat.get("platforms") or []],
            "compatible": compatible,
            "error": plat.get("error"),
        },
        "workDirectory": {
            "path": workdir.get("path"),
            "exists": workdir.get("exists"),
            "probedPath": workdir.get("probedPath"),
            "writable": workdir.get("writable"),
            "error": workdir.get("error"),
        },
        "disk": {
            "path": disk["path"],
            "freeBytes": disk["freeBytes"],
            "totalBytes": disk.get("totalBytes"),
            "minimumFreeBytes": req["minimum_free_disk_bytes"],
            "sufficient": enough,
        },
        "gates": {
            "minEngineVersion": req["min_engine_version"],
            "minComposeVersion": req["min_compose_version"],
            "requireCompose": req["require_compose"],
            "targetType": req["target_type"],
            "registryReachabilityMode": req["registry_reachability_mode"],
        },
        "checks": checks,
        "status": "passed" if not failures else "failed",
    }
    return evidence, failures


def _platform_matches(plat, os_name, arch):
    return (plat.get("os") or "linux") == os_name and oci_architecture(plat.get("architecture")) == arch


def _platform_str(plat):
    text = "%s/%s" % (plat.get("os") or "?", plat.get("architecture") or "?")
    if plat.get("variant"):
        text += "/" + plat["variant"]
    return text


def run_preflight(req, observer):
    """Observe and evaluate; returns ``(evidence, failures)``."""
    return evaluate(req, observer.observe(req))


def preflight_with(cli, params, get_bin_path=shutil.which, registry_factory=None):
    """The preflight of ``params`` (the stella_preflight options) over an engine client that the task
    goes on using, so the runtime is asked each question once. Returns ``(evidence, failures)``."""
    req = build_request(params)
    # each registry is offered only its own credentials (req["credentials"], keyed by registry_key)
    registry = (registry_factory or RegistryClient)(
        username=None, password=None, insecure_registries=req.get("insecure_registries"), timeout=req["timeout"]
    )
    registry.credentials = req["credentials"]
    observer = HostObserver(
        cli, get_bin_path, registry, ping_timeout=req["timeout"], docker_host=req.get("docker_host")
    )

    try:
        evidence, failures = run_preflight(req, observer)
    except StellaError as exc:
        exc.reason, exc.evidence = redacted([exc.reason, exc.evidence], secrets_of(req["credentials"], registry))
        raise
    found = secrets_of(req["credentials"], registry)
    return redacted(evidence, found), redacted(failures, found)


def raise_failures(evidence, failures, phase="preflight"):
    """A failed preflight as one ``StellaError``: the first failure's code, every failure in evidence."""
    if failures:
        raise StellaError(
            failures[0]["code"],
            "preflight failed: %s" % "; ".join("%s: %s" % (f["code"], f["reason"]) for f in failures),
            phase=phase,
            evidence={"preflight": evidence, "failures": failures},
        )
