"""stella_rollback against the real engine on this host: restore, refusals before mutation, traversal."""

from __future__ import annotations

import json
import os

import pytest

import ansible_run as ar


@pytest.fixture
def ctx():
    c = ar.DeployCtx(ar.load_lab_json(), prefix="rb")
    try:
        yield c
    finally:
        c.cleanup()


def running_state(ctx):
    return [(c["Id"], c["State"]["StartedAt"], c["Image"]) for c in ctx.inspect()]


def test_v1_then_broken_then_rollback_restores_v1(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    v1_files = ctx.files()
    v1_labels = ctx.inspect()[0]["Config"]["Labels"]
    broken = ctx.planned("app_broken", version="1.1.0-broken")
    failed = ctx.deploy(broken, args={"wait_timeout": 20})
    assert failed["failed"] and failed["failurePhase"] == "compose_up" and failed["code"] == "service_unhealthy"
    baseline = failed["previousRevisionPath"]
    assert ctx.inspect()[0]["Config"]["Labels"]["stella.manifest.hash"] == broken["manifestHash"]

    result = ctx.rollback(args={"reason": "broken health"})
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True and result["rollbackRestored"] is True
    assert result["restoredRevisionPath"] == baseline
    assert result["restoredDigests"] == {"web": ctx.images["app_v1"]["digest"]}
    assert result["restoredManifestHash"] == v1["manifestHash"]
    assert [p["phase"] for p in result["deploymentPhases"]] == [
        "rollback-pre",
        "rollback-deploy",
        "rollback-verify",
        "rollback-post",
    ]
    assert all(p["status"] == "succeeded" and isinstance(p["durationMs"], int) for p in result["deploymentPhases"])
    assert result["targetId"] == "tgt-local" and result["targetEndpoint"] == "local"
    assert result["rollbackReason"] == "broken health"
    assert ctx.files() == v1_files, "restored files differ from v1's"
    container = ctx.inspect()[0]
    assert container["State"]["Health"]["Status"] == "healthy"
    assert container["Config"]["Image"].endswith("@" + ctx.images["app_v1"]["digest"])
    labels = container["Config"]["Labels"]
    assert {k: v for k, v in labels.items() if k.startswith("stella.")} == {
        k: v for k, v in v1_labels.items() if k.startswith("stella.")
    }
    assert result["services"][0]["imageDigest"] == ctx.images["app_v1"]["digest"]
    assert result["versionStickerHash"] == v1["versionStickerHash"]
    # rolling back again to what runs changes nothing
    again = ctx.rollback()
    assert not again["failed"] and again["changed"] is False


def test_rollback_without_revision_fails_in_resolve_revision_before_mutation(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    before, files = running_state(ctx), ctx.files()
    result = ctx.rollback()
    assert result["failed"] and result["code"] == "no_revision" and result["failurePhase"] == "resolve_revision"
    assert result["completedPhases"] == [] and result["rollbackRestored"] is False
    assert {p["phase"]: p["status"] for p in result["deploymentPhases"]}["rollback-pre"] == "failed"
    assert "pulledServices" not in result
    assert running_state(ctx) == before and ctx.files() == files
    # a project never deployed here: same failure, nothing created
    other = ctx.rollback(
        payload={"ProjectName": ctx.project + "-none", "WorkDirectory": ctx.work, "Target": ctx.target_context()}
    )
    assert other["failed"] and other["failurePhase"] == "resolve_revision"
    assert not os.path.exists(os.path.join(ctx.work, ctx.project + "-none"))


def test_tampered_revision_fails_before_mutation(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    v2 = ctx.planned("app_v2", version="2.0.0")
    rev = ctx.deploy(v2)["previousRevisionPath"]
    before, files = running_state(ctx), ctx.files()
    lock_path = os.path.join(rev, "compose.stella.lock.yml")
    text = open(lock_path).read()
    open(lock_path, "w").write(text.replace(ctx.images["app_v1"]["digest"], ctx.images["app_broken"]["digest"]))
    result = ctx.rollback()
    assert result["failed"] and result["code"] == "revision_tampered"
    assert result["failurePhase"] == "validate_revision"
    assert "compose.stella.lock.yml" in result["msg"]
    assert running_state(ctx) == before and ctx.files() == files


@pytest.mark.parametrize("path", ["../../../etc", "/etc", "revisions/../../", "LINK"])
def test_revision_path_outside_revisions_is_rejected(ctx, path):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    assert not ctx.deploy(ctx.planned("app_v2", version="2.0.0"))["failed"]
    before = running_state(ctx)
    if path == "LINK":
        # a symlink inside revisions/ that points outside it, named like a revision
        outside = os.path.join(ctx.work, "outside")
        os.makedirs(outside)
        path = os.path.join(ctx.project_dir, "revisions", "000009-aaaaaaaaaaaa")
        os.symlink(outside, path)
    result = ctx.rollback(
        args={
            "project_name": ctx.project,
            "work_directory": ctx.work,
            "target": {
                "id": "tgt-local",
                "name": "controller",
                "type": "ComposeHost",
                "endpoint": "local",
                "executionMode": "ssh",
            },
            "revision_path": path,
        }
    )
    assert result["failed"] and result["code"] == "revision_path_rejected", result.get("msg")
    assert result["failurePhase"] == "resolve_revision"
    assert running_state(ctx) == before


def test_explicit_revision_path_and_check_mode(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    rev = ctx.deploy(ctx.planned("app_v2", version="2.0.0"))["previousRevisionPath"]
    before, files = running_state(ctx), ctx.files()
    check = ctx.rollback(
        payload={
            "ProjectName": ctx.project,
            "WorkDirectory": ctx.work,
            "RevisionPath": rev,
            "Target": ctx.target_context(),
        },
        check=True,
    )
    assert not check["failed"] and check["changed"] is True and check["restoredRevisionPath"] == rev
    assert running_state(ctx) == before and ctx.files() == files
    result = ctx.rollback(
        payload={
            "ProjectName": ctx.project,
            "WorkDirectory": ctx.work,
            "RevisionPath": os.path.basename(rev),
            "Target": ctx.target_context(),
        }
    )
    assert not result["failed"] and result["restoredRevisionPath"] == rev
    assert json.loads(ctx.files()["stella.version.json"])["manifestHash"] == v1["manifestHash"]
