"""Registry credentials on the controller reach the target's pull (lent for it, never left behind).

The lab's ``auth`` registry (htpasswd, ``127.0.0.1:5002``) listens on loopback, so the targets here are
thin targets (``lab/lab.sh thin up``): SSH hosts whose ``docker`` CLI drives the lab's own engine, which
reaches loopback registries; the Compose pull runs on the target with the target's Docker client config,
exactly as on any host. The target's root has no ``docker login``; the controller's credentials exist only
behind the lab's credential helper, named by the Docker config (``credHelpers``) of the ansible run.

1. A release whose image is in the auth registry is deployed through the ``deploy`` role: the image is
   pulled (it was removed from the engine first) and the job succeeds; the apply's evidence names the
   registry and the credential's source as lent; the password is nowhere in the output, the evidence,
   the job store or the target's file system (``grep -r`` over /tmp, /root, /var/tmp, /run and the work
   directory), and the lent config's directory is empty again.
2. The same deployment with ``deploy_lend_registry_credentials: false`` cannot pull: the target's own
   Docker config has no credentials (the lending is what made (1) work).
3. A second target whose image comes from the shared registry is lent nothing.

Fails (never skips) when the lab is not running.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import labkit  # noqa: E402
import thinkit  # noqa: E402
from test_plan_registry import auth_credentials  # noqa: E402
from test_role_deploy import Scenario  # noqa: E402

LENT_BASE = "/run/stellaops-pull"
SOURCE = "docker-config:credHelpers:stella-lab"


@pytest.fixture(scope="module")
def thin_pair():
    prefix = thinkit.session_prefix("lent")
    targets = thinkit.start_thin(2, prefix)
    try:
        yield targets
    finally:
        thinkit.stop_thin(prefix)


def on_target(host, *argv, check=True):
    return subprocess.run(labkit.ssh_argv(host, *argv), capture_output=True, text=True, check=check, timeout=120)


def thin_release(scenario, image_key):
    """The scenario's release without published ports or probes (every thin target shares the engine), and
    without the preflight's registry check: a thin target's own network does not reach the engine's
    loopback registries (its engine does)."""
    release = scenario.release(image_key)
    release["preflight"] = {"registryReachabilityMode": "skip"}
    for component in release["components"]:
        component.pop("ports", None)
        component["config"] = {k: v for k, v in component["config"].items() if not k.startswith("healthProbe.")}
    return release


def files_holding(host, text, work):
    """The regular files under /tmp, /root, /var/tmp, /run and ``work`` on ``host`` holding ``text`` (given
    on stdin, never in a command line); the engine's socket a thin target mounts at /run/docker.sock is
    left out."""
    found = subprocess.run(
        labkit.ssh_argv(
            host,
            "sh",
            "-c",
            "'read -r text; find /tmp /root /var/tmp /run %s -type f ! -path /run/docker.sock -print0 "
            '| xargs -0 -r grep -lF -e "$text" --; true\'' % work,
        ),
        input=text + "\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert found.returncode == 0 and found.stderr == "", found.stderr
    return found.stdout.split()


@pytest.fixture
def private_image(lab, tmp_path):
    """An image only the auth registry holds, and the engine does not: the lab's app image with a label of
    this run (a new image config, so a new manifest that only the registry can give), pushed with the auth
    registry's credentials in a Docker config of this fixture, then removed from the engine. The layers
    stay on the engine (the lab's app image shares them): the pull needs the registry's manifest, so it
    needs the credentials, whatever the engine holds."""
    address, username, password = auth_credentials(lab)
    ref = "%s/stella/lent-%s:v1" % (address, uuid.uuid4().hex[:8])
    config = tmp_path / "push-docker"
    config.mkdir()
    basic = base64.b64encode(("%s:%s" % (username, password)).encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {address: {"auth": basic}}}))
    env = dict(os.environ, DOCKER_CONFIG=str(config))
    dockerfile = "FROM %s\nLABEL stella.lab.lent=%s\n" % (lab["images"]["app_v1"]["loopback_ref"], ref)
    subprocess.run(
        ["docker", "build", "-q", "-t", ref, "-"],
        input=dockerfile.encode(),
        capture_output=True,
        check=True,
        timeout=120,
    )
    subprocess.run(["docker", "push", ref], capture_output=True, check=True, timeout=120, env=env)
    digest = json.loads(
        subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=True, timeout=60).stdout
    )[0]["RepoDigests"][0].split("@")[1]
    subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=True, timeout=60)
    shutil.rmtree(config)
    yield ref, digest
    subprocess.run(
        ["docker", "image", "rm", ref.rsplit(":", 1)[0] + "@" + digest], capture_output=True, timeout=60, check=False
    )


@pytest.fixture
def helper_env(lab, tmp_path):
    """The ansible run's environment: a Docker config naming the lab's credential helper for the auth
    registry, whose store holds its password (and nothing else on the controller does); ``asked`` the
    helper's log of the servers it was asked for."""
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
    return env, address, password


def test_the_controller_s_credentials_reach_the_pull_and_nothing_is_left(
    lab, tmp_path, thin_pair, helper_env, private_image
):
    env, address, password = helper_env
    ref, digest = private_image
    auth_host, shared_host = thin_pair
    # the target's own Docker client config knows nothing of the auth registry
    own = on_target(auth_host, "cat", "/root/.docker/config.json", check=False).stdout
    assert address not in own and password not in own

    sc = Scenario(lab, tmp_path / "auth", "lent", host=auth_host)
    (tmp_path / "auth").mkdir()
    sc.refs["private"] = ref
    other = Scenario(lab, tmp_path / "shared", "lent-other", host=shared_host)
    (tmp_path / "shared").mkdir()
    try:
        # 2. without lending, the target's pull has no credentials
        rc, _recap, results, output = sc.play(
            thin_release(sc, "private"),
            env=env,
            extra_vars={"deploy_lend_registry_credentials": False},
            rollback_on_failure=False,
        )
        assert rc != 0, output[-3000:]
        apply = results["deploy_apply_result"]
        assert apply["failurePhase"] == "compose_pull" and "lentRegistryCredentials" not in apply, apply.get("msg")
        assert password not in output

        # 1. lent: the image is pulled with the controller's credentials, the job succeeds
        rc, _recap, results, output = sc.play(thin_release(sc, "private"), env=env, options=["-vvv"])
        assert rc == 0, output[-3000:]
        assert results["deploy_job_closed"]["status"] == "Succeeded"
        apply = results["deploy_apply_result"]
        assert apply["pulledServices"] == ["web"]
        assert apply["lentRegistryCredentials"] == [{"registry": address, "source": SOURCE, "lent": True}]
        assert address in (tmp_path / "credstore.json.log").read_text()  # the helper was asked
        [container] = sc.inspect()
        assert container["Config"]["Image"] == ref + "@" + digest

        # the password: nowhere on the controller's side (the -vvv output included) ...
        basic = base64.b64encode(("%s:%s" % (auth_credentials(lab)[1], password)).encode()).decode()
        assert password not in output and basic not in output
        for path, data in sc.evidence_bytes(results).items():
            assert password.encode() not in data, path
        with open(sc.job_store, "rb") as handle:
            assert password.encode() not in handle.read()
        # ... nor on the target: the lent config is gone, and no file holds the password
        assert on_target(auth_host, "sh", "-c", "ls -A %s 2>/dev/null || true" % LENT_BASE).stdout.strip() == ""
        # the search finds a planted value, and not the password
        marker = "planted-%s" % uuid.uuid4().hex
        on_target(auth_host, "sh", "-c", "'echo %s > /var/tmp/%s'" % (marker, marker))
        assert files_holding(auth_host, marker, sc.work) == ["/var/tmp/" + marker]
        on_target(auth_host, "rm", "-f", "/var/tmp/" + marker)
        assert files_holding(auth_host, password, sc.work) == []
        assert on_target(auth_host, "cat", "/root/.docker/config.json", check=False).stdout == own

        # 3. a target whose image comes from another registry is lent nothing
        rc, _recap, results, output = other.play(thin_release(other, "app_v1"), env=env)
        assert rc == 0, output[-3000:]
        lent = results["deploy_apply_result"]["lentRegistryCredentials"]
        assert lent == [{"registry": "registry.lab:5001", "source": None, "lent": False}]
        assert on_target(shared_host, "sh", "-c", "ls -A %s 2>/dev/null || true" % LENT_BASE).stdout.strip() == ""
        assert password not in output
    finally:
        sc.cleanup()
        other.cleanup()
