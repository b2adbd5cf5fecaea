#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_rollback
short_description: Restore a retained revision on the target host (compose.rollback, docker.rollback)
version_added: 0.1.0
description:
  - Target-side C(compose.rollback). Resolves the explicit O(revision_path) (which must resolve inside
    the project's C(revisions/) directory) or the latest retained revision, validates the SHA-256 of
    every file against its C(revision.json) and the artifact set's hash chain, then, under the project
    lock, restores C(compose.stella.lock.yml), pulls missing images, verifies digests, runs
    C(docker compose up -d), waits for the containers as C(up --wait) would, inspects every service and
    only then restores
    C(stella.version.json) and C(apply-manifest.json).
  - V(docker.rollback) restores the DockerHost release a C(docker.run) deployment replaced, from the project's
    C(previous/) revision (the old sticker and the ids of the stopped C(<name>-stella-previous)
    containers). It validates the sticker hash and that every retained container is still the recorded
    one with the revision's manifest hash, stops and sets aside each running container, starts the
    retained one under its own name, verifies it (running, healthy, labels) and only then restores
    C(stella.version.json). A failure puts every container and the sticker back. After success the
    rolled-back containers and the consumed revision are removed.
  - With no retained revision the task fails with RV(failurePhase=resolve_revision) before any pull or
    runtime change; a tampered revision fails in V(validate_revision), also before any change.
  - Records RV(rollbackRestored), RV(restoredRevisionPath), the restored digests, the phases
    V(rollback-pre), V(rollback-deploy), V(rollback-verify), V(rollback-post) with timings, and the
    target identity. The module refuses to run for a target whose endpoint does not name this host.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
  - stellaops.runtime.task
attributes:
  check_mode:
    support: full
    details: Resolves and validates the revision, then reports whether restoring it would change anything.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Restoring the revision that already runs and is verified reports C(changed=false).
options:
  task:
    description: Which agent task to run.
    type: str
    choices: [compose.rollback, docker.rollback]
    default: compose.rollback
  project_name:
    description: Compose project name, or the DockerHost project name (payload key C(ProjectName)).
    type: str
  names:
    description: V(docker.rollback) only. The container names of the deployment (payload key C(Names)).
    type: list
    elements: str
  revision_path:
    description:
      - Retained revision to restore (payload key C(RevisionPath)), absolute or relative to
        C(<project>/revisions/) (V(compose.rollback)), or the project's C(previous/) directory
        (V(docker.rollback), the only revision a DockerHost project retains). Paths whose real path is outside C(revisions/), symlinks included, are
        rejected. Defaults to the latest retained revision; a deployment's rollback passes the
        C(previousRevisionPath) its apply retained, because identical revisions are deduplicated and the
        newest one is not always the deployment's baseline.
    type: str
  manifest_hash:
    description:
      - The manifest hash of the release the deployment being rolled back applied (payload key
        C(ManifestHash)). When given, the rollback restores only while the project still runs that
        release (or already runs the revision being restored); otherwise it is refused with
        V(rollback_superseded), the newer release is left running and RV(rollbackRefusedReason) says why.
    type: str
  reason:
    description: Why the rollback runs (payload key C(Reason)); recorded in RV(rollbackReason).
    type: str
seealso:
  - module: stellaops.runtime.stella_compose_deploy
"""

EXAMPLES = r"""
- name: Roll back to the latest retained revision
  stellaops.runtime.stella_rollback:
    payload: "{{ plan.payloads['compose.rollback'] }}"

- name: Restore the DockerHost release a deployment replaced
  stellaops.runtime.stella_rollback:
    task: docker.rollback
    payload: "{{ plan.payloads['docker.rollback'] }}"

- name: Roll back to a chosen revision
  stellaops.runtime.stella_rollback:
    project_name: acme_prod_tgt-01_shop
    revision_path: 000001-bf0792cc9036
    work_directory: /var/lib/stella/projects
    target:
      id: tgt-01
      name: vm-01
      type: ComposeHost
      endpoint: ssh://deploy@10.0.0.5
      executionMode: agent
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
rollbackRestored:
  description: V(true) once the revision runs, is verified, and its sticker is restored.
  returned: always
  type: bool
rollbackRefusedReason:
  description: Why a deployment's rollback was refused (code V(rollback_superseded)) because the project
    no longer runs the release that deployment applied; the newer release was left running.
  returned: when the rollback was refused as superseded
  type: str
restoredRevisionPath:
  description: Real path of the revision that was restored.
  returned: when resolved
  type: str
restoredDigests:
  description: Component name to image digest recorded by the restored sticker.
  returned: when resolved
  type: dict
restoredManifestHash:
  description: Manifest hash of the restored revision.
  returned: when resolved
  type: str
services:
  description: Per container, service, id, name, state, health, image, imageDigest, Stella labels.
  returned: always
  type: list
  elements: dict
completedPhases:
  description: Implementation phases that completed (V(resolve_revision), V(validate_revision),
    V(restore_lock), V(compose_pull), V(compose_up), V(inspect_services), V(restore_sticker); for V(docker.rollback)
    V(restore_container) and V(inspect_container) in place of the Compose steps).
  returned: always
  type: list
  elements: str
phaseDurationsMs:
  description: Duration of each implementation phase.
  returned: always
  type: dict
deploymentPhases:
  description: V(rollback-pre), V(rollback-deploy), V(rollback-verify), V(rollback-post) with status and durationMs.
  returned: always
  type: list
  elements: dict
failurePhase:
  description: The phase that failed, V(null) on success.
  returned: always
  type: str
code:
  description: Stable failure code (V(no_revision), V(revision_path_rejected), V(revision_tampered), ...).
  returned: failure
  type: str
targetId:
  description: Target identity used (also RV(targetName), RV(targetType), RV(targetEndpoint), RV(targetExecutionMode)).
  returned: always
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
rollbackReason:
  description: Why the rollback ran (O(reason) or the payload's C(Reason)).
  returned: when given
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import rollback as _compose_rollback
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import rollback as _docker_rollback
from ansible_collections.stellaops.runtime.plugins.module_utils.host.claim import parse_claim
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import (
    argument_spec,
    command_runner,
    engine_client,
    run_task,
)

ARGUMENT_SPEC = argument_spec(
    dict(
        task=dict(type="str", choices=["compose.rollback", "docker.rollback"], default="compose.rollback"),
        names=dict(type="list", elements="str"),
        project_name=dict(type="str"),
        revision_path=dict(type="str"),
        manifest_hash=dict(type="str"),
        reason=dict(type="str"),
    ),
    task=True,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_command = command_runner(module)

    def task():
        cli = engine_client(module, run_command)
        if module.params["task"] == "docker.rollback":
            request = _docker_rollback.parse_request(module.params["payload"], module.params)
            manager = _docker_rollback.DockerRollback(
                cli, run_command, module.warn, wait_timeout=module.params["wait_timeout"]
            )
        else:
            request = _compose_rollback.parse_request(module.params["payload"], module.params)
            manager = _compose_rollback.ComposeRollback(
                cli, run_command, module.warn, wait_timeout=module.params["wait_timeout"]
            )
        manager.claim = parse_claim(module.params["claim"])
        return manager.run(request, check_mode=module.check_mode)

    run_task(module, task)


if __name__ == "__main__":
    main()
