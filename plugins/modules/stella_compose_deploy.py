#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_compose_deploy
short_description: Apply a Stella release on the target host with Docker Compose v2 or Docker
version_added: 0.1.0
description:
  - Target-side apply of a planned release (the C(compose.up) or C(docker.run) agent task). It runs on
    the target host and refuses to report success anywhere else; the target identity's endpoint must
    name the host the module runs on, otherwise it fails with code V(wrong_host).
  - For V(compose.up), under the per-project lock (held for the whole apply, post-deploy hooks
    included) it removes stale temporary files, retains the current revision when one exists and
    differs, stages C(compose.stella.lock.yml), runs pre-deploy hooks, pulls missing images, verifies
    every image's RepoDigests contains the pinned digest, runs C(docker compose up -d
    --remove-orphans), waits for every container as C(up --wait) would (looking every 0.1 s until each
    is healthy, or running when it has no healthcheck; an exited or unhealthy container fails at once),
    inspects every service (state, health, image, Stella labels, target identity) and
    only then writes C(stella.version.json) and C(apply-manifest.json), then runs post-deploy hooks.
  - For V(docker.run), it takes one payload (O(payload)) or the payloads of every component of one
    DockerHost release (O(payloads)) and applies them as one transaction under the project lock. It
    pulls and verifies every digest-pinned image before listing, stopping or creating containers, runs
    pre-deploy hooks once, sets each container that does not already run its request aside (stopped, as
    C(<name>-stella-replaced)), starts the new one with Stella labels and environment, verifies all of
    them, commits O(version_sticker) (when given) and runs post-deploy hooks. A failure removes the new
    containers and starts the set-aside ones again.
  - With O(version_sticker), when the release replaced another release, the replaced containers are
    retained stopped as C(<name>-stella-previous) and the project's C(previous/) revision records their ids
    and the old sticker; RV(previousRevisionPath) names it and M(stellaops.runtime.stella_rollback)
    (C(docker.rollback)) restores it.
  - A failure leaves the committed sticker and apply manifest untouched, names the failing phase in
    RV(failurePhase) and returns the evidence of what was done.
  - Docker and Compose are called with argument lists only. A missing Docker CLI, daemon or Compose v2
    plugin is a failure (V(runtime_missing), V(runtime_daemon_unavailable), V(compose_missing)), never a
    fallback.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
  - stellaops.runtime.task
attributes:
  check_mode:
    support: full
    details: Nothing is written, pulled, started or run (hooks included); the result says whether files
      would change and whether a revision would be retained.
  diff_mode:
    support: full
    details: The diff is the compose lock before and after.
  idempotent:
    support: full
    details: The same artifacts on a converged project run no hook, recreate no container and report
      C(changed=false). V(changed) is decided from container ids, start times and file contents.
options:
  task:
    description:
      - Which agent task to run.
      - V(compose.up) payload keys are C(ProjectName), C(ComposeLock), C(VersionSticker) and C(Target)
        (required) and C(ApplyManifest), C(PullImages), C(BackupExisting), C(Hooks), C(WorkDirectory),
        C(ManifestHash), C(Variables).
      - V(docker.run) needs O(payload) or O(payloads), each with keys C(Image), C(Name) and C(Target)
        (required) and C(PullImage), C(Hooks), C(Labels), C(Environment), C(Ports), C(Config),
        C(WorkDirectory), C(ManifestHash), C(Variables), C(EnvFile).
    type: str
    choices: [compose.up, docker.run]
    default: compose.up
  project_name:
    description: Compose project name (C(ProjectName)).
    type: str
  compose_lock:
    description: Content of C(compose.stella.lock.yml) (C(ComposeLock)).
    type: str
  version_sticker:
    description:
      - Content of C(stella.version.json) (C(VersionSticker) of V(compose.up)).
      - For V(docker.run), the release's sticker, written to the project directory after every container
        verified; its C(manifestHash) and C(projectName) must match the payloads.
    type: str
  payloads:
    description:
      - V(docker.run) only. The C(docker.run) payloads of every component of one DockerHost release, applied
        as one transaction. They must name the same target, project, manifest hash and hooks.
    type: list
    elements: dict
  apply_manifest:
    description:
      - Content of C(apply-manifest.json) (C(ApplyManifest)). Built from the lock and sticker when omitted;
        verified against them when given.
    type: str
  manifest_hash:
    description: Expected manifest hash (C(ManifestHash)); must match the sticker's.
    type: str
  pull_images:
    description: Pull images that are not present (C(PullImages)). Defaults to V(true).
    type: bool
  backup_existing:
    description: Retain the current revision before applying a different one (C(BackupExisting)). Defaults to V(true).
    type: bool
  hooks:
    description:
      - Hook entries with the contract's key names C(Name), C(Phase) (V(pre-deploy) or V(post-deploy)),
        C(Interpreter), C(Command), C(WorkingDirectory), C(TimeoutSeconds), C(FailurePolicy)
        (V(fail), V(ignore), V(continue), V(warn)) and C(RedactionPolicy) (V(redact), V(none)).
      - Hook output is replaced by its length and SHA-256 unless C(RedactionPolicy=none).
    type: list
    elements: dict
  preflight:
    description:
      - Run the runtime preflight in the same task, before anything on the host changes, with the
        engine client the apply goes on using (the runtime is asked each question once). A failed check
        fails the task with the check's stable code (for example V(runtime_version_too_old),
        V(disk_space_low)) and RV(failurePhase=preflight); RV(preflight) holds the evidence either way.
      - Works for both tasks. For V(compose.up) it runs before any artifact is written or image pulled;
        for V(docker.run) before any image is pulled and any container is listed, stopped or created.
      - The payload and O(preflight.target_type) are used as given; for V(docker.run) set
        O(preflight.target_type=DockerHost) (the Compose plugin is then not required unless the payload's
        C(RequireCompose) says so).
      - The same options as M(stellaops.runtime.stella_preflight); the most used are listed here.
    type: dict
    suboptions:
      payload:
        description: The C(compose.preflight) payload verbatim (C(WorkDirectory), C(ImageReference),
          C(MinimumFreeDiskBytes), C(RegistryReachabilityMode), C(RequireCompose)).
        type: dict
      target_type:
        description: V(ComposeHost) or V(DockerHost).
        type: str
        choices: [ComposeHost, DockerHost]
        default: ComposeHost
      min_engine_version:
        description: Oldest Docker Engine accepted.
        type: str
        default: 24.0.0
      min_compose_version:
        description: Oldest Docker Compose plugin accepted.
        type: str
        default: 2.20.0
      insecure_registries:
        description: Registries reached over plain HTTP for the reachability and platform checks.
        type: list
        elements: str
        default: []
      registry_credentials:
        description:
          - Credentials per registry for the registry access and platform checks, keyed by the registry
            host as image references name it (V(docker.io), V(127.0.0.1:5002); Docker Hub also as
            V(index.docker.io) or V(https://index.docker.io/v1/)).
          - Each value is C({username, password}) or C({identitytoken}) plus an optional non-secret
            C(source) label, returned as C(credentialSource) when used. Pull access is asked anonymously
            first; a registry's entry is used only when that is refused.
          - The same as O(stellaops.runtime.stella_preflight#module:registry_credentials). Passwords,
            identity tokens and tokens are never logged or returned.
        type: dict
      timeout:
        description: Seconds each preflight check may take.
        type: float
        default: 10
  secret_env:
    description:
      - The release's C(secretEnv) (name to value). The C(.env.stella) artifact is rendered from it on the
        target exactly as planning rendered it, so its hash must be the one the apply manifest lists.
        Its values are masked in every hook output, whatever the hook's C(RedactionPolicy). Never logged
        or returned. Mutually exclusive with O(env_artifact).
    type: dict
  env_artifact:
    description:
      - Content of the optional C(.env.stella) environment artifact (written with mode 0600). Its hash
        must be the one the apply manifest lists. Never logged or returned.
    type: str
  secrets:
    description:
      - Secret values masked in hook output kept by C(RedactionPolicy=none). Never logged.
    type: list
    elements: str
    default: []
  keep_revisions:
    description:
      - How many retained revisions of the project to keep (O(task=compose.up)); the oldest beyond it are
        deleted after a new one is retained. V(0) keeps all; a negative value is refused (V(invalid_payload))
        before anything on the target changes.
      - A V(docker.run) deployment keeps one previous revision (its stopped containers) whatever this says.
    type: int
    default: 10
notes:
  - Give secrets through O(env_artifact) and files on the target, never inside hook commands, because
    module arguments other than those marked no_log appear in verbose logs.
seealso:
  - module: stellaops.runtime.stella_plan
  - module: stellaops.runtime.stella_rollback
"""

EXAMPLES = r"""
- name: Plan on the controller
  stellaops.runtime.stella_plan:
    release: "{{ release }}"
  register: plan

- name: Apply the compose.up payload verbatim on the target
  stellaops.runtime.stella_compose_deploy:
    payload: "{{ plan.payloads['compose.up'] }}"
  register: applied

- name: Same with snake_case options
  stellaops.runtime.stella_compose_deploy:
    project_name: acme_prod_tgt-01_shop
    compose_lock: "{{ plan.lock }}"
    version_sticker: "{{ plan.sticker }}"
    pull_images: true
    target:
      id: tgt-01
      name: vm-01
      type: ComposeHost
      endpoint: ssh://deploy@10.0.0.5
      executionMode: agent
    work_directory: /var/lib/stella/projects
    hooks:
      - Name: migrate
        Phase: pre-deploy
        Interpreter: /bin/sh
        Command: ./migrate.sh
        TimeoutSeconds: 60
        FailurePolicy: fail
"""

RETURN = r"""
claimTakeover:
  description: With O(claim), the claim of another job store this work took the project over from
    (C({storeId, jobId, generation})); the project's claim file keeps it among its C(takeovers).
  returned: when a claim of another store was accepted
  type: dict
claimFileRecreated:
  description: With O(claim), the project's claim file was missing or unreadable where a job's sticker runs,
    and this work, shown newer than the sticker's job (or its own), wrote it again (C({was, stickerJobId})).
  returned: when the claim file was written again
  type: dict
projectDirectory:
  description: Project directory on the target.
  returned: compose.up
  type: str
composePath:
  description: Path of C(compose.stella.lock.yml).
  returned: compose.up
  type: str
applyManifestPath:
  description: Path of C(apply-manifest.json).
  returned: compose.up
  type: str
artifactHashes:
  description: SHA-256 of each artifact file, the apply manifest included.
  returned: compose.up
  type: dict
serviceCount:
  description: Number of Compose services verified.
  returned: compose.up
  type: int
services:
  description: Per container of the project, service, container id and name, state, health, image,
    imageDigest (set only when the container runs the pinned image), ipAddress and Stella labels.
  returned: compose.up
  type: list
  elements: dict
completedPhases:
  description: Implementation phases that completed, in order (V(write_artifacts), V(pre_deploy_hooks),
    V(compose_pull), V(compose_up), V(inspect_services), V(write_sticker), V(post_deploy_hooks); for
    docker.run V(pull_image), V(pre_deploy_hooks), V(prepare_container), V(inspect_container), V(post_deploy_hooks)).
  returned: always
  type: list
  elements: str
phaseDurationsMs:
  description: Duration of each implementation phase that ran.
  returned: always
  type: dict
deploymentPhases:
  description: High-level phases (V(prepare), V(pre-deploy), V(deploy), V(verify), V(promote),
    V(post-deploy)) with status and durationMs.
  returned: always
  type: list
  elements: dict
hookResults:
  description: One entry per hook run, with name, phase, exitCode, timedOut, durationMs, failurePolicy,
    outcome (V(succeeded), V(failed), V(ignored), V(warned), V(continued)) and stdout/stderr
    (redacted to their length unless RedactionPolicy=none).
  returned: always
  type: list
  elements: dict
preflight:
  description:
    - The preflight evidence (OS, architecture, Docker and Compose versions, daemon, registry,
      platform, work directory, disk), when O(preflight) was given (V(compose.up) and V(docker.run)).
    - Its C(registry) has the keys of M(stellaops.runtime.stella_preflight)'s, among them C(reachable),
      C(authRequired), C(challenge), C(rateLimited), C(retryAfter), C(pullAccess) (V(anonymous) or
      V(credentials)) and C(credentialSource).
  returned: when O(preflight) was given
  type: dict
preflightFailures:
  description: The failed preflight checks (code and reason), empty when all passed (V(compose.up) and
    V(docker.run)).
  returned: when O(preflight) was given
  type: list
  elements: dict
failurePhase:
  description: The phase that failed, V(null) on success.
  returned: always
  type: str
code:
  description: Stable failure code.
  returned: failure
  type: str
targetId:
  description: Target identity used for the run (also RV(targetName), RV(targetType), RV(targetEndpoint), RV(targetExecutionMode)).
  returned: always
  type: str
previousRevisionPath:
  description: Retained revision that is the rollback baseline.
  returned: when a baseline exists
  type: str
appliedBecause:
  description:
    - Why the apply ran, one line each - nothing committed yet, another lock, or the release asked for
      not verified at the first look (for example a container whose health was still V(starting)).
    - The apply then reports C(changed) only when C(docker compose up) replaced or restarted a
      container or a file's contents differ.
    - For C(docker.run), why containers were replaced - missing, another image, each label of another
      value, not running, restarting or unhealthy. A container of the same request whose health is
      V(starting) is waited for first (RV(startingWaitMs)), and replaced only when it does not turn healthy.
  returned: compose.up, when the project was not already converged; docker.run, when a container was replaced
  type: list
  elements: str
startingWaitMs:
  description:
    - C(docker.run) - how long each container that already ran its request, with its health still
      V(starting) at the first look, was waited for, in milliseconds.
    - The time is counted in RV(phaseDurationsMs) of C(inspect_container) when the container turned
      healthy, of C(prepare_container) when it was replaced.
  returned: docker.run, when such a container was waited for
  type: dict
  sample: {"acme_prod_tgt-01_shop-web": 4250}
wouldApplyBecause:
  description:
    - Check mode only, when the apply would run - the reasons RV(appliedBecause) would give.
  returned: compose.up in check mode, when the project is not already converged; docker.run in check mode, when a container would be replaced
  type: list
  elements: str
versionStickerPath:
  description: Path of C(stella.version.json) (RV(versionStickerHash) is its SHA-256).
  returned: compose.up
  type: str
composeLockPath:
  description: Path of the compose lock (RV(composeLockHash) is its SHA-256).
  returned: compose.up
  type: str
runtime:
  description: Docker client/server and Compose versions, OS and architecture.
  returned: compose.up
  type: dict
containerId:
  description: Container id (docker.run; also RV(containerName), RV(containerState), RV(ipAddress)).
  returned: docker.run
  type: str
targetName:
  description: Target name used for the run.
  returned: always
  type: str
targetType:
  description: Target type (V(ComposeHost) or V(DockerHost)).
  returned: always
  type: str
targetEndpoint:
  description: Target endpoint the run verified as this host.
  returned: always
  type: str
targetExecutionMode:
  description: Target execution mode.
  returned: always
  type: str
versionStickerHash:
  description: SHA-256 of C(stella.version.json).
  returned: compose.up
  type: str
composeLockHash:
  description: SHA-256 of C(compose.stella.lock.yml).
  returned: compose.up
  type: str
containerName:
  description: Container name (docker.run).
  returned: docker.run
  type: str
containerState:
  description: Container state after the apply (docker.run).
  returned: docker.run
  type: str
ipAddress:
  description: Container IP address (docker.run).
  returned: docker.run
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import apply as _compose_apply
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.deploy import deploy_settings
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import (
    argument_spec,
    command_runner,
    engine_client,
    run_task,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_KEEP_REVISIONS
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import parse_claim

ARGUMENT_SPEC = argument_spec(
    dict(
        task=dict(type="str", choices=["compose.up", "docker.run"], default="compose.up"),
        project_name=dict(type="str"),
        compose_lock=dict(type="str"),
        version_sticker=dict(type="str"),
        apply_manifest=dict(type="str"),
        manifest_hash=dict(type="str"),
        pull_images=dict(type="bool"),
        backup_existing=dict(type="bool"),
        hooks=dict(type="list", elements="dict"),
        preflight=dict(
            type="dict",
            options=dict(
                payload=dict(type="dict"),
                target_type=dict(type="str", choices=["ComposeHost", "DockerHost"], default="ComposeHost"),
                min_engine_version=dict(type="str", default=DEFAULT_MIN_ENGINE),
                min_compose_version=dict(type="str", default=DEFAULT_MIN_COMPOSE),
                insecure_registries=dict(type="list", elements="str", default=[]),
                registry_credentials=dict(type="dict", no_log=True),
                timeout=dict(type="float", default=10),
            ),
        ),
        secret_env=dict(type="dict", no_log=True),
        env_artifact=dict(type="str", no_log=True),
        secrets=dict(type="list", elements="str", no_log=True, default=[]),
        keep_revisions=dict(type="int", default=DEFAULT_KEEP_REVISIONS),
        payloads=dict(type="list", elements="dict"),
    ),
    task=True,
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        mutually_exclusive=[("secret_env", "env_artifact"), ("payload", "payloads")],
    )
    settings = deploy_settings(module)
    run_command = command_runner(module)
    cli = engine_client(module, run_command)

    def task():
        if module.params["task"] == "docker.run":
            # imported only for this task: a compose.up run does not compile it
            from ansible_collections.stellaops.runtime.plugins.module_utils.docker import run as _docker_run  # pylint: disable=import-outside-toplevel

            manager, request = _docker_run.from_options(module, cli, run_command, settings)
        else:
            manager, request = _compose_apply.from_options(module, cli, run_command, settings)
        manager.claim = parse_claim(module.params["claim"])
        return manager.run(request, check_mode=module.check_mode, diff=module._diff)

    run_task(module, task)


if __name__ == "__main__":
    main()
