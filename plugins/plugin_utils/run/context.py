# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one ``stella_job`` task hands its step: the task's variables, whether it runs in check mode, the
job store's location, and the secrets and warnings the step collects; and the reads every step shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import JOB_INTERRUPTED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import interrupt_gone

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


class StepArgs(TypedDict):
    """The options of one ``stella_job`` task as its action validated them (``ARGUMENT_SPEC`` in
    plugins/action/stella_job.py): every option is there, ``None`` when it was not given and has no
    default."""

    step: str
    store: str | None
    job_id: str | None
    release: dict[str, Any] | None
    targets: list[str]
    readiness: dict[str, Any]
    registry_credentials: dict[str, Any]
    insecure_registries: list[str]
    image_policy: dict[str, Any]
    signing_key: str | None
    signing_passphrase: str | None
    timeout: float
    auto_rollback_on_failure: bool | None
    wait_for_health_check: bool | None
    target: str | None
    result: dict[str, Any] | None
    probe: dict[str, Any] | None
    failure: dict[str, Any] | None
    plan: dict[str, Any] | None
    reason: str | None
    batch: int | None
    evidence_dir: str | None
    report: bool
    revision_paths: dict[str, Any]
    traffic_options: dict[str, Any]
    claim_lease: int
    keep_revisions: int
    wait_timeout: int
    task_timeout: int
    target_identities: dict[str, Any]
    caller_job_id: bool
    started: dict[str, Any] | None
    min_engine_version: str
    min_compose_version: str
    observed: dict[str, Any] | None


class StepContext:
    """One ``stella_job`` task: its task variables, whether it runs in check mode, the store it opened
    (``location``), and the secrets it saw (redacted from any failure it reports) and its warnings."""

    def __init__(self, task_vars: dict[str, Any] | None, check_mode: bool) -> None:
        self.vars: dict[str, Any] = task_vars or {}
        self.check_mode = check_mode
        self.secrets: list[str] = []
        self.warnings: list[str] = []
        self.location: str | None = None

    @property
    def hostvars(self) -> Mapping[str, Any]:
        return self.vars.get("hostvars") or {}


def need(args: StepArgs, *names: str) -> None:
    """``job_invalid`` unless every option in ``names`` has a value."""
    for name in names:
        if args.get(name) in (None, ""):
            raise _missing(args, name)


def needed(args: StepArgs, name: Literal["job_id", "target"]) -> str:
    """The value of ``name``, an option the step needs (``job_invalid`` without one, as :func:`need`)."""
    value = args[name]
    if value is None or value == "":
        raise _missing(args, name)
    return value


def _missing(args: StepArgs, name: str) -> StellaError:
    return StellaError("job_invalid", "step %s needs %s" % (args["step"], name), phase="job")


def job_of(store: SqlJobStore, args: StepArgs, targets: bool = True) -> JobRecord:
    """The persisted record of ``job_id`` (without ``targets``: its header only, ``JobStore.head``);
    ``job_not_found`` when the store has none."""
    record: JobRecord | None = store.get(args["job_id"]) if targets else store.head(args["job_id"])
    if record is None:
        raise StellaError("job_not_found", "no job %s in the job store" % args["job_id"], phase="job")
    return record


def refuse_interrupted(record: JobRecord) -> None:
    """A job recorded interrupted (its run was taken for gone) goes no further, not even to a rollback."""
    if record.get("interrupted"):
        raise StellaError(
            JOB_INTERRUPTED,
            "job %s was recorded interrupted, this run stops: %s" % (record["jobId"], record["interrupted"]["why"]),
            phase="job",
        )


def batch_of(record: JobRecord, args: StepArgs) -> int:
    """The batch ``args`` names: ``batch``, else the one batch of ``targets``."""
    if args["batch"] is not None:
        return args["batch"]
    indexes = {record["targets"][n]["batch"] for n in args["targets"] if n in record["targets"]}
    if len(indexes) != 1:
        raise StellaError(
            "job_invalid",
            "step %s needs the targets of one batch (got %s)" % (args["step"], ", ".join(args["targets"]) or "none"),
            phase="job",
        )
    return indexes.pop()


def interrupt_gone_jobs(store: SqlJobStore, now: str) -> list[str]:
    """Record every unfinished job whose run is gone (or whose claim lease expired) interrupted, which
    releases its projects, before a new job claims any; their job ids."""
    return [
        record["jobId"]
        for record in store.unfinished()
        if interrupt_gone(store, record, now)["status"] != record["status"]
    ]
