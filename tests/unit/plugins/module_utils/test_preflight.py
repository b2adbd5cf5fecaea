"""Pure preflight evaluation: every code, every check runs, evidence shape."""

from __future__ import annotations

import copy
import threading

import pytest
import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import (
    CODES,
    HostObserver,
    build_request,
    evaluate,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import oci_architecture, registry_base_url

BASE_PARAMS = {
    "payload": None,
    "target_type": "ComposeHost",
    "work_directory": "/var/lib/stella/projects",
    "image_reference": "registry.lab:5001/stella/app:v1",
    "minimum_free_disk_bytes": 1024,
    "registry_reachability_mode": "http",
    "require_compose": None,
    "min_engine_version": "20.10.0",
    "min_compose_version": "2.20.0",
    "registry_username": None,
    "registry_password": None,
    "insecure_registries": [],
    "docker_cli": "docker",
    "docker_host": None,
    "timeout": 5,
}

# Client part captured from `docker version --format '{{json .}}'` (28.2.2 client, 20.10.24 engine).
CLIENT = {"Version": "28.2.2", "ApiVersion": "1.50", "Os": "linux", "Arch": "amd64"}
SERVER = {"Version": "20.10.24+dfsg1", "ApiVersion": "1.41", "Os": "linux", "Arch": "amd64"}

GOOD_OBS = {
    "host": {"system": "Linux", "machine": "x86_64", "distribution": "debian", "distributionVersion": "12", "kernel": "6.1", "hostname": "h"},
    "docker": {"binary": "/usr/bin/docker", "host": "unix:///var/run/docker.sock", "client": CLIENT, "server": SERVER},
    "compose": {"plugin": "v2.40.3"},
    "registry": {"registry": "registry.lab:5001", "url": "http://registry.lab:5001/v2/", "reachable": True, "httpStatus": 200},
    "platform": {"platforms": [{"os": "linux", "architecture": "amd64"}]},
    "workDirectory": {"path": "/var/lib/stella/projects", "exists": False, "probedPath": "/var/lib", "writable": True},
    "disk": {"path": "/var/lib", "freeBytes": 10 ** 10, "totalBytes": 10 ** 11},
}


def req(**over):
    params = dict(BASE_PARAMS)
    params.update(over)
    return build_request(params)


def codes(failures):
    return [f["code"] for f in failures]


def with_obs(**changes):
    obs = copy.deepcopy(GOOD_OBS)
    for key, value in changes.items():
        obs[key] = value
    return obs


def test_all_checks_pass_and_evidence_has_every_field():
    evidence, failures = evaluate(req(), GOOD_OBS)
    assert failures == []
    assert evidence["status"] == "passed"
    assert evidence["architecture"] == "amd64"
    assert evidence["docker"]["clientVersion"] == "28.2.2"
    assert evidence["docker"]["serverVersion"] == "20.10.24+dfsg1"
    assert evidence["docker"]["daemonStatus"] == "running"
    assert evidence["compose"]["version"] == "2.40.3"
    assert evidence["registry"]["reachable"] is True
    assert evidence["platform"]["compatible"] is True
    assert evidence["workDirectory"]["writable"] is True
    assert evidence["disk"]["sufficient"] is True
    assert [c["status"] for c in evidence["checks"]] == ["passed"] * 9


FAILING = [
    pytest.param({"docker": {"binary": None, "host": "unix:///var/run/docker.sock"}, "compose": {}}, {},
                 ["runtime_missing", "compose_missing"], id="runtime_missing"),
    pytest.param({"docker": {"binary": "/usr/bin/docker", "host": "unix:///x.sock", "client": CLIENT, "error": "no answer"}}, {},
                 ["runtime_daemon_unavailable"], id="daemon_unavailable"),
    pytest.param({}, {"min_engine_version": "24.0.0"}, ["runtime_version_too_old"], id="engine_too_old_default_gate"),
    pytest.param({}, {"min_compose_version": "9.0.0"}, ["runtime_version_too_old"], id="compose_too_old"),
    pytest.param({"compose": {"pluginError": "docker: 'compose' is not a docker command."}}, {}, ["compose_missing"], id="compose_missing"),
    pytest.param({"compose": {"standalone": {"path": "/usr/bin/docker-compose", "version": "1.29.2"}}}, {}, ["compose_missing"], id="compose_v1_only"),
    pytest.param({"registry": {"registry": "registry.lab:5001", "reachable": False, "reason": "connection refused"}}, {},
                 ["registry_unreachable"], id="registry_unreachable"),
    pytest.param({"platform": {"platforms": [{"os": "linux", "architecture": "arm64", "variant": "v8"}]}}, {},
                 ["platform_unsupported"], id="platform_unsupported"),
    pytest.param({"platform": {"error": "manifest unknown"}}, {}, ["platform_unsupported"], id="platform_unreadable"),
    pytest.param({"workDirectory": {"path": "/ro", "writable": False, "error": "/ro: Read-only file system"}}, {},
                 ["workdir_not_writable"], id="workdir_not_writable"),
    pytest.param({}, {"minimum_free_disk_bytes": 10 ** 12}, ["disk_space_low"], id="disk_space_low"),
]


@pytest.mark.parametrize("obs_change, req_change, expected", FAILING)
def test_each_code(obs_change, req_change, expected):
    evidence, failures = evaluate(req(**req_change), with_obs(**obs_change))
    assert codes(failures) == expected
    assert evidence["status"] == "failed"
    assert all(f["reason"] and "\n" not in f["reason"] for f in failures)
    assert set(codes(failures)) <= set(CODES)


def test_every_check_runs_when_many_fail():
    obs = with_obs(
        registry={"registry": "r", "reachable": False, "reason": "refused"},
        platform={"platforms": [{"os": "linux", "architecture": "s390x"}]},
        workDirectory={"path": "/ro", "writable": False, "error": "ro"},
    )
    evidence, failures = evaluate(req(min_engine_version="24.0.0", minimum_free_disk_bytes=10 ** 12), obs)
    assert codes(failures) == ["runtime_version_too_old", "registry_unreachable", "platform_unsupported",
                               "workdir_not_writable", "disk_space_low"]
    assert len(evidence["checks"]) == 9


def test_docker_host_does_not_require_compose():
    evidence, failures = evaluate(req(target_type="DockerHost"), with_obs(compose={"pluginError": "missing"}))
    assert failures == []
    assert evidence["compose"]["required"] is False


def test_payload_verbatim_is_accepted_and_merged():
    r = req(payload={"WorkDirectory": "/srv/stella", "ImageReference": "127.0.0.1:5000/a/b:1",
                     "MinimumFreeDiskBytes": 5, "RegistryReachabilityMode": "tcp", "RequireCompose": False},
            work_directory=None, image_reference=None, minimum_free_disk_bytes=None, registry_reachability_mode=None)
    assert (r["work_directory"], r["image"].registry, r["minimum_free_disk_bytes"], r["registry_reachability_mode"], r["require_compose"]) == (
        "/srv/stella", "127.0.0.1:5000", 5, "tcp", False)


@pytest.mark.parametrize("change, code, fragment", [
    ({"payload": {"WorkDir": "/x"}}, "invalid_request", "unknown key(s) WorkDir"),
    ({"payload": {"ImageReference": "other/img:1"}}, "invalid_request", "conflicts with option image_reference"),
    ({"work_directory": "relative/dir"}, "invalid_request", "absolute path"),
    ({"image_reference": "UPPER/case"}, "invalid_image_reference", "invalid repository"),
    ({"min_engine_version": "latest"}, "invalid_request", "is not a version"),
    ({"minimum_free_disk_bytes": -1}, "invalid_request", "non-negative"),
    ({"payload": {"RequireCompose": "yes"}}, "invalid_request", "must be a boolean"),
])
def test_bad_requests_fail_clearly(change, code, fragment):
    with pytest.raises(StellaError) as info:
        req(**change)
    assert info.value.code == code
    assert fragment in info.value.reason


def test_registry_credentials_and_url_userinfo_never_in_evidence():
    obs = with_obs(registry={"registry": "r", "url": "http://bob:hunter2@r/v2/", "reachable": True})
    evidence, dummy = evaluate(req(registry_username="bob", registry_password="hunter2"), obs)
    assert "hunter2" not in repr(evidence)
    assert evidence["registry"]["url"] == "http://r/v2/"
    assert evidence["registry"]["credentialsSupplied"] is True


@pytest.mark.parametrize("machine, arch", [("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("s390x", "s390x")])
def test_oci_architecture(machine, arch):
    assert oci_architecture(machine) == arch


class _NoRegistry:
    def ping(self, registry, mode):
        raise AssertionError("registry must not be called")

    def platforms(self, image):
        raise AssertionError("registry must not be called")


def test_observer_write_probe_and_disk(tmp_path):
    calls = []

    def run_command(argv, environ_update=None):
        calls.append(argv)
        return 1, "", "not here"

    observer = HostObserver(DockerCli(run_command, which=lambda name: None), lambda name: None, _NoRegistry())
    target = tmp_path / "not" / "yet"
    obs = observer.observe(req(work_directory=str(target), image_reference=None))
    assert obs["workDirectory"]["writable"] is True
    assert obs["workDirectory"]["probedPath"] == str(tmp_path)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
    assert obs["disk"]["freeBytes"] > 0
    assert obs["docker"]["binary"] is None
    assert calls == []


def test_observer_write_probe_fails_on_read_only_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    obs = HostObserver._workdir(str(ro))
    ro.chmod(0o700)
    import os
    if os.geteuid() == 0:
        # root ignores mode bits; the read-only mount case is covered by the integration tests
        assert obs["writable"] is True
    else:
        assert obs["writable"] is False


class _OrderedRegistry:
    """A registry double that records when it is asked, against the moment ``docker info`` answered."""

    def __init__(self, insecure_registries=(), info_answered=None):
        self.insecure_registries = tuple(insecure_registries)
        self.info_answered = info_answered
        self.asked = threading.Event()
        self.info_answered_first = None

    def base_url(self, registry):
        return registry_base_url(registry, self.insecure_registries)

    def ping(self, registry, mode):
        self.info_answered_first = self.info_answered.is_set()
        self.asked.set()
        return {"url": self.base_url(registry) + "/v2/", "reachable": True, "httpStatus": 200}

    def platforms(self, image):
        return ["linux/amd64"]


def _engine_holding_info_until(release, info_answered):
    """An engine client whose ``docker info`` answers only once ``release`` is set (at most 2 s)."""
    answers = {"version": (0, sc.fixture("docker_version_20.10.json"), ""),
               "info": (0, sc.fixture("docker_info.json"), "")}

    def run_command(argv, environ_update=None):  # pylint: disable=unused-argument
        inner, _limit = sc.strip_timeout(argv)
        if inner[1] == "info":
            release.wait(2)
            info_answered.set()
        return answers[inner[1]] if inner[1] in answers else (1, "", "unexpected")

    return DockerCli(run_command, which=lambda name: "/usr/bin/" + name)


@pytest.mark.parametrize("image,insecure", [
    ("127.0.0.1:5000/stella/app:v1", ()),
    ("registry.lab:5001/stella/app:v1", ("registry.lab:5001",)),
], ids=["loopback", "listed-insecure"])
def test_a_registry_reached_over_plain_http_is_asked_while_the_daemon_answers(monkeypatch, tmp_path, image, insecure):
    sc.offline_preflight(monkeypatch)
    info_answered = threading.Event()
    registry = _OrderedRegistry(insecure, info_answered)
    cli = _engine_holding_info_until(registry.asked, info_answered)
    obs = HostObserver(cli, sc.preflight_which, registry).observe(
        req(work_directory=str(tmp_path), image_reference=image, insecure_registries=list(insecure)))
    assert registry.info_answered_first is False
    assert obs["registry"]["reachable"] is True and obs["platform"] == {"platforms": ["linux/amd64"]}


def test_a_registry_the_daemon_may_list_as_insecure_waits_for_docker_info(monkeypatch, tmp_path):
    sc.offline_preflight(monkeypatch)
    info_answered = threading.Event()
    registry = _OrderedRegistry((), info_answered)
    cli = _engine_holding_info_until(threading.Event(), info_answered)  # info answers after its 2 s bound
    HostObserver(cli, sc.preflight_which, registry).observe(
        req(work_directory=str(tmp_path), image_reference="registry.lab:5001/stella/app:v1"))
    assert registry.info_answered_first is True
