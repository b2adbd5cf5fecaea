# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Docker and Docker Compose v2 through their CLI: argv lists in, JSON out.

Every command goes through an injected ``run_command(argv) -> (rc, stdout, stderr)``
(``AnsibleModule.run_command`` in modules, :func:`subprocess_runner` in tests and tools);
nothing is ever passed through a shell. Output is parsed by the pure ``parse_*`` and
``*_summary`` functions below, which unit tests drive with captured real output.
Standard library only: this runs on target hosts.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import shutil
import subprocess
import threading

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WAIT_TIMEOUT
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


def _ignore(_message):
    return None


# --------------------------------------------------------------------------- pure parsers


def parse_json_documents(text, warn=_ignore):
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


# --------------------------------------------------------------------------- runners


def subprocess_runner(argv, timeout=None):
    """A ``run_command`` for code outside modules (tests, bench): argv only, never a shell."""
    proc = subprocess.run(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False
    )
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


TIMEOUT_RC = 124  # coreutils timeout(1): the command did not finish in time


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


class DockerCli:
    """The target's one engine client: Docker and Compose v2 through their CLI, argv in, JSON out.

    Every call is bounded: ``timeout`` seconds (``timeout(1)`` wraps the argv, so a daemon that does
    not answer ends as ``runtime_daemon_unavailable`` instead of hanging the task). Each question
    about the runtime itself (versions) is asked once per task and remembered.
    """

    def __init__(self, run_command, docker="docker", warn=_ignore, timeout=60, which=shutil.which):
        self._run = run_command
        self.docker = docker
        self.warn = warn
        self.timeout = timeout
        self.commands = []
        self._which = which
        self._binary = None
        self._timeout_bin = None
        self._cache = {}
        self._asking = {}
        self._asking_guard = threading.Lock()

    def binary(self, phase=None):
        if self._binary is None:
            found = self._which(self.docker)
            if found is None:
                raise StellaError("runtime_missing", "Docker CLI %r not found on this host" % self.docker, phase=phase)
            # timeout(1) first: threads asking at once see the binary only with its bound
            self._timeout_bin = self._which("timeout") or ""
            self._binary = found
        return self._binary

    def run(self, argv, code="docker_command_failed", phase=None, check=True, timeout=None):
        self.binary(phase)
        limit = int(timeout or self.timeout)
        full = [self.docker] + list(argv)
        self.commands.append(full)
        wrapped = ([self._timeout_bin, "--kill-after", "5", str(limit)] + full) if self._timeout_bin and limit else full
        try:
            rc, out, err = self._run(wrapped)
        except (OSError, ValueError) as exc:
            raise StellaError("runtime_missing", "cannot execute %s: %s" % (self.docker, exc), phase=phase)
        if self._timeout_bin and rc in (TIMEOUT_RC, 128 + 9, -9):
            raise StellaError(
                "runtime_daemon_unavailable",
                "%s did not finish within %ds (the Docker daemon does not answer)" % (" ".join(full[:4]), limit),
                phase=phase,
            )
        if check and rc != 0:
            if rc == 127 or "No such file or directory" in (err or "") and not out:
                raise StellaError("runtime_missing", "docker CLI not found (%s)" % one_line(err), phase=phase)
            raise StellaError(
                classify_failure(err, code),
                "%s failed (rc=%d): %s" % (" ".join(full[:4]), rc, one_line(err or out)),
                phase=phase,
            )
        return rc, out, err

    # ---- the runtime (asked once per task)
    def _once(self, key, ask):
        """``ask()``'s answer, asked at most once per task even by threads asking at the same time (a
        failure is not remembered: the next caller asks again)."""
        with self._asking_guard:
            lock = self._asking.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                self._cache[key] = ask()
        return self._cache[key]

    def info(self, phase=None):
        """``docker info`` as JSON (``{}`` when it printed none). The CLI prints its own part, with its
        plugins, also when the daemon does not answer."""

        def ask():
            _rc, out, _err = self.run(["info", "--format", "{{json .}}"], check=False, phase=phase)
            docs = parse_json_documents(out)
            return docs[0] if docs else {}

        return self._once("info", ask)

    def version(self, phase=None):
        def ask():
            rc, out, err = self.run(["version", "--format", "{{json .}}"], check=False, phase=phase)
            if rc == 127 or (not out.strip() and rc != 0):
                raise StellaError(
                    classify_failure(err, "runtime_missing"), "docker version failed: %s" % one_line(err), phase=phase
                )
            data = parse_docker_version(out)
            data["error"] = one_line(err) if not data["server"] else None
            return data

        data = self._once("version", ask)
        if not data["server"]:
            raise StellaError(
                "runtime_daemon_unavailable", "Docker daemon unavailable: %s" % data["error"], phase=phase
            )
        return data

    def client_version(self, phase=None):
        """The CLI's own version (``docker --version``), which needs no daemon; ``None`` when even that fails."""
        try:
            rc, out, _err = self.run(["--version"], check=False, phase=phase)
        except StellaError:
            return None
        match = re.search(r"version v?(\d+\.\d+\.\d+[^\s,]*)", out or "") if rc == 0 else None
        return match.group(1) if match else None

    def cached_version(self):
        """What ``docker version`` said, if it was asked (the client part survives a daemon failure)."""
        return self._cache.get("version")

    def compose_version(self, phase=None):
        """The Compose v2 plugin's version from ``docker info`` (the CLI asks the plugin itself for it,
        and the same answer serves the registry configuration); ``docker compose version`` only when
        the CLI lists no plugins, or when ``docker info`` did not finish (a daemon that hangs)."""

        def ask():
            try:
                info = self.info(phase)
            except StellaError:  # the daemon did not answer in time: the plugin itself can still tell
                info = {}
            version, error = compose_plugin(info)
            if error:
                raise StellaError("compose_missing", "Docker Compose v2 plugin unavailable: %s" % error, phase=phase)
            return version or self.ask_compose_version(phase)

        return self._once("compose", ask)

    def ask_compose_version(self, phase=None):
        """``docker compose version``: runs the plugin itself (the runtime install verifies with it)."""
        rc, out, err = self.run(["compose", "version", "--format", "json"], check=False, phase=phase)
        if rc != 0:
            raise StellaError(
                "compose_missing", "Docker Compose v2 plugin unavailable: %s" % one_line(err or out), phase=phase
            )
        return parse_compose_version(out)

    def runtime(self, phase="preflight"):
        """Docker client/server, API and Compose versions, OS and architecture (both asked at once)."""
        self.binary(phase)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            compose = pool.submit(self.compose_version, phase=phase)
            docker = self.version(phase=phase)
            return runtime_summary(docker, compose.result())

    def registry_config(self, phase=None):
        """``docker info``'s ``RegistryConfig`` (``None`` when the daemon does not say)."""
        return self.info(phase).get("RegistryConfig") or None

    # ---- compose
    @staticmethod
    def compose_base(project, compose_file, project_dir):
        return ["compose", "--project-name", project, "--project-directory", project_dir, "-f", compose_file]

    def compose_up(self, project, compose_file, project_dir, wait_timeout=DEFAULT_WAIT_TIMEOUT, phase="compose_up"):
        """``up -d`` without ``--wait``: the caller waits for the containers itself (``ComposeProject.up``).
        The bound stays ``wait_timeout`` on top of the command timeout: replaced containers are stopped
        with their grace period first."""
        argv = self.compose_base(project, compose_file, project_dir) + [
            "up",
            "-d",
            "--remove-orphans",
            "--pull",
            "never",
        ]
        return self.run(argv, code="compose_up_failed", phase=phase, timeout=int(wait_timeout) + self.timeout)

    def project_container_ids(self, project, phase=None):
        _rc, out, _err = self.run(
            ["ps", "--all", "--quiet", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % project],
            phase=phase,
        )
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    # ---- containers / images
    def inspect_containers(self, ids, phase=None):
        if not ids:
            return []
        _rc, out, _err = self.run(["inspect", "--type", "container"] + list(ids), phase=phase, code="inspect_failed")
        return [container_summary(item) for item in parse_json_documents(out, self.warn)]

    def image_inspect(self, ref, phase=None):
        """Summary of a local image, or ``None`` when it is not present."""
        rc, out, err = self.run(["image", "inspect", ref], check=False, phase=phase)
        if rc != 0:
            if re.search(r"no such image|not found", (err or "") + out, re.I):
                return None
            raise StellaError(
                classify_failure(err, "inspect_failed"), "docker image inspect failed: %s" % one_line(err), phase=phase
            )
        docs = parse_json_documents(out, self.warn)
        return image_summary(docs[0]) if docs else None

    def image_inspect_many(self, refs, phase=None):
        """``{ref: summary or None}`` for several references, in one ``docker image inspect`` call when
        every image is present (the CLI answers in argument order); otherwise one call per reference."""
        unique = sorted(set(refs))
        if not unique:
            return {}
        rc, out, _err = self.run(["image", "inspect"] + unique, check=False, phase=phase)
        if rc == 0:
            docs = parse_json_documents(out, self.warn)
            if len(docs) == len(unique):
                return {ref: image_summary(doc) for ref, doc in zip(unique, docs)}
        return {ref: self.image_inspect(ref, phase=phase) for ref in unique}

    def pull(self, ref, phase="pull_image"):
        return self.run(["pull", "--quiet", ref], code="image_pull_failed", phase=phase, timeout=max(self.timeout, 600))

    def containers_by_name(self, name, phase=None):
        _rc, out, _err = self.run(
            ["ps", "--all", "--quiet", "--no-trunc", "--filter", "name=^/%s$" % name], phase=phase
        )
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    def container(self, name, phase=None):
        """The summary of the container named ``name``, or ``None``."""
        found = self.inspect_containers(self.containers_by_name(name, phase=phase), phase=phase)
        return found[0] if found else None

    def remove_container(self, ident, phase=None):
        return self.run(["rm", "--force", ident], phase=phase, code="container_remove_failed")

    def rename_container(self, ident, new_name, phase=None):
        return self.run(["rename", ident, new_name], phase=phase, code="container_rename_failed")

    def stop_container(self, ident, timeout=10, phase=None):
        return self.run(
            ["stop", "--time", str(int(timeout)), ident],
            phase=phase,
            code="container_stop_failed",
            timeout=int(timeout) + self.timeout,
        )

    def start_container(self, ident, phase=None):
        return self.run(["start", ident], phase=phase, code="container_start_failed")

    def run_container(self, argv_tail, phase="prepare_container"):
        _rc, out, _err = self.run(["run", "--detach"] + list(argv_tail), phase=phase, code="container_start_failed")
        return out.strip().splitlines()[-1] if out.strip() else None
