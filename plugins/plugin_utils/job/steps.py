# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The steps of ``stella_job`` (documentation: plugins/modules/stella_job.py), behind its action plugin.

Each step declares what it needs and what it does in check mode (:data:`STEPS`). A step reads the job
record from the job store, applies one pure change from ``record`` and persists the result in the same
transaction, so the record never shows progress that was not persisted. In check mode a step either
reads the store (``read``) or makes a preview that opens no store (``preview``, :mod:`.preview`).
"""

from __future__ import annotations

import collections
import importlib
import secrets

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, first_line, redact_text
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    JOB_CHECK_MODE, JOB_INTERRUPTED, PROJECT_BUSY, ROLLBACK_TASKS,
    deployment_evidence_dir, generated_job_id, job_evidence_dir, keep_revisions_problem, utc_timestamp)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.timeouts import task_timeout
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import stored_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import target as _job_target
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import fencing as _fencing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import step_failure as _step_failure
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import strategy as _strategy
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    DEPLOYMENT_EVIDENCE_FILE, JOB_EVIDENCE_FILE, ROLLBACK_EVIDENCE_FILE, check_new_job_directory, clean, keep_documents)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.lease import MIN_LEASE_SECONDS, start_keeper
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.owner import controller_owner, gone_why, interrupt_gone


def _lazy(name):
    """``plugin_utils.<name>``, imported when a step first needs it: every step runs in a task's own worker
    process, where the collection's modules are compiled from source on import, so a step imports only
    what it uses (planning, registry resolution, previews, traffic adapters and the report cost the
    steps that never use them about 0.05 s each)."""
    return importlib.import_module("ansible_collections.stellaops.runtime.plugins.plugin_utils." + name)


Step = collections.namedtuple("Step", "needs acting check_mode")
Step.__doc__ = """What a step needs: the options it cannot run without (``needs``), whether it acts for a
running job and is refused once the job was recorded interrupted (its projects are released, and another
job may hold them now: ``acting``), and what it does in check mode (``check_mode``: ``read`` the store,
or a ``preview`` that opens none)."""

STEPS = collections.OrderedDict([
    ("start", Step(("release",), False, "preview")),
    ("target", Step(("job_id", "target"), True, "preview")),
    ("traffic", Step(("job_id",), True, "preview")),
    ("gate", Step(("job_id",), True, "preview")),
    ("finish", Step(("job_id",), True, "preview")),
    ("rollback_start", Step(("job_id",), False, "read")),
    ("rollback_target", Step(("job_id", "target"), True, "preview")),
    ("traffic_rollback", Step(("job_id",), True, "preview")),
    ("close", Step(("job_id",), False, "preview")),
    ("show", Step(("job_id",), False, "read")),
    ("health", Step((), False, "read")),
])


# Steps of a job already recorded: the store they open must be the one its start wrote (never a new one).
STORE_WRITTEN_STEPS = ("target", "traffic", "gate", "finish", "rollback_start", "rollback_target", "traffic_rollback",
                       "close")

# Steps of a running job whose own error would end the playbook before the job is closed: an error
# inside one is recorded in the job instead (job/step_failure.py), unless it says the job cannot be
# written or must go no further.
RECORDED_FAILURE_STEPS = ("target", "traffic", "gate", "finish")
UNRECORDED_CODES = (JOB_INTERRUPTED, "job_not_found", "job_store_failed")


def interrupt_gone_jobs(store, now):
    """Record every unfinished job whose run is gone (or whose claim lease expired) interrupted, which
    releases its projects, before a new job claims any; their job ids."""
    return [record["jobId"] for record in store.unfinished()
            if interrupt_gone(store, record, now)["status"] != record["status"]]


class JobSteps:
    """One ``stella_job`` task: its task variables, whether it runs in check mode, and the secrets it
    saw (redacted from any failure it reports)."""

    def __init__(self, task_vars, check_mode):
        self.vars = task_vars or {}
        self.check_mode = check_mode
        self.secrets = []
        self.warnings = []
        self.location = None

    def run(self, args):
        """The outcome of step ``args["step"]``; a :class:`StellaError` when it cannot run."""
        step = STEPS[args["step"]]
        self._need(args, *step.needs)
        if self.check_mode and step.check_mode not in ("read", "preview"):
            raise StellaError(JOB_CHECK_MODE, "step %s records the job in the job store, so it does not run in "
                              "check mode: nothing was planned, persisted or changed" % args["step"])
        if self.check_mode and step.check_mode == "preview":  # no store is opened: a preview persists nothing
            return self._preview(args)
        self.location = args["store"] or self.vars.get("stella_job_store")
        missing = _job_store.missing_sqlite(self.location) if self.check_mode else None
        if missing:
            raise StellaError("job_store_missing", "no job store at %s (check mode creates none)" % missing,
                              phase="job")
        # a step of a recorded job needs the store its start wrote: a vanished or truncated one is an error
        store = _job_store.open_store(self.location, existing=args["step"] in STORE_WRITTEN_STEPS)
        try:
            if step.acting:  # the job's header only: the step reads what it changes under the store's lock
                record = self._job_of(store, args, targets=False)
                refused = _fencing.refused_work(clean(args["failure"])) if args["step"] == "target" else None
                if refused and record.get("interrupted"):  # what the fence refused is still recorded
                    return _fencing.record_refusal(store, args, refused)
                self._refuse_interrupted(record)
            try:
                return getattr(self, "_" + args["step"])(store, args)
            except Exception as exc:  # pylint: disable=broad-except  # recorded, so the job still ends
                if args["step"] not in RECORDED_FAILURE_STEPS or getattr(exc, "code", None) in UNRECORDED_CODES:
                    raise
                return _step_failure.recorded(store, args, exc, self.secrets)
        finally:
            store.close()

    def _need(self, args, *names):
        for name in names:
            if args.get(name) in (None, ""):
                raise StellaError("job_invalid", "step %s needs %s" % (args["step"], name), phase="job")

    def _job_of(self, store, args, targets=True):
        """The persisted record of ``job_id`` (without ``targets``: its header only, ``JobStore.head``);
        ``job_not_found`` when the store has none."""
        record = store.get(args["job_id"]) if targets else store.head(args["job_id"])
        if record is None:
            raise StellaError("job_not_found", "no job %s in the job store" % args["job_id"], phase="job")
        return record

    @staticmethod
    def _refuse_interrupted(record):
        """A job recorded interrupted (its run was taken for gone) goes no further, not even to a rollback."""
        if record.get("interrupted"):
            raise StellaError(JOB_INTERRUPTED, "job %s was recorded interrupted, this run stops: %s" % (
                record["jobId"], record["interrupted"]["why"]), phase="job")

    def _preview(self, args):
        """A step of the job in check mode (job/preview.py): nothing is opened, recorded or written."""
        preview = _lazy("job.preview")
        if args["step"] == "start":
            self._check_start(args)
            job_id, source, planned, options, _summary, unreachable = self._plan(args, utc_timestamp())
            return preview.start(job_id, source, planned, options, unreachable)
        if args["step"] == "close":
            hostvars = self.vars.get("hostvars") or {}
            # the start's outcome, kept on localhost: stella_job_run by the job, stella_job_finish by the rollback
            run, close, order = self.vars.get("stella_job_finish") or {}, preview.rollback_close, "rollbackOrder"
            if args["started"] is not None:  # the role's one-target job hands its start over
                run, close, order = args["started"], preview.close, "targetOrder"
            elif run.get("kind") != "rollback":
                run, close, order = self.vars.get("stella_job_run") or {}, preview.close, "targetOrder"
            if run.get("jobId") != args["job_id"] or not run.get("checkMode"):
                raise StellaError("job_not_found", "no job %s was previewed in this run" % args["job_id"], phase="job")
            # only the preview each target's recording step left on it
            return close(run, {name: hostvars[name][preview.PREVIEW_FACT] for name in run.get(order) or []
                               if name in hostvars and preview.PREVIEW_FACT in hostvars[name]})
        if args["step"] in ("target", "rollback_target"):
            result, failure = clean(args["result"]), clean(args["failure"])
            outcome = (preview.target_preview(result, failure) if args["step"] == "target"
                       else preview.rollback_target_preview(result, failure))
            return {"jobId": args["job_id"], "checkMode": True, "targetName": args["target"], "preview": outcome,
                    "ansible_facts": {preview.PREVIEW_FACT: outcome}}
        return preview.passing(args["step"], args["job_id"], args["batch"])

    def _check_start(self, args):
        """The options of a start, refused (job_invalid) before anything is planned or opened."""
        if args["claim_lease"] < 0 or 0 < args["claim_lease"] < MIN_LEASE_SECONDS:
            raise StellaError("job_invalid", "claim_lease must be 0 (no lease) or at least %d seconds, not %d" % (
                MIN_LEASE_SECONDS, args["claim_lease"]), phase="job")
        if keep_revisions_problem(args["keep_revisions"]):
            raise StellaError("job_invalid", keep_revisions_problem(args["keep_revisions"]), phase="job")

    def _plan(self, args, now):
        """``(job id, its source, the plan, options, summary, unreachable targets)``; nothing persisted."""
        job_id, source = (args["job_id"], "job_id") if args["job_id"] else (
            _job.job_id_from(self.vars) if args["caller_job_id"] else (None, None))
        if not job_id:
            job_id, source = generated_job_id(now, secrets.token_hex(4)), "generated"
        inputs, plan = _lazy("release.inputs"), _lazy("job.plan")
        release = inputs.plain(args["release"])
        self.secrets.extend(str(v) for v in (release.get("secretEnv") or {}).values())
        credentials = inputs.load_credentials(inputs.plain(args["registry_credentials"], "registry_credentials"))
        self.secrets.extend(credentials.secrets())
        hostvars = self.vars.get("hostvars") or {}
        hosts = [(name, dict(hostvars.get(name) or {})) for name in args["targets"]]
        for name, host in hosts:  # an identity given for a host wins over its inventory variables
            if isinstance(args["target_identities"].get(name), dict):
                host["stella_target"] = dict(host.get("stella_target") or {}, **inputs.plain(args["target_identities"][name]))
        probe = dict(release, target=dict(release.get("target") or {}, id="probe", name="probe",
                                          endpoint="local", executionMode="local"))
        probe.setdefault("target", {}).setdefault("type", "ComposeHost")
        try:
            resolved, resolution = inputs.resolve_digests(probe, credentials, args["insecure_registries"], {}, True,
                                                          args["timeout"])
        finally:
            self.secrets.extend(credentials.secrets())  # what the Docker config's helpers answered
        self.warnings.extend(credentials.warnings)
        options = plan.job_options(release, {"autoRollbackOnFailure": args["auto_rollback_on_failure"],
                                             "waitForHealthCheck": args["wait_for_health_check"]})
        options.update(claimLeaseSeconds=args["claim_lease"], keepRevisions=args["keep_revisions"],
                       waitTimeout=args["wait_timeout"], minEngineVersion=args["min_engine_version"],
                       taskTimeout=task_timeout(args["wait_timeout"], release.get("hooks"), args["task_timeout"]),
                       minComposeVersion=args["min_compose_version"],
                       insecureRegistries=list(args["insecure_registries"]))
        planned = plan.plan_job(release, hosts, resolved, job_id, options)
        _lazy("traffic.adapters").check_traffic_config(release["strategy"], release.get("strategyConfig"),
                                                       len(planned["batches"]))
        summary = {"release": release["release"], "tenant": release["tenant"], "environment": release["environment"],
                   "application": release["application"], "strategy": release["strategy"],
                   "strategyConfig": _lazy("evidence.masking").masked(release.get("strategyConfig") or {}),
                   "resolution": resolution}  # no secret of the strategyConfig is kept (evidence/masking.py)
        unreachable = {name: first_line(str(ping.get("msg") or "")) or "unreachable"
                       for name, ping in args["readiness"].items() if isinstance(ping, dict) and ping.get("unreachable")}
        return job_id, source, planned, options, summary, unreachable

    def _start(self, store, args):
        """Plan the whole job once and persist it; fail it closed when a target is unreachable."""
        self._check_start(args)
        now = utc_timestamp()
        interrupted = interrupt_gone_jobs(store, now)
        job_id, source, planned, options, summary, unreachable = self._plan(args, now)
        if store.head(job_id) is None:  # an id this store holds is job_exists; another store's, evidence_conflict
            check_new_job_directory(args["evidence_dir"], job_id)
        targets = {name: {"targetId": plan["target"]["id"], "targetName": plan["target"]["name"],
                          "targetType": plan["target"]["type"], "endpoint": plan["target"]["endpoint"],
                          "target": plan["target"], "projectName": plan["projectName"], "slot": plan["slot"],
                          "manifestHash": plan["manifestHash"],
                          "rollbackPayload": plan["payloads"][ROLLBACK_TASKS[plan["target"]["type"]]]}
                   for name, plan in planned["plans"].items()}
        record = _job.new_job(job_id, source, summary, planned["batches"], targets, options, now,
                              owner=controller_owner())
        stored, held = store.create(record)
        for name, plan in planned["plans"].items():  # each target's work carries its claim (host/claim.py)
            if stored["targets"][name].get("claim"):
                plan["inputs"]["apply"]["claim"] = stored["targets"][name]["claim"]
        if held:
            busy = {name: "project %s is held by unfinished job %s" % (targets[name]["projectName"], holder)
                    for name, holder in held.items()}
            reason = "another job is deploying the same project, nothing was changed: %s" % "; ".join(
                "%s: %s" % item for item in sorted(busy.items()))
            record = store.update(job_id, lambda r: _job.fail_closed(r, PROJECT_BUSY, reason, busy, utc_timestamp()))
        elif unreachable:
            reason = "target readiness failed before any target was changed: %s unreachable" % ", ".join(
                sorted(unreachable))
            record = store.update(job_id, lambda r: _job.fail_closed(r, "target_unreachable", reason, unreachable,
                                                                     utc_timestamp()))
        else:
            record = store.update(job_id, lambda r: _job.start(r, utc_timestamp()))
        keeper, warnings = None, list(self.warnings)
        if record["status"] == "Running" and args["claim_lease"]:
            keeper = start_keeper(self.location, job_id, record["owner"], args["claim_lease"])
            if keeper is None:
                warnings.append("job %s: the claim lease keeper could not be started; only the job's steps renew "
                                "its lease" % job_id)
        outcome = dict(_lazy("job.plan").plan_outcome(planned), jobId=job_id, jobIdSource=source,
                       proceed=record["status"] == "Running",
                       status=record["status"], reason=record["reason"], code=record["code"], options=options,
                       interruptedJobs=interrupted, leaseKeeperPid=keeper)
        return dict(outcome, warnings=warnings) if warnings else outcome

    def _target(self, store, args):
        """Record one target's outcome in one transaction: the nine phases as they ran (derived from the
        apply, the probes and the failure that stopped the target's play, _job_target), its facts, and
        its ``deployment.json``, kept in the job store in the same transaction (and written first to the
        evidence directory when the job has one, ``evidence_dir``)."""
        self._need(args, "plan")
        apply, probe, failure, plan = clean(args["result"]) or {}, clean(args["probe"]), clean(args["failure"]), clean(args["plan"])
        now = utc_timestamp()
        evidence = _lazy("evidence.deployment")
        document = evidence.deployment_record(plan, apply, now, preflight=evidence.preflight_evidence(apply), probe=probe)
        directory = deployment_evidence_dir("", plan.get("projectName"), plan.get("jobId"), (plan.get("target") or {}).get("id"))
        files, stored = keep_documents(args["evidence_dir"], directory, {DEPLOYMENT_EVIDENCE_FILE: document})
        outcome = _job_target.deployment_outcome(apply, probe, failure, evidence_written=bool(args["evidence_dir"]),
                                                 probe_duration_ms=(probe or {}).get("durationMs") or 0)

        def change(record):
            for name, status, duration, detail in outcome["phases"]:
                record = _job.record_phase(record, args["target"], name, status, None, now, duration, now, detail)
            return _job.finish_target(record, args["target"], outcome["succeeded"], now, reason=outcome["reason"],
                                      code=outcome["code"], facts=_job_target.target_facts(apply, files))
        record = store.update(args["job_id"], change, documents=stored)
        return {"jobId": args["job_id"], "targetName": args["target"], "target": record["targets"][args["target"]]}

    @staticmethod
    def _batch_of(record, args):
        """The batch ``args`` names: ``batch``, else the one batch of ``targets``."""
        if args["batch"] is not None:
            return args["batch"]
        indexes = {record["targets"][n]["batch"] for n in args["targets"] if n in record["targets"]}
        if len(indexes) != 1:
            raise StellaError("job_invalid", "step %s needs the targets of one batch (got %s)" % (
                args["step"], ", ".join(args["targets"]) or "none"), phase="job")
        return indexes.pop()

    def _traffic(self, store, args):
        """After a batch, before its gate: the traffic adapter shifts to the batch's weights (only when
        every target of the batch succeeded); without one, standby-only evidence."""
        record = self._job_of(store, args)
        batch = self._batch_of(record, args)
        step = _job_traffic.shift_step(record, batch)
        if step is None or any(record["targets"][n]["status"] != "Succeeded" for n in record["batches"][batch]):
            return {"jobId": record["jobId"], "batch": batch, "skipped": True, "failure": None}
        evidence, failure = self._run_adapter(record, step, args)
        store.update(record["jobId"], lambda r: _job_traffic.record_shift(r, step, evidence, utc_timestamp(), failure))
        return {"jobId": record["jobId"], "batch": batch, "skipped": False, "traffic": evidence, "failure": failure}

    def _traffic_rollback(self, store, args):
        """After the targets were rolled back, or after a failed job that shifted traffic and rolled no
        target back (_job_traffic.puts_traffic_back): every request back on the control slot, through the
        same adapter. A required adapter that is missing or fails fails the rollback closed."""
        record = self._job_of(store, args)
        step = _job_traffic.rollback_step(record, record.get("reason"))
        if step is None or not _job_traffic.puts_traffic_back(record):
            return {"jobId": record["jobId"], "skipped": True}
        evidence, failure = self._run_adapter(record, step, args)
        store.update(record["jobId"], lambda r: _job_traffic.record_rollback(r, evidence, utc_timestamp(), failure))
        return {"jobId": record["jobId"], "skipped": False, "traffic": evidence, "failure": failure}

    def _run_adapter(self, record, step, args):
        """``(evidence, failure or None)`` of one traffic step through the job's adapter (options from
        ``traffic_options``). Without a runnable adapter: the no-adapter evidence, and a failure only
        when ``requireTrafficAdapter`` is set."""
        config, required = _job_traffic.traffic_config(record)
        options = _lazy("release.inputs").plain(args["traffic_options"], "traffic_options")
        traffic = _lazy("traffic.adapters")
        self.secrets.extend(traffic.header_values(options))
        adapter, why = traffic.resolve(config, options)
        if adapter is None:
            failure = {"code": why, "reason": "no traffic adapter ran: %s" % why} if required else None
            return traffic.no_adapter_evidence(why, step), failure
        try:
            return traffic.evidence_json(adapter.shift(_job_traffic.job_facts(record), step)), None
        except traffic.TrafficError as exc:
            failure = {"code": exc.code, "reason": redact_text(exc.reason, self.secrets)}
            return traffic.evidence_json(exc.evidence), failure

    def _gate(self, store, args):
        found = {}

        def change(record):
            batch = found["batch"] = self._batch_of(record, args)
            outcomes = [(n, record["targets"][n]["status"], record["targets"][n]["reason"])
                        for n in record["batches"][batch]]
            decision = _strategy.gate(batch, outcomes, _job_traffic.gate_failure(record, batch),
                                      _step_failure.gate_failure(record))
            return _job.record_gate(record, decision, utc_timestamp())
        record = store.update(args["job_id"], change)
        decision = [g for g in record["gates"] if g["batch"] == found["batch"]][0]
        return {"jobId": args["job_id"], "proceed": decision["proceed"], "gate": decision}

    def _finish(self, store, args):
        """End the deployment; a failed job decides its one automatic rollback."""
        record = self._job_of(store, args)

        def auto_rollback(current):
            if current["status"] == "Failed" and not current.get("isRollback") and current.get("rollback") is None:
                return _job.auto_rollback(current, utc_timestamp())
            return None
        # one transaction: the job never shows Failed without its rollback decision (nor frees its projects)
        if record["status"] == "Running":
            record = store.update(args["job_id"], lambda r: _job.finish(r, utc_timestamp()), auto_rollback)
        elif auto_rollback(record) is not None:
            record = store.update(args["job_id"], auto_rollback)
        return _job.rollback_orders(record)

    def _rollback_start(self, store, args):
        """An operator rollback of job ``job_id``: a new job of kind ``rollback`` over the source job's
        targets that retained a revision, in reverse batch order; fails closed when none did. In check
        mode the same job is made and checked, and not stored (job/preview.py ``rollback_start``)."""
        source = self._job_of(store, args)
        now = utc_timestamp()
        if not self.check_mode:
            interrupt_gone_jobs(store, now)
        record = _job.operator_rollback(source, "%s-rollback-%s" % (source["jobId"], secrets.token_hex(3)), now,
                                        args["revision_paths"], first_line(args["reason"]), controller_owner(),
                                        wait_timeout=args["wait_timeout"])
        if self.check_mode:
            held = _lazy("job.preview").held_projects(record, store.claims(), {
                job["jobId"] for job in store.unfinished() if gone_why(job, now) is None})
        else:
            record, held = store.create(record)
        if held:
            raise StellaError(PROJECT_BUSY, "job %s: project held by unfinished job %s" % (
                record["jobId"], ", ".join(sorted(set(held.values())))), phase="job")
        if record["status"] == "Failed":
            raise StellaError(record["code"], "job %s: %s" % (record["jobId"], record["reason"]), phase="job")
        if not self.check_mode:  # the deployment is RollingBack from now on (job/recovery.py)
            _lazy("job.recovery").started(store, record, now)
        orders = _job.rollback_orders(record, source=source)
        return _lazy("job.preview").rollback_start(orders, record) if self.check_mode else orders

    def _rollback_target(self, store, args):
        """Record one target's rollback in one transaction: the agent's rollback phases, and whether the
        target counts as restored (the agent's verified restoration, _job_target.rollback_outcome)."""
        rollback = clean(args["result"]) or {}
        outcome = _job_target.rollback_outcome(rollback, clean(args["failure"]))
        now = utc_timestamp()

        def change(record):
            for name, status, duration, detail in outcome["phases"]:
                record = _job.record_phase(record, args["target"], name, status, None, now, duration, now, detail)
            facts = {"restoredRevisionPath": rollback.get("restoredRevisionPath"),
                     "rollbackDigest": _job_target.services_digest(rollback), "completedAt": now}
            return _job.finish_rollback_target(record, args["target"], outcome["succeeded"], now,
                                               reason=outcome["reason"], facts=facts)
        record = store.update(args["job_id"], change)
        return {"jobId": args["job_id"], "targetName": args["target"], "target": record["targets"][args["target"]]}

    def _close(self, store, args):
        """Finish a rollback in progress, write the job's evidence, and return the final record."""
        record = self._job_of(store, args)
        if record["status"] == "RollingBack":
            record = store.update(args["job_id"], lambda r: _job.finish_rollback(r, utc_timestamp()))
        elif record["status"] == "Running":
            record = store.update(args["job_id"], lambda r: _job.finish(r, utc_timestamp()))
        # an operator rollback job's evidence is about the deployment it rolls back (its source)
        source = store.get(record["sourceJobId"]) if record["kind"] == "rollback" and record.get("sourceJobId") else None
        rollback = _job_view.rollback_evidence(record, source)
        files, documents = self._keep_evidence(store, record, args["evidence_dir"], rollback, args["report"])
        # the id of the rollback evidence packet (its document name in the store), only when it was written
        evidence_id = files[ROLLBACK_EVIDENCE_FILE]["document"] if ROLLBACK_EVIDENCE_FILE in files else None
        if record["status"] in _job.TERMINAL:  # the terminal projection: after the terminal evidence exists
            store.project_terminal(record["jobId"], _projection.strategy_evidence(record, rollback, evidence_id, files),
                                   utc_timestamp())
            if source is not None and rollback is not None:
                self._recover_source(store, record, source, rollback, evidence_id)
        on_disk = {name: entry for name, entry in files.items() if entry.get("path")}
        return {"jobId": record["jobId"], "job": record, "status": record["status"], "reason": record["reason"],
                "msg": _job_view.closing_line(record["jobId"], record["status"], record["reason"]),
                "succeeded": _job.succeeded(record), "evidenceFiles": on_disk, "evidenceDocuments": documents,
                "outcome": _job_view.outcome(record, on_disk), "text": _job_view.render_text(record)}

    @staticmethod
    def _recover_source(store, record, source, rollback, evidence_id):
        """The deployment an operator rollback job rolled back, RollingBack since the rollback started, ends
        RolledBack (or Failed), once per rollback job, and its projection carries the rollback's
        ``rollback.evidence.*`` and traffic rollback keys (job/recovery.py, :func:`_projection.recovery_keys`)."""
        _lazy("job.recovery").ended(store, record, _projection.recovery_keys(record, rollback, evidence_id),
                                    utc_timestamp())

    def _show(self, store, args):
        """Read a job. A job whose controller run is gone (or whose claim lease expired) is first recorded
        as interrupted (``Failed``), so no job is shown ``Running`` when nothing runs it; not in check mode,
        which shows the record as it is."""
        record = self._job_of(store, args)
        if not self.check_mode:
            record = interrupt_gone(store, record)
        return {"jobId": record["jobId"], "job": record, "text": _job_view.render_text(record),
                "projection": store.projection(record["jobId"])}

    def _health(self, store, args):
        """The health status the store keeps for ``targets`` (their target ids), or for every target."""
        hostvars = self.vars.get("hostvars") or {}
        ids = [_lazy("job.plan").target_identity(name, dict(hostvars[name]) if name in hostvars else {}, None)["id"]
               for name in args["targets"]] if args["targets"] else None
        return {"health": store.health(ids)}

    @staticmethod
    def _keep_evidence(store, record, root, rollback, report):
        """The job's own evidence (``job.json``, ``rollback-evidence.json`` when there is rollback evidence,
        and with ``report`` the HTML report) kept in the job store, and written under ``root`` when the job
        has an evidence directory. ``(files, documents)``: ``{file name: {"sha256", "document", "path"}}``
        and ``{document name: sha256}`` of every document the store keeps for the job."""
        documents = {JOB_EVIDENCE_FILE: _job_view.job_evidence(record)}
        if rollback is not None:
            documents[ROLLBACK_EVIDENCE_FILE] = rollback
        directory = job_evidence_dir("", record["jobId"])
        files, stored = keep_documents(root, directory, documents)
        if report:
            page = _lazy("evidence.report")
            _files, deployments = stored_evidence(store, record)
            base = job_evidence_dir(root, record["jobId"]) if root else directory
            data = page.render_report(record, files, rollback, deployments, base=base).encode("utf-8")
            more, stored_page = keep_documents(root, directory, {page.REPORT_FILE: data})
            files.update(more)
            stored.update(stored_page)
        store.put_documents(record["jobId"], stored, utc_timestamp())
        return files, {name: entry["sha256"] for name, entry in store.document_index(record["jobId"]).items()}
