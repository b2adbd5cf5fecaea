# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Docker and Docker Compose v2 through their CLI: argv lists in, JSON out.

Every command goes through an injected ``run_command(argv) -> (rc, stdout, stderr)``
(``AnsibleModule.run_command`` in modules, :func:`subprocess_runner` in tests and tools);
nothing is ever passed through a shell. Output is read by the pure ``parse_*`` and ``*_summary``
functions of ``engine.cli_output``. Standard library only: this runs on target hosts.
"""

from __future__ import annotations

import concurrent.futures
import re
import shutil
import subprocess
import threading

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WAIT_TIMEOUT
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import (
    classify_failure,
    compose_plugin,
    container_summary,
    ignore_warning,
    image_summary,
    one_line,
    parse_compose_version,
    parse_docker_version,
    parse_json_documents,
    runtime_summary,
)

# --------------------------------------------------------------------------- runners


def subprocess_runner(argv, timeout=None):
    """A ``run_command`` for code outside modules (tests, bench): argv only, never a shell."""
    proc = subprocess.run(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False
    )
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


TIMEOUT_RC = 124  # coreutils timeout(1): the command did not finish in time


class DockerCli:
    """The target's one engine client: Docker and Compose v2 through their CLI, argv in, JSON out.

    Every call is bounded: ``timeout`` seconds (``timeout(1)`` wraps the argv, so a daemon that does
    not answer ends as ``runtime_daemon_unavailable`` instead of hanging the task). Each question
    about the runtime itself (versions) is asked once per task and remembered.
    """

    def __init__(self, run_command, docker="docker", warn=ignore_warning, timeout=60, which=shutil.which):
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
