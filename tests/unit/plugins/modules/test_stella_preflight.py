"""stella_preflight through AnsibleModule (patch_module_args): bad input, the catch-all, registry
credentials (pull access, what is returned and what never is)."""

from __future__ import annotations

import base64
import json
import os
import sys

import pytest

from modrun import run_module, sc, script_engine

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import preflight as _preflight
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_client import RegistryClient
from ansible_collections.stellaops.runtime.plugins.modules import stella_preflight as module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def runner(monkeypatch):
    """The module's engine client and run_command over an empty script: any command fails the test."""
    scripted = sc.ScriptedRunner()
    script_engine(monkeypatch, module, scripted)
    return scripted


@pytest.mark.parametrize(
    "args,needle",
    [
        ({"payload": {"WorkDir": "/x"}}, "unknown key(s) WorkDir"),
        ({"payload": {"ImageReference": "a/b:1"}, "image_reference": "c/d:2"}, "conflicts with option image_reference"),
        ({"payload": {"RequireCompose": "yes"}}, "must be a boolean"),
        ({"work_directory": "relative/dir"}, "absolute path"),
    ],
    ids=["unknown", "conflict", "type", "relative"],
)
def test_bad_input_is_refused_before_any_check(capsys, monkeypatch, runner, args, needle):
    def never(*_args, **_kwargs):
        raise AssertionError("no check may run")

    # The module's preflight_with validates the request, then observes: nothing may be observed.
    monkeypatch.setattr(_preflight, "run_preflight", never)
    monkeypatch.setattr(_preflight.HostObserver, "observe", never)
    monkeypatch.setattr(_preflight, "RegistryClient", never)
    rc, result = run_module(module, args, capsys, monkeypatch)
    assert rc == 1 and result["failed"] is True
    assert result["code"] == "invalid_request" and result["failurePhase"] == "preflight"
    assert needle in result["msg"]
    assert runner.calls == []


def test_unexpected_exception_is_an_internal_error_with_traceback(capsys, monkeypatch, runner):
    def explode(*_args, **_kwargs):
        raise RuntimeError("observer broke")

    monkeypatch.setattr(_preflight.HostObserver, "observe", explode)
    rc, result = run_module(module, {"_ansible_tracebacks_for": ["error"]}, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "internal_error" and result["failurePhase"] == "preflight"
    assert "observer broke" in result["msg"] and "RuntimeError: observer broke" in result["exception"]
    assert runner.calls == []


@pytest.mark.parametrize(
    "min_engine,code",
    [("20.10.0", None), (None, "runtime_version_too_old")],
    ids=["passes", "default-gate-refuses-20.10"],
)
def test_preflight_over_the_module_engine_client(tmp_path, capsys, monkeypatch, min_engine, code):
    """main() runs the preflight over the task's engine client (bounded by the smaller of timeout and
    command_timeout) and the module's binary lookup; each runtime question is asked once."""
    runner = sc.ScriptedRunner(sc.preflight_runtime())
    script_engine(monkeypatch, module, runner)
    sc.offline_preflight(monkeypatch)
    looked_up = []

    def get_bin_path(_self, name, required=False, opt_dirs=None):  # pylint: disable=unused-argument
        looked_up.append(name)
        return sc.preflight_which(name)

    monkeypatch.setattr(module.AnsibleModule, "get_bin_path", get_bin_path)
    args = {
        "payload": {"WorkDirectory": str(tmp_path), "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"},
        "timeout": 5,
        "command_timeout": 30,
    }
    if min_engine:
        args["min_engine_version"] = min_engine
    rc, result = run_module(module, args, capsys, monkeypatch)

    runner.assert_done()
    assert sorted(runner.docker_verbs()) == ["info", "version"]
    assert runner.limit_of("version") == 5
    assert "docker" in looked_up and "docker-compose" in looked_up
    assert result["changed"] is False and result["preflight"]["docker"]["serverVersion"] == "20.10.24+dfsg1"
    if code is None:
        assert rc == 0 and result["failures"] == [] and result["preflight"]["status"] == "passed"
    else:
        assert rc == 1 and result["code"] == code and result["failurePhase"] == "preflight"
        assert [f["code"] for f in result["failures"]] == [code] and result["preflight"]["status"] == "failed"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- registry_credentials

PASSWORD = "ghcr-pw-Planted-4Kd"
IDENTITY_TOKEN = "idt-refresh-Planted-7Wm"
HUB_CHALLENGE = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
HUB_TOKEN = "https://auth.docker.io/token"
PRIVATE = "docker.io/acme/private:2.0"
NO_LOG = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def hub():
    """Docker Hub: anonymous tokens pull nothing of acme/private; the identity token and acme's password may."""
    registry = FakeRegistry(
        "registry-1.docker.io",
        auth=("bearer", "acme", PASSWORD),
        anonymous=(),
        realm=HUB_TOKEN,
        service="registry.docker.io",
        challenge=HUB_CHALLENGE,
        identitytoken=IDENTITY_TOKEN,
        token_answer={"access_token": None, "expires_in": 300, "issued_at": "2025-06-02T09:14:03Z"},
    )
    registry.push(
        "acme/private",
        "2.0",
        image_index([("sha256:" + "1" * 64, {"os": "linux", "architecture": "amd64"})]),
        "application/vnd.oci.image.index.v1+json",
    )
    return registry


def echoing_proxy(registry):
    """A proxy in front of ``registry`` that refuses the calls made with the token the credentials obtained
    and echoes the request's Authorization header in its error, as some proxies do."""

    def transport(method, url, headers, timeout, body=None):
        if headers.get("Authorization") == "Bearer " + registry.token:
            raise StellaError(
                "registry_unreachable",
                "proxy refused %s %s (Authorization: %s)" % (method, url, headers["Authorization"]),
            )
        return registry(method, url, headers, timeout, body)

    return transport


def run_preflight(tmp_path, capsys, monkeypatch, transport, **args):
    """stella_preflight over the scripted engine and ``transport`` as the registries: ``(rc, result, stdout)``."""
    runner = sc.ScriptedRunner(sc.preflight_runtime())
    script_engine(monkeypatch, module, runner)
    sc.offline_preflight(monkeypatch)
    monkeypatch.setattr(_preflight, "RegistryClient", lambda **kw: RegistryClient(transport=transport, **kw))
    monkeypatch.setattr(
        module.AnsibleModule,
        "get_bin_path",
        lambda _self, name, required=False, opt_dirs=None: sc.preflight_which(name),
    )
    base = {"payload": {"WorkDirectory": str(tmp_path), "MinimumFreeDiskBytes": 1}, "min_engine_version": "20.10.0"}
    base.update(args)
    capsys.readouterr()
    rc, result = run_module(module, base, capsys, monkeypatch)
    runner.assert_done()
    return rc, result, json.dumps(result)


def planted(registry):
    """Every secret of the scenario: the planted password and identity token, what they make and obtain."""
    return [
        PASSWORD,
        IDENTITY_TOKEN,
        registry.token,
        base64.b64encode(("acme:" + PASSWORD).encode()).decode(),
        base64.b64encode(("octo:" + PASSWORD).encode()).decode(),
    ]


def test_registry_credentials_pull_a_private_image_and_no_secret_is_returned(tmp_path, capsys, monkeypatch):
    registry = hub()
    credentials = {
        "https://index.docker.io/v1/": {"identitytoken": IDENTITY_TOKEN, "source": "docker-config:credHelpers:desktop"},
        "ghcr.io": {"username": "octo", "password": PASSWORD, "source": "vault:ghcr"},
    }
    rc, result, out = run_preflight(
        tmp_path, capsys, monkeypatch, registry, image_reference=PRIVATE, registry_credentials=credentials
    )
    assert rc == 0, result.get("msg")
    found = result["preflight"]["registry"]
    assert (found["reachable"], found["authRequired"], found["pullAccess"], found["credentialSource"]) == (
        True,
        True,
        "credentials",
        "docker-config:credHelpers:desktop",
    )
    assert found["challenge"] == {"scheme": "bearer", "realm": HUB_TOKEN, "service": "registry.docker.io"}
    assert ("POST", HUB_TOKEN) in [(m, u) for m, u, dummy in registry.calls]  # the identity token was used
    # user names and labels are not secrets: not masked; passwords and identity tokens are
    given = result["invocation"]["module_args"]["registry_credentials"]
    assert given["ghcr.io"] == {"username": "octo", "password": NO_LOG, "source": "vault:ghcr"}
    assert given["https://index.docker.io/v1/"]["identitytoken"] == NO_LOG
    for secret in planted(registry):
        assert secret not in out, secret


@pytest.mark.parametrize(
    "entry",
    [
        {"identitytoken": IDENTITY_TOKEN, "source": "docker-config:auths"},
        {"username": "acme", "password": PASSWORD, "source": "docker-config:auths"},
    ],
    ids=["identity-token", "password"],
)
def test_no_secret_is_returned_when_the_registry_check_fails(tmp_path, capsys, monkeypatch, entry):
    registry = hub()
    rc, result, out = run_preflight(
        tmp_path,
        capsys,
        monkeypatch,
        echoing_proxy(registry),
        image_reference=PRIVATE,
        registry_credentials={"docker.io": entry, "ghcr.io": {"username": "octo", "password": PASSWORD}},
    )
    assert rc == 1 and result["failed"] is True and result["failurePhase"] == "preflight"
    assert [f["code"] for f in result["failures"]] == ["registry_unreachable", "platform_unsupported"]
    assert "proxy refused" in result["msg"] and "********" in result["msg"]  # the echo reached the reason, masked
    assert result["preflight"]["registry"]["authenticated"] is False
    for secret in planted(registry):
        assert secret not in out, secret


def test_refused_credentials_fail_with_registry_auth_failed(tmp_path, capsys, monkeypatch):
    rc, result, out = run_preflight(
        tmp_path,
        capsys,
        monkeypatch,
        hub(),
        image_reference=PRIVATE,
        registry_credentials={
            "docker.io": {"username": "acme", "password": "wrong-" + PASSWORD, "source": "vault:hub"}
        },
    )
    assert rc == 1 and result["code"] == "registry_auth_failed"
    assert [f["code"] for f in result["failures"]] == ["registry_auth_failed"]
    assert "refused pull of acme/private with the credentials from vault:hub" in result["msg"]
    assert result["preflight"]["registry"]["credentialSource"] == "vault:hub"
    assert PASSWORD not in out


def test_bad_registry_credentials_are_refused_before_any_check(capsys, monkeypatch):
    runner = sc.ScriptedRunner()
    script_engine(monkeypatch, module, runner)
    rc, result = run_module(
        module, {"registry_credentials": {"docker.io": {"username": "acme", "passwd": PASSWORD}}}, capsys, monkeypatch
    )
    assert rc == 1 and result["code"] == "invalid_request" and "unknown key(s) passwd" in result["msg"]
    assert runner.calls == [] and PASSWORD not in json.dumps(result)
