"""stella_rollback on a DinD target over SSH: v1 -> broken -> rollback restores v1."""

from __future__ import annotations

import pytest

import ansible_run as ar


@pytest.fixture
def ctx(target):
    c = ar.DeployCtx(ar.load_lab_json(), host=target, prefix="tgtrb")
    try:
        yield c
    finally:
        c.cleanup()


def test_broken_release_rolled_back_on_target(ctx, target):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    v1_files = ctx.files()
    broken = ctx.planned("app_broken", version="1.1.0")
    failed = ctx.deploy(broken, args={"wait_timeout": 20})
    assert failed["failed"] and failed["failurePhase"] == "compose_up"
    assert ctx.files()["stella.version.json"] == v1_files["stella.version.json"]

    result = ctx.rollback()
    assert not result["failed"], result.get("msg")
    assert result["rollbackRestored"] is True
    assert result["restoredRevisionPath"] == failed["previousRevisionPath"]
    assert result["targetEndpoint"] == "ssh://%s" % target["address"]
    assert ctx.files() == v1_files
    container = ctx.inspect()[0]
    assert container["State"]["Health"]["Status"] == "healthy"
    assert container["Config"]["Image"] == v1["components"][0]["image"]
    assert container["Config"]["Labels"]["stella.manifest.hash"] == v1["manifestHash"]
