# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``start``: the whole job planned once and persisted, failed closed when a target is
unreachable or a project is held; in check mode, the same plan as a preview that opens no store."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    PROJECT_BUSY,
    generated_job_id,
    keep_revisions_problem,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import ROLLBACK_TASKS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import check_new_job_directory
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobOptions, JobSummary, TargetRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.timeouts import task_timeout
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import (
    StepArgs,
    StepContext,
    interrupt_gone_jobs,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.lease import MIN_LEASE_SECONDS, start_keeper
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import controller_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import PlannedJob
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore

# Planning (release validation, registry resolution, the traffic adapters' checks) is imported by this
# step only: every step runs in a task's own worker process, and the steps that never plan do not pay
# for it (about 0.05 s per module).
# pylint: disable=import-outside-toplevel


def check_options(args: StepArgs) -> None:
    """The options of a start, refused (job_invalid) before anything is planned or opened."""
    if args["claim_lease"] < 0 or 0 < args["claim_lease"] < MIN_LEASE_SECONDS:
        raise StellaError(
            "job_invalid",
            "claim_lease must be 0 (no lease) or at least %d seconds, not %d"
            % (MIN_LEASE_SECONDS, args["claim_lease"]),
            phase="job",
        )
    if keep_revisions_problem(args["keep_revisions"]):
        raise StellaError("job_invalid", keep_revisions_problem(args["keep_revisions"]), phase="job")


def plan(
    ctx: StepContext, args: StepArgs, now: str
) -> tuple[str, str | None, PlannedJob, JobOptions, JobSummary, dict[str, str]]:
    """``(job id, its source, the plan, options, summary, unreachable targets)``; nothing persisted."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import masked
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import plan as _plan
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic.strategy import check_traffic_config

    job_id, source = (
        (args["job_id"], "job_id")
        if args["job_id"]
        else (_job.job_id_from(ctx.vars) if args["caller_job_id"] else (None, None))
    )
    if not job_id:
        job_id, source = generated_job_id(now, secrets.token_hex(4)), "generated"
    release = inputs.plain(args["release"])
    ctx.secrets.extend(str(v) for v in (release.get("secretEnv") or {}).values())
    credentials = inputs.load_credentials(inputs.plain(args["registry_credentials"], "registry_credentials"))
    ctx.secrets.extend(credentials.secrets())
    hostvars = ctx.hostvars
    hosts = [(name, dict(hostvars.get(name) or {})) for name in args["targets"]]
    for name, host in hosts:  # an identity given for a host wins over its inventory variables
        if isinstance(args["target_identities"].get(name), dict):
            host["stella_target"] = dict(
                host.get("stella_target") or {}, **inputs.plain(args["target_identities"][name])
            )
    probe = dict(
        release,
        target=dict(release.get("target") or {}, id="probe", name="probe", endpoint="local", executionMode="local"),
    )
    probe.setdefault("target", {}).setdefault("type", "ComposeHost")
    try:  # the image policy is checked first; each required image's signature with the same resolver
        resolved, resolution, signatures = inputs.resolve_and_verify(
            probe,
            credentials,
            args["insecure_registries"],
            {},
            True,
            args["timeout"],
            job_policy=inputs.plain(args["image_policy"] or {}, "image_policy") or None,
        )
    finally:
        ctx.secrets.extend(credentials.secrets())  # what the Docker config's helpers answered
    ctx.warnings.extend(credentials.warnings)
    options = _plan.job_options(
        release,
        {
            "autoRollbackOnFailure": args["auto_rollback_on_failure"],
            "waitForHealthCheck": args["wait_for_health_check"],
        },
    )
    options.update(
        {
            "claimLeaseSeconds": args["claim_lease"],
            "keepRevisions": args["keep_revisions"],
            "waitTimeout": args["wait_timeout"],
            "minEngineVersion": args["min_engine_version"],
            "taskTimeout": task_timeout(args["wait_timeout"], release.get("hooks"), args["task_timeout"]),
            "minComposeVersion": args["min_compose_version"],
            "insecureRegistries": list(args["insecure_registries"]),
        }
    )
    planned = _plan.plan_job(release, hosts, resolved, job_id, options)
    check_traffic_config(release["strategy"], release.get("strategyConfig"), len(planned["batches"]))
    if signatures:  # each target's deployment.json and the start's outcome carry the verdicts
        for plan_ in planned["plans"].values():
            plan_["signatures"] = signatures
    summary: JobSummary = {
        "release": release["release"],
        "tenant": release["tenant"],
        "environment": release["environment"],
        "application": release["application"],
        "strategy": release["strategy"],
        "strategyConfig": masked(release.get("strategyConfig") or {}),
        "resolution": resolution,
    }  # no secret of the strategyConfig is kept (evidence/masking.py)
    if signatures:
        summary["signatures"] = signatures
    unreachable: dict[str, str] = {
        name: first_line(str(ping.get("msg") or "")) or "unreachable"
        for name, ping in args["readiness"].items()
        if isinstance(ping, dict) and ping.get("unreachable")
    }
    return job_id, source, planned, options, summary, unreachable


class Start(Step):
    """Plan the whole job once and persist it; fail it closed when a target is unreachable."""

    name = "start"
    needs = ("release",)
    recorded_job = False

    def preview(self, ctx: StepContext, args: StepArgs) -> Outcome:
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import plan_outcome

        check_options(args)
        job_id, source, planned, options, _summary, unreachable = plan(ctx, args, utc_timestamp())
        return _preview.start(job_id, source, plan_outcome(planned), options, unreachable)

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import plan_outcome

        check_options(args)
        now = utc_timestamp()
        interrupted = interrupt_gone_jobs(store, now)
        job_id, source, planned, options, summary, unreachable = plan(ctx, args, now)
        if store.head(job_id) is None:  # an id this store holds is job_exists; another store's, evidence_conflict
            check_new_job_directory(args["evidence_dir"], job_id)
        targets: dict[str, TargetRecord] = {
            name: {
                "targetId": plan_["target"]["id"],
                "targetName": plan_["target"]["name"],
                "targetType": plan_["target"]["type"],
                "endpoint": plan_["target"]["endpoint"],
                "target": plan_["target"],
                "projectName": plan_["projectName"],
                "slot": plan_["slot"],
                "manifestHash": plan_["manifestHash"],
                "rollbackPayload": plan_["payloads"][ROLLBACK_TASKS[plan_["target"]["type"]]],
            }
            for name, plan_ in planned["plans"].items()
        }
        record = _job.new_job(
            job_id=job_id,
            job_id_source=source,
            summary=summary,
            batches=planned["batches"],
            targets=targets,
            options=options,
            now=now,
            owner=controller_owner(),
        )
        stored, held = store.create(record)
        for name, plan_ in planned["plans"].items():  # each target's work carries its claim (host/claim.py)
            if stored["targets"][name].get("claim"):
                plan_["inputs"]["apply"]["claim"] = stored["targets"][name]["claim"]
        if held:
            busy = {
                name: "project %s is held by unfinished job %s" % (targets[name]["projectName"], holder)
                for name, holder in held.items()
            }
            reason = "another job is deploying the same project, nothing was changed: %s" % "; ".join(
                "%s: %s" % item for item in sorted(busy.items())
            )
            record = store.update(
                job_id,
                lambda r: _job.fail_closed(
                    r, code=PROJECT_BUSY, reason=reason, failed_targets=busy, now=utc_timestamp()
                ),
            )
        elif unreachable:
            reason = "target readiness failed before any target was changed: %s unreachable" % ", ".join(
                sorted(unreachable)
            )
            record = store.update(
                job_id,
                lambda r: _job.fail_closed(
                    r, code="target_unreachable", reason=reason, failed_targets=unreachable, now=utc_timestamp()
                ),
            )
        else:
            record = store.update(job_id, lambda r: _job.start(r, utc_timestamp()))
        keeper: int | None
        keeper, warnings = None, list(ctx.warnings)
        if record["status"] == "Running" and args["claim_lease"]:
            keeper = start_keeper(ctx.location, job_id, record["owner"], args["claim_lease"])
            if keeper is None:
                warnings.append(
                    "job %s: the claim lease keeper could not be started; only the job's steps renew its lease" % job_id
                )
        outcome = dict(
            plan_outcome(planned),
            jobId=job_id,
            jobIdSource=source,
            proceed=record["status"] == "Running",
            status=record["status"],
            reason=record["reason"],
            code=record["code"],
            options=options,
            interruptedJobs=interrupted,
            leaseKeeperPid=keeper,
        )
        return dict(outcome, warnings=warnings) if warnings else outcome
