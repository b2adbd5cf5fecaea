#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This file only documents the stella_job action plugin (plugins/action/stella_job.py).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_job
short_description: Plan, record and close a deployment job over a fleet of targets
version_added: 0.2.0
description:
  - The controller side of a deployment job. A job is one release deployed to many targets in the
    batches of its strategy, with one typed record in the job store that every step reads, changes and
    persists in one transaction. The job playbook (C(stellaops.runtime.job)) calls it between phases;
    operators read a job with O(step=show) (the C(stellaops.runtime.job_show) playbook).
  - O(step=start) plans the whole job once before any target is touched. It validates the release,
    resolves every image tag to one digest, plans every target's artifacts and payloads, and cuts the
    targets into batches in inventory order. The batch sizes follow Ansible's C(serial), and the job
    playbook runs with them. It also marks as failed every unfinished job whose C(ansible-playbook) process is gone.
    A target whose connection failed the readiness check fails the job closed, with code
    C(target_unreachable), before any target is changed.
  - O(step=target) records one target's outcome in one transaction (the C(target) entry point of the
    C(stellaops.runtime.deploy) role calls it once per target), its nine phases, derived from the apply's
    result (O(result)), the probes' result (O(probe)) and the failure that stopped the target's play
    (O(failure)), never from a task's name; the failed phase is the one the results name. The target's
    C(deployment.json) is kept in the job store in the same transaction (with O(evidence_dir) it is first
    written there too).
  - O(step=gate) runs the strategy gate after a batch. O(step=finish) ends the deployment and decides the
    one automatic rollback. O(step=rollback_target) records one target's rollback (the agent's four
    rollback phases; the target counts as rolled back only when the agent reports a verified restoration).
    O(step=close) ends the rollback and keeps the job's evidence in the job store (and writes it to
    O(evidence_dir) when given). O(step=show) reads a job; a job
    whose C(ansible-playbook) process is gone on this controller is first recorded as interrupted (C(Failed),
    C(job_interrupted)), with its terminal projection.
  - A job holds the Compose project of each of its targets from O(step=start) until it is finished. A job
    started for a project that another unfinished job holds (on any controller sharing the store) fails
    closed with code C(project_busy) before any target is changed. A job whose controller is gone for good
    is released from any controller with C(stella interrupt JOB).
  - The store keeps the C(deployments) projection of every deployment job (mirrored from the persisted
    job only when what it shows changes; the terminal projection is written by O(step=close) after the
    job's evidence) and the health status of every target (C(unknown), C(healthy), C(degraded),
    C(unhealthy), C(offline), C(unreachable); C(docs/job-store.md) gives the rules). O(step=show)
    returns the projection; O(step=health) returns the health of O(targets), or of every target.
  - O(step=drift) (the C(stellaops.runtime.verify) playbook) holds what each target runs, as
    M(stellaops.runtime.stella_inspect) observed it (O(observed)), against what the last successful job of
    each of its projects recorded (component digests, containers running, the SHA-256 of the lock, sticker
    and apply manifest). A target that drifted is recorded C(degraded) with code C(runtime_drift) and the
    differences as its reason; one found in sync while its status is that drift gets back the status its
    last job gave. It changes no target, needs no O(job_id), and in check mode records nothing.
  - O(step=traffic) runs after a batch of a blue-green, canary or A/B job and before its gate. When every
    target of the batch succeeded it asks the job's traffic adapter (C(strategyConfig.trafficAdapter))
    to shift to the batch's weights and records the C(strategy.traffic.*) evidence in the job record;
    without an adapter it records standby-only evidence. A failed adapter, or a missing one with
    C(strategyConfig.requireTrafficAdapter), closes the gate after that batch with the adapter's code.
  - O(step=traffic_rollback) runs after the targets were rolled back and asks the same adapter to put
    every request back on the control slot (C(strategy.traffic.rollback.*)); a required adapter that is
    missing or fails fails the rollback closed.
  - O(step=rollback_start) starts an operator rollback of job O(job_id). This is a new job of kind
    C(rollback) over the targets that retained a revision, in reverse batch order (the
    C(stellaops.runtime.rollback) playbook). It fails closed with C(rollback_no_eligible_target) when
    no target is eligible.
  - This is an action plugin. It runs on the controller only; nothing is copied to or executed on a
    target.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.attributes.action
attributes:
  check_mode:
    support: full
    details:
      - O(step=drift) compares and returns its verdicts in check mode without recording them.
      - O(step=show) and O(step=health) only read the job store and run in check mode (O(step=show) then
        records no job interrupted, and a SQLite store that is not there is not created but reported,
        code C(job_store_missing)).
      - The deployment job's steps make a preview that opens no job store. O(step=start) plans the job (the
        release validated, tags resolved, artifacts and batches) and returns the plan with C(checkMode),
        status C(Preview) and no record; O(step=target), O(step=traffic), O(step=traffic_rollback) record
        nothing; O(step=target) returns what its target would do, from the results it is handed (the apply
        in check mode, the failure), and sets it as the target's C(stella_job_preview) fact; O(step=gate)
        proceeds (every batch is previewed); O(step=finish) decides no rollback; O(step=close) returns per
        target what it would do (C(preview)), from each target's C(stella_job_preview), and the job's C(text).
      - The operator rollback's O(step=rollback_start) reads the job store and makes the rollback job as a
        real run would, with the same refusals (no eligible target, a project held by an unfinished job
        whose run is not gone), and returns its orders with C(checkMode), C(kind=rollback), status C(Preview)
        and C(skipped); nothing is stored and no gone run's job is recorded interrupted.
        O(step=rollback_target) records nothing and sets what the target's rollback would do as its
        C(stella_job_preview) fact; O(step=close) returns per target what its rollback in
        check mode would do (C(preview)) and the rollback's C(text).
      - A step with no check-mode answer would fail with code C(job_check_mode_unsupported) before anything
        is planned or persisted; every step has one.
  diff_mode:
    support: none
  idempotent:
    support: none
    details:
      - Every call records a state change of a job.
options:
  step:
    description: What to do.
    type: str
    required: true
    choices: [start, target, traffic, gate, finish, rollback_start, rollback_target, traffic_rollback, close, show, health, drift]
  store:
    description:
      - The job store, a SQLite file path or C(sqlite:///relative) / C(sqlite:////absolute), or a PostgreSQL
        DSN C(postgresql://user@host:port/database) (the controller's Python then needs C(psycopg)).
        Keep the password out of the DSN (C(PGPASSWORD) or C(~/.pgpass) on the controller); a password in
        the DSN is redacted from every message.
      - Defaults to the C(stella_job_store) variable, else C(~/.local/state/stellaops/jobs.sqlite3).
    type: str
  job_id:
    description:
      - The job. Required for every step but O(step=start), where it sets the id of the new job; without
        it the id is the caller's C(awx_job_id) or C(tower_job_id) (as C(awx-<id>) / C(tower-<id>)), else
        the C(stella_job_id) variable, else a new unique one. A job id is never reused.
    type: str
  release:
    description:
      - O(step=start). The release input (C(docs/release-input.md)); its C(target) gives the target type
        only, each target's identity comes from its inventory host.
    type: dict
  readiness:
    description:
      - O(step=start). Each host's result of the readiness check (an C(ansible.builtin.raw) command with
        C(ignore_unreachable)); a result with C(unreachable) fails the job closed before any target changes.
    type: dict
    default: {}
  claim_lease:
    description:
      - O(step=start). Seconds this job's run may go without persisting a change or renewing the lease
        before any controller that shares the store takes the run for gone. The next job started there (or
        O(step=show)) then records it C(Failed) with code C(job_interrupted) and releases its projects. A
        run still alive stops at its next step with C(job_interrupted), without a rollback.
      - While the C(ansible-playbook) run that started the job runs, a keeper process on this controller
        renews the lease every third of it, also during a long step. It does not renew while that run is
        stopped (SIGSTOP, a suspended terminal), and it ends with the run or the job.
      - Without a lease (V(0)) only the controller that ran the job can tell that its run is gone. From
        another controller an operator says so with C(stella interrupt).
      - Choose it long enough that a busy controller never misses it (for example 120 seconds, which
        lets two renewals be missed; at least 3 seconds), and keep the controllers' clocks in step (NTP).
    type: int
    default: 0
  keep_revisions:
    description:
      - O(step=start). How many retained revisions each ComposeHost target keeps per project; the oldest
        beyond it are deleted after a new one is retained. V(0) keeps all. Kept in the job's options as
        C(keepRevisions); the job's apply tasks use it. A DockerHost target keeps one previous revision.
    type: int
    default: 10
  wait_timeout:
    description:
      - O(step=start) and O(step=rollback_start). Seconds the services may take to become running and healthy
        on a target, for its apply and its rollback. Kept in the job's options as C(waitTimeout).
    type: int
    default: 120
  task_timeout:
    description:
      - O(step=start). Seconds after which the controller gives up on a target's apply or rollback task that
        does not answer (a host that hangs while its connection stays up); the target is then recorded
        C(target_unreachable), its outcome unknown. V(0) (the default) derives it from the release as twice
        O(wait_timeout), plus every hook's C(timeoutSeconds), plus 600 seconds for pulls and container starts.
        Kept in the job's options as C(taskTimeout).
    type: int
    default: 0
  target_identities:
    description:
      - O(step=start). A target identity per inventory host, which wins over what the host's inventory variables
        (C(stella_target), its connection) say. The C(stellaops.runtime.deploy) role gives its release's target.
    type: dict
    default: {}
  caller_job_id:
    description:
      - O(step=start). Whether the caller's C(awx_job_id), C(tower_job_id) or C(stella_job_id) may name the
        job when O(job_id) is not given. The C(stellaops.runtime.deploy) role sets V(false), each host there
        is a job of its own, with a new id.
    type: bool
    default: true
  started:
    description:
      - O(step=close) in check mode. The outcome of the job's O(step=start) (of O(step=rollback_start) for an
        operator rollback), which the preview sums up with what each target's recording step left on it;
        required there.
    type: dict
  min_engine_version:
    description: O(step=start). Oldest acceptable Docker Engine, for every target's preflight.
    type: str
    default: 24.0.0
  min_compose_version:
    description: O(step=start). Oldest acceptable Compose plugin, for every ComposeHost target's preflight.
    type: str
    default: 2.20.0
  observed:
    description:
      - O(step=drift). Each target's registered result of M(stellaops.runtime.stella_inspect), by inventory
        host name (the name the job recorded the target by); required there. A failed or unreachable result
        gives that target the verdict C(unknown). With O(targets), only those hosts are checked.
    type: dict
  traffic_options:
    description:
      - O(step=traffic) and O(step=traffic_rollback). Options of the traffic adapter, over
        C(strategyConfig.trafficAdapterOptions). C(webhook) reads C(shiftUrl), C(rollbackUrl),
        C(timeoutSeconds), C(headers) (for example an C(Authorization) header) and C(enabled);
        C(local-file) reads C(path). Pass credentials here (from a vault or AWX credential), never in the
        release. Never logged or recorded.
    type: dict
    default: {}
  registry_credentials:
    description: O(step=start). As M(stellaops.runtime.stella_plan).
    type: dict
    default: {}
  insecure_registries:
    description: O(step=start). As M(stellaops.runtime.stella_plan).
    type: list
    elements: str
    default: []
  image_policy:
    description:
      - O(step=start). The image signature policy of the job (C(stella_image_policy)), over the release's
        C(imagePolicy); which components must carry a signature, by which trusted public keys, naming which
        identity. Checked at planning, before any target is touched. See docs/trust.md.
    type: dict
    default: {}
  signing_key:
    description:
      - O(step=close). The evidence signing key (C(stella_evidence_signing_key)), a private key file on the
        controller, in cosign's encrypted format (C(stella keys generate)) or PKCS#8 PEM, ECDSA P-256 or Ed25519.
        The job's evidence documents are signed with it as in-toto statements in DSSE envelopes, kept beside
        them; C(stella verify JOB --key PUB) checks them offline. See docs/trust.md.
    type: path
  signing_passphrase:
    description:
      - O(step=close). The passphrase of O(signing_key) (C(stella_evidence_signing_passphrase)); unset, the
        environment's C(STELLA_SIGNING_PASSPHRASE). Never logged or recorded.
    type: str
  timeout:
    description: O(step=start). Seconds per registry request.
    type: float
    default: 15.0
  auto_rollback_on_failure:
    description:
      - O(step=start). Overrides the release's C(strategyConfig.autoRollbackOnFailure) (alias
        C(rollbackOnFailure); default on).
    type: bool
  wait_for_health_check:
    description: O(step=start). Overrides the release's C(strategyConfig.waitForHealthCheck) (default on).
    type: bool
  target:
    description: O(step=target) and O(step=rollback_target). The inventory host.
    type: str
  targets:
    description:
      - O(step=start). The inventory hosts of the job, in order.
      - O(step=gate). The hosts of the batch that just ended (C(ansible_play_batch)), when O(batch) is not given.
      - O(step=health). The hosts whose health to return (by their target id); empty for every target.
    type: list
    elements: str
    default: []
  result:
    description:
      - O(step=target) and O(step=rollback_target). The target agent's result (C(compose.up) or
        C(docker.run), C(compose.rollback) or C(docker.rollback)), as registered, also when it failed; its
        C(deploymentPhases), retained revision, artifact hashes and service digests are recorded.
    type: dict
  probe:
    description: O(step=target). The result of M(stellaops.runtime.stella_probe) for the target, when it ran.
    type: dict
  failure:
    description:
      - O(step=target) and O(step=rollback_target). The result of the task that stopped the target's play
        (C(ansible_failed_result) in a rescue); the target is recorded failed, at the phase the results name.
    type: dict
  plan:
    description: O(step=target). The target's plan (for its C(deployment.json)); required with O(step=target).
    type: dict
  reason:
    description: O(step=rollback_start). Why the job is rolled back.
    type: str
  batch:
    description: O(step=gate). The batch that just ended (0-based); default the batch of O(targets).
    type: int
  evidence_dir:
    description:
      - O(step=close). Where C(jobs/<job id>/job.json) (and C(rollback-evidence.json)) are also written;
        the job store keeps them whether or not it is given.
      - O(step=target). Where the target's C(<project>/<job id>/<target>/deployment.json) is also written.
      - O(step=start). A new job whose C(jobs/<job id>/) already exists there (a job of the same id in another
        job store sharing the directory) fails with C(evidence_conflict) before anything is recorded or changed.
        An evidence file is never replaced by other contents (C(evidence_conflict)).
    type: path
  report:
    description:
      - O(step=close). Also keep C(jobs/<job id>/report.html), the evidence report for people
        (C(docs/report.md)), in the job store (and in O(evidence_dir) when given).
    type: bool
    default: false
  revision_paths:
    description:
      - >-
        O(step=rollback_start). C({host: revision path}) to restore another retained revision than the one
        the job's deployment retained (also for a target that retained none).
    type: dict
    default: {}
notes:
  - The record and its statuses are described in C(docs/jobs.md).
"""

EXAMPLES = r"""
- name: Show a job
  stellaops.runtime.stella_job:
    step: show
    job_id: job-20261201T050000-1a2b3c4d
  register: job

- name: Print it
  ansible.builtin.debug:
    msg: "{{ job.text }}"
"""

RETURN = r"""
jobId:
  description: The job.
  returned: success
  type: str
job:
  description: The persisted job record (O(step=close) and O(step=show)).
  returned: success
  type: dict
text:
  description: The job, human-readable (O(step=close) and O(step=show)).
  returned: success
  type: str
proceed:
  description: O(step=start) and O(step=gate). Whether the next batch may start.
  returned: success
  type: bool
leaseKeeperPid:
  description: O(step=start) with O(claim_lease). The process id of the keeper renewing the job's claim lease.
  returned: step is start
  type: int
plans:
  description: O(step=start). Each target's plan (as M(stellaops.runtime.stella_plan) returns it).
  returned: success
  type: dict
serial:
  description: O(step=start). The batch sizes, for the play's C(serial).
  returned: success
  type: list
  elements: int
targetOrder:
  description: O(step=start). The targets in batch order.
  returned: success
  type: list
  elements: str
rollbackOrder:
  description: O(step=finish). The targets to roll back, in reverse batch order (empty when none).
  returned: success
  type: list
  elements: str
rollbackSerial:
  description: O(step=finish). The rollback batch sizes.
  returned: success
  type: list
  elements: int
projection:
  description: O(step=show). The job's C(deployments) projection (C(null) for a rollback job).
  returned: step is show
  type: dict
health:
  description: O(step=health). One entry per target, C(targetId), C(status), C(reason), C(code), C(jobId), C(updatedAt).
  returned: step is health
  type: list
  elements: dict
verdicts:
  description:
    - O(step=drift). One entry per target and project, C(target), C(project), C(verdict) (V(in_sync),
      V(drifted) or V(unknown)), C(jobId) (the job compared with), C(reason) and C(differences), each
      C(kind) (V(digest), V(missing_service), V(extra_service), V(stopped), V(lock), V(sticker),
      V(manifest)), C(service), C(recorded), C(observed).
  returned: step is drift
  type: list
  elements: dict
lines:
  description: O(step=drift). Each verdict as one line, for example C(drifted web-2 project shop) and what differs.
  returned: step is drift
  type: list
  elements: str
drifted:
  description: O(step=drift). The targets with a project that drifted.
  returned: step is drift
  type: list
  elements: str
evidenceFiles:
  description:
    - O(step=close) with O(evidence_dir). Each evidence file written there, with its C(path), C(sha256) and
      C(document) (its name in the job store).
  returned: success
  type: dict
evidenceDocuments:
  description:
    - O(step=close). Every evidence document the job store keeps for the job (C(stella evidence JOB)
      lists or exports them), by name (its path under an evidence directory), with its SHA-256.
  returned: step is close
  type: dict
outcome:
  description:
    - O(step=close). What the job publishes for workflows (the C(job_close) playbook passes it to
      C(ansible.builtin.set_stats) as C(stella_job_outcome)), C(deploymentId), C(status), C(succeeded),
      C(code), C(reason), C(rolledBack), C(rollbackStatus), C(targets), C(evidence) (the evidence files
      with their SHA-256), C(evidenceDigest).
  returned: success
  type: dict
code:
  description: The stable failure code.
  returned: failure
  type: str
"""
