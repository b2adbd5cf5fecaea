# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``compose.rollback``: restore a retained revision and prove it runs.

Phases: ``rollback-pre`` (resolve the revision, validate its hashes and artifact set; nothing on the
host changes before this passes), ``rollback-deploy`` (stage the revision's lock, pull missing images,
verify digests, ``docker compose up``), ``rollback-verify`` (inspect every service: state, health,
image digest, Stella labels, target identity) and ``rollback-post`` (commit the revision's sticker and
apply manifest). A missing revision fails in ``resolve_revision`` before any pull or runtime mutation.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ansible_collections.stellaops.runtime.plugins.module_utils import _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils._artifacts import verify_artifact_set
from ansible_collections.stellaops.runtime.plugins.module_utils._canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils._deploy import (
    ComposeHost, PhaseRecorder, _bad, _check_keys, container_fingerprint, ensure_this_host, normalize_target,
    raise_problems, service_images, project_evidence, DEFAULT_WORK_DIRECTORY)
from ansible_collections.stellaops.runtime.plugins.module_utils._fsutil import (
    atomic_write, project_lock, read_bytes, remove_stale_temps)
from ansible_collections.stellaops.runtime.plugins.module_utils._imageref import parse_image_ref

ROLLBACK_KEYS = ("ProjectName", "RevisionPath", "Target", "Variables", "WorkDirectory", "Reason")
ROLLBACK_REQUIRED = ("ProjectName", "Target")
ROLLBACK_PHASES = (
    ("rollback-pre", ("resolve_revision", "validate_revision")),
    ("rollback-deploy", ("restore_lock", "compose_pull", "compose_up")),
    ("rollback-verify", ("inspect_services",)),
    ("rollback-post", ("restore_sticker",)),
)


def rollback_request_from_payload(payload, overrides=None):
    """Normalize a verbatim ``compose.rollback`` payload (ProjectName, optional RevisionPath, Target...)."""
    _check_keys(payload, ROLLBACK_KEYS, ROLLBACK_REQUIRED, "compose.rollback")
    variables = payload.get("Variables") or {}
    if not isinstance(variables, dict):
        raise _bad("Variables must be an object")
    work = (overrides or {}).get("work_directory") or payload.get("WorkDirectory") or variables.get("workDirectory")
    project = payload["ProjectName"]
    if not isinstance(project, str) or not project:
        raise _bad("ProjectName must be a non-empty string")
    revision = payload.get("RevisionPath")
    if revision is not None and (not isinstance(revision, str) or not revision):
        raise _bad("RevisionPath must be a non-empty string when given")
    return {
        "project_name": project,
        "revision_path": revision,
        "target": normalize_target(payload["Target"]),
        "work_directory": work or DEFAULT_WORK_DIRECTORY,
        "reason": payload.get("Reason") or variables.get("rollbackReason"),
        "pull_images": True,
    }


def rollback_request_from_options(params):
    for key in ("project_name", "target"):
        if not params.get(key):
            raise _bad("option %s is required when payload is not given" % key)
    return {
        "project_name": params["project_name"],
        "revision_path": params.get("revision_path"),
        "target": normalize_target(params["target"], "target"),
        "work_directory": params.get("work_directory") or DEFAULT_WORK_DIRECTORY,
        "reason": params.get("reason"),
        "pull_images": params.get("pull_images", True) is not False,
    }


def revision_digests(sticker_bytes):
    """``{component: digest}`` recorded in a sticker (the rollback digest proof)."""
    try:
        sticker = json.loads(sticker_bytes)
    except ValueError:
        return {}
    return {c.get("name"): c.get("digest") for c in sticker.get("components") or [] if isinstance(c, dict)}


def check_revision_set(layout, record, files):
    """The revision must be a consistent artifact set of this project (pure apart from nothing)."""
    problems = verify_artifact_set(files.get(_revisions.MANIFEST_FILE) or b"", {
        _revisions.LOCK_FILE: files.get(_revisions.LOCK_FILE),
        _revisions.STICKER_FILE: files.get(_revisions.STICKER_FILE),
        _revisions.ENV_FILE: files.get(_revisions.ENV_FILE)}, layout.project_name, record.get("manifestHash"))
    if problems:
        raise StellaError("revision_tampered", "retained revision is not a consistent artifact set: %s" % (
            "; ".join(problems)), phase="validate_revision", evidence={"problems": problems})


class ComposeRollback:
    """Restore a retained revision of a Compose project on this host."""

    def __init__(self, run_command, docker="docker", warn=None, wait_timeout=120):
        self.host = ComposeHost(run_command, docker=docker, warn=warn, wait_timeout=wait_timeout)
        self.run_command = run_command

    def rollback(self, request, check_mode=False):
        rec = PhaseRecorder()
        target = request["target"]
        layout = _revisions.Layout(request["work_directory"], request["project_name"])
        evidence = project_evidence(target, layout)
        evidence["rollbackRestored"] = False
        if request.get("reason"):
            evidence["rollbackReason"] = request["reason"]
        result = {"changed": False, "evidence": evidence, "warnings": []}
        try:
            self._rollback(request, layout, rec, result, check_mode)
        except StellaError as exc:
            evidence.update(rec.evidence(ROLLBACK_PHASES))
            evidence["failurePhase"] = exc.phase
            exc.evidence = dict(evidence, **(exc.evidence or {}))
            exc.evidence["changed"] = result["changed"]
            raise
        evidence.update(rec.evidence(ROLLBACK_PHASES))
        return result

    def _rollback(self, request, layout, rec, result, check_mode):
        evidence = result["evidence"]
        target = request["target"]
        ensure_this_host(target, self.run_command)
        if not os.path.isdir(layout.project_dir):
            with rec.phase("resolve_revision"):
                raise StellaError("no_revision", "project %s has no directory %s, so no retained revision" % (
                    layout.project_name, layout.project_dir), phase="resolve_revision")
        lock_cm = contextlib.nullcontext() if check_mode else project_lock(layout.project_dir)
        wait_start = time.monotonic()
        with lock_cm:
            evidence["lockWaitMs"] = int((time.monotonic() - wait_start) * 1000)
            with rec.phase("resolve_revision"):
                path = _revisions.resolve_revision(layout, request.get("revision_path"))
                evidence["restoredRevisionPath"] = path
            with rec.phase("validate_revision"):
                record, files = _revisions.load_revision(path)
                check_revision_set(layout, record, files)
                mhash = record.get("manifestHash")
                evidence.update({"restoredManifestHash": mhash,
                                 "restoredDigests": revision_digests(files[_revisions.STICKER_FILE]),
                                 "manifestHash": mhash,
                                 "artifactHashes": dict(record["files"])})
            evidence["runtime"] = runtime = self.host.runtime(phase="preflight")
            evidence.update({"dockerVersion": runtime["dockerServerVersion"],
                             "composeVersion": runtime["composeVersion"]})
            current = _revisions.read_current(layout)
            before_env = read_bytes(layout.env_path)
            before_containers = self.host.current_containers(layout.project_name, phase="validate_revision")
            if check_mode:
                result["changed"] = any(current[name] != files[name] for name in _revisions.REVISION_FILES) or \
                    self._converged(layout, files, current, before_containers, target, mhash) is None
                evidence["checkMode"] = True
                return
            converged = self._converged(layout, files, current, before_containers, target, mhash)
            if converged is not None:
                for name in ("restore_lock", "compose_pull", "compose_up", "restore_sticker"):
                    rec.skip(name)
                with rec.phase("inspect_services"):
                    evidence["services"] = converged
                    evidence["serviceCount"] = len({s["service"] for s in converged})
                evidence["rollbackRestored"] = True
                self._finish(evidence, layout)
                return
            with rec.phase("restore_lock"):
                removed = remove_stale_temps(layout.project_dir) + _revisions.remove_stale_revision_temps(layout)
                if removed:
                    evidence["removedStaleTemps"] = removed
                atomic_write(layout.lock_path, files[_revisions.LOCK_FILE])
                if files.get(_revisions.ENV_FILE) is not None and before_env != files[_revisions.ENV_FILE]:
                    atomic_write(layout.env_path, files[_revisions.ENV_FILE], mode=0o600)
                result["changed"] = current[_revisions.LOCK_FILE] != files[_revisions.LOCK_FILE]
                config = self.host.read_config(layout, "restore_lock")
                images = service_images(config)
                for service, image in images.items():
                    if not image or not parse_image_ref(image).digest:
                        raise StellaError("image_not_pinned", "service %s image %r is not digest-pinned" % (
                            service, image), phase="restore_lock")
            with rec.phase("compose_pull"):
                image_ids, pulled = self.host.ensure_images(layout, images, request["pull_images"], "compose_pull")
                evidence["pulledServices"] = pulled
            with rec.phase("compose_up"):
                result["changed"] = True
                self.host.cli.compose_up(layout.project_name, layout.lock_path, layout.project_dir,
                                         wait_timeout=self.host.wait_timeout)
            with rec.phase("inspect_services"):
                after, services, problems = self.host.verify(layout, config, image_ids, target, mhash,
                                                             "inspect_services")
                evidence["services"] = services
                evidence["serviceCount"] = len({s["service"] for s in services})
                raise_problems(problems, "inspect_services")
            with rec.phase("restore_sticker"):
                if current[_revisions.STICKER_FILE] != files[_revisions.STICKER_FILE]:
                    atomic_write(layout.sticker_path, files[_revisions.STICKER_FILE])
                if current[_revisions.MANIFEST_FILE] != files[_revisions.MANIFEST_FILE]:
                    atomic_write(layout.manifest_path, files[_revisions.MANIFEST_FILE])
            result["changed"] = (_revisions.read_current(layout) != current
                                 or container_fingerprint(after) != container_fingerprint(before_containers))
            evidence["rollbackRestored"] = True
            self._finish(evidence, layout)

    def _converged(self, layout, files, current, containers, target, mhash):
        if any(current[name] != files[name] for name in _revisions.REVISION_FILES):
            return None
        return self.host._converged(layout, {n: files[n] for n in _revisions.REVISION_FILES}, current,
                                    read_bytes(layout.env_path), None, None, containers, target, mhash)

    @staticmethod
    def _finish(evidence, layout):
        for key, path in (("versionStickerHash", layout.sticker_path), ("composeLockHash", layout.lock_path),
                          ("applyManifestHash", layout.manifest_path)):
            data = read_bytes(path)
            evidence[key] = sha256_bytes(data) if data is not None else None
        evidence["composeLockPath"] = layout.lock_path
