"""stella_preflight through AnsibleModule (patch_module_args): bad input and the catch-all."""

from __future__ import annotations

import pytest

from modrun import run_module, sc, script_engine

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import preflight as _preflight
from ansible_collections.stellaops.runtime.plugins.modules import stella_preflight as module


@pytest.fixture
def runner(monkeypatch):
    """The module's engine client and run_command over an empty script: any command fails the test."""
    scripted = sc.ScriptedRunner()
    script_engine(monkeypatch, module, scripted)
    return scripted


@pytest.mark.parametrize("args,needle", [
    ({"payload": {"WorkDir": "/x"}}, "unknown key(s) WorkDir"),
    ({"payload": {"ImageReference": "a/b:1"}, "image_reference": "c/d:2"}, "conflicts with option image_reference"),
    ({"payload": {"RequireCompose": "yes"}}, "must be a boolean"),
    ({"work_directory": "relative/dir"}, "absolute path"),
], ids=["unknown", "conflict", "type", "relative"])
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


@pytest.mark.parametrize("min_engine,code", [("20.10.0", None), (None, "runtime_version_too_old")],
                         ids=["passes", "default-gate-refuses-20.10"])
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
    args = {"payload": {"WorkDirectory": str(tmp_path), "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"},
            "timeout": 5, "command_timeout": 30}
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
