# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side ``compose.up``: apply a planned release to a Compose project on this host.

Steps (each recorded with its duration): ``write_artifacts`` (retain the committed revision, stage
the lock and env artifact), ``pre_deploy_hooks``, ``compose_pull`` (pull missing images, verify
RepoDigests), ``compose_up``, ``inspect_services`` (state, health, digest, labels, identity),
``write_sticker`` (commit sticker and apply manifest only now), ``post_deploy_hooks``. A failure at
any step puts every file of the project back exactly as it was; the retained revision stays as the
rollback baseline. Standard library only.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import os
import re
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import hooks as _hooks
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import revisions as _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.request import check_artifacts, parse_request
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import (
    listed_env_hash,
    same_release,
    verify_artifact_set,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.project import (
    NOT_ASKED,
    ComposeProject,
    ServicesNotReady,
    check_pinned,
    container_fingerprint,
    present_image_ids,
    services_evidence,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import raise_problems
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    COMPOSE_STEPS,
    DEFAULT_KEEP_REVISIONS,
    DEFAULT_WAIT_TIMEOUT,
    ENV_FILE,
    ENV_FILE_MODE,
    LOCK_FILE,
    MANIFEST_FILE,
    REVISION_FILES,
    STICKER_FILE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import fence
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import (
    StagedFiles,
    project_lock,
    read_bytes,
    remove_stale_temps,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.identity import ensure_this_host
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.preflight_step import runtime_preflight


# The early look: futures of the project's containers and of the lock's images, and whether it was
# asked under the project lock.
EarlyLook = collections.namedtuple("EarlyLook", "containers images locked")


def project_evidence(target_evidence, layout):
    """What every Compose task result starts with: identity and the project's logical paths."""
    evidence = dict(target_evidence)
    evidence.update(
        {
            "projectName": layout.project_name,
            "projectDirectory": layout.project_dir,
            "composePath": layout.lock_path,
            "composeLockPath": layout.lock_path,
            "applyManifestPath": layout.manifest_path,
            "versionStickerPath": layout.sticker_path,
            "services": [],
            "serviceCount": 0,
        }
    )
    return evidence


def lock_diff(before, after, path):
    return {"before": before or "", "after": after or "", "before_header": path, "after_header": path}


class ComposeApply(Manager):
    """``compose.up`` on this host."""

    def __init__(
        self,
        cli,
        run_command,
        warn=None,
        secrets=(),
        wait_timeout=DEFAULT_WAIT_TIMEOUT,
        keep_revisions=DEFAULT_KEEP_REVISIONS,
        env_bytes=None,
        preflight=None,
    ):
        super().__init__(cli, run_command, warn, secrets)
        self.wait_timeout = wait_timeout
        self.keep_revisions = keep_revisions
        self.env_bytes = env_bytes
        self.preflight = preflight

    def initial_evidence(self, request):
        self.layout = _revisions.Layout(request["work_directory"], request["project_name"])
        self.project = ComposeProject(self.cli, self.layout, self.wait_timeout)
        return dict(project_evidence(super().initial_evidence(request), self.layout), hookResults=[])

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        files, sticker = check_artifacts(request, self.env_bytes)
        mhash = sticker["manifestHash"]
        evidence.update(
            {
                "manifestHash": mhash,
                "composeLockHash": sha256_bytes(files[LOCK_FILE]),
                "versionStickerHash": sha256_bytes(files[STICKER_FILE]),
                "applyManifestHash": sha256_bytes(files[MANIFEST_FILE]),
                "artifactHashes": dict(
                    json.loads(files[MANIFEST_FILE])["artifacts"], **{MANIFEST_FILE: sha256_bytes(files[MANIFEST_FILE])}
                ),
                "slot": sticker.get("slot"),
                "trafficRole": sticker.get("trafficRole"),
            }
        )
        with rec.phase("verify_target", record=False):
            ensure_this_host(request["target"], self.run_command)
        with contextlib.ExitStack() as stack:
            early = None
            if not check_mode:
                # Look at the project's containers and the lock's images while the engine answers the
                # preflight (reads only: nothing on the host changes before the preflight passed). A
                # project that exists is looked at under its lock, taken now.
                locked = os.path.isdir(self.layout.project_dir)
                if locked:
                    self._lock(stack, evidence)
                early = self._ask(
                    stack.enter_context(concurrent.futures.ThreadPoolExecutor(max_workers=2)), files, locked
                )
            self._preflight(rec, evidence)
            with rec.phase("preflight", record=False):  # a superseded job stops here, in check mode too
                fence(self.layout.project_dir, self.claim, accept=False)
            if diff:
                before = read_bytes(self.layout.lock_path) or b""
                result["diff"] = lock_diff(
                    before.decode("utf-8", "replace"), files[LOCK_FILE].decode("utf-8"), self.layout.lock_path
                )
            if check_mode:
                return self._check_mode(request, rec, result, files, mhash)
            if not early.locked:
                self._lock(stack, evidence)
            with rec.phase("preflight", record=False):  # under the lock: the claim the project now works for
                evidence.update(fence(self.layout.project_dir, self.claim))
            killed = _hooks.reap_stale_hooks(self.layout.project_dir)
            if killed:
                evidence["staleHookPidsKilled"] = killed
            before = _revisions.read_current(self.layout)
            before_env = read_bytes(self.layout.env_path)
            containers, found = self._look(files, before, early)
            converged, reasons = self._converged(files, before, before_env, containers, request["target"], mhash, found)
            if converged is not None:
                # Same release, every service verified: no hook runs, no container is touched, and the
                # committed artifact set (with the sticker of the job that applied it) stays.
                evidence.update(services_evidence(converged))
                self._keep_committed(before, evidence)
                rec.skip(*[name for name in COMPOSE_STEPS if name != "inspect_services"])
                with rec.phase("inspect_services"):
                    baseline = _revisions.latest_other(self.layout, before[STICKER_FILE])
                if baseline:
                    evidence["previousRevisionPath"] = baseline
                return
            evidence["appliedBecause"] = reasons
            staged = StagedFiles(self.layout.project_dir)
            try:
                self._apply(request, rec, result, files, before, before_env, containers, mhash, staged, found)
            except BaseException:
                with contextlib.suppress(OSError):
                    restored = staged.restore()
                    if restored:
                        evidence["filesRestored"] = restored
                        evidence["lockRestored"] = LOCK_FILE in restored
                raise
            staged.commit()

    def _lock(self, stack, evidence):
        """Hold the project lock until ``stack`` closes; the wait is evidence."""
        wait_start = time.monotonic()
        stack.enter_context(project_lock(self.layout.project_dir))
        evidence["lockWaitMs"] = int((time.monotonic() - wait_start) * 1000)

    def _preflight(self, rec, evidence):
        """The runtime preflight (when asked) and the runtime facts every result records."""
        if self.preflight is not None:
            # The runtime preflight in the same task: nothing was touched yet.
            runtime_preflight(self.cli, rec, evidence, self.preflight)
        with rec.phase("preflight", record=False):
            runtime = evidence["runtime"] = self.cli.runtime(phase="preflight")
            evidence.update(
                {"dockerVersion": runtime["dockerServerVersion"], "composeVersion": runtime["composeVersion"]}
            )

    def _ask(self, pool, files, locked=True):
        """The early look: futures of the project's containers and of :meth:`ComposeProject.lock_images`
        for the lock asked for, asked at the same time."""
        return EarlyLook(
            pool.submit(self.project.containers, phase="verify_target"),
            pool.submit(self.project.lock_images, files[LOCK_FILE], "verify_target"),
            locked,
        )

    def _look(self, files, before, early):
        """``(containers, lock images)`` for the converge check and the apply: the early look's answers.
        An early look made before the project existed stands only while nothing was committed since
        (another job may have applied meanwhile); otherwise they are asked again, under the lock now held."""
        if not early.locked and before[LOCK_FILE] is not None:
            # the unlocked look finishes first (its answers are discarded): the engine is never asked the
            # same question twice at once
            concurrent.futures.wait([early.containers, early.images])
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                early = self._ask(pool, files)
                return early.containers.result(), early.images.result()
        return early.containers.result(), early.images.result()

    def _converged(self, files, before, before_env, containers, target, mhash, found=None):
        """``(services evidence, [])`` when the committed set is this release and runs exactly, else
        ``(None, reasons)``: one line each, why it must be applied."""
        if before[LOCK_FILE] is None:
            return None, ["nothing is committed in the project"]
        if before[LOCK_FILE] != files[LOCK_FILE]:
            return None, ["the committed lock is another one"]
        if before[STICKER_FILE] != files[STICKER_FILE] or before[MANIFEST_FILE] != files[MANIFEST_FILE]:
            # Another job applied this same release: its committed set must still verify.
            if not same_release(before[STICKER_FILE], files[STICKER_FILE]):
                return None, ["the committed sticker records another release"]
            problems = verify_artifact_set(
                before[MANIFEST_FILE] or b"",
                {LOCK_FILE: before[LOCK_FILE], STICKER_FILE: before[STICKER_FILE], ENV_FILE: before_env},
                self.layout.project_name,
                mhash,
            )
            if problems:
                return None, ["the committed artifact set does not verify: %s" % problem for problem in problems]
        env_hash = listed_env_hash(before[MANIFEST_FILE])
        if env_hash and sha256_bytes(before_env or b"") != env_hash:
            return None, ["%s is not the committed one" % ENV_FILE]
        if self.env_bytes is not None and before_env != self.env_bytes:
            return None, ["%s is another one" % ENV_FILE]
        ids = present_image_ids(*found) if found is not None else NOT_ASKED
        return self.project.convergence(containers, target, mhash, lock_bytes=files[LOCK_FILE], ids=ids)

    @staticmethod
    def _keep_committed(before, evidence):
        """Evidence of the committed set a converged run keeps (it may name an earlier job)."""
        committed = json.loads(before[STICKER_FILE])
        evidence.update(
            {
                "versionStickerHash": sha256_bytes(before[STICKER_FILE]),
                "applyManifestHash": sha256_bytes(before[MANIFEST_FILE]),
                "artifactHashes": dict(
                    json.loads(before[MANIFEST_FILE])["artifacts"],
                    **{MANIFEST_FILE: sha256_bytes(before[MANIFEST_FILE])},
                ),
                "appliedByJobId": committed.get("jobId"),
                "appliedByTaskId": committed.get("taskId"),
            }
        )

    def _hook_env(self, request, mhash):
        return {
            "STELLA_PROJECT_NAME": self.layout.project_name,
            "STELLA_PROJECT_DIRECTORY": self.layout.project_dir,
            "STELLA_MANIFEST_HASH": mhash,
            "STELLA_TARGET_ID": request["target"]["id"],
            "STELLA_COMPOSE_PATH": self.layout.lock_path,
        }

    def _apply(self, request, rec, result, files, before, before_env, before_containers, mhash, staged, found=None):
        evidence = result["evidence"]
        layout = self.layout
        env_hash = listed_env_hash(files[MANIFEST_FILE])
        hook_env = self._hook_env(request, mhash)
        with rec.phase("write_artifacts"):
            removed = remove_stale_temps(layout.project_dir) + _revisions.remove_stale_revision_temps(layout)
            if removed:
                evidence["removedStaleTemps"] = removed
            if env_hash and self.env_bytes is None and sha256_bytes(before_env or b"") != env_hash:
                raise StellaError(
                    "artifact_missing",
                    "apply manifest lists %s but it was not supplied and the file "
                    "on the target does not match" % ENV_FILE,
                )
            if request["backup_existing"]:
                baseline = _revisions.retain_baseline(layout, before, before_env, files, self.keep_revisions)
                if baseline:
                    evidence["previousRevisionPath"] = baseline
            if before[LOCK_FILE] != files[LOCK_FILE]:
                staged.write(LOCK_FILE, files[LOCK_FILE])
            if self.env_bytes is not None and before_env != self.env_bytes:
                staged.write(ENV_FILE, self.env_bytes, mode=ENV_FILE_MODE)
            expected = self.project.expected(files[LOCK_FILE], "write_artifacts")
            images = expected[0]
            check_pinned(images, "write_artifacts")
        with rec.phase("pre_deploy_hooks"):
            _hooks.run_phase(
                request["hooks"],
                "pre-deploy",
                layout.project_dir,
                hook_env,
                self.secrets,
                evidence["hookResults"],
                result["warnings"],
            )
        with rec.phase("compose_pull"):
            # What the early look found of the images stands unless a pre-deploy hook ran since (a
            # hook may pull or remove images).
            asked = (
                found[1] if found is not None and not _hooks.hooks_for_phase(request["hooks"], "pre-deploy") else None
            )
            image_ids, pulled = self.project.ensure_images(images, request["pull_images"], "compose_pull", asked)
            evidence.update(pulledServices=pulled, imageIds=image_ids)
        try:
            with rec.phase("compose_up"):
                result["changed"] = True
                started = self.project.up()
        except ServicesNotReady as exc:
            evidence.update(
                services_evidence(
                    self.project.verify(
                        expected, image_ids, request["target"], mhash, "compose_up", containers=exc.containers
                    )[1]
                )
            )
            raise
        except StellaError as exc:
            with contextlib.suppress(StellaError):
                evidence.update(
                    services_evidence(
                        self.project.verify(expected, image_ids, request["target"], mhash, "compose_up")[1]
                    )
                )
            exc.code = up_failure_code(exc.reason, exc.code)
            raise
        with rec.phase("inspect_services"):
            after, services, problems = self.project.verify(
                expected, image_ids, request["target"], mhash, "inspect_services", containers=started
            )
            evidence.update(services_evidence(services))
            result["changed"] = container_fingerprint(after) != container_fingerprint(before_containers)
            raise_problems(problems, "inspect_services")
        with rec.phase("write_sticker"):
            artifacts = {
                LOCK_FILE: read_bytes(layout.lock_path),
                STICKER_FILE: files[STICKER_FILE],
                ENV_FILE: read_bytes(layout.env_path) if env_hash else None,
            }
            problems = verify_artifact_set(files[MANIFEST_FILE], artifacts, layout.project_name, mhash)
            if problems:
                raise StellaError("artifact_hash_mismatch", "; ".join(problems), phase="write_sticker")
            for name in (STICKER_FILE, MANIFEST_FILE):
                if before[name] != files[name]:
                    staged.write(name, files[name])
        if staged.names():
            result["changed"] = True
        with rec.phase("post_deploy_hooks"):
            _hooks.run_phase(
                request["hooks"],
                "post-deploy",
                layout.project_dir,
                hook_env,
                self.secrets,
                evidence["hookResults"],
                result["warnings"],
            )

    def _check_mode(self, request, rec, result, files, mhash):
        evidence = result["evidence"]
        layout = self.layout
        exists = os.path.isdir(layout.project_dir)
        before = _revisions.read_current(layout) if exists else dict.fromkeys(REVISION_FILES)
        containers = self.project.containers(phase="write_artifacts")
        converged, reasons = self._converged(
            files, before, read_bytes(layout.env_path), containers, request["target"], mhash
        )
        if converged is None:
            evidence["wouldApplyBecause"] = reasons
        changed_files = [] if converged else sorted(name for name in REVISION_FILES if before[name] != files[name])
        result["changed"] = converged is None
        evidence["wouldChangeFiles"] = changed_files
        evidence["wouldRetainRevision"] = bool(request["backup_existing"] and before[STICKER_FILE] and changed_files)
        if converged:
            evidence.update(services_evidence(converged))
            self._keep_committed(before, evidence)
        rec.skip(*COMPOSE_STEPS)
        evidence["checkMode"] = True


def up_failure_code(reason, code):
    """A stable code from ``docker compose up``'s error text."""
    text = reason or ""
    if re.search(r"is unhealthy", text):
        return "service_unhealthy"
    if re.search(r"exited \(\d+\)|has exited|is not running|restarting", text):
        return "service_not_running"
    if re.search(r"manifest unknown|not found|pull access denied", text):
        return "image_pull_failed"
    return code


def from_options(module, cli, run_command, settings):
    """``(manager, request)`` of the ``compose.up`` the deploy module's options ask for (``settings``:
    ``agent.deploy.deploy_settings``)."""
    request = parse_request(module.params["payload"], module.params)
    manager = ComposeApply(
        cli,
        run_command,
        module.warn,
        settings["secrets"],
        module.params["wait_timeout"],
        module.params["keep_revisions"],
        settings["env_bytes"],
        preflight=settings["preflight"],
    )
    return manager, request
