"""The Compose side of the provider protocol that no released Compose speaks yet, played by this test against
the real ``stella`` command: stdin requests (``get-service-config``, ``get-image`` with its chunked
``image-stream``, also truncated), gating by ``COMPOSE_PROVIDER_MESSAGES``, and a request answered by EOF.
The deployment and the image load are real (the lab's registry and this machine's engine).

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import uuid

import pytest

import ansible_run as ar
from labkit import free_port

BASE = "error,info,setenv,debug"
REQUESTS = ("get-service-config", "get-image", "get-relay-info")


@pytest.fixture(scope="module")
def stella(tmp_path_factory):
    base = tmp_path_factory.mktemp("protocol")
    subprocess.run(
        [
            os.path.join(ar.VENV_BIN, "python"),
            os.path.join(ar.ROOT, "scripts", "stella.py"),
            "install",
            "--bin-dir",
            str(base / "bin"),
            "--plugin-dir",
            str(base / "plugins"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return str(base / "bin" / "stella")


class FakeCompose:
    """Runs ``stella compose ...`` and answers its requests the way the newest Compose source does."""

    def __init__(self, stella, messages, answers):
        self.stella, self.messages, self.answers = stella, messages, answers

    def run(self, *args, timeout=600):
        env = dict(os.environ)
        if self.messages is None:
            env.pop("COMPOSE_PROVIDER_MESSAGES", None)
        else:
            env["COMPOSE_PROVIDER_MESSAGES"] = self.messages
        proc = subprocess.Popen(
            [self.stella, "compose"] + list(args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        seen = []
        try:
            for raw in proc.stdout:
                line = json.loads(raw)  # anything but a JSON line would abort Compose
                seen.append(line)
                if line["type"] in self.answers:
                    answer = self.answers[line["type"]]
                    if answer is None:  # a Compose that never answers: the provider reads EOF
                        proc.stdin.close()
                    else:
                        answer(proc.stdin, line)
                elif line["type"] in REQUESTS and not proc.stdin.closed:
                    proc.stdin.close()  # a request this test did not expect: EOF, so it fails instead of waiting
            rc = proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        return rc, seen


def write_config(config):
    def answer(stdin, _line):
        stdin.write(json.dumps(config).encode() + b"\n")
        stdin.flush()

    return answer


def write_image(tar, truncate_at=None, piece=65536):
    def answer(stdin, _line):
        stdin.write(
            json.dumps({"type": "image-stream", "encoding": "chunked", "media-type": "application/x-tar"}).encode()
            + b"\n"
        )
        sent = 0
        for start in range(0, len(tar), piece):
            block = tar[start : start + piece]
            if truncate_at is not None and sent + len(block) > truncate_at:
                stdin.write(b"%x\r\n" % len(block) + block[: truncate_at - sent])
                stdin.close()  # Compose closes the answer channel after an aborted transfer
                return
            stdin.write(b"%x\r\n" % len(block) + block + b"\r\n")
            sent += len(block)
        stdin.write(b"0\r\n")
        stdin.flush()

    return answer


def types(seen):
    return [line["type"] for line in seen]


def test_get_service_config_builds_the_release_and_gating_holds(lab, stella, tmp_path):
    project, port = "proto%s" % uuid.uuid4().hex[:8], free_port()
    config = {
        "image": lab["images"]["app_v2"]["loopback_ref"],
        "environment": {"MODE": "from-compose"},
        "ports": [{"target": 8080, "published": str(port), "protocol": "tcp"}],
    }
    options = [
        "--insecure_registries=127.0.0.1:5000",
        "--min_engine_version=20.10.0",
        "--version=2.0.0",
        "--state_directory=%s" % (tmp_path / "state"),
        "--work_directory=%s" % (tmp_path / "work"),
    ]
    compose = FakeCompose(stella, "error,info,setenv,get-service-config", {"get-service-config": write_config(config)})
    try:
        rc, seen = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, seen
        assert types(seen)[0] == "get-service-config"
        assert "debug" not in types(seen)  # not announced, so never sent
        setenv = dict(line["message"].split("=", 1) for line in seen if line["type"] == "setenv")
        assert setenv["URL"] == "http://localhost:%d/" % port
        assert setenv["DIGEST"] == lab["images"]["app_v2"]["digest"]
        inspect = json.loads(
            subprocess.run(
                ["docker", "inspect", "%s-web-1" % setenv["PROJECT"]], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        assert "MODE=from-compose" in inspect["Config"]["Env"]
    finally:
        rc, seen = FakeCompose(stella, None, {}).run("--project-name=%s" % project, "down", *options, "web")
        assert rc == 0, seen
        assert "setenv" not in types(seen)


def test_a_request_answered_by_eof_is_an_actionable_error(stella):
    compose = FakeCompose(stella, BASE + ",get-service-config", {"get-service-config": None})
    rc, seen = compose.run("--project-name=p", "up", "web")
    assert rc == 1 and types(seen) == ["get-service-config", "error"]
    assert "does not support provider requests" in seen[-1]["message"]


@pytest.fixture
def saved_image(lab):
    """A tag of the lab's app image saved as a tar, then removed from the engine."""
    source = lab["images"]["app_v1"]["loopback_ref"]
    subprocess.run(["docker", "pull", "--quiet", source], check=True, capture_output=True, timeout=300)
    tag = "stella-pull-test/app:%s" % uuid.uuid4().hex[:8]
    subprocess.run(["docker", "tag", source, tag], check=True, capture_output=True)
    tar = subprocess.run(["docker", "save", tag], check=True, capture_output=True, timeout=300).stdout
    image_id = json.loads(
        subprocess.run(["docker", "image", "inspect", tag], check=True, capture_output=True, text=True).stdout
    )[0]["Id"]
    subprocess.run(["docker", "rmi", tag], check=True, capture_output=True)
    yield tag, tar, image_id
    subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)


def present(tag):
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode == 0


def test_pull_streams_the_local_image_and_a_truncated_stream_tags_nothing(stella, saved_image, tmp_path):
    tag, tar, image_id = saved_image
    args = [
        "--project-name=p",
        "pull",
        "--image=%s" % tag,
        "--source=local",
        "--policy=missing",
        "--digest=%s" % image_id,
        "--state_directory=%s" % (tmp_path / "state"),
        "web",
    ]
    announced = BASE + ",get-image"

    rc, seen = FakeCompose(stella, announced, {"get-image": write_image(tar, truncate_at=len(tar) // 2)}).run(*args)
    assert rc == 1 and types(seen) == ["get-image", "error"], seen
    assert seen[0]["message"] == tag
    assert seen[-1]["message"].startswith("image_stream_truncated:")
    assert not present(tag)

    rc, seen = FakeCompose(stella, announced, {"get-image": write_image(tar)}).run(*args)
    assert rc == 0, seen
    assert present(tag)
    assert any(
        line["type"] == "info" and line["message"].startswith("loaded %s (%d bytes)" % (tag, len(tar))) for line in seen
    ), seen

    # the same digest again: the bookkeeping says it is there, no bytes are asked for
    rc, seen = FakeCompose(stella, announced, {}).run(*args)
    assert rc == 0 and types(seen) == ["info"] and "up to date" in seen[0]["message"]

    # another digest in the local daemon (an `up --build` rebuilt it): whatever the policy, its bytes are asked for
    for policy, digit in (("missing", "0"), ("always", "1")):
        again = [a.replace("--policy=missing", "--policy=" + policy) for a in args if not a.startswith("--digest=")]
        rc, seen = FakeCompose(stella, announced, {"get-image": write_image(tar)}).run(
            *again + ["--digest=sha256:" + digit * 64]
        )
        assert rc == 0 and types(seen)[0] == "get-image", seen
    # the digest announced last was ingested: policy always asks for nothing either
    rc, seen = FakeCompose(stella, announced, {}).run(*again + ["--digest=sha256:" + "1" * 64])
    assert rc == 0 and types(seen) == ["info"] and "up to date" in seen[0]["message"], seen


# ---- publish-endpoint and the relay endpoint, with the real networks Compose would create

RELAY = BASE + ",publish-endpoint,get-relay-info,rawsetenv"


def docker(*args, check=True):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=check, timeout=120)


@pytest.fixture
def networks():
    """Bridge networks made for one test (``make(name, internal)``), removed afterwards."""
    made = []

    def make(name, internal=False):
        docker("network", "create", *(["--internal"] if internal else []), name)
        made.append(name)
        return json.loads(docker("network", "inspect", name).stdout)[0]["IPAM"]["Config"][0]["Gateway"]

    yield make
    for name in made:
        docker("network", "rm", name, check=False)


def relay_info(network, gateway):
    """Compose's side of get-relay-info: the relay-link network exists (made by the test), its gateway answered."""

    def answer(stdin, _line):
        stdin.write(json.dumps({"networks": [{"name": network, "gateway": gateway}]}).encode() + b"\n")
        stdin.flush()

    return answer


def reach(lab, network, address, port):
    """From a container on ``network``: an HTTP request to address:port through nc; the response, or None."""
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            network,
            lab["images"]["tool"]["loopback_ref"],
            "sh",
            "-c",
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 %s %s" % (address, port),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return proc.stdout if proc.returncode == 0 and proc.stdout.startswith("HTTP/1") else None


def host_connects(address, port):
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


def relay_pid(state, project):
    path = state / project / "web" / ("%s-web" % project) / "relay.pid"
    return int(path.read_text()) if path.exists() else None


def test_publish_endpoint_relays_to_the_relay_link_network_only(lab, stella, tmp_path, networks):
    project, port = "relay%s" % uuid.uuid4().hex[:8], free_port()
    link, other = "%s_web_relay" % project, "%s_other" % project
    gateway = networks(link, internal=True)
    networks(other)
    state = tmp_path / "state"
    options = [
        "--image=%s" % lab["images"]["app_v1"]["loopback_ref"],
        "--ports=%d:8080" % port,
        "--insecure_registries=127.0.0.1:5000",
        "--min_engine_version=20.10.0",
        "--state_directory=%s" % state,
        "--work_directory=%s" % (tmp_path / "work"),
        "--raw_environment=WEB_ENDPOINT=URL",
    ]
    compose = FakeCompose(stella, RELAY, {"get-relay-info": relay_info(link, gateway)})
    try:
        rc, seen = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, seen
        kinds = types(seen)
        assert kinds.index("get-relay-info") < kinds.index("info")  # asked before anything is deployed
        published = [line["message"] for line in seen if line["type"] == "publish-endpoint"]
        assert len(published) == 1 and published[0].startswith("8080=%s:" % gateway), seen
        listen = int(published[0].rsplit(":", 1)[1])
        assert [line["message"] for line in seen if line["type"] == "rawsetenv"] == [
            "WEB_ENDPOINT=http://localhost:%d/" % port
        ]
        pid = relay_pid(state, project)
        assert pid and os.getsid(pid) == pid

        # the relay's side: a container on the relay-link network reaches the deployed service ...
        assert reach(lab, link, gateway, listen), "the relay-link network does not reach the relay endpoint"
        # ... a container on another bridge and one on the default bridge do not, nor the host's other addresses
        assert reach(lab, other, gateway, listen) is None
        assert reach(lab, "bridge", gateway, listen) is None
        for address in ["127.0.0.1"] + [a for a in host_addresses() if a != gateway]:
            assert not host_connects(address, listen), "%s:%d accepts connections" % (address, listen)

        # a second up: the same endpoint, the same forwarder
        rc, again = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, again
        assert [line["message"] for line in again if line["type"] == "publish-endpoint"] == published
        assert relay_pid(state, project) == pid
    finally:
        rc, down = FakeCompose(stella, RELAY, {}).run("--project-name=%s" % project, "down", *options, "web")
    assert rc == 0, down
    assert not {"setenv", "rawsetenv", "publish-endpoint"} & set(types(down))
    assert not os.path.exists("/proc/%d" % pid) or b"forwarder" not in open("/proc/%d/cmdline" % pid, "rb").read()
    assert not (state / project / "web" / ("%s-web" % project)).exists()


def host_addresses():
    out = subprocess.run(["ip", "-j", "-4", "address", "show"], capture_output=True, text=True, check=True).stdout
    return [info["local"] for link in json.loads(out) for info in link.get("addr_info", [])]


def test_without_a_gateway_the_relay_binds_the_default_bridge_gateway_and_says_so(lab, stella, tmp_path):
    project, port = "relay%s" % uuid.uuid4().hex[:8], free_port()
    bridge = json.loads(docker("network", "inspect", "bridge").stdout)[0]["IPAM"]["Config"][0]["Gateway"]
    options = [
        "--image=%s" % lab["images"]["app_v1"]["loopback_ref"],
        "--ports=%d:8080" % port,
        "--insecure_registries=127.0.0.1:5000",
        "--min_engine_version=20.10.0",
        "--state_directory=%s" % (tmp_path / "state"),
        "--work_directory=%s" % (tmp_path / "work"),
    ]
    try:
        compose = FakeCompose(stella, BASE + ",publish-endpoint", {})
        rc, seen = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, seen
        assert "get-relay-info" not in types(seen)
        assert any("not pinned" in line["message"] for line in seen if line["type"] == "info"), seen
        published = [line["message"] for line in seen if line["type"] == "publish-endpoint"]
        assert len(published) == 1 and published[0].startswith("8080=%s:" % bridge), seen
        listen = int(published[0].rsplit(":", 1)[1])
        assert reach(lab, "bridge", bridge, listen)  # where host.docker.internal points
        assert not host_connects("127.0.0.1", listen)  # never a wildcard bind
    finally:
        rc, down = FakeCompose(stella, BASE, {}).run("--project-name=%s" % project, "down", *options, "web")
        assert rc == 0, down


def test_raw_environment_needs_rawsetenv_and_fails_before_deploying(stella, tmp_path):
    rc, seen = FakeCompose(stella, BASE, {}).run(
        "--project-name=p",
        "up",
        "--image=example/app:1",
        "--raw_environment=DATABASE_URL=URL",
        "--state_directory=%s" % (tmp_path / "state"),
        "web",
    )
    assert rc == 1 and types(seen) == ["error"], seen
    assert seen[0]["message"].startswith("compose_unsupported:") and "raw_environment" in seen[0]["message"]
    assert not (tmp_path / "state").exists()
    rc, seen = FakeCompose(stella, RELAY, {}).run(
        "--project-name=p", "up", "--image=example/app:1", "--raw_environment=DATABASE_URL=PASSWORD", "web"
    )
    assert rc == 1 and seen[-1]["message"].startswith("invalid_option:") and "URL" in seen[-1]["message"]


def test_stop_pauses_the_deployment_and_the_next_up_resumes_it_unchanged(lab, stella, tmp_path):
    """``stop`` as newer Compose calls it (2.40.3 never does): the containers stop, the project, its
    committed artifacts and the job store stay; no ``setenv``. The next ``up`` starts the same containers
    again and sends the same ``setenv`` lines; a second ``stop`` is a no-op."""
    project, port = "stop%s" % uuid.uuid4().hex[:8], free_port()
    options = [
        "--image=%s" % lab["images"]["app_v1"]["loopback_ref"],
        "--ports=%d:8080" % port,
        "--insecure_registries=127.0.0.1:5000",
        "--min_engine_version=20.10.0",
        "--state_directory=%s" % (tmp_path / "state"),
        "--work_directory=%s" % (tmp_path / "work"),
    ]
    compose = FakeCompose(stella, BASE, {})
    try:
        rc, seen = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, seen
        first = [line["message"] for line in seen if line["type"] == "setenv"]
        deployed = dict(line.split("=", 1) for line in first)["PROJECT"]
        ids = docker(
            "ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % deployed
        ).stdout.split()
        assert ids
        sticker = tmp_path / "work" / deployed / "stella.version.json"
        committed = sticker.read_bytes()

        for attempt in ("stop", "again"):
            rc, seen = compose.run("--project-name=%s" % project, "stop", *options, "web")
            assert rc == 0, (attempt, seen)
            assert "setenv" not in types(seen) and "error" not in types(seen), (attempt, seen)
            states = [json.loads(docker("inspect", i).stdout)[0]["State"] for i in ids]
            assert [s["Running"] for s in states] == [False] * len(ids), (attempt, states)
            assert sticker.read_bytes() == committed
        assert not host_connects("127.0.0.1", port)

        rc, seen = compose.run("--project-name=%s" % project, "up", *options, "web")
        assert rc == 0, seen
        assert [line["message"] for line in seen if line["type"] == "setenv"] == first
        again = docker("ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % deployed).stdout
        assert sorted(again.split()) == sorted(ids)  # the same containers, running again
        assert host_connects("127.0.0.1", port)
    finally:
        rc, down = FakeCompose(stella, BASE, {}).run("--project-name=%s" % project, "down", *options, "web")
        assert rc == 0, down
    assert docker("ps", "-aq", "--filter", "label=com.docker.compose.project=%s" % deployed).stdout.strip() == ""
