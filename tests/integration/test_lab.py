"""The Docker lab itself (``make lab``): registries, images, Compose v2 and DinD targets over SSH.

Traffic goes only to loopback, the lab's docker0 gateway (registry.lab = 172.17.0.1) and the lab's
own target containers.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

import labkit

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)
APP_IMAGES = ("app_v1", "app_v2", "app_broken", "tool")


def repo_and_tag(ref: str) -> tuple[str, str, str]:
    registry, rest = ref.split("/", 1)
    repo, tag = rest.rsplit(":", 1)
    return registry, repo, tag


def manifest(registry: str, repo: str, reference: str, auth=None):
    return labkit.http_get(
        "http://%s/v2/%s/manifests/%s" % (registry, repo, reference), headers={"Accept": MANIFEST_ACCEPT}, auth=auth
    )


def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def test_lab_json_describes_the_lab(lab):
    assert lab["registries"]["plain"]["address"] == "127.0.0.1:5000"
    assert lab["registries"]["shared"]["address"] == "registry.lab:5001"
    assert lab["registries"]["auth"]["address"] == "127.0.0.1:5002"
    assert lab["registries"]["auth"]["username"] == "stella"
    for key in APP_IMAGES:
        image = lab["images"][key]
        assert image["ref"].startswith("registry.lab:5001/stella/")
        assert image["loopback_ref"].startswith("127.0.0.1:5000/stella/")
        assert image["digest"].startswith("sha256:") and len(image["digest"]) == 71
    assert lab["images"]["auth_app_v1"]["ref"] == "127.0.0.1:5002/stella/app:v1"
    assert os.path.isfile(lab["ssh_key"]) and os.stat(lab["ssh_key"]).st_mode & 0o077 == 0
    secret = labkit.lab_path(lab, lab["registries"]["auth"]["password_file"])
    assert os.stat(secret).st_mode & 0o777 == 0o600
    assert os.path.isfile(lab["compose_binary"])


@pytest.mark.parametrize("key", APP_IMAGES)
def test_plain_registry_serves_each_image_by_digest(lab, key):
    image = lab["images"][key]
    registry, repo, tag = repo_and_tag(image["loopback_ref"])
    status, headers, body = manifest(registry, repo, image["digest"])
    assert status == 200
    assert headers["docker-content-digest"] == image["digest"]
    assert "sha256:" + hashlib.sha256(body).hexdigest() == image["digest"]
    status, headers, dummy = manifest(registry, repo, tag)
    assert status == 200 and headers["docker-content-digest"] == image["digest"]


def test_shared_registry_serves_the_same_storage(lab):
    image = lab["images"]["app_v1"]
    registry, repo, tag = repo_and_tag(image["ref"])
    status, headers, dummy = manifest(registry, repo, tag)
    assert status == 200 and headers["docker-content-digest"] == image["digest"]


def test_images_are_distinct(lab):
    digests = {lab["images"][key]["digest"] for key in APP_IMAGES}
    assert len(digests) == len(APP_IMAGES)


def test_auth_registry_refuses_anonymous_and_accepts_credentials(lab):
    address = lab["registries"]["auth"]["address"]
    image = lab["images"]["auth_app_v1"]
    dummy, repo, tag = repo_and_tag(image["ref"])
    status, headers, dummy = labkit.http_get("http://%s/v2/" % address)
    assert status == 401 and "basic" in headers.get("www-authenticate", "").lower()
    assert manifest(address, repo, tag)[0] == 401
    user, password = labkit.auth_credentials(lab)
    assert manifest(address, repo, tag, auth=(user, password + "-wrong"))[0] == 401
    status, headers, dummy = manifest(address, repo, tag, auth=(user, password))
    assert status == 200 and headers["docker-content-digest"] == image["digest"]


def test_no_registry_credential_left_in_docker_config():
    path = os.path.join(os.path.expanduser("~"), ".docker", "config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            assert "127.0.0.1:5002" not in json.load(handle).get("auths", {})


def test_docker_compose_is_v2(lab):
    proc = run("docker", "compose", "version", "--short")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().lstrip("v").startswith("2.")
    assert proc.stdout.strip() == lab["compose_version"]


def _wait_health(container: str, want: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = run("docker", "inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()
        if status == want:
            break
        time.sleep(0.5)
    return status


def test_app_images_serve_their_version_and_health(lab):
    """v2 serves exactly 'v2' and turns healthy; broken keeps running but turns unhealthy."""
    names = []
    try:
        for key in ("app_v2", "app_broken"):
            name = "stella-labtest-%s-%d" % (key.replace("_", "-"), os.getpid())
            names.append(name)
            ref = "%s@%s" % (lab["images"][key]["loopback_ref"].rsplit(":", 1)[0], lab["images"][key]["digest"])
            proc = run("docker", "run", "-d", "--name", name, "--label", "stella.lab=test", ref)
            assert proc.returncode == 0, proc.stderr
        assert _wait_health(names[0], "healthy") == "healthy"
        body = run("docker", "exec", names[0], "wget", "-q", "-O-", "http://127.0.0.1:8080/").stdout
        assert body == "v2"
        assert _wait_health(names[1], "unhealthy") == "unhealthy"
        assert run("docker", "inspect", "-f", "{{.State.Running}}", names[1]).stdout.strip() == "true"
    finally:
        for name in names:
            run("docker", "rm", "-f", name)


def test_target_answers_docker_info_over_ssh_with_its_own_engine(target):
    remote = labkit.ssh(target, "docker", "info", "--format", "'{{.ID}} {{.ServerVersion}}'").stdout.split()
    local = run("docker", "info", "--format", "{{.ID}}").stdout.strip()
    assert remote[0] and local and remote[0] != local
    assert labkit.ssh(target, "hostname").stdout.strip() == target["hostname"] == "main"
    assert labkit.ssh(target, "/usr/bin/python3", "--version").stdout.startswith("Python 3.")
    assert target["compose"] is True
    assert labkit.ssh(target, "docker", "compose", "version", "--short").stdout.strip().lstrip("v").startswith("2.")


def test_target_pulls_by_digest_from_the_shared_registry_and_runs_v1(target, lab):
    image = lab["images"]["app_v1"]
    ref = "%s@%s" % (image["ref"].rsplit(":", 1)[0], image["digest"])
    labkit.ssh(target, "docker", "pull", "-q", ref, timeout=180)
    digests = labkit.ssh(target, "docker", "image", "inspect", "-f", "'{{json .RepoDigests}}'", ref).stdout
    assert ref in json.loads(digests)
    labkit.ssh(
        target,
        "docker rm -f labtest-v1 >/dev/null 2>&1; docker run -d --name labtest-v1 -p 127.0.0.1:18080:8080 " + ref,
    )
    try:
        fetch = (
            'python3 -c "import time,urllib.request as u\n'
            "for i in range(50):\n"
            "    try: print(u.urlopen('http://127.0.0.1:18080/', timeout=2).read().decode(), end=''); break\n"
            '    except OSError: time.sleep(0.2)"'
        )
        assert labkit.ssh(target, fetch).stdout == "v1"
    finally:
        labkit.ssh(target, "docker", "rm", "-f", "labtest-v1", check=False)


def test_target_up_is_idempotent(target):
    cid = run("docker", "inspect", "-f", "{{.Id}}", target["container"]).stdout.strip()
    again = labkit.start_target(target["name"], hostname=target["hostname"])
    assert again == target
    assert run("docker", "inspect", "-f", "{{.Id}}", target["container"]).stdout.strip() == cid


def test_three_targets_at_once_one_without_compose(target, target_factory):
    with ThreadPoolExecutor(max_workers=2) as pool:
        second, third = pool.map(lambda args: target_factory(*args), [("second", True), ("bare", False)])
    targets = [target, second, third]
    assert len({t["address"] for t in targets}) == 3
    assert third["compose"] is False
    ids = set()
    for t in targets:
        ids.add(labkit.ssh(t, "docker", "info", "--format", "'{{.ID}}'").stdout.strip())
    assert len(ids) == 3
    missing = labkit.ssh(third, "docker", "compose", "version", check=False)
    assert missing.returncode != 0
    assert labkit.ssh(second, "docker", "compose", "version", "--short").stdout.strip().lstrip("v").startswith("2.")

    # The lab's own inventory and labkit's agree, and Ansible reaches every target over SSH.
    listed = yaml.safe_load(labkit.run_lab("inventory"))["all"]["children"]["targets"]["hosts"]
    for t in targets:
        assert listed[t["name"]]["ansible_host"] == t["address"]
        assert listed[t["name"]]["ansible_ssh_private_key_file"] == t["ssh_key"]
    inventory = yaml.safe_load(labkit.ansible_inventory(targets))
    assert set(inventory["all"]["children"]["targets"]["hosts"]) == {t["name"] for t in targets}
    path = os.path.join(labkit.ROOT, ".lab", "inventory-%d.yml" % os.getpid())
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(labkit.ansible_inventory(targets))
    try:
        env = dict(os.environ, ANSIBLE_HOST_KEY_CHECKING="False", ANSIBLE_NOCOLOR="1")
        proc = subprocess.run(
            [
                os.path.join(labkit.ROOT, ".venv", "bin", "ansible"),
                "targets",
                "-i",
                path,
                "-m",
                "ansible.builtin.ping",
                "-o",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )
    finally:
        os.unlink(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == 3

    target_factory.stop(third)
    assert run("docker", "inspect", third["container"]).returncode != 0
