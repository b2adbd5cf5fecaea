# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Planning a whole deployment job once, on the controller. Pure, no I/O.

One release, many targets: each inventory host becomes a release target (its identity from the
host's ``stella_target`` variable, else from its connection variables), every target is planned
with the same resolved digests and the same job id, and the targets are cut into the strategy's
batches in inventory order.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_KEEP_REVISIONS,
    DEFAULT_WAIT_TIMEOUT,
    ENV_FILE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import (
    COMPOSE_PREFLIGHT,
    COMPOSE_UP,
    DOCKER_RUN,
    ROLLBACK_TASKS,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import strategy as _strategy
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import (
    ApplyInputs,
    JobOptions,
    PlannedJob,
    PlanOutcome,
    ProbeInputs,
    RollbackInputs,
    TargetInputs,
    TargetPlan,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.timeouts import task_timeout
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import FILES_KEY, plan_release
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import validate_release

LOCAL_CONNECTIONS = ("local",)
# What the job playbooks need of each target's plan (the rest stays in the job's own planning).
PLAN_KEYS = (
    "projectName",
    "slot",
    "trafficRole",
    "strategy",
    "release",
    "target",
    "tenant",
    "environment",
    "application",
    "jobId",
    "taskId",
    "workDirectory",
    "projectDirectory",
    "paths",
    "manifestHash",
    "composeHash",
    "versionStickerHash",
    "applyManifestHash",
    "envArtifactHash",
    "artifactHashes",
    "components",
    "payloads",
    "scriptGraphProof",
    "sticker",
)
# The job's settings that each target's task inputs carry (the job's options hold them), and their
# defaults: the contract's.
DEFAULT_SETTINGS: dict[str, Any] = {
    "waitForHealthCheck": True,
    "waitTimeout": DEFAULT_WAIT_TIMEOUT,
    "keepRevisions": DEFAULT_KEEP_REVISIONS,
    "minEngineVersion": DEFAULT_MIN_ENGINE,
    "minComposeVersion": DEFAULT_MIN_COMPOSE,
    "insecureRegistries": [],
    "taskTimeout": 0,
}
# The agent task that applies a release, per target type.
APPLY_TASKS = {"ComposeHost": COMPOSE_UP.name, "DockerHost": DOCKER_RUN.name}


def target_identity(name: str, host: Mapping[str, Any], target_type: str | None) -> dict[str, Any]:
    """The release target of inventory host ``name`` (``host``: its variables)."""
    given = dict(host.get("stella_target") or {})
    if host.get("ansible_connection") in LOCAL_CONNECTIONS:
        endpoint, mode = "local", "local"
    else:
        # No userinfo: endpoints are evidence, and the planner redacts userinfo anyway.
        address = host.get("ansible_host") or name
        port = host.get("ansible_port") or host.get("ansible_ssh_port")
        endpoint = "ssh://%s%s" % (address, ":%s" % port if port else "")
        mode = "ssh"
    identity = {"id": name, "name": name, "type": target_type, "endpoint": endpoint, "executionMode": mode}
    identity.update(given)
    return identity


def rollback_options(strategy_config: Mapping[str, Any] | None, override: object = None) -> tuple[bool, str]:
    """``(autoRollbackOnFailure, source)``: the release's strategyConfig (alias rollbackOnFailure),
    default on; ``override`` (the role variable) wins only when it is set."""
    config = strategy_config or {}
    if override is not None:
        return bool(override), "override"
    for key in ("autoRollbackOnFailure", "rollbackOnFailure"):
        if key in config:
            return bool(config[key]), "strategyConfig." + key
    return True, "default"


def job_options(release: Mapping[str, Any], overrides: Mapping[str, Any]) -> JobOptions:
    """``waitForHealthCheck`` and ``autoRollbackOnFailure`` of the job: the release's strategyConfig,
    role variables only as overrides (``None`` = not set)."""
    config = release.get("strategyConfig") or {}
    auto, source = rollback_options(config, overrides.get("autoRollbackOnFailure"))
    wait = overrides.get("waitForHealthCheck")
    wait_source = "override"
    if wait is None:
        wait, wait_source = (
            config.get("waitForHealthCheck", True),
            ("strategyConfig.waitForHealthCheck" if "waitForHealthCheck" in config else "default"),
        )
    return {
        "autoRollbackOnFailure": bool(auto),
        "autoRollbackSource": source,
        "waitForHealthCheck": bool(wait),
        "waitForHealthCheckSource": wait_source,
    }


def release_for(release: dict[str, Any], identity: dict[str, Any], job_id: str) -> dict[str, Any]:
    per_target = copy.deepcopy(release)
    per_target["target"] = identity
    per_target["jobId"] = job_id
    per_target.pop("taskId", None)
    return per_target


def target_inputs(
    plan: Mapping[str, Any], release: Mapping[str, Any], settings: Mapping[str, Any] | None
) -> TargetInputs:
    """What one target's play hands to each of its tasks, as the tasks' own options, so no play
    branches on the target type: ``apply`` (stella_compose_deploy: the agent task, its payload or
    payloads, the sticker a DockerHost commits, the preflight that runs first in the same task, the
    wait timeout, the revisions kept and the task's own timeout, :func:`.timeouts.task_timeout`),
    ``probe`` (stella_probe: each component's name and config, the target, whether probes run) and
    ``rollback`` (stella_rollback: the agent task, its payload, the wait timeout and the task timeout).
    ``settings``: the job's options (:data:`DEFAULT_SETTINGS` where they say nothing)."""
    settings = dict(DEFAULT_SETTINGS, **{k: v for k, v in (settings or {}).items() if k in DEFAULT_SETTINGS})
    target_type = plan["target"]["type"]
    payloads = plan["payloads"]
    timeout = task_timeout(settings["waitTimeout"], release.get("hooks"), settings["taskTimeout"])
    apply: ApplyInputs = {
        "task": APPLY_TASKS[target_type],
        "wait_timeout": settings["waitTimeout"],
        "task_timeout": timeout,
        "keep_revisions": settings["keepRevisions"],
        "preflight": {
            "payload": payloads[COMPOSE_PREFLIGHT.name],
            "target_type": target_type,
            "min_engine_version": settings["minEngineVersion"],
            "min_compose_version": settings["minComposeVersion"],
            "insecure_registries": list(settings["insecureRegistries"]),
        },
    }
    if target_type == "DockerHost":
        apply.update({"payloads": payloads[DOCKER_RUN.name], "version_sticker": plan["sticker"]})
    else:
        apply["payload"] = payloads[COMPOSE_UP.name]
    probe: ProbeInputs = {
        "components": [{"name": c["name"], "config": c.get("config") or {}} for c in release["components"]],
        "target": plan["target"],
        "wait_for_health_check": bool(settings["waitForHealthCheck"]),
    }
    rollback: RollbackInputs = {
        "task": ROLLBACK_TASKS[target_type],
        "payload": payloads[ROLLBACK_TASKS[target_type]],
        "wait_timeout": settings["waitTimeout"],
        "task_timeout": timeout,
    }
    return {"apply": apply, "probe": probe, "rollback": rollback}


def plan_job(
    release: dict[str, Any],
    hosts: Sequence[tuple[str, Mapping[str, Any]]],
    resolved: Mapping[str, Any],
    job_id: str,
    settings: Mapping[str, Any] | None = None,
) -> PlannedJob:
    """Plan every target of the job.

    ``hosts``: ``[(name, host variables), ...]`` in inventory order; ``settings``: the job's
    options (each target's task inputs carry :data:`DEFAULT_SETTINGS`' keys of them). Returns ``{"batches", "serial",
    "targetOrder", "plans": {name: plan}, "files": {name: artifact bytes}}``.
    """
    if not hosts:
        raise StellaError("job_invalid", "the deployment job has no targets", phase="plan")
    target_type = (release.get("target") or {}).get("type", "ComposeHost")
    names = [name for name, _vars in hosts]
    batches = _strategy.plan_batches(release.get("strategy"), release.get("strategyConfig"), names)
    plans: dict[str, TargetPlan] = {}
    files: dict[str, dict[str, bytes]] = {}
    for name, host in hosts:
        per_target = release_for(release, target_identity(name, host, target_type), job_id)
        validate_release(per_target)
        plan = plan_release(per_target, resolved)
        files[name] = plan.pop(FILES_KEY)
        plans[name] = cast(TargetPlan, {key: plan[key] for key in PLAN_KEYS if key in plan})
        plans[name]["inputs"] = target_inputs(plan, per_target, settings)
    ids: dict[str, str] = {}
    for name, kept in plans.items():
        other = ids.setdefault(kept["target"]["id"], name)
        if other != name:
            raise StellaError(
                "job_invalid",
                "targets %s and %s have the same target id %r" % (other, name, kept["target"]["id"]),
                phase="plan",
            )
    return {
        "batches": batches,
        "serial": [len(batch) for batch in batches],
        "targetOrder": [n for batch in batches for n in batch],
        "plans": plans,
        "files": files,
    }


def plan_outcome(planned: PlannedJob) -> PlanOutcome:
    """What a job's start returns of its plan (``plan_job``'s result): the batches for the play's
    ``serial``, each target's plan, and which targets get an env artifact."""
    return {
        "batches": planned["batches"],
        "serial": planned["serial"],
        "targetOrder": planned["targetOrder"],
        "plans": planned["plans"],
        "hasEnvArtifact": {name: files.get(ENV_FILE) is not None for name, files in planned["files"].items()},
    }
