"""An offline site: a DinD target that reaches no registry deploys a digest-pinned release whose image it
already holds (``registryReachabilityMode: skip``, ``pullImages: false``) through the
``stellaops.runtime.deploy`` role; its preflight asks no registry and the job succeeds. The same release
naming its image by tag, with the controller's registry down, fails at planning with ``image_unresolved``
and the hint to pin the digest. An image brought by ``docker save | docker load`` deploys pinned by its id.

The target is this module's own (``target_factory("offline")``): its registry route is cut with iptables
inside it and restored in a ``finally`` block; the target is removed afterwards. Fails (never skips) when
the lab is not running.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

import ansible_run as ar
import labkit

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step

PLAYBOOK = os.path.join(ar.ROOT, "tests", "integration", "playbooks", "deploy_role.yml")
TARGET_WORK = "/var/lib/stella-offline-it"


@pytest.fixture(scope="module")
def offline_target(target_factory):
    target = target_factory("offline")
    try:
        yield target
    finally:
        target_factory.stop(target)


def play(tmp_path, host, release, name):
    """Run the deploy role's test playbook on ``host``; ``(rc, results, output)``."""
    run = tmp_path / name
    run.mkdir()
    variables = {
        "release": release,
        "job_store": str(tmp_path / "jobs.sqlite3"),
        "evidence_dir": str(tmp_path / "evidence"),
        "insecure_registries": [],
        "wait_timeout": 60,
        "results_file": str(run / "results.json"),
    }
    (run / "vars.json").write_text(json.dumps(variables))
    (run / "inventory.ini").write_text(ar.inventory_text(host))
    argv = [os.path.join(ar.VENV_BIN, "ansible-playbook"), "-i", str(run / "inventory.ini")]
    argv += ["-e", "@" + str(run / "vars.json"), PLAYBOOK]
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS,
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ar.ROOT, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    results = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    return proc.returncode, results, output


def release_for(target, image, application, config=None):
    return {
        "release": {"id": "rel-offline-1", "name": "app", "version": "1.0.0"},
        "tenant": "offline-it",
        "environment": "test",
        "application": application,
        "strategy": "rolling",
        "target": {
            "id": "tgt-" + target["name"],
            "name": target["name"],
            "type": "ComposeHost",
            "endpoint": "ssh://root@%s" % target["address"],
            "executionMode": "ssh",
        },
        "workDirectory": TARGET_WORK,
        "pullImages": False,
        "preflight": {"registryReachabilityMode": "skip", "minimumFreeDiskBytes": 1},
        "components": [{"name": "web", "image": image, "config": config or {}}],
    }


# Every registry port the target could reach, on any address: the lab's registries (5000-5010, the shared
# one at docker0's gateway among them) and HTTP(S) ones. SSH from the controller is untouched.
CUT = ["-p tcp --dport 5000:5010 -j REJECT --reject-with tcp-reset", "-p tcp -m multiport --dports 80,443 -j REJECT"]


def cut_registries(target):
    for rule in CUT:
        labkit.ssh(target, "iptables -I OUTPUT %s" % rule, timeout=30)


def restore_registries(target):
    for rule in CUT:
        labkit.ssh(target, "iptables -D OUTPUT %s" % rule, timeout=30, check=False)


def compose_down(target, project):
    labkit.ssh(
        target,
        "cd %s/%s 2>/dev/null && docker compose -p %s -f compose.stella.lock.yml down -v || true"
        % (TARGET_WORK, project, project),
        check=False,
    )


def running_image(target, project):
    return labkit.ssh(
        target,
        "docker inspect --format '{{.Config.Image}} {{.State.Status}}' $(docker ps -q --filter "
        "label=com.docker.compose.project=%s)" % project,
    ).stdout.split()


def test_an_offline_target_deploys_a_preloaded_pinned_image_and_a_tag_fails_at_planning(lab, offline_target, tmp_path):
    target = offline_target
    image = lab["images"]["app_v1"]
    pinned = "%s@%s" % (image["ref"], image["digest"])
    application = "off-%s" % uuid.uuid4().hex[:8]
    project = None
    # the site's images arrive before the network goes away (here from the lab registry, as from a site mirror)
    labkit.ssh(target, "docker pull -q %s" % pinned, timeout=120)
    try:
        cut_registries(target)
        # the target really reaches no registry now
        probe = labkit.ssh(target, "docker pull -q %s" % image["ref"].replace(":v1", ":v2"), timeout=60, check=False)
        assert probe.returncode != 0, "the target still reaches the registry"

        rc, results, output = play(tmp_path, target, release_for(target, pinned, application), "pinned")
        assert rc == 0, output[-4000:]
        job = results["deploy_job"]
        plan = job["plans"][target["name"]]
        project = plan["projectName"]
        # planning asked no registry: the reference is pinned, and the job's evidence says so
        with open(tmp_path / "evidence" / "jobs" / job["jobId"] / "job.json", encoding="utf-8") as handle:
            record = json.load(handle)
        assert record["status"] == "Succeeded", record.get("reason")
        assert record["resolution"][pinned] == {
            "reference": pinned,
            "image": pinned,
            "digest": image["digest"],
            "resolved": False,
            "source": "pinned",
        }, record["resolution"]
        preflight = results["deploy_apply_result"]["preflight"]
        assert preflight["status"] == "passed"
        reg = preflight["registry"]
        assert reg["mode"] == "skip" and reg["skipped"] == "registry_reachability_mode=skip"
        assert reg["contacted"] is False and reg["requests"] == []
        assert reg["pullSource"] == "local" and reg["localImage"]["repoDigest"].endswith("@" + image["digest"])
        checks = {c["name"]: c for c in preflight["checks"]}
        assert checks["registry"] == {
            "name": "registry",
            "status": "skipped",
            "reason": "registry_reachability_mode=skip",
        }
        assert checks["registry_access"]["status"] == "passed"
        assert checks["platform"]["status"] == "passed" and preflight["platform"]["source"] == "local"
        closed = results["deploy_job_closed"]
        assert closed["succeeded"] is True and closed["status"] == "Succeeded", closed
        assert results["deploy_apply_result"]["services"][0]["imageDigest"] == image["digest"]
        # the target's deployment evidence on the controller records the passed preflight
        deployment = tmp_path / "evidence" / project / job["jobId"] / plan["target"]["id"] / "deployment.json"
        assert json.loads(deployment.read_text())["preflight"] == {"status": "passed", "failures": []}
        assert running_image(target, project) == [pinned, "running"]

        # the same release by tag, the controller's registry down: planning fails and says to pin the digest
        down = "127.0.0.1:%d/stella/app:v1" % labkit.free_port()
        rc, results, output = play(tmp_path, target, release_for(target, down, application + "-tag"), "tag")
        assert rc != 0
        failed = results["deploy_job"]
        assert failed["failed"] is True and failed["code"] == "image_unresolved", failed
        assert failed.get("next") == next_step("image_unresolved") and "pin the digest" in failed["next"]
        assert "Connection refused" in failed["msg"] or "refused" in failed["msg"].lower(), failed["msg"]
        assert results["deploy_apply_result"] is None
    finally:
        restore_registries(target)
        if project:
            compose_down(target, project)


def test_an_offline_target_deploys_an_image_it_loaded_pinned_by_its_id(lab, offline_target, tmp_path):
    """``docker save | docker load`` (no RepoDigests survive a load): the release pins the image by its id
    (``image.localId``, ``compose.skipPull``), nothing is resolved and the target asks no registry."""
    target = offline_target
    source = lab["images"]["app_v2"]["loopback_ref"]
    saved = subprocess.run(["docker", "save", source], capture_output=True, check=True, timeout=60).stdout
    subprocess.run(
        ["docker", "exec", "-i", target["container"], "docker", "load", "-q"], input=saved, check=True, timeout=60
    )
    image_id = labkit.ssh(target, "docker image inspect --format '{{.Id}}' %s" % source).stdout.strip()
    assert image_id.startswith("sha256:")
    application = "offid-%s" % uuid.uuid4().hex[:8]
    project = None
    config = {"image.localId": image_id, "compose.skipPull": True}
    try:
        cut_registries(target)
        rc, results, output = play(tmp_path, target, release_for(target, source, application, config), "by-id")
        assert rc == 0, output[-4000:]
        job = results["deploy_job"]
        project = job["plans"][target["name"]]["projectName"]
        with open(tmp_path / "evidence" / "jobs" / job["jobId"] / "job.json", encoding="utf-8") as handle:
            record = json.load(handle)
        assert record["status"] == "Succeeded", record.get("reason")
        assert record["resolution"][source]["source"] == "local" and record["resolution"][source]["resolved"] is False
        reg = results["deploy_apply_result"]["preflight"]["registry"]
        assert reg["contacted"] is False and reg["requests"] == []
        assert results["deploy_apply_result"]["preflight"]["status"] == "passed"
        assert running_image(target, project) == [image_id, "running"]
    finally:
        restore_registries(target)
        if project:
            compose_down(target, project)
