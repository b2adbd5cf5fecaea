# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``docker.rollback``: restore the DockerHost release a deployment replaced.

The baseline is the project's ``previous/`` revision that ``docker.run`` retained: the replaced
release's sticker and the ids of its stopped ``<name>-stella-previous`` containers. Steps:
``resolve_revision`` (the revision exists; the project still runs the release the rolled-back
deployment applied, else ``rollback_superseded``), ``validate_revision`` (sticker hash, every
retained container present with the recorded id and the revision's manifest hash),
``restore_container`` (each running container is stopped and set aside, the retained one takes its
name and starts), ``inspect_container`` (running, healthy, image, labels), ``restore_sticker``. A
failure puts every container and the sticker back. After success the rolled-back containers and the
consumed revision are removed (one rollback per baseline). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import (
    container_problems,
    raise_problems,
    stella_labels,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CONTAINER_NAME_RE,
    DEFAULT_WAIT_TIMEOUT,
    DOCKER_PREVIOUS_SUFFIX,
    DOCKER_REVISION_DIR,
    DOCKER_ROLLED_BACK_SUFFIX,
    LABEL_MANIFEST_HASH,
    ROLLBACK_PHASES,
    STICKER_FILE,
    invalid,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import DOCKER_ROLLBACK
from ansible_collections.stellaops.runtime.plugins.module_utils.docker.revision import load_revision
from ansible_collections.stellaops.runtime.plugins.module_utils.docker.container import SETTLE_SECONDS, wait_settled
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import fence
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import StagedFiles, project_lock, read_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.identity import ensure_this_host
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager


def parse_request(payload=None, options=None):
    """A ``docker.rollback`` request from the verbatim payload and/or the snake_case options."""
    request = DOCKER_ROLLBACK.parse(payload, options)
    variables = request.pop("Variables") or {}
    request["reason"] = request["reason"] or variables.get("rollbackReason")
    names = request["names"]
    if not names or not all(isinstance(n, str) and CONTAINER_NAME_RE.match(n) for n in names):
        raise invalid("Names must list the deployment's container names, got %r" % (names,))
    request["project_directory"] = os.path.join(request["work_directory"], request["project_name"])
    return request


def sticker_facts(sticker_bytes):
    """``(manifestHash, {component: digest})`` recorded in a sticker."""
    try:
        sticker = json.loads(sticker_bytes)
    except (TypeError, ValueError):
        return None, {}
    if not isinstance(sticker, dict):
        return None, {}
    return sticker.get("manifestHash"), {
        c.get("name"): c.get("digest") for c in sticker.get("components") or [] if isinstance(c, dict)
    }


def retained_problems(record, names, found):
    """Problems (strings) of the retained containers against the revision record (pure).

    ``found``: ``{name: summary of <name>-stella-previous or None}``.
    """
    problems = []
    recorded = record.get("containers") or {}
    for name in names:
        if name not in recorded:
            problems.append("the revision records no retained container for %s" % name)
            continue
        container = found.get(name)
        if container is None:
            problems.append("retained container %s%s is gone" % (name, DOCKER_PREVIOUS_SUFFIX))
        elif container["id"] != recorded[name]:
            problems.append(
                "%s%s is container %s, the revision records %s"
                % (name, DOCKER_PREVIOUS_SUFFIX, container["id"], recorded[name])
            )
        elif (container.get("labels") or {}).get(LABEL_MANIFEST_HASH) != record.get("manifestHash"):
            problems.append(
                "%s%s carries %s=%r, the revision is %s"
                % (
                    name,
                    DOCKER_PREVIOUS_SUFFIX,
                    LABEL_MANIFEST_HASH,
                    (container.get("labels") or {}).get(LABEL_MANIFEST_HASH),
                    record.get("manifestHash"),
                )
            )
    return problems


class DockerRollback(Manager):
    """``docker.rollback`` on this host."""

    groups = ROLLBACK_PHASES

    def __init__(
        self,
        cli,
        run_command,
        warn=None,
        wait_timeout=DEFAULT_WAIT_TIMEOUT,
        settle=SETTLE_SECONDS,
        sleep=time.sleep,
        clock=time.monotonic,
    ):
        super().__init__(cli, run_command, warn)
        self.wait_timeout = wait_timeout
        self.settle = settle
        self.sleep = sleep
        self.clock = clock

    def initial_evidence(self, request):
        evidence = super().initial_evidence(request)
        evidence.update(
            {
                "projectName": request["project_name"],
                "projectDirectory": request["project_directory"],
                "versionStickerPath": os.path.join(request["project_directory"], STICKER_FILE),
                "rollbackRestored": False,
                "services": [],
                "serviceCount": 0,
            }
        )
        if request.get("reason"):
            evidence["rollbackReason"] = request["reason"]
        return evidence

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        directory = request["project_directory"]
        with rec.phase("verify_target", record=False):
            ensure_this_host(request["target"], self.run_command)
        revision = os.path.join(directory, DOCKER_REVISION_DIR)
        if request.get("revision_path") and os.path.realpath(request["revision_path"]) != os.path.realpath(revision):
            with rec.phase("resolve_revision"):
                raise StellaError(
                    "revision_path_rejected",
                    "revision path %r is not the retained DockerHost "
                    "revision %s" % (request["revision_path"], revision),
                )
        if not os.path.isdir(revision):
            with rec.phase("resolve_revision"):
                raise StellaError(
                    "no_revision", "project %s has no retained revision %s" % (request["project_name"], revision)
                )
        with contextlib.nullcontext() if check_mode else project_lock(directory):
            committed = read_bytes(os.path.join(directory, STICKER_FILE))
            with rec.phase("resolve_revision"):
                evidence.update(fence(directory, self.claim, accept=not check_mode))
                evidence["restoredRevisionPath"] = revision
                record, sticker = load_revision(revision)
                running, _digests = sticker_facts(committed)
                own = request.get("manifest_hash")
                if own and running not in (own, record.get("manifestHash")):
                    why = (
                        "project now runs release %s, not %s that this deployment applied; the newer release is "
                        "left running" % (running, own)
                    )
                    evidence["rollbackRefusedReason"] = why
                    raise StellaError("rollback_superseded", why)
            with rec.phase("validate_revision"):
                mhash, digests = sticker_facts(sticker)
                evidence.update({"restoredManifestHash": mhash, "manifestHash": mhash, "restoredDigests": digests})
                found = {
                    name: self.cli.container(name + DOCKER_PREVIOUS_SUFFIX, phase="validate_revision")
                    for name in request["names"]
                }
                problems = retained_problems(record, request["names"], found)
                if problems:
                    raise StellaError("revision_tampered", "retained revision %s: %s" % (revision, "; ".join(problems)))
            if check_mode:
                result["changed"] = True
                evidence["checkMode"] = True
                return
            self._restore(request, rec, result, found, record, sticker, committed)

    def _restore(self, request, rec, result, found, record, sticker, committed):
        evidence = result["evidence"]
        directory = request["project_directory"]
        swapped = []
        staged = StagedFiles(directory)
        try:
            with rec.phase("restore_container"):
                result["changed"] = True
                for name in request["names"]:
                    current = self.cli.container(name, phase="restore_container")
                    swapped.append((name, current, found[name]))
                    if current:
                        self.cli.stop_container(current["id"], phase="restore_container")
                        self.cli.rename_container(
                            current["id"], name + DOCKER_ROLLED_BACK_SUFFIX, phase="restore_container"
                        )
                    self.cli.rename_container(found[name]["id"], name, phase="restore_container")
                    self.cli.start_container(found[name]["id"], phase="restore_container")
            with rec.phase("inspect_container"):
                seen = [self._wait(name) for name in request["names"]]
                evidence["services"] = [self._entry(c, record, sticker) for c in seen]
                evidence["serviceCount"] = len(seen)
                problems = []
                for container in seen:
                    problems.extend(container_problems(container, "restored container"))
                    if (container.get("labels") or {}).get(LABEL_MANIFEST_HASH) != record.get("manifestHash"):
                        problems.append(
                            (
                                "label_mismatch",
                                "restored container %s is not release %s"
                                % (container["name"], record.get("manifestHash")),
                            )
                        )
                raise_problems(problems, "inspect_container")
            with rec.phase("restore_sticker"):
                if committed != sticker:
                    staged.write(STICKER_FILE, sticker)
                evidence["versionStickerHash"] = sha256_bytes(sticker)
        except BaseException:
            with contextlib.suppress(OSError):
                if staged.restore():
                    evidence["stickerRestored"] = True
            self._put_back(swapped, evidence)
            raise
        staged.commit()
        evidence["rollbackRestored"] = True
        evidence["rolledBackContainerIds"] = sorted(c["id"] for _n, c, _p in swapped if c)
        for _name, current, _previous in swapped:
            if current:
                self.cli.remove_container(current["id"], phase="cleanup")
        shutil.rmtree(os.path.join(directory, DOCKER_REVISION_DIR), ignore_errors=True)

    def _put_back(self, swapped, evidence):
        """Stop the restored containers under their retained names and start the replaced ones again."""
        for name, current, previous in reversed(swapped):
            with contextlib.suppress(StellaError):
                now = self.cli.container(name)
                if now and now["id"] == previous["id"]:
                    self.cli.stop_container(previous["id"])
                    self.cli.rename_container(previous["id"], name + DOCKER_PREVIOUS_SUFFIX)
                if current:
                    self.cli.rename_container(current["id"], name)
                    self.cli.start_container(current["id"])
                    evidence.setdefault("containersPutBack", []).append(current["id"])

    @staticmethod
    def _entry(container, record, sticker):
        _mhash, digests = sticker_facts(sticker)
        service = (container.get("labels") or {}).get("stella.component") or container["name"]
        digest = digests.get(service)
        if digest is None and len(digests) == 1:
            digest = next(iter(digests.values()))
        image = container.get("image") or ""
        return {
            "service": service,
            "containerId": container["id"],
            "containerName": container["name"],
            "state": container["state"],
            "health": container["health"],
            "startedAt": container.get("startedAt"),
            "image": image,
            "imageDigest": digest if digest and image.endswith("@" + digest) else None,
            "imageId": container.get("imageId"),
            "ipAddress": container.get("ipAddress"),
            "labels": stella_labels(container.get("labels")),
            "manifestHash": record.get("manifestHash"),
        }

    def _wait(self, name):
        return wait_settled(self.cli, name, self.wait_timeout, self.settle, self.sleep, self.clock)
