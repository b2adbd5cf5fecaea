"""engine/cli.py and engine/cli_output.py: pure parsers over output captured from Docker 20.10 / Compose v2.40.3, and argv building."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import cli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import cli_output
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "docker")
V1 = "sha256:b9a6e9632066c93f491df171b17ea45ae2caeba315e7305441a9822cf67e9c79"


def fixture(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.mark.parametrize(
    "text,count",
    [
        ("", 0),
        ('[{"a": 1}, {"b": 2}]', 2),
        ('{"a": 1}\n{"b": 2}\n', 2),
        ('{"a": 1}', 1),
        ('[{"a": 1}]\n[{"b": 2}]', 2),
        ("42", 0),
    ],
    ids=["empty", "array", "json-lines", "one-object", "arrays-per-line", "scalar"],
)
def test_parse_json_documents(text, count):
    assert len(cli_output.parse_json_documents(text)) == count


def test_parse_json_documents_warns_on_garbage_lines():
    warnings = []
    docs = cli_output.parse_json_documents('{"a": 1}\nWARN something odd\n{"b": 2}', warnings.append)
    assert docs == [{"a": 1}, {"b": 2}]
    assert warnings and "WARN something odd" in warnings[0]


def test_compose_ps_jsonl_captured():
    docs = cli_output.parse_json_documents(fixture("compose_ps_v2.40.3.jsonl"))
    assert sorted(d["Service"] for d in docs) == ["bad", "web"]
    assert {d["Service"]: d["Health"] for d in docs} == {"bad": "unhealthy", "web": "healthy"}


def test_docker_version_captured():
    data = cli_output.parse_docker_version(fixture("docker_version_20.10.json"))
    assert data["client"] == "28.2.2"
    assert data["server"] == "20.10.24+dfsg1"
    assert data["serverApiVersion"] == "1.41"
    assert data["components"]["containerd"] == "1.6.20~ds1"
    assert (data["os"], data["arch"]) == ("linux", "amd64")


def test_docker_version_daemon_down_has_no_server():
    assert cli_output.parse_docker_version(fixture("docker_version_daemon_down.json"))["server"] is None
    assert (
        cli_output.classify_failure(fixture("docker_version_daemon_down.stderr"), "x") == "runtime_daemon_unavailable"
    )


@pytest.mark.parametrize(
    "text,version",
    [
        ('{"version":"v2.40.3"}', "2.40.3"),
        ("Docker Compose version v2.20.2", "2.20.2"),
        ("docker-compose version 1.29.2, build unknown", "1.29.2"),
    ],
    ids=["json", "plain", "v1"],
)
def test_parse_compose_version(text, version):
    assert cli_output.parse_compose_version(text) == version


def test_parse_compose_version_captured_and_garbage():
    assert cli_output.parse_compose_version(fixture("compose_version.json")) == "2.40.3"
    with pytest.raises(StellaError) as err:
        cli_output.parse_compose_version("docker: 'compose' is not a docker command.")
    assert err.value.code == "compose_missing"


def test_parse_ip_addresses_captured():
    addresses = cli_output.parse_ip_addresses(fixture("ip_addr.json"))
    assert "127.0.0.1" in addresses
    assert addresses == sorted(addresses)


def test_container_summary_healthy_and_unhealthy():
    data = json.loads(fixture("inspect_containers_healthy_unhealthy.json"))
    summaries = {s["service"]: s for s in map(cli_output.container_summary, data)}
    assert summaries["web"]["health"] == "healthy" and summaries["web"]["running"]
    assert summaries["bad"]["health"] == "unhealthy"
    assert summaries["web"]["labels"]["stella.target.id"] == "t-1"
    assert summaries["web"]["ipAddress"] and summaries["web"]["startedAt"]
    assert summaries["web"]["imageId"].startswith("sha256:")
    assert not summaries["web"]["name"].startswith("/")


def test_container_summary_exited():
    summary = cli_output.container_summary(json.loads(fixture("inspect_container_exited.json"))[0])
    assert summary["state"] == "exited" and summary["exitCode"] == 3 and not summary["running"]
    assert summary["health"] == "unhealthy"  # the image HEALTHCHECK keeps its last verdict after exit
    assert summary["ipAddress"] is None


def test_image_summary_and_repo_digests_captured():
    image = cli_output.image_summary(json.loads(fixture("image_inspect_app_v1.json"))[0])
    assert cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5000/stella/app:v1@" + V1)
    assert cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5000/stella/app@" + V1)
    assert not cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5000/stella/app:v1@sha256:" + "0" * 64)
    assert not cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5000/stella/other:v1@" + V1)
    assert not cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5000/stella/app:v1")
    assert cli_output.repo_digests_contain(image["repoDigests"], "127.0.0.1:5002/stella/app:v1@" + V1)


@pytest.mark.parametrize(
    "repo_digests,ref,expected",
    [
        (["busybox@" + V1], "docker.io/library/busybox:1@" + V1, True),
        (["docker.io/library/busybox@" + V1], "busybox@" + V1, True),
        (["garbage", "x@y"], "busybox@" + V1, False),
        ([], "busybox@" + V1, False),
    ],
    ids=["hub-short", "hub-long", "garbage", "none"],
)
def test_repo_digests_contain_normalizes_docker_hub(repo_digests, ref, expected):
    assert cli_output.repo_digests_contain(repo_digests, ref) is expected


@pytest.mark.parametrize(
    "name,code",
    [
        ("compose_pull_unknown_digest.stderr", "image_pull_failed"),
        ("compose_up_unhealthy.stderr", "image_pull_failed"),
        ("docker_version_daemon_down.stderr", "runtime_daemon_unavailable"),
    ],
    ids=["pull", "up", "daemon"],
)
def test_classify_failure(name, code):
    assert cli_output.classify_failure(fixture(name), "image_pull_failed") == code


@pytest.mark.parametrize(
    "name,needle",
    [
        ("compose_pull_unknown_digest.stderr", "manifest unknown"),
        ("compose_up_unhealthy.stderr", "is unhealthy"),
        ("compose_up_exited.stderr", "exited (3)"),
        ("pull_unknown_digest.stderr", "not found"),
    ],
)
def test_one_line_picks_the_telling_line(name, needle):
    line = cli_output.one_line(fixture(name))
    assert needle in line and "\n" not in line


def which(name):
    return "/usr/bin/" + name


def unwrapped(argv):
    """The docker argv inside the ``timeout --kill-after 5 N`` wrapper every call gets."""
    assert argv[:3] == ["/usr/bin/timeout", "--kill-after", "5"] and argv[3].isdigit(), argv
    return argv[4:]


class FakeRun:
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        argv = unwrapped(argv)
        self.calls.append(argv)
        for prefix, answer in self.answers:
            if argv[1 : 1 + len(prefix)] == prefix:
                return answer
        return 0, "", ""


def test_docker_cli_uses_argv_lists_and_parses():
    run = FakeRun(
        [
            (["version"], (0, fixture("docker_version_20.10.json"), "")),
            (["compose", "version"], (0, fixture("compose_version.json"), "")),
            (["image", "inspect"], (1, "", "Error: No such image: x")),
        ]
    )
    docker = cli.DockerCli(run, which=which)
    assert docker.version()["server"] == "20.10.24+dfsg1"
    assert docker.compose_version() == "2.40.3"
    assert docker.image_inspect("x@" + V1) is None
    docker.compose_up("p", "/w/p/compose.stella.lock.yml", "/w/p", wait_timeout=30)
    up = run.calls[-1]
    assert up == [
        "docker",
        "compose",
        "--project-name",
        "p",
        "--project-directory",
        "/w/p",
        "-f",
        "/w/p/compose.stella.lock.yml",
        "up",
        "-d",
        "--remove-orphans",
        "--pull",
        "never",
    ]
    assert all(isinstance(call, list) for call in run.calls)


def test_docker_cli_failures_have_codes():
    run = FakeRun(
        [
            (
                ["version"],
                (1, fixture("docker_version_daemon_down.json"), fixture("docker_version_daemon_down.stderr")),
            ),
            (["compose", "version"], (1, "", "docker: unknown command: docker compose")),
            (["compose", "--project-name"], (1, "", fixture("compose_up_exited.stderr"))),
        ]
    )
    docker = cli.DockerCli(run, which=which)
    with pytest.raises(StellaError) as err:
        docker.version(phase="preflight")
    assert err.value.code == "runtime_daemon_unavailable" and err.value.phase == "preflight"
    with pytest.raises(StellaError) as err:
        docker.compose_version()
    assert err.value.code == "compose_missing"
    with pytest.raises(StellaError) as err:
        docker.compose_up("p", "/f", "/d")
    assert err.value.code == "compose_up_failed" and "exited (3)" in err.value.reason
    with pytest.raises(StellaError) as err:
        cli.DockerCli(run, which=lambda name: None).version()
    assert err.value.code == "runtime_missing"


def info_with_plugins(plugins):
    info = json.loads(fixture("docker_info.json"))
    info["ClientInfo"]["Plugins"] = plugins
    return json.dumps(info)


COMPOSE_PLUGIN = json.loads(fixture("docker_info.json"))["ClientInfo"]["Plugins"][0]


@pytest.mark.parametrize(
    "plugins,version,error",
    [
        ([COMPOSE_PLUGIN], "2.40.3", None),
        ([dict(COMPOSE_PLUGIN, Version="2.26.1")], "2.26.1", None),
        ([{"Name": "buildx", "Version": "v0.23.0"}], None, "lists no compose plugin"),
        ([], None, "lists no compose plugin"),
        (
            [
                {
                    "Name": "compose",
                    "Path": "/usr/libexec/docker/cli-plugins/docker-compose",
                    "Err": 'plugin candidate "compose" did not match "^[a-z][a-z0-9]*$"',
                }
            ],
            None,
            "did not match",
        ),
        ([dict(COMPOSE_PLUGIN, Version="")], None, "reports no version"),
        (None, None, None),
    ],
    ids=["captured", "no-v-prefix", "other-plugin-only", "no-plugins", "broken-plugin", "no-version", "not-listed"],
)
def test_compose_plugin_from_docker_info(plugins, version, error):
    found, why = cli_output.compose_plugin(json.loads(info_with_plugins(plugins)))
    assert found == version
    assert (why is None) if error is None else (error in why)


def test_compose_plugin_of_no_info_says_nothing():
    assert cli_output.compose_plugin({}) == (None, None) and cli_output.compose_plugin(None) == (None, None)


def test_one_docker_info_answers_the_compose_version_and_the_registry_config():
    """The captured ``docker info`` lists the Compose plugin: no ``docker compose version`` is run, and the
    registry configuration comes from the same single answer."""
    run = FakeRun([(["info", "--format", "{{json .}}"], (0, fixture("docker_info.json"), ""))])
    docker = cli.DockerCli(run, which=which)
    assert docker.compose_version() == "2.40.3"
    assert docker.registry_config()["IndexConfigs"]["registry.lab:5001"]["Secure"] is False
    assert docker.compose_version() == "2.40.3"
    assert run.calls == [["docker", "info", "--format", "{{json .}}"]]


def test_docker_info_is_asked_once_by_threads_asking_at_once():
    asked, release = threading.Event(), threading.Event()
    calls = []

    def slow(argv):
        calls.append(unwrapped(argv))
        asked.set()
        release.wait(5)
        return 0, fixture("docker_info.json"), ""

    docker = cli.DockerCli(slow, which=which)
    answers = []
    threads = [
        threading.Thread(target=lambda: answers.append(docker.compose_version())),
        threading.Thread(target=lambda: answers.append(docker.registry_config() is not None)),
    ]
    threads[0].start()
    assert asked.wait(5)
    threads[1].start()  # while the first question is still unanswered
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(5)
    assert sorted(answers, key=str) == ["2.40.3", True] and len(calls) == 1


def test_compose_version_when_the_daemon_is_down():
    """Captured: with no daemon, ``docker info`` exits 1 but still prints the CLI's part with its plugins."""
    run = FakeRun([(["info"], (1, fixture("docker_info_daemon_down.json"), fixture("docker_info_daemon_down.stderr")))])
    docker = cli.DockerCli(run, which=which)
    assert docker.compose_version() == "2.40.3"
    assert docker.registry_config() is None


@pytest.mark.parametrize(
    "plugins,code_or_version",
    [
        ([], "compose_missing"),
        ([{"Name": "compose", "Err": "permission denied"}], "compose_missing"),
        (None, "2.40.3"),
    ],
    ids=["not-listed", "broken", "cli-lists-no-plugins"],
)
def test_compose_version_asks_the_plugin_only_when_the_cli_lists_none(plugins, code_or_version):
    run = FakeRun(
        [
            (["info"], (0, info_with_plugins(plugins), "")),
            (["compose", "version"], (0, fixture("compose_version.json"), "")),
        ]
    )
    docker = cli.DockerCli(run, which=which)
    if code_or_version == "compose_missing":
        with pytest.raises(StellaError) as err:
            docker.compose_version(phase="preflight")
        assert err.value.code == "compose_missing" and err.value.phase == "preflight"
        assert "Docker Compose v2 plugin unavailable" in err.value.reason
        asked_plugin = False
    else:
        assert docker.compose_version() == code_or_version
        asked_plugin = True
    assert (["docker", "compose", "version", "--format", "json"] in run.calls) is asked_plugin


def test_compose_version_when_docker_info_does_not_finish():
    """A daemon that accepts but never answers: ``docker info`` ends by its bound (rc 124), and the plugin
    itself still tells its version, so the preflight does not report Compose missing on top."""
    run = FakeRun(
        [(["info"], (cli.TIMEOUT_RC, "", "")), (["compose", "version"], (0, fixture("compose_version.json"), ""))]
    )
    docker = cli.DockerCli(run, which=which)
    assert docker.compose_version() == "2.40.3"
    assert ["docker", "compose", "version", "--format", "json"] in run.calls


def test_ask_compose_version_runs_the_plugin():
    run = FakeRun([(["compose", "version"], (0, fixture("compose_version.json"), ""))])
    assert cli.DockerCli(run, which=which).ask_compose_version() == "2.40.3"
    assert run.calls == [["docker", "compose", "version", "--format", "json"]]


def test_image_inspect_many_is_one_call_when_every_image_is_present():
    doc = json.loads(fixture("image_inspect_app_v1.json"))[0]
    other = dict(doc, Id="sha256:" + "b" * 64)
    refs = ["r/a:1@" + V1, "r/b:1@" + V1, "r/a:1@" + V1]
    run = FakeRun([(["image", "inspect"], (0, json.dumps([doc, other]), ""))])
    found = cli.DockerCli(run, which=which).image_inspect_many(refs)
    assert len(run.calls) == 1 and run.calls[0][-2:] == sorted(set(refs))
    assert found["r/a:1@" + V1]["id"] == doc["Id"] and found["r/b:1@" + V1]["id"] == other["Id"]


def test_image_inspect_many_falls_back_per_reference_when_one_is_missing():
    doc = fixture("image_inspect_app_v1.json")
    answers = {"r/a:1@" + V1: (0, doc, ""), "r/b:1@" + V1: (1, "", "Error: No such image: r/b:1@" + V1)}

    def run(argv):
        argv = unwrapped(argv)
        run.calls.append(argv)
        if len(argv) > 4:
            return 1, "[" + doc.strip()[1:-1] + "]", "Error: No such image: r/b:1@" + V1
        return answers[argv[-1]]

    run.calls = []
    found = cli.DockerCli(run, which=which).image_inspect_many(answers)
    assert len(run.calls) == 3
    assert found["r/b:1@" + V1] is None and found["r/a:1@" + V1]["id"].startswith("sha256:")
