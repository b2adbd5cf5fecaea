"""Pure preflight evaluation: every code, every check runs, evidence shape; registry reachability and
pull access observed through the real client over fake registries."""

from __future__ import annotations

import copy
import json
import os
import sys
import threading

import pytest
import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import CODES, build_request, evaluate
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_observer import HostObserver
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_registry import (
    credential_log_values,
    mask_credentials,
    observe_image,
    redacted,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (
    oci_architecture,
    registry_base_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import basic_authorization
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_client import RegistryClient

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index, image_manifest  # noqa: E402  pylint: disable=wrong-import-position

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
    "host": {
        "system": "Linux",
        "machine": "x86_64",
        "distribution": "debian",
        "distributionVersion": "12",
        "kernel": "6.1",
        "hostname": "h",
    },
    "docker": {"binary": "/usr/bin/docker", "host": "unix:///var/run/docker.sock", "client": CLIENT, "server": SERVER},
    "compose": {"plugin": "v2.40.3"},
    "registry": {
        "registry": "registry.lab:5001",
        "url": "http://registry.lab:5001/v2/",
        "reachable": True,
        "httpStatus": 200,
    },
    "pull": {
        "registry": "registry.lab:5001",
        "pullAccess": "anonymous",
        "auth": None,
        "scope": "repository:stella/app:pull",
    },
    "platform": {"platforms": [{"os": "linux", "architecture": "amd64"}]},
    "workDirectory": {"path": "/var/lib/stella/projects", "exists": False, "probedPath": "/var/lib", "writable": True},
    "disk": {"path": "/var/lib", "freeBytes": 10**10, "totalBytes": 10**11},
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
    assert evidence["registry"]["pullAccess"] == "anonymous"
    assert evidence["registry"]["pullScope"] == "repository:stella/app:pull"
    assert evidence["platform"]["compatible"] is True
    assert evidence["workDirectory"]["writable"] is True
    assert evidence["disk"]["sufficient"] is True
    assert [c["name"] for c in evidence["checks"]] == [
        "runtime",
        "daemon",
        "engine_version",
        "compose",
        "compose_version",
        "registry",
        "registry_access",
        "platform",
        "workdir",
        "disk",
    ]
    assert [c["status"] for c in evidence["checks"]] == ["passed"] * 10


FAILING = [
    pytest.param(
        {"docker": {"binary": None, "host": "unix:///var/run/docker.sock"}, "compose": {}},
        {},
        ["runtime_missing", "compose_missing"],
        id="runtime_missing",
    ),
    pytest.param(
        {"docker": {"binary": "/usr/bin/docker", "host": "unix:///x.sock", "client": CLIENT, "error": "no answer"}},
        {},
        ["runtime_daemon_unavailable"],
        id="daemon_unavailable",
    ),
    pytest.param({}, {"min_engine_version": "24.0.0"}, ["runtime_version_too_old"], id="engine_too_old_default_gate"),
    pytest.param({}, {"min_compose_version": "9.0.0"}, ["runtime_version_too_old"], id="compose_too_old"),
    pytest.param(
        {"compose": {"pluginError": "docker: 'compose' is not a docker command."}},
        {},
        ["compose_missing"],
        id="compose_missing",
    ),
    pytest.param(
        {"compose": {"standalone": {"path": "/usr/bin/docker-compose", "version": "1.29.2"}}},
        {},
        ["compose_missing"],
        id="compose_v1_only",
    ),
    pytest.param(
        {"registry": {"registry": "registry.lab:5001", "reachable": False, "reason": "connection refused"}},
        {},
        ["registry_unreachable"],
        id="registry_unreachable",
    ),
    pytest.param(
        {
            "pull": {
                "registry": "registry.lab:5001",
                "error": "registry registry.lab:5001 refused anonymous pull",
                "code": "registry_auth_failed",
            },
            "platform": {"skipped": "registry_auth_failed"},
        },
        {},
        ["registry_auth_failed"],
        id="registry_auth_failed",
    ),
    pytest.param(
        {
            "registry": {
                "registry": "registry.lab:5001",
                "reachable": True,
                "httpStatus": 401,
                "authRequired": True,
                "authenticated": False,
                "authError": "registry refused the credentials",
            }
        },
        {},
        ["registry_auth_failed"],
        id="credentials_refused_on_v2",
    ),
    pytest.param(
        {"platform": {"platforms": [{"os": "linux", "architecture": "arm64", "variant": "v8"}]}},
        {},
        ["platform_unsupported"],
        id="platform_unsupported",
    ),
    pytest.param({"platform": {"error": "manifest unknown"}}, {}, ["platform_unsupported"], id="platform_unreadable"),
    pytest.param(
        {"workDirectory": {"path": "/ro", "writable": False, "error": "/ro: Read-only file system"}},
        {},
        ["workdir_not_writable"],
        id="workdir_not_writable",
    ),
    pytest.param({}, {"minimum_free_disk_bytes": 10**12}, ["disk_space_low"], id="disk_space_low"),
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
    evidence, failures = evaluate(req(min_engine_version="24.0.0", minimum_free_disk_bytes=10**12), obs)
    assert codes(failures) == [
        "runtime_version_too_old",
        "registry_unreachable",
        "platform_unsupported",
        "workdir_not_writable",
        "disk_space_low",
    ]
    assert len(evidence["checks"]) == 10


def test_docker_host_does_not_require_compose():
    evidence, failures = evaluate(req(target_type="DockerHost"), with_obs(compose={"pluginError": "missing"}))
    assert failures == []
    assert evidence["compose"]["required"] is False


def test_payload_verbatim_is_accepted_and_merged():
    r = req(
        payload={
            "WorkDirectory": "/srv/stella",
            "ImageReference": "127.0.0.1:5000/a/b:1",
            "MinimumFreeDiskBytes": 5,
            "RegistryReachabilityMode": "tcp",
            "RequireCompose": False,
        },
        work_directory=None,
        image_reference=None,
        minimum_free_disk_bytes=None,
        registry_reachability_mode=None,
    )
    assert (
        r["work_directory"],
        r["image"].registry,
        r["minimum_free_disk_bytes"],
        r["registry_reachability_mode"],
        r["require_compose"],
    ) == ("/srv/stella", "127.0.0.1:5000", 5, "tcp", False)


@pytest.mark.parametrize(
    "change, code, fragment",
    [
        ({"payload": {"WorkDir": "/x"}}, "invalid_request", "unknown key(s) WorkDir"),
        ({"payload": {"ImageReference": "other/img:1"}}, "invalid_request", "conflicts with option image_reference"),
        ({"work_directory": "relative/dir"}, "invalid_request", "absolute path"),
        ({"image_reference": "UPPER/case"}, "invalid_image_reference", "invalid repository"),
        ({"min_engine_version": "latest"}, "invalid_request", "is not a version"),
        ({"minimum_free_disk_bytes": -1}, "invalid_request", "non-negative"),
        ({"payload": {"RequireCompose": "yes"}}, "invalid_request", "must be a boolean"),
    ],
)
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


@pytest.mark.parametrize(
    "machine, arch", [("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("s390x", "s390x")]
)
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

    def image_access(self, image):
        return {"pullAccess": "anonymous", "auth": None, "scope": "repository:%s:pull" % image.repository}


def _engine_holding_info_until(release, info_answered):
    """An engine client whose ``docker info`` answers only once ``release`` is set (at most 2 s)."""
    answers = {
        "version": (0, sc.fixture("docker_version_20.10.json"), ""),
        "info": (0, sc.fixture("docker_info.json"), ""),
    }

    def run_command(argv, environ_update=None):  # pylint: disable=unused-argument
        inner, _limit = sc.strip_timeout(argv)
        if inner[1] == "info":
            release.wait(2)
            info_answered.set()
        return answers[inner[1]] if inner[1] in answers else (1, "", "unexpected")

    return DockerCli(run_command, which=lambda name: "/usr/bin/" + name)


@pytest.mark.parametrize(
    "image,insecure",
    [
        ("127.0.0.1:5000/stella/app:v1", ()),
        ("registry.lab:5001/stella/app:v1", ("registry.lab:5001",)),
    ],
    ids=["loopback", "listed-insecure"],
)
def test_a_registry_reached_over_plain_http_is_asked_while_the_daemon_answers(monkeypatch, tmp_path, image, insecure):
    sc.offline_preflight(monkeypatch)
    info_answered = threading.Event()
    registry = _OrderedRegistry(insecure, info_answered)
    cli = _engine_holding_info_until(registry.asked, info_answered)
    obs = HostObserver(cli, sc.preflight_which, registry).observe(
        req(work_directory=str(tmp_path), image_reference=image, insecure_registries=list(insecure))
    )
    assert registry.info_answered_first is False
    assert obs["registry"]["reachable"] is True and obs["platform"] == {"platforms": ["linux/amd64"]}


def test_a_registry_the_daemon_may_list_as_insecure_waits_for_docker_info(monkeypatch, tmp_path):
    sc.offline_preflight(monkeypatch)
    info_answered = threading.Event()
    registry = _OrderedRegistry((), info_answered)
    cli = _engine_holding_info_until(threading.Event(), info_answered)  # info answers after its 2 s bound
    HostObserver(cli, sc.preflight_which, registry).observe(
        req(work_directory=str(tmp_path), image_reference="registry.lab:5001/stella/app:v1")
    )
    assert registry.info_answered_first is True


# ---------------------------------------------------------------------------- registry credentials and access

PASSWORD = "hub-pw-Planted-7Qx"
IDENTITY_TOKEN = "idt-refresh-Planted-91c"
HUB_CHALLENGE = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
HUB_TOKEN_EXTRAS = {"access_token": None, "expires_in": 300, "issued_at": "2025-06-02T09:14:03.535843893Z"}
PUBLIC = "nginx:1.27"
PRIVATE = "docker.io/acme/private:2.0"


def hub(**kwargs):
    """Docker Hub as its registry and token service answer: anonymous tokens pull library/nginx only."""
    options = dict(
        auth=("bearer", "acme", PASSWORD),
        anonymous={"library/nginx"},
        realm="https://auth.docker.io/token",
        service="registry.docker.io",
        challenge=HUB_CHALLENGE,
        token_answer=HUB_TOKEN_EXTRAS,
        identitytoken=IDENTITY_TOKEN,
    )
    options.update(kwargs)
    registry = FakeRegistry("registry-1.docker.io", **options)
    amd = registry.push("library/nginx", "amd", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    registry.push(
        "library/nginx",
        "1.27",
        image_index([(amd, {"os": "linux", "architecture": "amd64"})]),
        "application/vnd.oci.image.index.v1+json",
    )
    registry.push("acme/private", "2.0", image_manifest("2"), "application/vnd.oci.image.manifest.v1+json")
    registry.blobs[("acme/private", "sha256:" + "2" * 64)] = json.dumps(
        {"os": "linux", "architecture": "amd64"}
    ).encode()
    return registry


def observed(request, transport):
    """GOOD_OBS with the registry, pull and platform observations of the real client over ``transport``."""
    client = RegistryClient(transport=transport)
    client.credentials = request["credentials"]
    observer = HostObserver(None, None, client)
    pull, platform = observe_image(client, request["image"])
    return with_obs(registry=observer._registry(request), pull=pull, platform=platform), client  # pylint: disable=protected-access


def check_status(evidence):
    return {
        c["name"]: (c["status"], c.get("reason"))
        for c in evidence["checks"]
        if c["name"] in ("registry", "registry_access", "platform")
    }


def test_build_request_keys_credentials_by_registry_and_registry_username_wins_for_its_registry():
    r = req(
        image_reference=PRIVATE,
        registry_credentials={
            "https://index.docker.io/v1/": {"username": "acme", "password": PASSWORD, "source": "docker-config:auths"},
            "127.0.0.1:5002": {"identitytoken": IDENTITY_TOKEN},
        },
    )
    assert r["credentials"] == {
        "docker.io": {"username": "acme", "password": PASSWORD, "source": "docker-config:auths"},
        "127.0.0.1:5002": {"identitytoken": IDENTITY_TOKEN, "source": "registry_credentials"},
    }
    r = req(
        image_reference=PRIVATE,
        registry_username="bot",
        registry_password="pw2",
        registry_credentials={"index.docker.io": {"username": "acme", "password": PASSWORD}},
    )
    assert r["credentials"] == {"docker.io": {"username": "bot", "password": "pw2", "source": "registry_username"}}
    r = req(
        image_reference=PRIVATE,
        registry_url="https://bob:s3cret@mirror.example:5000/",
        registry_credentials={"docker.io": {"username": "acme", "password": PASSWORD}},
    )
    assert r["credentials"] == {
        "docker.io": {"username": "acme", "password": PASSWORD, "source": "registry_credentials"},
        "mirror.example:5000": {"username": "bob", "password": "s3cret", "source": "registry_url"},
    }
    assert req(image_reference=None, registry_username="bot", registry_password="pw2")["credentials"] == {}


def test_build_request_refuses_bad_registry_credentials():
    with pytest.raises(StellaError) as info:
        req(registry_credentials={"docker.io": {"user": "acme", "password": PASSWORD}})
    assert info.value.code == "invalid_request" and "unknown key(s) user" in info.value.reason
    assert PASSWORD not in info.value.reason


def test_docker_hub_public_image_passes_anonymously():
    r = req(image_reference=PUBLIC, registry_credentials={"docker.io": {"username": "acme", "password": PASSWORD}})
    obs, dummy = observed(r, hub())
    evidence, failures = evaluate(r, obs)
    assert failures == []
    registry = evidence["registry"]
    assert registry["reachable"] is True and registry["httpStatus"] == 401 and registry["authRequired"] is True
    assert registry["challenge"] == {
        "scheme": "bearer",
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
    }
    assert registry["pullAccess"] == "anonymous" and registry["pullScope"] == "repository:library/nginx:pull"
    # the credentials were tried on /v2/ (accepted) but the pull needed none
    assert registry["authenticated"] is True and registry["credentialSource"] == "registry_credentials"
    assert evidence["platform"]["available"] == ["linux/amd64"]


def test_docker_hub_private_image_with_credentials_says_where_they_came_from():
    r = req(
        image_reference=PRIVATE,
        registry_credentials={
            "index.docker.io": {"identitytoken": IDENTITY_TOKEN, "source": "docker-config:credHelpers:desktop"}
        },
    )
    obs, client = observed(r, hub())
    evidence, failures = evaluate(r, obs)
    assert failures == [] and evidence["status"] == "passed"
    registry = evidence["registry"]
    assert (registry["pullAccess"], registry["credentialSource"], registry["credentialsSupplied"]) == (
        "credentials",
        "docker-config:credHelpers:desktop",
        True,
    )
    assert check_status(evidence) == {
        "registry": ("passed", None),
        "registry_access": ("passed", None),
        "platform": ("passed", None),
    }
    assert all(secret not in repr(evidence) for secret in client.secrets())


@pytest.mark.parametrize(
    "credentials, reason",
    [
        (
            None,
            "registry docker.io refused anonymous pull of acme/private (the registry refused an anonymous token (HTTP 401)): "
            "give credentials for docker.io (registry_credentials)",
        ),
        (
            {"docker.io": {"username": "acme", "password": "wrong", "source": "vault:hub"}},
            "registry docker.io: token service https://auth.docker.io/token refused the credentials from vault:hub (HTTP 401); "
            "registry docker.io refused pull of acme/private with the credentials from vault:hub: token service "
            "https://auth.docker.io/token refused the credentials (HTTP 401)",
        ),
    ],
    ids=["no-credentials", "wrong-credentials"],
)
def test_a_refused_pull_is_registry_auth_failed_and_the_registry_still_reachable(credentials, reason):
    r = req(image_reference=PRIVATE, registry_credentials=credentials)
    obs, dummy = observed(r, hub())
    evidence, failures = evaluate(r, obs)
    assert failures == [{"code": "registry_auth_failed", "reason": reason, "next": next_step("registry_auth_failed")}]
    assert check_status(evidence) == {
        "registry": ("passed", None),
        "registry_access": ("failed", None),
        "platform": ("skipped", "registry_auth_failed"),
    }
    assert evidence["registry"]["reachable"] is True and evidence["registry"]["pullAccess"] is None
    assert evidence["registry"].get("credentialSource") == (credentials and "vault:hub")
    assert set(codes(failures)) <= set(CODES)


def test_a_rate_limited_registry_is_reachable_and_the_unverified_checks_say_why():
    manifest = "https://registry-1.docker.io/v2/library/nginx/manifests/1.27"
    r = req(image_reference=PUBLIC)
    obs, dummy = observed(
        r, hub(answers={manifest: (429, {"retry-after": "3600"}, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}')})
    )
    evidence, failures = evaluate(r, obs)
    assert failures == []
    why = "registry docker.io answered HTTP 429 (rate limit; Retry-After: 3600) for docker.io/library/nginx:1.27"
    assert check_status(evidence) == {
        "registry": ("passed", None),
        "registry_access": ("skipped", why),
        "platform": ("skipped", "registry rate-limited: " + why),
    }
    assert evidence["registry"]["rateLimited"] is True and evidence["registry"]["retryAfter"] == "3600"

    v2 = "https://registry-1.docker.io/v2/"
    obs, dummy = observed(r, hub(answers={v2: (429, {"retry-after": "60"}, b"")}))
    evidence, failures = evaluate(r, obs)
    assert failures == [] and evidence["registry"]["rateLimited"] is True and evidence["registry"]["retryAfter"] == "60"
    assert evidence["registry"]["pullAccess"] == "anonymous"


def test_what_is_not_a_registry_or_does_not_answer_is_unreachable():
    r = req(image_reference=PUBLIC)
    obs, dummy = observed(
        r, hub(answers={"https://registry-1.docker.io/v2/": (404, {"content-type": "text/html"}, b"<html>")})
    )
    evidence, failures = evaluate(r, obs)
    assert failures == [
        {
            "code": "registry_unreachable",
            "reason": "registry docker.io unreachable: unexpected HTTP 404 from /v2/ (not a registry API answer)",
            "next": next_step("registry_unreachable"),
        }
    ]

    def down(method, url, headers, timeout, body=None):
        raise StellaError("registry_unreachable", "%s: [Errno 111] Connection refused" % url)

    evidence, failures = evaluate(r, observed(r, down)[0])
    assert codes(failures) == ["registry_unreachable", "platform_unsupported"]
    assert check_status(evidence)["registry_access"] == ("skipped", "registry_unreachable")


def test_redacted_replaces_secrets_everywhere():
    data = {"a": ["x %s y" % PASSWORD, {"b": "Bearer tok-1"}], "n": 3, "none": None}
    assert redacted(data, [PASSWORD, "tok-1"]) == {
        "a": ["x ******** y", {"b": "Bearer ********"}],
        "n": 3,
        "none": None,
    }


def test_credential_log_values_unmask_user_names_and_labels_but_never_a_secret():
    mapping = {
        "docker.io": {"username": "acme", "password": PASSWORD, "source": "docker-config:auths"},
        "ghcr.io": {"identitytoken": IDENTITY_TOKEN, "source": "vault:ghcr"},
        "quay.io": {"username": "same-as-secret", "password": "p"},
    }
    public, secret = credential_log_values(mapping, other_secrets=["same-as-secret", {"k": ["x"]}])
    assert public == {"acme", "docker-config:auths", "vault:ghcr"}
    assert basic_authorization("acme", PASSWORD).split(" ", 1)[1] in secret
    values = {"acme", PASSWORD, "docker-config:auths", IDENTITY_TOKEN, "vault:ghcr", "same-as-secret", "p"}
    mask_credentials(values, mapping, ["same-as-secret"])
    assert PASSWORD in values and IDENTITY_TOKEN in values and "same-as-secret" in values and "acme" not in values
    assert credential_log_values("not a mapping") == (set(), set())


def test_disk_space_low_says_how_much_in_binary_units_and_what_to_do():
    obs = with_obs(disk={"path": "/srv/stella", "freeBytes": 2 * 1024 * 1024, "totalBytes": 10**11})
    _evidence, failures = evaluate(req(minimum_free_disk_bytes=1024**3), obs)
    assert failures == [
        {
            "code": "disk_space_low",
            "reason": "2 MiB free at /srv/stella, 1 GiB required",
            "next": next_step("disk_space_low"),
        }
    ]
