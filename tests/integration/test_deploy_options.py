"""stella_compose_deploy with snake_case options and the secret ``.env.stella`` artifact (no_log)."""

from __future__ import annotations

import json
import os
import stat
import uuid

import pytest

import ansible_run as ar


@pytest.fixture
def ctx():
    c = ar.DeployCtx(ar.load_lab_json(), prefix="opt")
    try:
        yield c
    finally:
        c.cleanup()


def test_snake_case_options_equal_the_payload(ctx):
    planned = ctx.planned()
    target = {
        "id": "tgt-local",
        "name": "controller",
        "type": "ComposeHost",
        "endpoint": "local",
        "executionMode": "ssh",
    }
    result = ar.ansible_module(
        ar.DEPLOY_MODULE,
        {
            "project_name": ctx.project,
            "compose_lock": planned["lock"],
            "version_sticker": planned["sticker"],
            "pull_images": True,
            "backup_existing": True,
            "target": target,
            "work_directory": ctx.work,
            "hooks": [{"Name": "hello", "Phase": "post-deploy", "Command": "echo hi", "RedactionPolicy": "none"}],
        },
    )
    assert not result["failed"], result.get("msg")
    assert result["hookResults"][0]["stdout"] == "hi\n"
    # the apply manifest the module built equals the planner's
    assert ctx.files()["apply-manifest.json"] == planned["_files"]["apply-manifest.json"]
    again = ctx.deploy(planned)
    assert not again["failed"] and again["changed"] is False
    # one payload-versus-option rule: the same value both ways is fine, a different one is refused
    same = ar.ansible_module(
        ar.DEPLOY_MODULE, {"payload": planned["payloads"]["compose.up"], "project_name": ctx.project}
    )
    assert not same["failed"] and same["changed"] is False, same.get("msg")
    both = ar.ansible_module(
        ar.DEPLOY_MODULE, {"payload": planned["payloads"]["compose.up"], "project_name": ctx.project + "-other"}
    )
    assert both["failed"] and both["code"] == "invalid_payload" and "conflicts with option project_name" in both["msg"]


def test_env_artifact_is_written_0600_and_never_logged(ctx):
    secret = "tok-%s" % uuid.uuid4().hex
    planned = ctx.planned(secret_env={"APP_TOKEN": secret})
    env_text = planned["_files"][".env.stella"].decode()
    result, output = ctx.deploy(planned, args={"env_artifact": env_text}, verbosity=3, raw=True)
    assert not result["failed"], result.get("msg")
    assert secret not in output and secret not in json.dumps(result)
    path = os.path.join(ctx.project_dir, ".env.stella")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ".env.stella" in result["artifactHashes"]
    env = ctx.inspect()[0]["Config"]["Env"]
    assert "APP_TOKEN=%s" % secret in env
    # without the artifact, the one already on the target (same hash) is accepted
    again = ctx.deploy(planned)
    assert not again["failed"] and again["changed"] is False
    # a different value is refused before any change
    wrong = ctx.deploy(planned, args={"env_artifact": env_text.replace(secret, "other")})
    assert wrong["failed"] and wrong["code"] == "artifact_hash_mismatch"
    assert "other" not in wrong["msg"]
