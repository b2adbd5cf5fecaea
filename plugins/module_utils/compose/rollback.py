# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``compose.rollback``: restore a retained revision and prove it runs.

Steps: ``resolve_revision`` and ``validate_revision`` (rollback-pre: nothing on the host changes
before the revision is found, belongs to this project and its hashes verify), ``restore_lock``,
``compose_pull``, ``compose_up`` (rollback-deploy), ``inspect_services`` (rollback-verify) and
``restore_sticker`` (rollback-post). A deployment's rollback restores only while the project still
runs the release that deployment applied (``ManifestHash``): a newer release is left alone
(``rollback_superseded``). A failure puts every file back as it was. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import revisions as _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import verify_artifact_set
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.apply import project_evidence
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.project import (
    ComposeProject,
    check_pinned,
    container_fingerprint,
    services_evidence,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import raise_problems
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WAIT_TIMEOUT,
    ENV_FILE,
    ENV_FILE_MODE,
    LOCK_FILE,
    MANIFEST_FILE,
    REVISION_FILES,
    ROLLBACK_PHASES,
    STICKER_FILE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import COMPOSE_ROLLBACK
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import fence
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import (
    StagedFiles,
    project_lock,
    read_bytes,
    remove_stale_temps,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.identity import ensure_this_host
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager


def parse_request(payload=None, options=None):
    """A ``compose.rollback`` request from the verbatim payload and/or the snake_case options."""
    request = COMPOSE_ROLLBACK.parse(payload, options)
    variables = request.pop("Variables") or {}
    request["reason"] = request["reason"] or variables.get("rollbackReason")
    return request


def revision_digests(sticker_bytes):
    """``{component: digest}`` recorded in a sticker (the rollback digest proof)."""
    try:
        sticker = json.loads(sticker_bytes)
    except ValueError:
        return {}
    return {c.get("name"): c.get("digest") for c in sticker.get("components") or [] if isinstance(c, dict)}


def committed_manifest_hash(manifest_bytes):
    try:
        return json.loads(manifest_bytes).get("manifestHash") if manifest_bytes else None
    except (ValueError, AttributeError):
        return None


def superseded(committed, own, restoring):
    """Why a deployment's rollback must not run (pure): the project runs neither the release that
    deployment applied nor the one being restored, so a newer deployment owns it now."""
    if not own or committed is None or committed in (own, restoring):
        return None
    return "project now runs release %s, not %s that this deployment applied; the newer release is left running" % (
        committed,
        own,
    )


def check_revision_set(layout, record, files):
    """The revision must be a consistent artifact set of this project."""
    problems = verify_artifact_set(
        files.get(MANIFEST_FILE) or b"",
        {LOCK_FILE: files.get(LOCK_FILE), STICKER_FILE: files.get(STICKER_FILE), ENV_FILE: files.get(ENV_FILE)},
        layout.project_name,
        record.get("manifestHash"),
    )
    if problems:
        raise StellaError(
            "revision_tampered",
            "retained revision is not a consistent artifact set: %s" % ("; ".join(problems)),
            phase="validate_revision",
            evidence={"problems": problems},
        )


class ComposeRollback(Manager):
    """``compose.rollback`` on this host."""

    groups = ROLLBACK_PHASES

    def __init__(self, cli, run_command, warn=None, wait_timeout=DEFAULT_WAIT_TIMEOUT):
        super().__init__(cli, run_command, warn)
        self.wait_timeout = wait_timeout

    def initial_evidence(self, request):
        self.layout = _revisions.Layout(request["work_directory"], request["project_name"])
        self.project = ComposeProject(self.cli, self.layout, self.wait_timeout)
        evidence = dict(project_evidence(super().initial_evidence(request), self.layout), rollbackRestored=False)
        if request.get("reason"):
            evidence["rollbackReason"] = request["reason"]
        return evidence

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        layout = self.layout
        with rec.phase("verify_target", record=False):
            ensure_this_host(request["target"], self.run_command)
        if not os.path.isdir(layout.project_dir):
            with rec.phase("resolve_revision"):
                raise StellaError(
                    "no_revision",
                    "project %s has no directory %s, so no retained revision"
                    % (layout.project_name, layout.project_dir),
                )
        wait_start = time.monotonic()
        with contextlib.nullcontext() if check_mode else project_lock(layout.project_dir):
            evidence["lockWaitMs"] = int((time.monotonic() - wait_start) * 1000)
            current = _revisions.read_current(layout)
            with rec.phase("resolve_revision"):
                evidence.update(fence(layout.project_dir, self.claim, accept=not check_mode))
                path = _revisions.resolve_revision(layout, request.get("revision_path"), request.get("manifest_hash"))
                evidence["restoredRevisionPath"] = path
                record, files = _revisions.load_revision(path, phase="validate_revision")
                why = superseded(
                    committed_manifest_hash(current[MANIFEST_FILE]),
                    request.get("manifest_hash"),
                    record.get("manifestHash"),
                )
                if why:
                    evidence["rollbackRefusedReason"] = why
                    raise StellaError("rollback_superseded", why)
            with rec.phase("validate_revision"):
                check_revision_set(layout, record, files)
                mhash = record.get("manifestHash")
                evidence.update(
                    {
                        "restoredManifestHash": mhash,
                        "manifestHash": mhash,
                        "restoredDigests": revision_digests(files[STICKER_FILE]),
                        "artifactHashes": dict(record["files"]),
                    }
                )
                runtime = evidence["runtime"] = self.cli.runtime(phase="preflight")
                evidence.update(
                    {"dockerVersion": runtime["dockerServerVersion"], "composeVersion": runtime["composeVersion"]}
                )
                before_containers = self.project.containers(phase="validate_revision")
            same_files = all(current[name] == files[name] for name in REVISION_FILES)
            converged = (
                self.project.converged(before_containers, request["target"], mhash, lock_bytes=files[LOCK_FILE])
                if same_files
                else None
            )
            if check_mode:
                result["changed"] = converged is None
                evidence["checkMode"] = True
                return
            if converged is not None:
                rec.skip("restore_lock", "compose_pull", "compose_up", "restore_sticker")
                with rec.phase("inspect_services"):
                    evidence.update(services_evidence(converged))
                evidence["rollbackRestored"] = True
                self._finish(evidence)
                return
            staged = StagedFiles(layout.project_dir)
            try:
                after = self._restore(request, rec, result, files, current, mhash, staged)
            except BaseException:
                with contextlib.suppress(OSError):
                    restored = staged.restore()
                    if restored:
                        evidence["filesRestored"] = restored
                raise
            staged.commit()
            result["changed"] = _revisions.read_current(layout) != current or container_fingerprint(
                after
            ) != container_fingerprint(before_containers)
            evidence["rollbackRestored"] = True
            self._finish(evidence)

    def _restore(self, request, rec, result, files, current, mhash, staged):
        evidence = result["evidence"]
        layout = self.layout
        with rec.phase("restore_lock"):
            removed = remove_stale_temps(layout.project_dir) + _revisions.remove_stale_revision_temps(layout)
            if removed:
                evidence["removedStaleTemps"] = removed
            if current[LOCK_FILE] != files[LOCK_FILE]:
                staged.write(LOCK_FILE, files[LOCK_FILE])
            if files.get(ENV_FILE) is not None and read_bytes(layout.env_path) != files[ENV_FILE]:
                staged.write(ENV_FILE, files[ENV_FILE], mode=ENV_FILE_MODE)
            expected = self.project.expected(files[LOCK_FILE], "restore_lock")
            images = expected[0]
            check_pinned(images, "restore_lock")
        with rec.phase("compose_pull"):
            image_ids, pulled = self.project.ensure_images(images, True, "compose_pull")
            evidence["pulledServices"] = pulled
        with rec.phase("compose_up"):
            result["changed"] = True
            started = self.project.up()
        with rec.phase("inspect_services"):
            after, services, problems = self.project.verify(
                expected, image_ids, request["target"], mhash, "inspect_services", containers=started
            )
            evidence.update(services_evidence(services))
            raise_problems(problems, "inspect_services")
        with rec.phase("restore_sticker"):
            for name in (STICKER_FILE, MANIFEST_FILE):
                if current[name] != files[name]:
                    staged.write(name, files[name])
        return after

    def _finish(self, evidence):
        for key, path in (
            ("versionStickerHash", self.layout.sticker_path),
            ("composeLockHash", self.layout.lock_path),
            ("applyManifestHash", self.layout.manifest_path),
        ):
            data = read_bytes(path)
            evidence[key] = sha256_bytes(data) if data is not None else None
