# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The runtime preflight's observation of the host it runs on (contract: "Preflight Evidence").

:class:`HostObserver` gathers raw observations, read-only apart from the work directory write probe:
the host and its OS, the Docker CLI and daemon, the Compose plugin, the registry and the image, the
work directory and its disk. All external commands go through the task's engine client; the
evaluation of what it observed is ``engine.preflight``'s. Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
import socket
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import observe_image


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
