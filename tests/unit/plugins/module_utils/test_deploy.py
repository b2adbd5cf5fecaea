"""_deploy: payload normalization, artifact checks on real planner output, identity, evidence, verification."""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils import _deploy as dp
from ansible_collections.stellaops.runtime.plugins.plugin_utils import _plan
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")
D1 = "sha256:b9a6e9632066c93f491df171b17ea45ae2caeba315e7305441a9822cf67e9c79"
TARGET = {"id": "tgt-01", "name": "vm-01", "type": "ComposeHost", "endpoint": "local", "executionMode": "agent"}


def planned(secret_env=None, target_type="ComposeHost", endpoint="local"):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"}, "tenant": "acme", "environment": "prod",
        "application": "shop", "strategy": "rolling", "workDirectory": "/srv/stella",
        "target": dict(TARGET, type=target_type, endpoint=endpoint),
        "components": [{"name": "web", "image": "127.0.0.1:5000/stella/app:v1", "config": {"env.MODE": "x"},
                        "ports": ["8080"]}],
        "hooks": [{"name": "h", "phase": "pre-deploy", "command": "true"}],
    }
    if secret_env:
        release["secretEnv"] = secret_env
    return _plan.plan_release(release, {"127.0.0.1:5000/stella/app:v1": D1})


def test_compose_payload_from_the_real_planner_normalizes():
    plan = planned()
    request = dp.compose_request_from_payload(plan["payloads"]["compose.up"])
    assert request["project_name"] == plan["projectName"]
    assert request["target"] == TARGET
    assert request["pull_images"] is True and request["backup_existing"] is True
    assert request["hooks"][0]["Name"] == "h" and request["work_directory"] == "/srv/stella"
    lock, sticker_bytes, manifest_bytes, sticker, mhash = dp.check_artifacts(request)
    assert mhash == plan["manifestHash"]
    assert manifest_bytes.decode() == plan["applyManifest"]
    assert lock.decode() == plan["lock"]


@pytest.mark.parametrize("mutate,needle", [
    (lambda p: p.update(Extra=1), "unknown key(s) Extra"),
    (lambda p: p.pop("PullImages"), "lacks required key(s) PullImages"),
    (lambda p: p.pop("Target"), "Target"),
    (lambda p: p.update(projectName="x"), "projectName"),
    (lambda p: p.update(PullImages="yes"), "PullImages must be a boolean"),
    (lambda p: p["Target"].pop("Endpoint"), "Target.Endpoint"),
    (lambda p: p["Target"].update(Region="eu"), "Region"),
    (lambda p: p.update(Hooks=[{"Name": "x"}]), "Hooks[0]"),
    (lambda p: p.update(Variables=[]), "Variables"),
], ids=["unknown", "missing", "no-target", "wrong-case", "type", "target-field", "target-extra", "hook", "vars"])
def test_compose_payload_rejections(mutate, needle):
    payload = copy.deepcopy(planned()["payloads"]["compose.up"])
    mutate(payload)
    with pytest.raises(StellaError) as err:
        dp.compose_request_from_payload(payload)
    assert needle in err.value.reason and err.value.phase == "validate_payload"


def test_work_directory_required_somewhere():
    payload = copy.deepcopy(planned()["payloads"]["compose.up"])
    del payload["WorkDirectory"]
    with pytest.raises(StellaError):
        dp.compose_request_from_payload(payload)
    assert dp.compose_request_from_payload(payload, {"work_directory": "/x"})["work_directory"] == "/x"


def test_options_request():
    plan = planned()
    request = dp.compose_request_from_options({"project_name": plan["projectName"], "compose_lock": plan["lock"],
                                               "version_sticker": plan["sticker"], "target": TARGET,
                                               "pull_images": None, "backup_existing": False, "hooks": None})
    assert request["pull_images"] is True and request["backup_existing"] is False
    assert request["work_directory"] == dp.DEFAULT_WORK_DIRECTORY
    dp.check_artifacts(request)
    with pytest.raises(StellaError):
        dp.compose_request_from_options({"project_name": "p"})


@pytest.mark.parametrize("field,value,needle", [
    ("compose_lock", lambda plan: plan["lock"].replace("x", "y"), "composeHash"),
    ("version_sticker", lambda plan: plan["sticker"].replace(plan["manifestHash"], "sha256:" + "0" * 64),
     "manifestHash"),
    ("apply_manifest", lambda plan: plan["applyManifest"].replace('"sha256:', '"sha256:0', 1), "hash"),
    ("manifest_hash", lambda plan: "sha256:" + "1" * 64, "ManifestHash"),
    ("project_name", lambda plan: "other", "projectName"),
    ("target", lambda plan: dict(TARGET, id="tgt-02"), "differs from the sticker"),
    ("version_sticker", lambda plan: "not json", "not JSON"),
], ids=["lock-edited", "sticker-hash", "manifest-edited", "manifest-hash", "project", "target", "sticker-json"])
def test_check_artifacts_rejects_inconsistent_sets(field, value, needle):
    plan = planned()
    request = dp.compose_request_from_payload(plan["payloads"]["compose.up"])
    request[field] = value(plan)
    with pytest.raises(StellaError) as err:
        dp.check_artifacts(request)
    assert needle in err.value.reason


def test_check_artifacts_with_env_artifact():
    plan = planned(secret_env={"DB_PASSWORD": "hunter2"})
    request = dp.compose_request_from_payload(plan["payloads"]["compose.up"])
    env = plan["_files"][".env.stella"]
    _lock, _s, manifest, _st, _m = dp.check_artifacts(request, env)
    assert dp.listed_env_hash(manifest) == dp.sha256_bytes(env)
    dp.check_artifacts(request, None)  # may already be on the target: checked at apply time
    with pytest.raises(StellaError):
        dp.check_artifacts(request, b"DB_PASSWORD=other\n")


@pytest.mark.parametrize("endpoint,host", [
    ("local", "localhost"), ("ssh://deploy@10.0.0.5:22", "10.0.0.5"), ("ssh://10.0.0.5", "10.0.0.5"),
    ("root@Host.Example", "host.example"), ("host:2222", "host"), ("tcp://[fe80::1]:2376", "fe80::1"),
    ("unix:///var/run/docker.sock", "localhost"), ("vm-01", "vm-01"),
])
def test_endpoint_host(endpoint, host):
    assert dp.endpoint_host(endpoint) == host


@pytest.mark.parametrize("endpoint,expected", [
    ("local", True), ("localhost", True), ("127.0.0.1", True), ("ssh://root@127.0.0.1", True),
    ("ssh://root@172.17.0.2", True), ("ssh://root@172.17.0.3", False), ("target-a", True), ("TARGET-A.lab", True),
    ("other-host", False), ("ssh://named-elsewhere", False), ("resolves-here", True), ("", False),
])
def test_endpoint_is_this_host(endpoint, expected):
    resolved = {"resolves-here": ["172.17.0.2"], "named-elsewhere": ["10.9.9.9"]}.get(dp.endpoint_host(endpoint), [])
    assert dp.endpoint_is_this_host(endpoint, ["127.0.0.1", "172.17.0.2"], ["target-a", "target-a.lab"],
                                    resolved) is expected


def test_ensure_this_host_uses_ip_addr_output():
    with open(os.path.join(FIX, "docker", "ip_addr.json")) as handle:
        ip_json = handle.read()

    def run(argv):
        assert argv == ["ip", "-j", "addr"]
        return 0, ip_json, ""

    dp.ensure_this_host(dict(TARGET, endpoint="ssh://root@127.0.0.1"), run)
    with pytest.raises(StellaError) as err:
        dp.ensure_this_host(dict(TARGET, endpoint="ssh://root@192.0.2.1"), run)
    assert err.value.code == "wrong_host" and err.value.phase == "verify_target"


def test_phase_recorder_and_deployment_phases():
    rec = dp.PhaseRecorder()
    with rec.phase("write_artifacts"):
        pass
    rec.skip("pre_deploy_hooks")
    with pytest.raises(StellaError) as err:
        with rec.phase("compose_pull"):
            raise StellaError("image_pull_failed", "boom")
    assert err.value.phase == "compose_pull"
    evidence = rec.evidence()
    assert evidence["completedPhases"] == ["write_artifacts"]
    assert evidence["failurePhase"] == "compose_pull"
    assert {p["phase"]: p["status"] for p in evidence["deploymentPhases"]} == {
        "prepare": "succeeded", "pre-deploy": "skipped", "deploy": "failed"}
    assert set(evidence["phaseDurationsMs"]) == {"write_artifacts", "pre_deploy_hooks", "compose_pull"}


CONFIG = {"services": {"web": {"image": "r.lab/app:v1@" + D1,
                               "labels": {"stella.manifest.hash": "sha256:m", "stella.target.id": "tgt-01",
                                          "stella.target.name": "vm-01", "stella.target.type": "ComposeHost",
                                          "stella.target.endpoint": "local", "stella.execution.mode": "agent",
                                          "stella.slot": "active"}}}}


def container(**kw):
    base = {"id": "c1", "name": "p-web-1", "state": "running", "running": True, "restarting": False,
            "health": "healthy", "imageId": "sha256:img", "labels": dict(CONFIG["services"]["web"]["labels"]),
            "service": "web", "startedAt": "t0", "ipAddress": "10.0.0.2", "exitCode": 0}
    base.update(kw)
    return base


def verify(containers):
    return dp.verify_services(dp.service_images(CONFIG), dp.service_labels(CONFIG), containers, {"web": "sha256:img"},
                              TARGET, "sha256:m")


def test_verify_services_accepts_a_converged_project():
    services, problems = verify([container()])
    assert problems == []
    assert services[0]["imageDigest"] == D1 and services[0]["labels"]["stella.slot"] == "active"


@pytest.mark.parametrize("change,code", [
    ({"running": False, "state": "exited", "exitCode": 3}, "service_not_running"),
    ({"health": "unhealthy"}, "service_unhealthy"),
    ({"health": "starting"}, "service_unhealthy"),
    ({"imageId": "sha256:other"}, "digest_mismatch"),
    ({"labels": dict(CONFIG["services"]["web"]["labels"], **{"stella.target.id": "x"})}, "label_mismatch"),
    ({"service": "ghost"}, "service_not_running"),
], ids=["exited", "unhealthy", "starting", "digest", "label", "missing"])
def test_verify_services_problems(change, code):
    services, problems = verify([container(**change)])
    assert problems and problems[0][0] == code
    with pytest.raises(StellaError) as err:
        dp.raise_problems(problems, "inspect_services")
    assert err.value.code == code and err.value.phase == "inspect_services"


def test_verify_services_flags_unexpected_and_required_labels():
    _s, problems = verify([container(), container(id="c2", service="extra")])
    assert ("service_unexpected" in [p[0] for p in problems])
    bare = {"services": {"web": {"image": "r.lab/app:v1@" + D1, "labels": {}}}}
    _s, problems = dp.verify_services(dp.service_images(bare), dp.service_labels(bare), [container()],
                                      {"web": "sha256:img"}, TARGET, "sha256:m")
    assert any("lacks required label stella.manifest.hash" in p[1] for p in problems)


def test_service_labels_list_form_and_check_pinned():
    assert dp.service_labels({"services": {"a": {"labels": ["x=1", "y"]}}}) == {"a": {"x": "1", "y": ""}}
    dp.check_pinned({"web": "r.lab/app:v1@" + D1})
    with pytest.raises(StellaError) as err:
        dp.check_pinned({"web": "r.lab/app:v1"})
    assert err.value.code == "image_not_pinned"


def test_fingerprint_and_diff():
    assert dp.container_fingerprint([container(id="b"), container(id="a")]) == [("a", "t0"), ("b", "t0")]
    assert dp.lock_diff(None, "x", "/p") == {"before": "", "after": "x", "before_header": "/p", "after_header": "/p"}


def test_docker_run_payload_from_the_real_planner():
    plan = planned(target_type="DockerHost")
    payload = plan["payloads"]["docker.run"][0]
    request = dp.docker_request_from_payload(payload)
    assert request["image"].endswith("@" + D1) and request["pull_image"] is True
    argv = dp.container_run_argv(request)
    assert argv[:4] == ["--name", payload["Name"], "--restart", "unless-stopped"]
    assert "--label" in argv and "stella.target.id=tgt-01" in argv and "MODE=x" in argv
    assert argv[-1] == request["image"]
    running = container(imageId="sha256:img", labels=dict(request["labels"], **{"stella.container.name": request["name"]}))
    assert dp.container_matches(running, request, "sha256:img")
    assert not dp.container_matches(running, request, "sha256:other")
    assert not dp.container_matches(dict(running, running=False), request, "sha256:img")
    bad = dict(payload, Image="127.0.0.1:5000/stella/app:v1")
    with pytest.raises(StellaError):
        dp.docker_request_from_payload(bad)
    with pytest.raises(StellaError):
        dp.docker_request_from_payload(dict(payload, Labels={"a": 1}))


def test_engine_refuses_wrong_host_before_touching_docker(tmp_path):
    plan = planned(endpoint="ssh://192.0.2.9")
    payload = copy.deepcopy(plan["payloads"]["compose.up"])
    calls = []

    def run(argv):
        calls.append(argv)
        return (0, json.dumps([{"addr_info": [{"local": "127.0.0.1"}]}]), "") if argv[0] == "ip" else (1, "", "")

    request = dp.compose_request_from_payload(payload)
    request["work_directory"] = str(tmp_path)
    with pytest.raises(StellaError) as err:
        dp.ComposeHost(run).apply(request)
    assert err.value.code == "wrong_host" and err.value.evidence["failurePhase"] == "verify_target"
    assert not any(argv[0] == "docker" for argv in calls)
    assert not os.listdir(str(tmp_path))
