"""DockerHost (``docker.run``) through stella_compose_deploy task=docker.run on this host's real engine."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid

import pytest

import ansible_run as ar

UNKNOWN_DIGEST = "sha256:" + "2" * 64


@pytest.fixture
def env():
    lab = ar.load_lab_json()
    project = "dh-%s" % uuid.uuid4().hex[:10]
    work = tempfile.mkdtemp(prefix="stella-dh-")
    resolved = {v["loopback_ref"]: v["digest"] for v in lab["images"].values() if "loopback_ref" in v}
    target = {"id": "tgt-dh", "name": "dockerhost", "type": "DockerHost", "endpoint": "local", "executionMode": "ssh"}

    def payload(image, version="1.0.0", hooks=None, config=None):
        release = ar.release_input(
            project,
            {"web": image},
            work,
            target=target,
            version=version,
            hooks=hooks,
            config={"web": dict({"env.GREETING": "hello"}, **(config or {}))},
        )
        return ar.plan(release, resolved)["payloads"]["docker.run"][0]

    try:
        yield lab, project, payload
    finally:
        ar.docker("rm", "-f", project + "-web", check=False)
        shutil.rmtree(work, ignore_errors=True)


def inspect(name):
    return json.loads(ar.docker("inspect", name))[0]


def run(payload, **kw):
    return ar.ansible_module(ar.DEPLOY_MODULE, {"task": "docker.run", "payload": payload}, **kw)


def test_docker_run_deploy_idempotence_and_replace(env):
    lab, project, payload = env
    v1 = payload(lab["images"]["app_v1"]["loopback_ref"])
    result = run(v1)
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True
    assert result["completedPhases"] == [
        "pull_image",
        "write_artifacts",
        "pre_deploy_hooks",
        "prepare_container",
        "inspect_container",
        "post_deploy_hooks",
    ]
    assert result["containerName"] == project + "-web" and result["containerState"] == "running"
    assert result["health"] == "healthy" and result["ipAddress"]
    assert result["targetType"] == "DockerHost" and result["targetId"] == "tgt-dh"
    assert result["manifestHash"] == v1["ManifestHash"] and result["failurePhase"] is None
    container = inspect(project + "-web")
    labels = container["Config"]["Labels"]
    for key in (
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
        assert labels[key] == v1["Labels"][key]
    assert "GREETING=hello" in container["Config"]["Env"]
    assert "STELLA_MANIFEST_HASH=%s" % v1["ManifestHash"] in container["Config"]["Env"]
    first = (container["Id"], container["State"]["StartedAt"])

    again = run(v1)
    assert not again["failed"] and again["changed"] is False
    assert (inspect(project + "-web")["Id"], inspect(project + "-web")["State"]["StartedAt"]) == first
    check = run(payload(lab["images"]["app_v2"]["loopback_ref"], version="2.0.0"), check=True)
    assert check["changed"] is True and inspect(project + "-web")["Id"] == first[0]

    v2 = payload(lab["images"]["app_v2"]["loopback_ref"], version="2.0.0")
    upgraded = run(v2)
    assert not upgraded["failed"] and upgraded["changed"] is True
    assert upgraded["replacedContainerId"] == first[0]
    assert inspect(project + "-web")["Config"]["Image"].endswith(lab["images"]["app_v2"]["digest"])


def test_rerun_over_a_restarted_container_waits_for_it_and_reports_no_change(env):
    """The operator restarted the container: the re-run finds its health ``starting`` (the healthcheck runs
    every 10 s) and waits for it to turn healthy instead of replacing it with the same release."""
    lab, project, payload = env
    v1 = payload(lab["images"]["app_v1"]["loopback_ref"], config={"healthcheck.interval": "10s"})
    assert not run(v1)["failed"]
    ar.docker("restart", project + "-web")
    restarted = inspect(project + "-web")
    assert restarted["State"]["Health"]["Status"] == "starting"
    again = run(v1)
    assert not again["failed"], again.get("msg")
    assert again["changed"] is False and "appliedBecause" not in again, again.get("appliedBecause")
    assert again["health"] == "healthy" and again["completedPhases"] == ["pull_image", "inspect_container"]
    # the wait is said, and counted in the verification's duration (the first check comes about 10 s in)
    waited = again["startingWaitMs"][project + "-web"]
    assert 1000 < waited <= again["phaseDurationsMs"]["inspect_container"], (waited, again["phaseDurationsMs"])
    after = inspect(project + "-web")
    assert (after["Id"], after["State"]["StartedAt"]) == (restarted["Id"], restarted["State"]["StartedAt"])
    assert after["State"]["Health"]["Status"] == "healthy"


def test_unknown_digest_fails_in_pull_before_touching_the_container(env):
    lab, project, payload = env
    assert not run(payload(lab["images"]["app_v1"]["loopback_ref"]))["failed"]
    before = inspect(project + "-web")
    bad = payload("127.0.0.1:5000/stella/app:v9@" + UNKNOWN_DIGEST, version="9.0.0")
    result = run(bad)
    assert result["failed"] and result["code"] == "image_pull_failed" and result["failurePhase"] == "pull_image"
    assert result["completedPhases"] == []
    after = inspect(project + "-web")
    assert (after["Id"], after["State"]["StartedAt"]) == (before["Id"], before["State"]["StartedAt"])


def test_failing_pre_deploy_hook_keeps_the_running_container(env):
    lab, project, payload = env
    assert not run(payload(lab["images"]["app_v1"]["loopback_ref"]))["failed"]
    before = inspect(project + "-web")["Id"]
    hooks = [{"name": "gate", "phase": "pre-deploy", "command": "exit 3"}]
    result = run(payload(lab["images"]["app_v2"]["loopback_ref"], version="2.0.0", hooks=hooks))
    assert result["failed"] and result["code"] == "hook_failed" and result["failurePhase"] == "pre_deploy_hooks"
    assert result["hookResults"][0]["exitCode"] == 3
    assert inspect(project + "-web")["Id"] == before
