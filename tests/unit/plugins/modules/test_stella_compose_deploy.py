"""stella_compose_deploy through AnsibleModule (patch_module_args): input refusals, the catch-all, warnings
that outlive a failure, secrets kept out of the output, check mode, the preflight option (registry
credentials included)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from modrun import run_module, sc, script_engine, warning_texts

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import apply as _compose_apply
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import run as _docker_run
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import preflight as _preflight
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_client import RegistryClient
from ansible_collections.stellaops.runtime.plugins.modules import stella_compose_deploy as module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))

from planning_support import FakeRegistry  # noqa: E402  pylint: disable=wrong-import-position

SECRET = "hunter2-not-in-output"


@pytest.fixture
def site(tmp_path):
    return sc.Site(tmp_path / "work")


@pytest.fixture
def runner(monkeypatch):
    scripted = sc.ScriptedRunner()
    script_engine(monkeypatch, module, scripted)
    return scripted


def test_bad_payloads_fail_before_anything_runs(site, runner, capsys, monkeypatch):
    plan = site.plan()
    up = plan["payloads"]["compose.up"]
    cases = [
        {"payload": {"ProjectName": plan["projectName"]}},
        {"payload": dict(up, Extra=1)},
        {"payload": dict(up, PullImages="yes")},
        {"payload": up, "work_directory": "/elsewhere"},
        {"payload": up, "target": dict(sc.TARGET, id="tgt-99")},
        {"payload": dict(up, WorkDirectory="/srv/../etc")},
        {"task": "docker.run", "payload": up},
        {"project_name": plan["projectName"]},
        {"payload": up, "keep_revisions": -1},
    ]
    for args in cases:
        rc, result = run_module(module, args, capsys, monkeypatch)
        assert rc == 1 and result["failed"] is True, args
        assert result["code"] == "invalid_payload" and result["failurePhase"] == "validate_payload", result
        assert result["changed"] is False
    assert runner.calls == [] and not os.path.exists(site.work)


def test_unexpected_exception_is_an_internal_error_with_traceback(site, runner, capsys, monkeypatch):
    def explode(self, request, rec, result, check_mode, diff):
        raise RuntimeError("boom")

    monkeypatch.setattr(_compose_apply.ComposeApply, "execute", explode)
    payload = site.plan()["payloads"]["compose.up"]
    rc, result = run_module(module, {"payload": payload, "_ansible_tracebacks_for": ["error"]}, capsys, monkeypatch)
    assert rc == 1 and result["failed"] is True and result["code"] == "internal_error"
    assert "boom" in result["msg"]
    assert "Traceback" in result["exception"] and "RuntimeError: boom" in result["exception"]
    assert "_compose_apply" in result["exception"] or "explode" in result["exception"]
    assert runner.calls == []
    # Without error tracebacks requested (DISPLAY_TRACEBACK=never), the code and message remain.
    rc, result = run_module(module, {"payload": payload}, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "internal_error" and "boom" in result["msg"]


def test_unexpected_exception_in_docker_run(tmp_path, runner, capsys, monkeypatch):
    def explode(self, request, rec, result, check_mode, diff):
        raise KeyError("missing")

    monkeypatch.setattr(_docker_run.DockerRun, "execute", explode)
    plan = sc.Site(tmp_path, target_type="DockerHost").plan()
    rc, result = run_module(
        module,
        {"task": "docker.run", "payload": plan["payloads"]["docker.run"][0], "_ansible_tracebacks_for": ["error"]},
        capsys,
        monkeypatch,
    )
    assert rc == 1 and result["code"] == "internal_error" and "KeyError" in result["exception"]


def test_warnings_of_a_non_blocking_hook_survive_a_later_failure(site, monkeypatch, capsys):
    hook = {"name": "notify", "phase": "pre-deploy", "command": "exit 1", "failurePolicy": "warn"}
    plan = site.plan(secret=SECRET, hooks=[hook])
    broken = [site.container(plan, "b1", base="bad")]
    up = site.up_step(plan, rc=1, err=sc.fixture("compose_up_unhealthy.stderr"))
    runner = sc.ScriptedRunner(site.apply_steps(plan, [], broken, up=up))
    script_engine(monkeypatch, module, runner)
    rc, result = run_module(
        module, {"payload": plan["payloads"]["compose.up"], "secret_env": {"DB_PASSWORD": SECRET}}, capsys, monkeypatch
    )
    runner.assert_done()
    assert rc == 1 and result["code"] == "service_unhealthy" and result["failurePhase"] == "compose_up"
    assert result["changed"] is True
    assert any("notify" in w and "FailurePolicy=warn" in w for w in warning_texts(result)), result.get("warnings")
    assert [h["outcome"] for h in result["hookResults"]] == ["warned"]
    assert result["filesRestored"] == [".env.stella", sc.LOCK]
    assert SECRET not in repr(result)


def test_apply_through_the_module_keeps_secrets_out_of_the_output(site, monkeypatch, capsys):
    plan = site.plan(secret=SECRET)
    runner = sc.ScriptedRunner(
        site.apply_steps(plan, [], [site.container(plan, "a1")], up=site.up_step(plan, wait_timeout=45))
    )
    script_engine(monkeypatch, module, runner)
    rc, result = run_module(
        module,
        {
            "payload": plan["payloads"]["compose.up"],
            "secret_env": {"DB_PASSWORD": SECRET},
            "command_timeout": 30,
            "wait_timeout": 45,
        },
        capsys,
        monkeypatch,
    )
    runner.assert_done()
    assert rc == 0 and result["changed"] is True and result["failurePhase"] is None
    assert result["manifestHash"] == plan["manifestHash"] and result["targetId"] == "tgt-01"
    assert result["serviceCount"] == 1 and result["completedPhases"][-1] == "post_deploy_hooks"
    with open(os.path.join(site.directory(plan), ".env.stella"), "rb") as handle:
        assert handle.read() == site.env(plan)
    assert runner.limit_of("version") == 30 and runner.limit_of("compose up") == 45 + 30
    assert SECRET not in capsys.readouterr().out + repr(result)


def test_check_mode_through_the_module(site, monkeypatch, capsys):
    plan = site.plan()
    runner = sc.ScriptedRunner(sc.runtime() + sc.containers(site.project(plan), []))
    script_engine(monkeypatch, module, runner)
    rc, result = run_module(
        module,
        {"payload": plan["payloads"]["compose.up"], "_ansible_check_mode": True, "_ansible_diff": True},
        capsys,
        monkeypatch,
    )
    runner.assert_done()
    assert rc == 0 and result["changed"] is True and result["checkMode"] is True
    assert result["diff"]["after"] == plan["lock"]
    assert not os.path.exists(site.work)


def test_preflight_option_fails_the_task_before_anything_changes(site, monkeypatch, capsys):
    """The preflight suboptions reach the apply with their defaults (min_engine_version 24.0.0 refuses the
    captured 20.10 engine): the task fails in phase preflight with the evidence, and nothing on the host
    changes (the early look only read the project's containers and the lock's images)."""
    plan = site.plan(secret=SECRET)
    runner = sc.ScriptedRunner(
        [
            sc.Unordered(
                list(sc.preflight_runtime()[0].pending) + sc.containers(site.project(plan), []) + [sc.image_present()]
            )
        ]
    )
    script_engine(monkeypatch, module, runner)
    sc.offline_preflight(monkeypatch)
    preflight = {"payload": {"WorkDirectory": site.work, "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"}}
    rc, result = run_module(
        module,
        {"payload": plan["payloads"]["compose.up"], "secret_env": {"DB_PASSWORD": SECRET}, "preflight": preflight},
        capsys,
        monkeypatch,
    )
    runner.assert_done()
    assert rc == 1 and result["code"] == "runtime_version_too_old" and result["failurePhase"] == "preflight"
    assert result["changed"] is False and result["preflight"]["status"] == "failed"
    assert result["preflight"]["gates"]["minEngineVersion"] == "24.0.0"
    assert [f["code"] for f in result["preflightFailures"]] == ["runtime_version_too_old"]
    assert sorted(runner.verbs()) == ["image inspect", "info", "ps", "version"] and not os.path.exists(site.work)
    assert SECRET not in capsys.readouterr().out + repr(result)


def test_preflight_option_passes_and_the_apply_reuses_the_runtime(site, monkeypatch, capsys):
    plan = site.plan()
    runner = sc.ScriptedRunner(site.apply_steps(plan, [], [site.container(plan, "a1")], first=sc.preflight_runtime()))
    script_engine(monkeypatch, module, runner)
    sc.offline_preflight(monkeypatch)
    preflight = {
        "payload": {"WorkDirectory": site.work, "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"},
        "min_engine_version": "20.10.0",
    }
    rc, result = run_module(
        module, {"payload": plan["payloads"]["compose.up"], "preflight": preflight}, capsys, monkeypatch
    )
    runner.assert_done()
    assert rc == 0 and result["changed"] is True and result["failurePhase"] is None
    assert result["preflight"]["status"] == "passed" and result["preflightFailures"] == []
    verbs = runner.docker_verbs()
    assert verbs.count("version") == 1 and verbs.count("info") == 1 and "compose version" not in verbs


def test_preflight_option_asks_the_daemon_the_task_uses(site, monkeypatch, capsys):
    plan = site.plan()
    runner = sc.ScriptedRunner(site.apply_steps(plan, [], [site.container(plan, "a1")], first=sc.preflight_runtime()))
    script_engine(monkeypatch, module, runner)
    pings = sc.offline_preflight(monkeypatch)
    preflight = {
        "payload": {"WorkDirectory": site.work, "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"},
        "min_engine_version": "20.10.0",
    }
    rc, result = run_module(
        module,
        {
            "payload": plan["payloads"]["compose.up"],
            "preflight": preflight,
            "docker_host": "unix:///run/user/1000/docker.sock",
        },
        capsys,
        monkeypatch,
    )
    assert rc == 0, result
    assert pings == ["/run/user/1000/docker.sock"], pings
    assert result["preflight"]["docker"]["host"] == "unix:///run/user/1000/docker.sock"


def test_preflight_registry_credentials_refused_fail_the_task_without_returning_them(site, monkeypatch, capsys):
    """preflight.registry_credentials reach the preflight: refused credentials fail the task in phase preflight
    with registry_auth_failed and the credentials' label, the password nowhere in the result, the user name
    and label not masked."""
    password = "hub-pw-Planted-2Rt"
    registry = FakeRegistry(
        "registry-1.docker.io",
        auth=("bearer", "acme", password),
        anonymous=(),
        realm="https://auth.docker.io/token",
        service="registry.docker.io",
        challenge='Bearer realm="https://auth.docker.io/token",service="registry.docker.io"',
    )
    plan = site.plan(secret=SECRET)
    runner = sc.ScriptedRunner(
        [
            sc.Unordered(
                list(sc.preflight_runtime()[0].pending) + sc.containers(site.project(plan), []) + [sc.image_present()]
            )
        ]
    )
    script_engine(monkeypatch, module, runner)
    sc.offline_preflight(monkeypatch)
    monkeypatch.setattr(_preflight, "RegistryClient", lambda **kw: RegistryClient(transport=registry, **kw))
    preflight = {
        "payload": {
            "WorkDirectory": site.work,
            "MinimumFreeDiskBytes": 1,
            "ImageReference": "docker.io/acme/private:2.0",
        },
        "min_engine_version": "20.10.0",
        "registry_credentials": {
            "index.docker.io": {"username": "acme", "password": "wrong-" + password, "source": "vault:hub"}
        },
    }
    rc, result = run_module(
        module,
        {"payload": plan["payloads"]["compose.up"], "secret_env": {"DB_PASSWORD": SECRET}, "preflight": preflight},
        capsys,
        monkeypatch,
    )
    runner.assert_done()
    assert rc == 1 and result["code"] == "registry_auth_failed" and result["failurePhase"] == "preflight"
    assert [f["code"] for f in result["preflightFailures"]] == ["registry_auth_failed"]
    assert result["preflight"]["registry"]["credentialSource"] == "vault:hub"
    assert result["preflight"]["registry"]["pullAccess"] is None and result["changed"] is False
    given = result["invocation"]["module_args"]["preflight"]["registry_credentials"]["index.docker.io"]
    assert given == {"username": "acme", "password": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER", "source": "vault:hub"}
    out = capsys.readouterr().out + json.dumps(result)
    assert password not in out and SECRET not in out and not os.path.exists(site.work)
