# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target runtime preflight (contract: "Runtime Modes", "Preflight Evidence").

Two halves:

* :class:`HostObserver` gathers raw observations on the target (read-only, apart from the work
  directory write probe). All external commands go through an injected ``run_command(argv)``.
* :func:`evaluate` is pure: it turns observations and the request into evidence and a list of
  ``{code, reason}`` failures. Every check runs even when an earlier one fails.
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
import shutil
import socket
import tempfile
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
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import (
    observe_image,
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
# Observation (I/O)
# --------------------------------------------------------------------------------------------


def _os_release():
    data = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as handle:
                for line in handle:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        data[key] = value.strip('"')
            break
        except OSError:
            continue
    return data


def _ping_unix_socket(path, timeout):
    """GET /_ping on a Docker unix socket; returns ``(ok, detail)``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        reply = sock.recv(64)
        if reply.startswith(b"HTTP/1.") and b" 200" in reply[:16]:
            return True, "ok"
        return False, "unexpected answer from %s" % path
    except socket.timeout:
        return False, "no answer from %s within %ss" % (path, timeout)
    except OSError as exc:
        return False, "%s: %s" % (path, exc.strerror or exc)
    finally:
        sock.close()


class HostObserver:
    """Gathers raw observations of the host it runs on.

    ``cli`` is the task's engine client (engine/cli.py :class:`DockerCli`, every call bounded);
    ``get_bin_path(name)`` returns a path or ``None``; ``registry`` has ``ping(registry, mode)``,
    ``platforms(image_ref)`` and ``image_access(image_ref)`` (see ``engine.registry_client``).
    """

    def __init__(self, cli, get_bin_path, registry, ping_timeout=5.0, docker_host=None):
        self.cli = cli
        self.get_bin_path = get_bin_path
        self.registry = registry
        self.ping_timeout = ping_timeout
        self.docker_host = docker_host

    def observe(self, req):
        """Every observation, at the same time where nothing depends on another: the engine
        questions (versions, registry config, Compose; each once, each bounded by the engine
        client's timeout), the work directory and disk, and the registry as soon as the daemon said
        which registries it reaches over plain HTTP."""
        obs = {"host": self._host()}
        registry = self._target_registry(req)
        if registry and req["registry"] and req["registry_url"].startswith("http://"):
            self.registry.insecure_registries = tuple(self.registry.insecure_registries) + (registry,)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            compose = pool.submit(self._compose)
            local = pool.submit(lambda: (self._workdir(req["work_directory"]), self._disk(req["work_directory"])))
            # A registry already reached over plain HTTP (loopback, an http:// registry_url, or listed by the
            # caller) is reached the same way whatever the daemon lists: it need not wait for ``docker info``.
            settled = (
                registry is None
                or req["registry_reachability_mode"] == "skip"
                or self.registry.base_url(registry).startswith("http://")
            )
            remote = pool.submit(self._remote, req) if settled else None
            obs["docker"] = self._docker(pool)
            if remote is None:
                self._use_daemon_insecure_registries(obs)
                remote = pool.submit(self._remote, req)
            obs["compose"] = compose.result()
            obs["registry"], obs["pull"], obs["platform"] = remote.result()
            obs["workDirectory"], obs["disk"] = local.result()
        return obs

    @staticmethod
    def _host():
        osr = _os_release()
        return {
            "system": platform.system(),
            "kernel": platform.release(),
            "machine": platform.machine(),
            "distribution": osr.get("ID"),
            "distributionVersion": osr.get("VERSION_ID"),
            "prettyName": osr.get("PRETTY_NAME"),
            "hostname": socket.gethostname(),
        }

    def _docker(self, pool):
        binary = self.get_bin_path(self.cli.docker)
        host = redact_url(self.docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
        result = {"binary": binary, "host": host}
        if not binary:
            return result
        if host.startswith("unix://"):
            ok, detail = _ping_unix_socket(host[len("unix://") :], self.ping_timeout)
            result["ping"] = detail
            if not ok:
                result["error"] = detail
                result["client"] = {"Version": self.cli.client_version(phase="preflight")}
                return result
        registry_config = pool.submit(self.cli.registry_config, phase="preflight")
        try:
            version = self.cli.version(phase="preflight")
        except StellaError as exc:
            result["error"] = exc.reason
            cached = self.cli.cached_version()
            result["client"] = (
                {"Version": cached["client"], "ApiVersion": cached["clientApiVersion"]} if cached else None
            )
            return result
        result["runtime"] = version
        result["client"] = {"Version": version["client"], "ApiVersion": version["clientApiVersion"]}
        result["server"] = {
            "Version": version["server"],
            "ApiVersion": version["serverApiVersion"],
            "Os": version["os"],
            "Arch": version["arch"],
        }
        try:
            result["insecureRegistries"] = insecure_registries_from_info(registry_config.result())
        except StellaError:
            result["insecureRegistries"] = []
        return result

    def _compose(self):
        result = {}
        if self.get_bin_path(self.cli.docker):
            try:
                result["plugin"] = self.cli.compose_version(phase="preflight")
            except StellaError as exc:
                result["pluginError"] = exc.reason
        legacy = self.get_bin_path("docker-compose")
        if legacy:
            result["standalone"] = {"path": legacy}
        return result

    def _remote(self, req):
        """The registry's reachability, then the image's pull access and platforms (one manifest request)."""
        return (self._registry(req),) + observe_image(self.registry, req["image"])

    @staticmethod
    def _target_registry(req):
        """The registry to reach: the one of ``registry_url``, else the image's (``None``: neither)."""
        return req["registry"] or (req["image"].registry if req["image"] else None)

    def _registry(self, req):
        mode = req["registry_reachability_mode"]
        registry = self._target_registry(req)
        if registry is None:
            return {"skipped": "no image_reference or registry_url"}
        if mode == "skip":
            return {"registry": registry, "skipped": "registry_reachability_mode=skip"}
        return dict(self.registry.ping(registry, mode), registry=registry)

    def _use_daemon_insecure_registries(self, obs):
        """Registries the daemon reaches over plain HTTP are reached the same way here."""
        extra = [r for r in obs["docker"].get("insecureRegistries") or [] if r not in self.registry.insecure_registries]
        if extra:
            self.registry.insecure_registries = tuple(self.registry.insecure_registries) + tuple(extra)

    @staticmethod
    def _workdir(path):
        """Write probe: create, fsync and delete a temp file in ``path`` (or its nearest parent)."""
        probe_dir = _nearest_existing(path)
        result = {"path": path, "exists": os.path.isdir(path), "probedPath": probe_dir}
        try:
            fd, tmp = tempfile.mkstemp(prefix=".stella-preflight-", dir=probe_dir)
            try:
                os.write(fd, b"stella preflight write probe\n")
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(tmp)
            result["writable"] = True
        except OSError as exc:
            result["writable"] = False
            result["error"] = "%s: %s" % (probe_dir, exc.strerror or exc)
        return result

    @staticmethod
    def _disk(path):
        probe_dir = _nearest_existing(path)
        stat = os.statvfs(probe_dir)
        return {
            "path": probe_dir,
            "freeBytes": stat.f_bavail * stat.f_frsize,
            "totalBytes": stat.f_blocks * stat.f_frsize,
        }


def insecure_registries_from_info(registry_config):
    """Names of registries marked insecure in ``docker info``'s ``RegistryConfig`` (CIDRs are ignored)."""
    configs = (registry_config or {}).get("IndexConfigs") or {}
    return sorted(name for name, conf in configs.items() if isinstance(conf, dict) and conf.get("Secure") is False)


def _nearest_existing(path):
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


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
