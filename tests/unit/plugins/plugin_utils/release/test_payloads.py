"""Agent task payloads: the contract's exact property names, DockerHost pull rules, hooks, preflight."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import compose_accepts_every_lock, DIGEST_A, minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.payloads import component_skips_pull  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import build_request  # noqa: E402

IMAGE = "registry.example.com/shop/web:1.0"
PINNED = IMAGE + "@" + DIGEST_A
TARGET_KEYS = {"Id", "Name", "Type", "Endpoint", "ExecutionMode"}
VARIABLE_KEYS = {
    "projectName",
    "slot",
    "trafficRole",
    "targetId",
    "targetName",
    "targetType",
    "targetEndpoint",
    "targetExecutionMode",
    "workDirectory",
    "projectDirectory",
    "composePath",
    "versionStickerPath",
    "applyManifestPath",
    "manifestHash",
    "composeHash",
    "versionStickerHash",
    "applyManifestHash",
    "deploymentJobId",
    "deploymentTaskId",
    "deploymentStrategy",
    "releaseId",
    "releaseVersion",
    "rollback",
}
HOOKS = [
    {"name": "migrate", "phase": "pre-deploy", "command": "echo hi"},
    {
        "name": "notify",
        "phase": "post-deploy",
        "command": "exit 1",
        "interpreter": "/bin/bash",
        "workingDirectory": "/tmp",
        "timeoutSeconds": 5,
        "failurePolicy": "warn",
        "redactionPolicy": "none",
    },
]


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


def _plan(target_type="ComposeHost", **overrides):
    release = minimal_release(**overrides)
    release["target"]["type"] = target_type
    return plan_release(release, {IMAGE: DIGEST_A})


def test_compose_up_payload_exact_keys():
    plan = _plan(hooks=HOOKS)
    up = plan["payloads"]["compose.up"]
    assert set(up) == {
        "ProjectName",
        "ComposeLock",
        "VersionSticker",
        "ApplyManifest",
        "PullImages",
        "BackupExisting",
        "Hooks",
        "WorkDirectory",
        "ManifestHash",
        "Target",
        "Variables",
    }
    assert up["ComposeLock"] == plan["lock"] and up["VersionSticker"] == plan["sticker"]
    assert up["PullImages"] is True and up["BackupExisting"] is True
    assert set(up["Target"]) == TARGET_KEYS and up["Target"]["Type"] == "ComposeHost"
    assert set(up["Variables"]) == VARIABLE_KEYS
    assert all(isinstance(v, str) for v in up["Variables"].values())
    assert up["Variables"]["rollback"] == "false" and up["Variables"]["composePath"].endswith(
        "/compose.stella.lock.yml"
    )
    assert "docker.run" not in plan["payloads"]


def test_hook_entries_exact_names_and_defaults():
    plan = _plan(hooks=HOOKS)
    first, second = plan["payloads"]["compose.up"]["Hooks"]
    assert first == {
        "Name": "migrate",
        "Phase": "pre-deploy",
        "Interpreter": "/bin/sh",
        "Command": "echo hi",
        "WorkingDirectory": plan["projectDirectory"],
        "TimeoutSeconds": 300,
        "FailurePolicy": "fail",
        "RedactionPolicy": "redact",
    }
    assert second == {
        "Name": "notify",
        "Phase": "post-deploy",
        "Interpreter": "/bin/bash",
        "Command": "exit 1",
        "WorkingDirectory": "/tmp",
        "TimeoutSeconds": 5,
        "FailurePolicy": "warn",
        "RedactionPolicy": "none",
    }


def test_rollback_payload():
    plan = _plan()
    rollback = plan["payloads"]["compose.rollback"]
    assert set(rollback) == {"ProjectName", "ManifestHash", "WorkDirectory", "Target", "Variables"}
    assert rollback["ManifestHash"] == plan["manifestHash"]
    assert rollback["Variables"]["rollback"] == "true"


@pytest.mark.parametrize("target_type,require", [("ComposeHost", True), ("DockerHost", False)])
def test_preflight_payload_is_accepted_by_stella_preflight(target_type, require):
    payload = _plan(target_type, preflight={"minimumFreeDiskBytes": 5, "registryReachabilityMode": "tcp"})["payloads"][
        "compose.preflight"
    ]
    assert payload == {
        "WorkDirectory": "/var/lib/stella/projects",
        "ImageReference": PINNED,
        "MinimumFreeDiskBytes": 5,
        "RegistryReachabilityMode": "tcp",
        "RequireCompose": require,
    }
    request = build_request({"payload": payload, "target_type": target_type})
    assert request["require_compose"] is require and request["image"].digest == DIGEST_A


def test_docker_run_payload():
    plan = _plan(
        "DockerHost",
        hooks=HOOKS[:1],
        components=[
            {
                "name": "web",
                "image": IMAGE,
                "config": {"env.MODE": "yes", "env.N": 3, "env.B": False},
                "ports": ["80:80"],
            },
            {"name": "side", "image": IMAGE, "config": {"runtime.skipPull": True}},
        ],
    )
    runs = plan["payloads"]["docker.run"]
    assert [r["Name"] for r in runs] == [plan["projectName"] + "-side", plan["projectName"] + "-web"]
    web = runs[1]
    assert {"Image", "Name", "PullImage", "Hooks", "Target", "Variables", "Labels", "Environment"} <= set(web)
    assert web["Image"] == PINNED and web["PullImage"] is True and runs[0]["PullImage"] is False
    assert web["Environment"]["MODE"] == "yes" and web["Environment"]["N"] == "3" and web["Environment"]["B"] == "false"
    for name in (
        "STELLA_RELEASE_ID",
        "STELLA_SLOT",
        "STELLA_TRAFFIC_ROLE",
        "STELLA_PROJECT",
        "STELLA_TARGET_ID",
        "STELLA_MANIFEST_HASH",
        "STELLA_COMPONENT",
    ):
        assert name in web["Environment"]
    for label in (
        "stella.target.id",
        "stella.target.name",
        "stella.target.type",
        "stella.target.endpoint",
        "stella.execution.mode",
        "stella.manifest.hash",
        "stella.slot",
        "stella.project",
        "stella.traffic.role",
    ):
        assert label in web["Labels"], label
    assert web["Labels"]["stella.target.type"] == "DockerHost"
    assert web["Hooks"][0]["Name"] == "migrate"
    assert "compose.up" not in plan["payloads"]


@pytest.mark.parametrize(
    "config,skip",
    [
        ({}, False),
        ({"runtime.skipPull": True}, True),
        ({"runtime.skipPull": "true"}, True),
        ({"runtime.skipPull": False}, False),
        ({"compose.skipPull": True}, True),
        ({"compose.pullImages": False}, True),
        ({"compose.pullImages": "false"}, True),
        ({"compose.pullImages": True}, False),
        ({"pullImages": False}, True),
        ({"pullImages": "true"}, False),
    ],
)
def test_component_pull_markers(config, skip):
    assert component_skips_pull(config) is skip


def test_release_level_pull_images_false():
    plan = _plan("DockerHost", pullImages=False)
    assert plan["payloads"]["docker.run"][0]["PullImage"] is False
    assert _plan(pullImages=False)["payloads"]["compose.up"]["PullImages"] is False
    assert (
        _plan(components=[{"name": "web", "image": IMAGE, "config": {"compose.skipPull": True}}])["payloads"][
            "compose.up"
        ]["PullImages"]
        is False
    )


def test_payloads_never_collapse_to_component_at_digest():
    plan = _plan("DockerHost", components=[{"name": "web", "image": IMAGE}])
    assert plan["payloads"]["docker.run"][0]["Image"] == PINNED
    assert "web@sha256" not in str(plan["payloads"])
