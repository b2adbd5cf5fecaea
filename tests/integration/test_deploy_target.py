"""stella_compose_deploy on the session's DinD target host (conftest ``target``) reached over SSH (python3 without PyYAML, Engine 20.10,
Compose v2 plugin copied in), with images pulled from the shared lab registry ``registry.lab:5001``."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

import ansible_run as ar
import labkit


@pytest.fixture
def ctx(target):
    c = ar.DeployCtx(ar.load_lab_json(), host=target, prefix="tgt")
    try:
        yield c
    finally:
        c.cleanup()


def test_v1_v2_and_idempotence_on_a_target_over_ssh(ctx, target):
    v1 = ctx.planned()
    result = ctx.deploy(v1)
    assert not result["failed"], result.get("msg")
    assert result["changed"] is True
    assert result["targetEndpoint"] == "ssh://%s" % target["address"]
    assert result["targetId"] == "tgt-" + target["name"]
    assert result["projectDirectory"] == "/var/lib/stella-it/" + ctx.project
    assert result["services"][0]["imageDigest"] == ctx.images["app_v1"]["digest"]
    assert result["services"][0]["image"].startswith("registry.lab:5001/stella/app:v1@")
    assert ctx.files()["stella.version.json"] == v1["_files"]["stella.version.json"]
    # the container runs on the target's engine, not on the controller's
    assert ar.project_containers(ctx.project) == {}
    before = ctx.containers()
    assert set(before) == {"web"}

    again = ctx.deploy(v1)
    assert not again["failed"] and again["changed"] is False
    assert ctx.containers() == before

    v2 = ctx.planned("app_v2", version="2.0.0")
    upgraded = ctx.deploy(v2)
    assert not upgraded["failed"], upgraded.get("msg")
    rev = upgraded["previousRevisionPath"]
    assert rev == "/var/lib/stella-it/%s/revisions/000001-%s" % (ctx.project, v1["manifestHash"].split(":")[1][:12])
    record = json.loads(ctx.sh("cat %s/revision.json" % rev))
    sums = ctx.sh("cd %s && sha256sum compose.stella.lock.yml stella.version.json apply-manifest.json" % rev)
    for line in sums.splitlines():
        digest, name = line.split()
        assert record["files"][name] == "sha256:" + digest
    labels = ctx.inspect()[0]["Config"]["Labels"]
    assert labels["stella.manifest.hash"] == v2["manifestHash"]
    assert labels["stella.target.endpoint"] == "ssh://%s" % target["address"]


def test_payload_for_another_host_is_refused_on_this_target(ctx, target):
    """The controller's payload (endpoint ``local``) must not report success when run on the target."""
    planned = ar.plan(
        ar.release_input(
            ctx.project,
            {"web": ctx.refs["app_v1"]},
            ctx.work,
            target={
                "id": "tgt-other",
                "name": "other",
                "type": "ComposeHost",
                "endpoint": "ssh://root@172.17.0.250",
                "executionMode": "ssh",
            },
        ),
        ctx.resolved,
    )
    result = ctx.deploy(planned)
    assert result["failed"] and result["code"] == "wrong_host" and result["failurePhase"] == "verify_target"
    assert ctx.containers() == {}
    assert ctx.sh("test -e %s && echo present || echo absent" % ctx.project_dir).strip() == "absent"


def test_docker_run_on_a_target_over_ssh(target):
    """DockerHost (docker.run) on the DinD target: pulled from the shared registry, labelled, idempotent."""
    lab = ar.load_lab_json()
    project = "dh-%s" % uuid.uuid4().hex[:8]
    host_target = {
        "id": "tgt-dh-" + target["name"],
        "name": target["name"],
        "type": "DockerHost",
        "endpoint": "ssh://root@%s" % target["address"],
        "executionMode": "ssh",
    }
    resolved = {v["ref"]: v["digest"] for v in lab["images"].values()}
    release = ar.release_input(
        project,
        {"web": lab["images"]["app_v1"]["ref"]},
        "/var/lib/stella-it",
        target=host_target,
        config={"web": {"env.GREETING": "hello"}},
    )
    payload = ar.plan(release, resolved)["payloads"]["docker.run"][0]
    name = project + "-web"
    remote_docker = list(labkit.ssh_argv(target)) + ["docker"]
    try:
        first = ar.ansible_module(ar.DEPLOY_MODULE, {"task": "docker.run", "payload": payload}, host=target)
        assert not first["failed"], first.get("msg")
        assert first["changed"] is True and first["containerState"] == "running" and first["health"] == "healthy"
        assert first["targetEndpoint"] == "ssh://%s" % target["address"] and first["targetType"] == "DockerHost"
        inspected = subprocess.run(remote_docker + ["inspect", name], capture_output=True, text=True, check=True)
        container = json.loads(inspected.stdout)[0]
        assert container["Config"]["Image"].endswith("@" + lab["images"]["app_v1"]["digest"])
        assert container["Config"]["Labels"]["stella.target.id"] == host_target["id"]
        assert "GREETING=hello" in container["Config"]["Env"]
        again = ar.ansible_module(ar.DEPLOY_MODULE, {"task": "docker.run", "payload": payload}, host=target)
        assert not again["failed"] and again["changed"] is False and again["containerId"] == first["containerId"]
    finally:
        subprocess.run(remote_docker + ["rm", "-f", name], capture_output=True, check=False)
