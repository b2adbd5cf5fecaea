# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Agent task payloads with the contract's exact property names (pure, stdlib only).

Agent.Core deserializes with default System.Text.Json options, so the property names below are
case-exact: ``compose.up`` (ProjectName, ComposeLock, VersionSticker, PullImages, BackupExisting,
Hooks), ``docker.run`` (Image, Name, PullImage, Hooks), ``compose.rollback`` (ProjectName,
RevisionPath), ``compose.preflight`` (WorkDirectory, ImageReference, MinimumFreeDiskBytes,
RegistryReachabilityMode, RequireCompose). ``compose.up``, ``docker.run`` and ``compose.rollback`` also
carry a ``Target`` context object and ``Variables``; ``compose.preflight`` carries exactly its five keys.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import image_id
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.tasks import (
    COMPOSE_PREFLIGHT,
    COMPOSE_ROLLBACK,
    COMPOSE_UP,
    DOCKER_ROLLBACK,
    DOCKER_RUN,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (  # noqa: F401 (re-exported)
    DEFAULT_HOOK_INTERPRETER,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_MINIMUM_FREE_DISK_BYTES,
    DEFAULT_REACHABILITY_MODE,
    target_context,
)

_SKIP_PULL_KEYS = (
    ("runtime.skipPull", True),
    ("compose.skipPull", True),
    ("compose.pullImages", False),
    ("pullImages", False),
)


def _truthy(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def component_skips_pull(config):
    """True when the component marks a preloaded/offline image (runtime.skipPull, compose.skipPull,
    compose.pullImages=false or pullImages=false)."""
    for key, skip_when in _SKIP_PULL_KEYS:
        if key in config and _truthy(config[key]) == skip_when:
            return True
    return False


def hook_entries(hooks, project_directory):
    """Contract hook entries (defaults: /bin/sh, project directory, 300 s, fail, redact)."""
    return [
        {
            "Name": hook["name"],
            "Phase": hook["phase"],
            "Interpreter": hook.get("interpreter", DEFAULT_HOOK_INTERPRETER),
            "Command": hook["command"],
            "WorkingDirectory": hook.get("workingDirectory", project_directory),
            "TimeoutSeconds": hook.get("timeoutSeconds", DEFAULT_HOOK_TIMEOUT),
            "FailurePolicy": hook.get("failurePolicy", "fail"),
            "RedactionPolicy": hook.get("redactionPolicy", "redact"),
        }
        for hook in hooks
    ]


def variables(plan, rollback=False):
    """The contract's compose variables, all strings."""
    data = {
        "projectName": plan["projectName"],
        "slot": plan["slot"],
        "trafficRole": plan["trafficRole"],
        "targetId": plan["target"]["id"],
        "targetName": plan["target"]["name"],
        "targetType": plan["target"]["type"],
        "targetEndpoint": plan["target"]["endpoint"],
        "targetExecutionMode": plan["target"]["executionMode"],
        "workDirectory": plan["workDirectory"],
        "projectDirectory": plan["projectDirectory"],
        "composePath": plan["paths"]["composePath"],
        "versionStickerPath": plan["paths"]["versionStickerPath"],
        "applyManifestPath": plan["paths"]["applyManifestPath"],
        "manifestHash": plan["manifestHash"],
        "composeHash": plan["composeHash"],
        "versionStickerHash": plan["versionStickerHash"],
        "applyManifestHash": plan["applyManifestHash"],
        "deploymentJobId": plan["jobId"],
        "deploymentTaskId": plan["taskId"],
        "deploymentStrategy": plan["strategy"],
        "releaseId": plan["release"]["id"],
        "releaseVersion": plan["release"]["version"],
        "rollback": "true" if rollback else "false",
    }
    if plan.get("envArtifactHash"):
        data["envArtifactPath"] = plan["paths"]["envArtifactPath"]
        data["envArtifactHash"] = plan["envArtifactHash"]
    return data


def deployment_environment(plan, component):
    """Standard Stella deployment variables given to every container."""
    return {
        "STELLA_APPLICATION": plan["application"],
        "STELLA_COMPONENT": component,
        "STELLA_ENVIRONMENT": plan["environment"],
        "STELLA_MANIFEST_HASH": plan["manifestHash"],
        "STELLA_PROJECT": plan["projectName"],
        "STELLA_RELEASE_ID": plan["release"]["id"],
        "STELLA_RELEASE_NAME": plan["release"]["name"],
        "STELLA_RELEASE_VERSION": plan["release"]["version"],
        "STELLA_SLOT": plan["slot"],
        "STELLA_TARGET_ID": plan["target"]["id"],
        "STELLA_TENANT": plan["tenant"],
        "STELLA_TRAFFIC_ROLE": plan["trafficRole"],
    }


def compose_up(plan, lock_text, sticker_text, apply_manifest_text, pull_images, backup_existing, hooks):
    return COMPOSE_UP.payload(
        ProjectName=plan["projectName"],
        ComposeLock=lock_text,
        VersionSticker=sticker_text,
        ApplyManifest=apply_manifest_text,
        PullImages=pull_images,
        BackupExisting=backup_existing,
        Hooks=hooks,
        WorkDirectory=plan["workDirectory"],
        ManifestHash=plan["manifestHash"],
        Target=target_context(plan["target"]),
        Variables=variables(plan),
    )


def docker_run(plan, service, hooks):
    """One ``docker.run`` task: one digest-pinned image, labels, env.* plus Stella variables."""
    env = dict(deployment_environment(plan, service["name"]))
    for key in sorted(service["config"]):
        if key.startswith("env."):
            value = service["config"][key]
            env[key[4:]] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return DOCKER_RUN.payload(
        Image=service["image"],
        Name="%s-%s" % (plan["projectName"], service["name"]),
        PullImage=not (plan["pullImagesDisabled"] or component_skips_pull(service["config"])),
        Hooks=hooks,
        Labels=dict(sorted(service["labels"].items())),
        Environment={name: env[name] for name in sorted(env)},
        Ports=list(service["ports"]),
        Config={key: service["config"][key] for key in sorted(service["config"])},
        WorkDirectory=plan["workDirectory"],
        ManifestHash=plan["manifestHash"],
        Target=target_context(plan["target"]),
        Variables=dict(variables(plan), componentName=service["name"]),
        EnvFile=plan["paths"]["envArtifactPath"] if plan.get("envArtifactHash") else None,
    )


def compose_rollback(plan, revision_path=None):
    """``ManifestHash`` is the release this deployment applies: its rollback restores only while the
    project still runs it (a newer deployment's release is never replaced)."""
    return COMPOSE_ROLLBACK.payload(
        ProjectName=plan["projectName"],
        RevisionPath=revision_path,
        ManifestHash=plan["manifestHash"],
        WorkDirectory=plan["workDirectory"],
        Target=target_context(plan["target"]),
        Variables=variables(plan, rollback=True),
    )


def docker_rollback(plan, names, revision_path=None):
    """``docker.rollback`` of this deployment's containers, guarded like ``compose.rollback`` by the
    manifest hash the deployment applies."""
    return DOCKER_ROLLBACK.payload(
        ProjectName=plan["projectName"],
        Names=list(names),
        RevisionPath=revision_path,
        ManifestHash=plan["manifestHash"],
        WorkDirectory=plan["workDirectory"],
        Target=target_context(plan["target"]),
        Variables=variables(plan, rollback=True),
    )


def compose_preflight(plan, images, preflight):
    """Exactly the contract's five keys, so ``stellaops.runtime.stella_preflight`` (which rejects
    unknown payload keys) and Agent.Core consume it unchanged. ``ImageReference`` is the first
    component's pinned image (components sorted by name), left out for an image id pin (a locally
    loaded image, which no registry holds)."""
    return COMPOSE_PREFLIGHT.payload(
        WorkDirectory=plan["workDirectory"],
        ImageReference=None if image_id(images[0]) else images[0],
        MinimumFreeDiskBytes=preflight.get("minimumFreeDiskBytes", DEFAULT_MINIMUM_FREE_DISK_BYTES),
        RegistryReachabilityMode=preflight.get("registryReachabilityMode", DEFAULT_REACHABILITY_MODE),
        RequireCompose=plan["target"]["type"] == "ComposeHost",
    )
