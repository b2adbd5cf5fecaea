# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``docker.run``: one digest-pinned container on this host.

Steps: ``pull_image`` (pull and verify the digest BEFORE listing, stopping or creating containers),
``pre_deploy_hooks``, ``prepare_container`` (the previous container is stopped and set aside, not
removed), ``inspect_container`` (running, not restarting, healthy where a healthcheck exists, image,
labels), ``post_deploy_hooks``. Only a verified container replaces the previous one: a failed
verification removes the new container and starts the previous one again. Standard library only.
"""

from __future__ import annotations

import os
import time

from ansible_collections.stellaops.runtime.plugins.module_utils import _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils._compose_project import (
    container_problems, raise_problems, stella_labels)
from ansible_collections.stellaops.runtime.plugins.module_utils._contract import (
    CONTAINER_NAME_RE, DOCKER_RUN, DOCKER_STEPS, REQUIRED_STELLA_LABELS, invalid)
from ansible_collections.stellaops.runtime.plugins.module_utils._docker_cli import repo_digests_contain
from ansible_collections.stellaops.runtime.plugins.module_utils._fsutil import project_lock
from ansible_collections.stellaops.runtime.plugins.module_utils._identity import ensure_this_host
from ansible_collections.stellaops.runtime.plugins.module_utils._imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.module_utils._manager import Manager

# A container without a healthcheck must stay up (same start, no restart) this long to count as running.
SETTLE_SECONDS = 2.0


def parse_request(payload=None, options=None):
    """A ``docker.run`` request from the verbatim payload and/or options."""
    request = DOCKER_RUN.parse(payload, options)
    if not parse_image_ref(request["image"]).digest:
        raise invalid("Image %r must be pinned by digest (registry/repository:tag@sha256:...)" % request["image"])
    if not CONTAINER_NAME_RE.match(request["name"]):
        raise invalid("Name %r is not a valid container name" % request["name"])
    request["hooks"] = _hooks.normalize_hooks(request["hooks"])
    request["ports"] = [str(p) for p in request["ports"]]
    request["manifest_hash"] = request["manifest_hash"] or request["labels"].get("stella.manifest.hash")
    variables = request.pop("Variables") or {}
    directory = variables.get("projectDirectory") or os.path.join(
        request["work_directory"], variables.get("projectName") or request["name"])
    if not isinstance(directory, str) or not directory.startswith("/") or ".." in directory.split("/"):
        raise invalid("project directory %r must be an absolute path without '..'" % (directory,))
    request["project_directory"] = directory
    request["env_file"] = request.pop("EnvFile")
    request.pop("Config", None)
    return request


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
    argv.append(request["image"])
    return argv


def container_matches(container, request, image_id):
    """True when an inspected container already runs this request (image, labels, running)."""
    if not container or container.get("imageId") != image_id or not container.get("running"):
        return False
    if container.get("restarting"):
        return False
    labels = container.get("labels") or {}
    if any(labels.get(k) != v for k, v in request["labels"].items()):
        return False
    return labels.get("stella.container.name") == request["name"]


def verify_container(container, request, image_id):
    """``(code, reason)`` problems of the new container (pure)."""
    problems = container_problems(container, "container")
    if not problems and container.get("restartCount"):
        problems.append(("service_not_running", "container %s restarted %d time(s) since it was created" % (
            container["name"], container["restartCount"])))
    if container.get("imageId") != image_id:
        problems.append(("digest_mismatch", "container %s runs %s, not %s" % (
            container["name"], container.get("imageId"), image_id)))
    for key, value in sorted(request["labels"].items()):
        if (container.get("labels") or {}).get(key) != value:
            problems.append(("label_mismatch", "label %s is %r, expected %r" % (
                key, (container.get("labels") or {}).get(key), value)))
    return problems


class DockerRun(Manager):
    """``docker.run`` on this host."""

    def __init__(self, cli, run_command, warn=None, secrets=(), health_timeout=60, settle=SETTLE_SECONDS,
                 sleep=time.sleep, clock=time.monotonic):
        super().__init__(cli, run_command, warn, secrets)
        self.health_timeout = health_timeout
        self.settle = settle
        self.sleep = sleep
        self.clock = clock

    def initial_evidence(self, request):
        evidence = super().initial_evidence(request)
        evidence.update({"containerName": request["name"], "image": request["image"],
                         "imageDigest": parse_image_ref(request["image"]).digest,
                         "manifestHash": request["manifest_hash"], "hookResults": []})
        return evidence

    def _image_id(self, request, phase):
        info = self.cli.image_inspect(request["image"], phase=phase)
        if info is None:
            return None
        if not repo_digests_contain(info["repoDigests"], request["image"]):
            raise StellaError("digest_mismatch", "image %s has RepoDigests %s, none is the pinned digest" % (
                request["image"], info["repoDigests"]), phase=phase)
        return info["id"]

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        missing = [key for key in REQUIRED_STELLA_LABELS if key not in request["labels"]]
        if missing:
            raise StellaError("label_missing", "docker.run Labels lack %s" % ", ".join(missing),
                              phase="validate_payload")
        with rec.phase("verify_target", record=False):
            ensure_this_host(request["target"], self.run_command)
        with rec.phase("preflight", record=False):
            docker = self.cli.version(phase="preflight")
            evidence.update({"dockerVersion": docker["server"], "dockerClientVersion": docker["client"]})
        if check_mode:
            image_id = self._image_id(request, "pull_image")
            current = self.cli.container(request["name"])
            result["changed"] = not container_matches(current, request, image_id)
            evidence["checkMode"] = True
            rec.skip(*DOCKER_STEPS)
            return
        directory = request["project_directory"]
        with project_lock(directory):
            killed = _hooks.reap_stale_hooks(directory)
            if killed:
                evidence["staleHookPidsKilled"] = killed
            with rec.phase("pull_image"):
                image_id = self._image_id(request, "pull_image")
                if request["pull_image"] and image_id is None:
                    self.cli.pull(request["image"], phase="pull_image")
                    evidence["pulled"] = True
                    image_id = self._image_id(request, "pull_image")
                if image_id is None:
                    raise StellaError("image_missing", "image %s is not present and PullImage is false" %
                                      request["image"])
                evidence["imageId"] = image_id
            current = self.cli.container(request["name"], phase="prepare_container")
            if container_matches(current, request, image_id) and current.get("health") in ("healthy", "none"):
                rec.skip("pre_deploy_hooks", "prepare_container", "post_deploy_hooks")
                with rec.phase("inspect_container"):
                    self._record(evidence, current)
                return
            env = {"STELLA_CONTAINER_NAME": request["name"], "STELLA_MANIFEST_HASH": request["manifest_hash"] or "",
                   "STELLA_TARGET_ID": request["target"]["id"]}
            with rec.phase("pre_deploy_hooks"):
                _hooks.run_phase(request["hooks"], "pre-deploy", directory, env, self.secrets, evidence["hookResults"],
                                 result["warnings"])
            self._replace(request, rec, result, current, image_id)
            with rec.phase("post_deploy_hooks"):
                _hooks.run_phase(request["hooks"], "post-deploy", directory, env, self.secrets,
                                 evidence["hookResults"], result["warnings"])

    def _replace(self, request, rec, result, current, image_id):
        evidence = result["evidence"]
        aside = None
        with rec.phase("prepare_container"):
            result["changed"] = True
            if current:
                evidence["replacedContainerId"] = current["id"]
                aside = "%s-stella-previous" % request["name"]
                stale = self.cli.container(aside, phase="prepare_container")
                if stale:
                    self.cli.remove_container(stale["id"], phase="prepare_container")
                self.cli.stop_container(current["id"], phase="prepare_container")
                self.cli.rename_container(current["id"], aside, phase="prepare_container")
            try:
                self.cli.run_container(container_run_argv(request), phase="prepare_container")
            except StellaError:
                self._put_back(request, current, evidence)
                raise
        try:
            with rec.phase("inspect_container"):
                container = self._wait(request["name"])
                self._record(evidence, container)
                raise_problems(verify_container(container, request, image_id), "inspect_container")
        except StellaError:
            self._put_back(request, current, evidence)
            raise
        if current:
            self.cli.remove_container(current["id"], phase="inspect_container")

    def _put_back(self, request, previous, evidence):
        """Remove the new container and start the previous one again under its own name."""
        new = self.cli.container(request["name"])
        if new:
            self.cli.remove_container(new["id"])
        if previous:
            self.cli.rename_container(previous["id"], request["name"])
            self.cli.start_container(previous["id"])
            evidence["previousContainerRestored"] = previous["id"]

    def _wait(self, name):
        """Inspect until the container settles: healthy/unhealthy with a healthcheck, otherwise running
        with the same start time and no restart for ``settle`` seconds (a crash loop never settles)."""
        deadline = self.clock() + self.health_timeout
        stable_since = None
        seen = None
        while True:
            container = self.cli.container(name, phase="inspect_container")
            if container is None:
                raise StellaError("service_not_running", "container %s disappeared" % name, phase="inspect_container")
            health = container.get("health")
            if health in ("healthy", "unhealthy"):
                return container
            if health == "none":
                key = (container.get("startedAt"), container.get("running"), container.get("restarting"))
                if not container.get("running") and not container.get("restarting"):
                    return container
                if key != seen or container.get("restarting"):
                    seen, stable_since = key, self.clock()
                elif self.clock() - stable_since >= self.settle:
                    return container
            if self.clock() > deadline:
                return container
            self.sleep(0.25)

    @staticmethod
    def _record(evidence, container):
        evidence.update({"containerId": container["id"], "containerName": container["name"],
                         "containerState": container["state"], "health": container["health"],
                         "restartCount": container.get("restartCount"),
                         "ipAddress": container.get("ipAddress"), "startedAt": container.get("startedAt"),
                         "labels": stella_labels(container.get("labels"))})
