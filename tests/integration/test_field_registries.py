"""Registries as the field has them, in the lab (issue 29): a Docker-Hub-like registry (a challenge without
scope, anonymous pull tokens, a 429 with Retry-After or a 503 on demand), the auth registry with
credentials that only a Docker config's credential helper knows, and planning through rate limits.

Planning runs through ``stella_plan`` and deployments through the ``stellaops.runtime.deploy`` role with
the real ``ansible-playbook`` on localhost (the lab's fronts listen on loopback, where this machine's
engine pulls from them). The faults are set on the lab's front for one path and removed afterwards.
Fails (never skips) when the lab is not running.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "fixtures"))

from planning_support import minimal_release  # noqa: E402
from test_plan_playbook import run_playbook  # noqa: E402
from test_plan_registry import auth_credentials, lab  # noqa: E402,F401 pylint: disable=unused-import
from test_role_deploy import Scenario  # noqa: E402


@contextlib.contextmanager
def fault(registry, **spec):
    """A fault of the lab's front of ``registry`` (``status``, ``retryAfter``, ``count``, ``match``),
    removed when the block ends."""
    answer = requests.post(registry["faults"], json=spec, timeout=10)
    assert answer.status_code == 201, answer.text
    fault_id = answer.json()["id"]
    try:
        yield answer.json()
    finally:
        requests.delete("%s/%s" % (registry["faults"], fault_id), timeout=10)


def test_planning_waits_out_one_rate_limit_and_records_the_wait(lab, tmp_path):
    hub = lab["registries"]["hub"]
    image = lab["images"]["hub_app_v2"]
    with fault(hub, status=429, retryAfter=2, count=1, match="/stella/app/manifests/v2"):
        plan, _output = run_playbook(
            tmp_path, {"release": minimal_release(components=[{"name": "web", "image": image["ref"]}])}
        )
    assert plan.get("failed") is not True, plan.get("msg")
    assert plan["components"][0]["digest"] == image["digest"]
    [wait] = plan["resolution"][image["ref"]]["registryWaits"]
    assert wait["status"] == 429 and wait["url"].endswith("/v2/stella/app/manifests/v2")
    assert 2.0 <= wait["waitedSeconds"] < 10


def test_planning_gives_up_on_a_registry_that_keeps_answering_503(lab, tmp_path):
    hub = lab["registries"]["hub"]
    image = lab["images"]["hub_app_v2"]
    with fault(hub, status=503, retryAfter=None, count=-1, match="/stella/app/manifests/v2"):
        plan, _output = run_playbook(
            tmp_path, {"release": minimal_release(components=[{"name": "web", "image": image["ref"]}])}
        )
    assert plan["failed"] is True and plan["code"] == "image_unresolved"
    assert hub["address"] in plan["msg"] and "HTTP 503" in plan["msg"] and "after 5 tries over" in plan["msg"]
    assert plan["cause"] == "registry_unavailable" and len(plan["waits"]) == 4
    # 0.5 s, 1 s, 2 s and 4 s between the five tries, each recorded
    for wait, expected in zip(plan["waits"], (0.5, 1, 2, 4)):
        assert wait["status"] == 503 and expected <= wait["waitedSeconds"] < expected + 0.5, plan["waits"]


def test_a_release_from_the_hub_is_planned_checked_and_deployed_anonymously(lab, tmp_path):
    """No credentials anywhere: the hub's /v2/ answers 401 with a challenge without scope, which is
    reachable; the preflight's pull check gets an anonymous token for the repository; the job succeeds."""
    sc = Scenario(lab, tmp_path, "hub")
    sc.refs["hub_app_v1"] = lab["images"]["hub_app_v1"]["ref"]
    empty = tmp_path / "no-docker-config"
    empty.mkdir()
    try:
        rc, _recap, results, output = sc.play(sc.release("hub_app_v1"), env={"DOCKER_CONFIG": str(empty)})
        assert rc == 0, output[-3000:]
        assert results["deploy_job_closed"]["status"] == "Succeeded"
        registry = results["deploy_apply_result"]["preflight"]["registry"]
        assert registry["reachable"] is True and registry["authRequired"] is True, registry
        assert registry["pullAccess"] == "anonymous" and "credentialSource" not in registry, registry
        resolution = results["deploy_job"]["plans"][sc.hostname]
        assert lab["images"]["hub_app_v1"]["digest"] in json.dumps(resolution)
        [container] = sc.inspect()
        assert container["Config"]["Image"] == sc.refs["hub_app_v1"] + "@" + lab["images"]["hub_app_v1"]["digest"]
    finally:
        sc.cleanup()


def test_auth_registry_credentials_only_from_a_credential_helper_never_show(lab, tmp_path):
    """The auth registry's password is known only to the lab's credential helper, named by a Docker config
    on the controller: planning and the preflight's pull check use it and say so; it appears nowhere in
    the -vvv output, the evidence, the job store or the report."""
    address, username, password = auth_credentials(lab)
    store = tmp_path / "credstore.json"
    store.write_text(json.dumps({address: {"Username": username, "Secret": password}}))
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credHelpers": {address: "stella-lab"}}))
    env = {
        "DOCKER_CONFIG": str(config),
        "STELLA_LAB_CREDSTORE": str(store),
        "PATH": lab["credential_helper"] + os.pathsep + os.environ["PATH"],
    }
    sc = Scenario(lab, tmp_path, "helper")
    sc.refs["auth_app_v1"] = lab["images"]["auth_app_v1"]["ref"]
    try:
        rc, _recap, results, output = sc.play(
            sc.release("auth_app_v1"), env=env, options=["-vvv"], extra_vars={"report": True}
        )
        assert rc == 0, output[-3000:]
        closed = results["deploy_job_closed"]
        assert closed["status"] == "Succeeded"
        source = "docker-config:credHelpers:stella-lab"
        registry = results["deploy_apply_result"]["preflight"]["registry"]
        assert registry["pullAccess"] == "credentials" and registry["credentialSource"] == source, registry
        documents = sc.evidence_bytes(results)
        [job] = [data for path, data in documents.items() if path.endswith("job.json")]
        assert source.encode() in job  # the resolution evidence names where the credential came from
        asked = (tmp_path / "credstore.json.log").read_text().split()
        assert address in asked or any(address in line for line in asked)
        # the planted password: nowhere
        assert password not in output
        for path, data in sc.evidence_bytes(results).items():
            assert password.encode() not in data, path
        for directory, _dirs, files in os.walk(sc.evidence_dir):
            for name in files:
                with open(os.path.join(directory, name), "rb") as handle:
                    assert password.encode() not in handle.read(), name
        assert any(name.endswith(".html") for _d, _s, files in os.walk(sc.evidence_dir) for name in files)
        with open(sc.job_store, "rb") as handle:
            assert password.encode() not in handle.read()
        for name in os.listdir(tmp_path):
            if name.endswith(".sqlite3-wal"):
                with open(tmp_path / name, "rb") as handle:
                    assert password.encode() not in handle.read()
    finally:
        sc.cleanup()
