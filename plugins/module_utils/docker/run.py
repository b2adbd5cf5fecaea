# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``docker.run``: digest-pinned containers of one DockerHost release on this host.

One or more ``docker.run`` payloads (one per component, all of the same release, target and
project) are applied as one transaction. Steps: ``preflight`` (the runtime preflight, when asked:
before anything is pulled, listed, stopped or created), ``pull_image`` (pull and verify every digest
BEFORE listing, stopping or creating containers), ``pre_deploy_hooks``, ``prepare_container`` (each
container that does not already run its request is stopped and set aside as
``<name>-stella-replaced``, not removed), ``inspect_container`` (running, not restarting, healthy
where a healthcheck exists, image, labels), ``write_sticker`` (with a version sticker: commit it
only now), ``post_deploy_hooks``. A failure at any step removes the new containers, starts the
set-aside ones again under their own names and puts the sticker back.

After success, when the release replaced a different one (a committed sticker of another release),
the set-aside containers become ``<name>-stella-previous`` (stopped) and the project's
``previous/`` revision records their ids and the old sticker: the baseline ``docker.rollback``
restores. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import hooks as _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import same_release
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.preflight_step import runtime_preflight
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import (
    HEALTH_VERIFIED,
    raise_problems,
    stella_labels,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.docker.container import (
    SETTLE_SECONDS,
    container_gaps,
    service_entry,
    verify_container,
    wait_settled,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DOCKER_PREVIOUS_SUFFIX,
    DOCKER_REPLACED_SUFFIX,
    DOCKER_REVISION_DIR,
    DOCKER_STEPS,
    ENV_FILE,
    ENV_FILE_MODE,
    REQUIRED_STELLA_LABELS,
    STICKER_FILE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import repo_digests_contain
from ansible_collections.stellaops.runtime.plugins.module_utils.docker.request import (
    container_run_argv,
    parse_deployment,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.docker.revision import (
    REVISION_RECORD,
    remove_stale_revision_temps,
    write_revision,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import fence
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import (
    StagedFiles,
    atomic_write,
    project_lock,
    read_bytes,
    remove_stale_temps,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.identity import ensure_this_host
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager


def sticker_job(sticker_bytes):
    try:
        return json.loads(sticker_bytes).get("jobId")
    except (TypeError, ValueError, AttributeError):
        return None


def from_options(module, cli, run_command, settings):
    """``(manager, request)`` of the ``docker.run`` the deploy module's options ask for (``settings``:
    ``agent.deploy.deploy_settings``)."""
    params = module.params
    request = parse_deployment(params["payloads"] or [params["payload"]], params, params["version_sticker"])
    manager = DockerRun(
        cli,
        run_command,
        module.warn,
        settings["secrets"],
        health_timeout=params["wait_timeout"],
        env_bytes=settings["env_bytes"],
        preflight=settings["preflight"],
    )
    return manager, request


class DockerRun(Manager):
    """``docker.run`` of one DockerHost release on this host."""

    def __init__(
        self,
        cli,
        run_command,
        warn=None,
        secrets=(),
        health_timeout=60,
        settle=SETTLE_SECONDS,
        sleep=time.sleep,
        clock=time.monotonic,
        env_bytes=None,
        preflight=None,
    ):
        super().__init__(cli, run_command, warn, secrets)
        self.env_bytes = env_bytes
        self.preflight = preflight
        self.health_timeout = health_timeout
        self.settle = settle
        self.sleep = sleep
        self.clock = clock

    def initial_evidence(self, request):
        evidence = super().initial_evidence(request)
        first = request["containers"][0]
        evidence.update(
            {
                "containerName": first["name"],
                "image": first["image"],
                "imageDigest": parse_image_ref(first["image"]).digest,
                "projectName": request["project_name"],
                "projectDirectory": request["project_directory"],
                "manifestHash": request["manifest_hash"],
                "hookResults": [],
                "services": [],
                "serviceCount": 0,
            }
        )
        if request["sticker"] is not None:
            evidence["versionStickerPath"] = os.path.join(request["project_directory"], STICKER_FILE)
        return evidence

    def _image_id(self, request, phase):
        info = self.cli.image_inspect(request["image"], phase=phase)
        if info is None:
            return None
        if not repo_digests_contain(info["repoDigests"], request["image"]):
            raise StellaError(
                "digest_mismatch",
                "image %s has RepoDigests %s, none is the pinned digest" % (request["image"], info["repoDigests"]),
                phase=phase,
            )
        return info["id"]

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        for container in request["containers"]:
            missing = [key for key in REQUIRED_STELLA_LABELS if key not in container["labels"]]
            if missing:
                raise StellaError(
                    "label_missing",
                    "docker.run Labels of %s lack %s" % (container["name"], ", ".join(missing)),
                    phase="validate_payload",
                )
        with rec.phase("verify_target", record=False):
            ensure_this_host(request["target"], self.run_command)
        if self.preflight is not None:
            # The runtime preflight in the same task, as compose.up runs it: nothing was touched yet.
            runtime_preflight(self.cli, rec, evidence, self.preflight)
        with rec.phase("preflight", record=False):
            docker = self.cli.version(phase="preflight")
            evidence.update({"dockerVersion": docker["server"], "dockerClientVersion": docker["client"]})
        directory = request["project_directory"]
        sticker_path = os.path.join(directory, STICKER_FILE)
        with rec.phase("preflight", record=False):  # a superseded job stops here, in check mode too
            fence(directory, self.claim, accept=False)
        if check_mode:
            image_ids = {c["name"]: self._image_id(c, "pull_image") for c in request["containers"]}
            # a container whose healthcheck is still starting is waited for by the apply, not replaced
            gaps = {
                c["name"]: container_gaps(
                    self.cli.container(c["name"]), c, image_ids[c["name"]], health=HEALTH_VERIFIED + ("starting",)
                )
                for c in request["containers"]
            }
            stale = [c["name"] for c in request["containers"] if gaps[c["name"]]]
            committed = read_bytes(sticker_path)
            result["changed"] = bool(stale) or (
                request["sticker"] is not None and not same_release(committed, request["sticker"])
            )
            evidence.update({"checkMode": True, "wouldReplaceContainers": stale})
            if stale:
                evidence["wouldApplyBecause"] = [gap for name in stale for gap in gaps[name]]
            rec.skip(*DOCKER_STEPS)
            return
        with project_lock(directory):
            with rec.phase("preflight", record=False):  # under the lock: the claim the project now works for
                evidence.update(fence(directory, self.claim))
            killed = _hooks.reap_stale_hooks(directory)
            if killed:
                evidence["staleHookPidsKilled"] = killed
            with rec.phase("pull_image"):
                image_ids = {c["name"]: self._pulled(c, evidence) for c in request["containers"]}
                evidence["imageId"] = image_ids[request["containers"][0]["name"]]
            looks = {c["name"]: self._first_look(c, image_ids[c["name"]]) for c in request["containers"]}
            currents = {name: current for name, (current, _gaps, _waited) in looks.items()}
            gaps = {name: found for name, (_current, found, _waited) in looks.items()}
            waited = {name: ms for name, (_current, _gaps, ms) in looks.items() if ms is not None}
            if waited:
                evidence["startingWaitMs"] = waited
            stale = [c for c in request["containers"] if gaps[c["name"]]]
            committed = read_bytes(sticker_path)
            # the wait decided the step: the verification of the running release, or the replacement
            rec.carry("prepare_container" if stale else "inspect_container", sum(waited.values()))
            if not stale:
                self._converged(request, rec, result, currents, image_ids, committed)
                return
            evidence["appliedBecause"] = [gap for c in stale for gap in gaps[c["name"]]]
            self._apply(request, rec, result, stale, currents, image_ids, committed)

    def _first_look(self, container, image_id):
        """``(container of this name as it runs now, why it does not run this request, ms waited or
        None)``. One that already runs this request with its healthcheck still starting (just started
        or restarted) is waited for until its health is decided, not replaced: replacing it would
        restart the same release."""
        current = self.cli.container(container["name"], phase="prepare_container")
        waited = None
        if (
            current
            and current.get("health") == "starting"
            and not container_gaps(current, container, image_id, health=None)
        ):
            start = self.clock()
            try:
                current = wait_settled(
                    self.cli,
                    container["name"],
                    self.health_timeout,
                    self.settle,
                    self.sleep,
                    self.clock,
                    phase="prepare_container",
                )
            except StellaError as exc:
                if exc.code != "service_not_running":
                    raise
                current = None  # it disappeared while waited for: a new one is started
            waited = int((self.clock() - start) * 1000)
        return current, container_gaps(current, container, image_id), waited

    def _pulled(self, container, evidence):
        image_id = self._image_id(container, "pull_image")
        if container["pull_image"] and image_id is None:
            self.cli.pull(container["image"], phase="pull_image")
            evidence.setdefault("pulledImages", []).append(container["image"])
            evidence["pulled"] = True
            image_id = self._image_id(container, "pull_image")
        if image_id is None:
            raise StellaError("image_missing", "image %s is not present and PullImage is false" % container["image"])
        return image_id

    def _converged(self, request, rec, result, currents, image_ids, committed):
        """Every container already runs its request: no hook runs and no container is touched; a
        committed sticker of the same release (maybe of an earlier job) stays."""
        evidence = result["evidence"]
        rec.skip("write_artifacts", "pre_deploy_hooks", "prepare_container", "post_deploy_hooks")
        with rec.phase("inspect_container"):
            self._record(evidence, [(c, currents[c["name"]], image_ids[c["name"]]) for c in request["containers"]])
        sticker = request["sticker"]
        if sticker is None:
            return
        with rec.phase("write_sticker"):
            if same_release(committed, sticker):
                evidence["appliedByJobId"] = sticker_job(committed)
                sticker = committed
            else:
                atomic_write(os.path.join(request["project_directory"], STICKER_FILE), sticker)
                result["changed"] = True
            evidence["versionStickerHash"] = sha256_bytes(sticker)
        baseline = self._baseline(request)
        if baseline:
            evidence["previousRevisionPath"] = baseline

    def _apply(self, request, rec, result, stale, currents, image_ids, committed):
        evidence = result["evidence"]
        directory = request["project_directory"]
        env = {
            "STELLA_PROJECT_NAME": request["project_name"],
            "STELLA_PROJECT_DIRECTORY": directory,
            "STELLA_CONTAINER_NAME": request["containers"][0]["name"],
            "STELLA_MANIFEST_HASH": request["manifest_hash"] or "",
            "STELLA_TARGET_ID": request["target"]["id"],
        }
        aside = {}
        staged = StagedFiles(directory)
        try:
            with rec.phase("write_artifacts"):
                removed = remove_stale_revision_temps(directory) + remove_stale_temps(directory)
                if removed:
                    evidence["removedStaleTemps"] = removed
                if self.env_bytes is not None and read_bytes(os.path.join(directory, ENV_FILE)) != self.env_bytes:
                    staged.write(ENV_FILE, self.env_bytes, mode=ENV_FILE_MODE)
            with rec.phase("pre_deploy_hooks"):
                _hooks.run_phase(
                    request["hooks"],
                    "pre-deploy",
                    directory,
                    env,
                    self.secrets,
                    evidence["hookResults"],
                    result["warnings"],
                )
            with rec.phase("prepare_container"):
                result["changed"] = True
                for container in stale:
                    current = aside[container["name"]] = currents[container["name"]]
                    if current:
                        evidence.setdefault("replacedContainerIds", []).append(current["id"])
                        evidence.setdefault("replacedContainerId", current["id"])
                    self._set_aside(container, current)
                    self.cli.run_container(container_run_argv(container), phase="prepare_container")
            with rec.phase("inspect_container"):
                stale_names = {c["name"] for c in stale}
                seen = [
                    (
                        c,
                        self._wait(c["name"]) if c["name"] in stale_names else currents[c["name"]],
                        image_ids[c["name"]],
                    )
                    for c in request["containers"]
                ]
                self._record(evidence, seen)
                raise_problems(
                    [p for c, found, image_id in seen for p in verify_container(found, c, image_id)],
                    "inspect_container",
                )
            if request["sticker"] is not None:
                with rec.phase("write_sticker"):
                    staged.write(STICKER_FILE, request["sticker"])
                    evidence["versionStickerHash"] = sha256_bytes(request["sticker"])
            with rec.phase("post_deploy_hooks"):
                _hooks.run_phase(
                    request["hooks"],
                    "post-deploy",
                    directory,
                    env,
                    self.secrets,
                    evidence["hookResults"],
                    result["warnings"],
                )
        except BaseException:
            with contextlib.suppress(OSError):
                restored = staged.restore()
                if restored:
                    evidence["filesRestored"] = restored
                    evidence["stickerRestored"] = STICKER_FILE in restored
            self._put_back(stale, aside, evidence)
            raise
        staged.commit()
        self._retain(request, aside, committed, evidence)

    def _set_aside(self, container, current):
        """Stop the running container and rename it ``<name>-stella-replaced``."""
        if not current:
            return
        replaced = container["name"] + DOCKER_REPLACED_SUFFIX
        leftover = self.cli.container(replaced, phase="prepare_container")
        if leftover:
            self.cli.remove_container(leftover["id"], phase="prepare_container")
        self.cli.stop_container(current["id"], phase="prepare_container")
        self.cli.rename_container(current["id"], replaced, phase="prepare_container")

    def _put_back(self, stale, aside, evidence):
        """Remove the new containers and start the set-aside ones again under their own names."""
        for container in reversed(stale):
            if container["name"] not in aside:
                continue
            previous = aside[container["name"]]
            with contextlib.suppress(StellaError):
                new = self.cli.container(container["name"])
                if new and new["id"] != (previous or {}).get("id"):
                    self.cli.remove_container(new["id"])
                if previous:
                    if not new or new["id"] != previous["id"]:
                        self.cli.rename_container(previous["id"], container["name"])
                    self.cli.start_container(previous["id"])
                    evidence.setdefault("previousContainersRestored", []).append(previous["id"])
                    evidence["previousContainerRestored"] = previous["id"]

    def _retain(self, request, aside, committed, evidence):
        """After success: keep the replaced release (another release's sticker was committed) as the
        ``previous/`` revision with its containers stopped as ``<name>-stella-previous``; otherwise
        remove the set-aside containers."""
        replaced = {name: current for name, current in aside.items() if current}
        retain = (
            request["sticker"] is not None
            and committed is not None
            and not same_release(committed, request["sticker"])
            and bool(replaced)
        )
        if not retain:
            for current in replaced.values():
                self.cli.remove_container(current["id"], phase="cleanup")
            return
        kept = {}
        for name, current in sorted(replaced.items()):
            previous = name + DOCKER_PREVIOUS_SUFFIX
            old = self.cli.container(previous, phase="cleanup")
            if old:
                self.cli.remove_container(old["id"], phase="cleanup")
            self.cli.rename_container(current["id"], previous, phase="cleanup")
            kept[name] = current["id"]
        evidence["previousRevisionPath"] = write_revision(
            request["project_directory"], request["project_name"], committed, kept
        )
        evidence["retainedContainerIds"] = sorted(kept.values())

    def _baseline(self, request):
        """The retained revision when it records another release than the running one."""
        path = os.path.join(request["project_directory"], DOCKER_REVISION_DIR)
        try:
            with open(os.path.join(path, REVISION_RECORD), "rb") as handle:
                record = json.loads(handle.read())
        except (OSError, ValueError):
            return None
        return path if isinstance(record, dict) and record.get("manifestHash") != request["manifest_hash"] else None

    def _wait(self, name):
        return wait_settled(self.cli, name, self.health_timeout, self.settle, self.sleep, self.clock)

    @staticmethod
    def _record(evidence, seen):
        """``services`` for every container; the first one also as the top-level container fields."""
        services = [service_entry(request, container, image_id) for request, container, image_id in seen]
        evidence.update({"services": services, "serviceCount": len(services)})
        first = seen[0][1]
        evidence.update(
            {
                "containerId": first["id"],
                "containerName": first["name"],
                "containerState": first["state"],
                "health": first["health"],
                "restartCount": first.get("restartCount"),
                "ipAddress": first.get("ipAddress"),
                "startedAt": first.get("startedAt"),
                "labels": stella_labels(first.get("labels")),
            }
        )
