# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The documents of the deployment job, as the job store keeps them and the job's steps return them: typed
dictionaries, with the keys exactly as they are stored (camelCase in the job's own documents, the tasks'
option names in a target's inputs). Types only, nothing runs here.

- :class:`JobRecord`: the job record (job/record.py makes and moves it); its ``targets`` map each target
  name to a :class:`TargetRecord`, whose ``phases`` (and ``rollbackPhases``) are :class:`PhaseEntry`.
- :class:`GateDecision`: the strategy gate after a batch (job/strategy.py ``gate``), kept in ``gates``.
- :class:`JobRollback`: the job's rollback decision (``rollback``); :class:`RollbackPlan` the targets a
  rollback restores, in reverse batch order, and those it leaves as they are.
- :class:`RollbackOrder`: what ``rollback_orders`` hands the rollback playbook, with a
  :class:`RollbackTargetOrder` per target.
- :class:`TargetPlan`: one target's plan (job/plan.py ``plan_job``), with the :class:`TargetInputs` its
  play hands its tasks (``apply``, ``probe``, ``rollback``).
- :class:`TargetOutcome`: one target's deployment or rollback from what its tasks returned
  (job/target.py ``deployment_outcome`` / ``rollback_outcome``).
- The rest are the parts these hold: the job's options, its owner, events, a target's claim, the
  traffic requests and steps, a failed controller step, an interruption, the recovery an operator
  rollback made; and :class:`HealthEvent`, a target's health change a job change implies.
"""

from typing import Any, Literal, NotRequired, TypedDict

JobStatus = Literal["Pending", "Running", "Succeeded", "Failed", "RollingBack", "RolledBack"]
TargetStatus = Literal["Pending", "Running", "Succeeded", "Failed", "Skipped", "RolledBack"]
JobKind = Literal["deployment", "rollback"]
EventKind = Literal["RollbackStarted", "RollbackCompleted", "RollbackFailed"]
# One phase of a target's outcome: (name, status, durationMs, detail or None).
OutcomePhase = tuple[str, str, int, dict[str, Any] | None]


class Failure(TypedDict):
    """A failure that closes a gate or fails a step: its code and one-line reason."""

    code: str
    reason: str


class Claim(TypedDict):
    """A target's claim on its Compose project, handed out by the job store (store/claims.py)."""

    jobId: str
    generation: int
    projectKey: str
    storeId: str


class Owner(TypedDict):
    """The controller run (``ansible-playbook`` process) that owns the job (run/owner.py)."""

    host: str
    pid: int
    startTicks: int | None


class JobOptions(TypedDict, total=False):
    """The job's settings (job/plan.py ``job_options`` and the role's variables)."""

    autoRollbackOnFailure: bool
    autoRollbackSource: str | None
    waitForHealthCheck: bool
    waitForHealthCheckSource: str
    claimLeaseSeconds: int
    keepRevisions: int
    waitTimeout: int
    minEngineVersion: str
    minComposeVersion: str
    taskTimeout: int
    insecureRegistries: list[str]


class PhaseEntry(TypedDict):
    """One phase a target ran: ``status`` as its outcome says it (succeeded, failed, skipped); ``detail``
    only when there is one."""

    name: str
    status: str
    startedAt: str | None
    completedAt: str | None
    durationMs: int
    detail: NotRequired[dict[str, Any]]


class TargetRollback(TypedDict, total=False):
    """A target's rollback: whether it was restored, and what the agent reported of it."""

    succeeded: bool
    restoredRevisionPath: str | None
    rollbackDigest: str | None
    completedAt: str
    rollbackJobId: str


class TargetRecord(TypedDict, total=False):
    """One target of the job: its place in the batch plan, its status and phases, its identity and plan
    facts (set when the job is made), what its apply left (job/target.py ``target_facts``) and its
    rollback."""

    batch: int
    order: int
    status: TargetStatus
    phases: list[PhaseEntry]
    rollbackPhases: list[PhaseEntry]
    reason: str | None
    code: str | None
    next: str
    evidence: dict[str, Any]
    # identity and plan facts
    targetId: str
    targetName: str
    targetType: str
    endpoint: str
    target: dict[str, Any]
    projectName: str
    slot: str
    manifestHash: str
    rollbackPayload: dict[str, Any]
    claim: Claim
    # what the apply left
    artifacts: dict[str, str]
    appliedByJobId: str
    claimTakeover: Any
    claimFileRecreated: Any
    applyRan: bool
    unchangedByJob: bool
    previousRevisionPath: str | None
    restoredInPlace: bool
    currentDigest: str
    outcomeUnknown: bool
    # the rollback
    rollbackSkipped: str
    statusBeforeRollback: TargetStatus
    rollbackError: str
    rollback: TargetRollback


class GateDecision(TypedDict):
    """The strategy gate after batch ``batch`` (0-based): whether the next batch starts, and why; ``code``
    when a traffic adapter or a controller step closed it, ``at`` once it is recorded."""

    batch: int
    proceed: bool
    reason: str
    failedTargets: list[str]
    code: NotRequired[str]
    at: NotRequired[str]


class JobEvent(TypedDict):
    """A rollback event of the job: started (its targets), completed (its targets) or failed (its error);
    ``rollbackJobId`` on a deployment an operator rollback job rolls back."""

    kind: EventKind
    at: str
    targets: NotRequired[list[str]]
    error: NotRequired[str]
    rollbackJobId: NotRequired[str]


class RollbackPlan(TypedDict):
    """The targets a rollback restores (batches, in reverse batch order) and why it leaves the others."""

    batches: list[list[str]]
    skipped: dict[str, str]


class JobRollback(TypedDict, total=False):
    """The job's rollback decision: not attempted (``skipReason``, and what would have been rolled back), or
    attempted (automatic or an operator's), then its end (``status`` succeeded or failed)."""

    attempted: bool
    automatic: bool
    skipReason: str
    source: str | None
    batches: list[list[str]]
    skipped: dict[str, str]
    reason: str | None
    startedAt: str
    completedAt: str | None
    status: Literal["succeeded", "failed"]
    error: Failure


class TrafficShift(TypedDict):
    """What the traffic adapter is asked (job/traffic.py): the weights of the control and treatment slots
    after batch ``batch``, or, for the traffic rollback (``batch`` ``None``), every request back on the
    control slot, with the rollback's reason."""

    batch: int | None
    controlSlot: str
    treatmentSlot: str
    controlWeight: int
    treatmentWeight: int
    rollback: NotRequired[bool]
    reason: NotRequired[str | None]


class TrafficStep(TypedDict):
    """One traffic shift after a batch: its evidence, and its failure when the gate must close."""

    batch: int | None
    at: str
    evidence: dict[str, Any]
    failure: NotRequired[Failure]


class TrafficFailure(TypedDict):
    """A failed traffic shift, and the batch after which it closes the gate."""

    code: str
    reason: str
    batch: int | None


class TrafficRollback(TypedDict):
    """The traffic rollback: every request back on the control slot."""

    at: str
    evidence: dict[str, Any]
    failure: Failure | None


class StepFailure(TypedDict):
    """The first error inside one of the controller's steps of the job (job/step_failure.py)."""

    step: str
    code: str
    reason: str
    batch: int | None
    at: str


class Interruption(TypedDict):
    """When and why the job's controller run ended before the job did."""

    at: str
    why: str


class Recovery(TypedDict):
    """The operator rollback job that recovered a deployment, and how it ended (job/recovery.py)."""

    rollbackJobId: str
    status: Literal["rolled_back", "rollback_failed"]
    reason: str | None
    startedAt: str
    completedAt: str


class HealthEvent(TypedDict):
    """A change of a target's health that a job change implies (job/health.py), as the job store keeps it."""

    targetId: str
    targetName: str
    status: str
    reason: str
    code: str | None
    jobId: str
    at: str | None


class ImageVerdict(TypedDict, total=False):
    """The signature verdict of one image reference under the job's image policy (release/signatures.py,
    docs/trust.md): the pinned image and digest, ``verified`` (with the key's path and fingerprint, the
    signature manifest's digest, where it was found and the identity it names) or ``not_required``."""

    image: str
    digest: str
    status: Literal["verified", "not_required"]
    keyFingerprint: str
    keyPath: str
    signatureDigest: str
    source: Literal["referrers", "tag", "directory"]
    identity: str


class JobSummary(TypedDict, total=False):
    """What the job says of its release (copied into the record when it is made); ``sourceJobId`` and
    ``reason`` for an operator rollback job."""

    release: dict[str, Any] | None
    tenant: Any
    environment: Any
    application: Any
    strategy: str | None
    strategyConfig: dict[str, Any] | None
    resolution: Any
    signatures: dict[str, ImageVerdict]
    sourceJobId: str
    reason: str | None


class JobRecord(TypedDict):
    """The deployment job record (schema ``stella.job.v1``). ``targets`` maps each target name to its
    record; ``targetOrder`` is the batch order. The summary keys come from :class:`JobSummary`; the
    traffic, step failure, interruption and recovery keys appear when those happen; ``revision`` and
    ``leaseRenewedAt`` are the job store's, on records read from it."""

    schema: str
    jobId: str
    jobIdSource: str | None
    kind: JobKind
    isRollback: bool
    status: JobStatus
    promotion: JobStatus | None
    reason: str | None
    code: str | None
    options: JobOptions
    batches: list[list[str]]
    targetOrder: list[str]
    targets: dict[str, TargetRecord]
    gates: list[GateDecision]
    events: list[JobEvent]
    rollback: JobRollback | None
    owner: Owner | None
    createdAt: str
    updatedAt: str
    startedAt: str | None
    completedAt: str | None
    # the summary
    release: NotRequired[dict[str, Any] | None]
    tenant: NotRequired[Any]
    environment: NotRequired[Any]
    application: NotRequired[Any]
    strategy: NotRequired[str | None]
    strategyConfig: NotRequired[dict[str, Any] | None]
    resolution: NotRequired[Any]
    signatures: NotRequired[dict[str, ImageVerdict]]
    sourceJobId: NotRequired[str]
    # what happened
    traffic: NotRequired[list[TrafficStep]]
    trafficFailure: NotRequired[TrafficFailure]
    trafficRollback: NotRequired[TrafficRollback]
    strategyEvidence: NotRequired[dict[str, Any]]
    stepFailure: NotRequired[StepFailure]
    interrupted: NotRequired[Interruption]
    recovery: NotRequired[Recovery]
    # its evidence is signed (at close): the public key's fingerprint, sha256:<hex> (docs/trust.md)
    evidenceSignedBy: NotRequired[str]
    # the job store's
    revision: NotRequired[int]
    leaseRenewedAt: NotRequired[str]


class RollbackTargetOrder(TypedDict):
    """All one target's rollback play reads: the revision, payload and agent task, the waits, its claim,
    the job id and the rollback's reason."""

    revisionPath: str | None
    payload: dict[str, Any] | None
    task: str
    target: dict[str, Any] | None
    waitTimeout: int
    taskTimeout: int
    claim: Claim | None
    jobId: str
    reason: str


class RollbackOrder(TypedDict):
    """The rollback the playbook runs next (job/rollback.py ``rollback_orders``): its batches, ``serial``,
    host order and each target's order; no batch when the job does not roll back."""

    jobId: str
    status: JobStatus
    reason: str | None
    rollbackBatches: list[list[str]]
    rollbackSerial: list[int]
    rollbackOrder: list[str]
    rollbackTargets: dict[str, RollbackTargetOrder]


class PreflightInputs(TypedDict):
    """The preflight the apply task runs first, on the target."""

    payload: dict[str, Any]
    target_type: str
    min_engine_version: str
    min_compose_version: str
    insecure_registries: list[str]


class ApplyInputs(TypedDict):
    """``stella_compose_deploy``'s options: the agent task and its payload (ComposeHost) or payloads and
    version sticker (DockerHost), the waits, the revisions kept and, once the job is stored, the claim."""

    task: str
    wait_timeout: int
    task_timeout: int
    keep_revisions: int
    preflight: PreflightInputs
    payload: NotRequired[dict[str, Any]]
    payloads: NotRequired[list[dict[str, Any]]]
    version_sticker: NotRequired[str]
    claim: NotRequired[Claim]


class ProbeComponent(TypedDict):
    """One component the probes check: its name and its config."""

    name: str
    config: dict[str, Any]


class ProbeInputs(TypedDict):
    """``stella_probe``'s options: each component, the target, whether probes run."""

    components: list[ProbeComponent]
    target: dict[str, Any]
    wait_for_health_check: bool


class RollbackInputs(TypedDict):
    """``stella_rollback``'s options: the agent task, its payload and the waits."""

    task: str
    payload: dict[str, Any]
    wait_timeout: int
    task_timeout: int


class TargetInputs(TypedDict):
    """What one target's play hands to each of its tasks (job/plan.py ``target_inputs``)."""

    apply: ApplyInputs
    probe: ProbeInputs
    rollback: RollbackInputs


class TargetPlan(TypedDict):
    """One target's plan as the job playbooks need it (job/plan.py ``PLAN_KEYS``) and its task inputs."""

    projectName: str
    slot: str
    trafficRole: str | None
    strategy: str
    release: dict[str, Any]
    target: dict[str, Any]
    tenant: Any
    environment: Any
    application: Any
    jobId: str
    taskId: str
    workDirectory: str
    projectDirectory: str
    paths: dict[str, str]
    manifestHash: str
    composeHash: str
    versionStickerHash: str
    applyManifestHash: str
    envArtifactHash: str | None
    artifactHashes: dict[str, Any]
    components: list[dict[str, Any]]
    payloads: dict[str, Any]
    scriptGraphProof: dict[str, Any]
    sticker: str
    inputs: TargetInputs
    signatures: NotRequired[dict[str, ImageVerdict]]


class TargetOutcome(TypedDict):
    """One target's deployment (``failedPhase`` and ``code`` too) or rollback, from what its tasks returned:
    whether it succeeded, the phases it ran and, when it failed, why."""

    succeeded: bool
    phases: list[OutcomePhase]
    reason: str | None
    failedPhase: NotRequired[str | None]
    code: NotRequired[str | None]


class PlannedJob(TypedDict):
    """The whole job's plan (:func:`plan_job`): its batches, each target's plan and artifact bytes."""

    batches: list[list[str]]
    serial: list[int]
    targetOrder: list[str]
    plans: dict[str, TargetPlan]
    files: dict[str, dict[str, bytes]]


class PlanOutcome(TypedDict):
    """What a job's start returns of its plan (:func:`plan_outcome`)."""

    batches: list[list[str]]
    serial: list[int]
    targetOrder: list[str]
    plans: dict[str, TargetPlan]
    hasEnvArtifact: dict[str, bool]
