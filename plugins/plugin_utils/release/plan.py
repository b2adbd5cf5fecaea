# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The whole release plan: a pure composition of release input, naming, lock, artifacts and payloads.

:func:`plan_release` does no I/O. Digest resolution happens before it (release/registry.py), and the
caller passes the result as ``resolved`` (original image reference -> ``sha256:...``).
"""

from __future__ import annotations

import posixpath

from ansible_collections.stellaops.runtime.plugins.module_utils.contract import artifacts as _artifacts
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    ENV_FILE,
    LABEL_COMPONENT,
    LABEL_IMAGE_DIGEST,
    LABEL_PROJECT,
    LOCK_FILE,
    MANIFEST_FILE,
    STICKER_FILE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import lock as _lock
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import naming as _naming
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import payloads as _payloads
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.graph_proof import build_graph_proof
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import image_id, parse_image_ref
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import normalize_release

FILES_KEY = "_files"
# Component config: the image id (``sha256:...``) of a locally loaded image, which pins the component
# instead of a registry digest (the Compose provider sets it for an image ``pull`` loaded; with
# ``compose.skipPull``, since no registry holds it).
LOCAL_IMAGE_KEY = "image.localId"


def local_images(release):
    """``{reference: image id}`` of the components pinned by a locally loaded image's id (pure)."""
    found = {}
    for component in release.get("components") or []:
        local = (component.get("config") or {}).get(LOCAL_IMAGE_KEY)
        if local is not None:
            if not image_id(local):
                raise StellaError(
                    "release_invalid",
                    "component %s: %s %r is not an image id (sha256:<64 hex>)"
                    % (component.get("name"), LOCAL_IMAGE_KEY, local),
                    phase="plan",
                )
            found[component.get("image")] = local
    return found


def unresolved_references(release):
    """Original image references that carry no digest (what the registry must resolve); a reference
    pinned by a local image id is not one of them."""
    refs = set()
    local = local_images(release)
    for component in release.get("components") or []:
        image = component.get("image")
        if isinstance(image, str) and "@" not in image and image not in local:
            refs.add(image)
    return sorted(refs)


def pin_image(image, resolved, local=None):
    """``registry/repository:tag@sha256:...`` for ``image``: its own digest, else ``resolved[image]``;
    ``local``, the image id of a locally loaded image, pins it as that id (``sha256:...``), which the
    engine runs as is and no registry is asked about."""
    if local:
        return local, local
    ref = parse_image_ref(image)
    if ref.digest:
        return ref.render(), ref.digest
    digest = resolved.get(image)
    if not digest:
        raise StellaError(
            "image_unresolved", "image %s was not resolved to a digest" % image, phase="plan", evidence={"image": image}
        )
    if not ref.tag:
        ref.tag = "latest"
    pinned = ref.with_digest(digest)
    return pinned.render(), pinned.digest


def labels_for(plan, component, digest):
    target = plan["target"]
    return {
        "stella.application": plan["application"],
        LABEL_COMPONENT: component,
        "stella.environment": plan["environment"],
        "stella.execution.mode": target["executionMode"],
        LABEL_IMAGE_DIGEST: digest,
        "stella.manifest.hash": plan["manifestHash"],
        LABEL_PROJECT: plan["projectName"],
        "stella.release.id": plan["release"]["id"],
        "stella.release.name": plan["release"]["name"],
        "stella.release.version": plan["release"]["version"],
        "stella.slot": plan["slot"],
        "stella.target.endpoint": target["endpoint"],
        "stella.target.id": target["id"],
        "stella.target.name": target["name"],
        "stella.target.type": target["type"],
        "stella.tenant": plan["tenant"],
        "stella.traffic.role": plan["trafficRole"],
    }


def _short(value):
    return digest_json(value)[len("sha256:") :][:16]


def script_graph_proof(scripts):
    """The release script graph proof, or ``None`` without scripts; a failed proof blocks planning."""
    if not scripts:
        return None
    proof = build_graph_proof(scripts)
    if proof["status"] != "passed":
        codes = sorted({issue["code"] for issue in proof["issues"]})
        raise StellaError(
            "graph_proof_failed",
            "release script graph proof failed (%s); proofDigest %s" % (", ".join(codes), proof["proofDigest"]),
            phase="plan",
            evidence={"scriptGraphProof": proof},
        )
    return proof


def plan_release(release, resolved):
    """Plan one release on one target. Pure: same inputs, same bytes.

    Returns a dict of camelCase keys (projectName, slot, trafficRole, projectDirectory, lock, sticker,
    applyManifest, hashes, desiredState, payloads, ...). File bytes, including the secret
    ``.env.stella``, are under ``_files`` only; callers must not echo that key.
    """
    data = normalize_release(release)
    graph_proof = script_graph_proof(data["scripts"])
    target = dict(data["target"])
    target["endpoint"] = redact_url(target["endpoint"])
    slot, slot_source = _naming.select_slot(data)
    role = _naming.traffic_role(slot, _naming.active_slot(data))
    project = _naming.project_name(data, slot)
    work_directory = data["workDirectory"]
    project_directory = posixpath.join(work_directory, project)

    components = []
    for component in data["components"]:
        pinned, digest = pin_image(component["image"], resolved, component["config"].get(LOCAL_IMAGE_KEY))
        components.append(
            {
                "name": component["name"],
                "image": pinned,
                "digest": digest,
                "reference": component["image"],
                "config": component["config"],
                "ports": component["ports"],
            }
        )
    components.sort(key=lambda item: item["name"])

    scope = {
        "release": data["release"],
        "target": target,
        "tenant": data["tenant"],
        "environment": data["environment"],
        "application": data["application"],
    }
    desired = _artifacts.build_desired_state(scope, slot, role, project, components, data["secretEnv"])
    mhash = _artifacts.manifest_hash(desired)

    plan = dict(scope)
    plan.update(
        {
            "projectName": project,
            "slot": slot,
            "slotSource": slot_source,
            "trafficRole": role,
            "strategy": data["strategy"],
            "workDirectory": work_directory,
            "projectDirectory": project_directory,
            "manifestHash": mhash,
        }
    )
    plan["paths"] = {
        "composePath": posixpath.join(project_directory, LOCK_FILE),
        "versionStickerPath": posixpath.join(project_directory, STICKER_FILE),
        "applyManifestPath": posixpath.join(project_directory, MANIFEST_FILE),
        "envArtifactPath": posixpath.join(project_directory, ENV_FILE),
    }
    for component in components:
        component["labels"] = labels_for(plan, component["name"], component["digest"])

    env_bytes = _artifacts.render_env_artifact(data["secretEnv"])
    lock_bytes = _lock.render_lock(
        project, components, emit_version=data["emitComposeVersion"], env_file=env_bytes is not None
    )
    chash = sha256_bytes(lock_bytes)
    job_id = data.get("jobId") or "job-" + _short({"manifestHash": mhash, "strategy": data["strategy"]})
    task_id = data.get("taskId") or "task-" + _short({"jobId": job_id, "targetId": target["id"]})

    sticker = _artifacts.build_sticker(
        {
            "release": dict(data["release"]),
            "jobId": job_id,
            "taskId": task_id,
            "target": target,
            "tenant": data["tenant"],
            "environment": data["environment"],
            "application": data["application"],
            "strategy": data["strategy"],
            "slot": slot,
            "trafficRole": role,
            "projectName": project,
            "workDirectory": work_directory,
            "projectDirectory": project_directory,
            "manifestHash": mhash,
            "composeHash": chash,
            "components": [{"name": c["name"], "image": c["image"], "digest": c["digest"]} for c in components],
        }
    )
    if env_bytes is not None:
        sticker["envArtifactHash"] = sha256_bytes(env_bytes)
    sticker_bytes = _artifacts.render_json(sticker)
    files = {LOCK_FILE: lock_bytes, STICKER_FILE: sticker_bytes}
    if env_bytes is not None:
        files[ENV_FILE] = env_bytes
    apply_manifest = _artifacts.build_apply_manifest(project, mhash, files)
    apply_bytes = _artifacts.render_json(apply_manifest)
    files[MANIFEST_FILE] = apply_bytes

    plan.update(
        {
            "jobId": job_id,
            "taskId": task_id,
            "composeHash": chash,
            "versionStickerHash": sha256_bytes(sticker_bytes),
            "applyManifestHash": sha256_bytes(apply_bytes),
            "envArtifactHash": sticker.get("envArtifactHash"),
            "pullImagesDisabled": data.get("pullImages") is False,
        }
    )
    artifact_hashes = dict(apply_manifest["artifacts"])
    artifact_hashes[MANIFEST_FILE] = plan["applyManifestHash"]

    hooks = _payloads.hook_entries(data["hooks"], project_directory)
    lock_text = lock_bytes.decode("utf-8")
    sticker_text = sticker_bytes.decode("utf-8")
    apply_text = apply_bytes.decode("utf-8")
    images = [c["image"] for c in components]
    payloads = {"compose.preflight": _payloads.compose_preflight(plan, images, data["preflight"])}
    if target["type"] == "ComposeHost":
        pull = not (plan["pullImagesDisabled"] or all(_payloads.component_skips_pull(c["config"]) for c in components))
        payloads["compose.up"] = _payloads.compose_up(
            plan, lock_text, sticker_text, apply_text, pull, data["backupExisting"], hooks
        )
        payloads["compose.rollback"] = _payloads.compose_rollback(plan)
    else:
        payloads["docker.run"] = [_payloads.docker_run(plan, c, hooks) for c in components]
        payloads["docker.rollback"] = _payloads.docker_rollback(plan, [p["Name"] for p in payloads["docker.run"]])

    return {
        "projectName": project,
        "slot": slot,
        "slotSource": slot_source,
        "trafficRole": role,
        "strategy": data["strategy"],
        "release": dict(data["release"]),
        "target": target,
        "tenant": data["tenant"],
        "environment": data["environment"],
        "application": data["application"],
        "jobId": job_id,
        "taskId": task_id,
        "workDirectory": work_directory,
        "projectDirectory": project_directory,
        "paths": plan["paths"]
        if env_bytes is not None
        else {k: v for k, v in plan["paths"].items() if k != "envArtifactPath"},
        "lock": lock_text,
        "sticker": sticker_text,
        "applyManifest": apply_text,
        "manifestHash": mhash,
        "composeHash": chash,
        "versionStickerHash": plan["versionStickerHash"],
        "applyManifestHash": plan["applyManifestHash"],
        "envArtifactHash": plan["envArtifactHash"],
        "artifactHashes": artifact_hashes,
        "desiredState": desired,
        "components": [
            {"name": c["name"], "reference": c["reference"], "image": c["image"], "digest": c["digest"]}
            for c in components
        ],
        "payloads": payloads,
        "scriptGraphProof": graph_proof,
        FILES_KEY: files,
    }
