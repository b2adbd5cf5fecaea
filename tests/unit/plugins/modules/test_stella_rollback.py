"""stella_rollback through AnsibleModule (patch_module_args): input refusals, the catch-all, failure shape."""

from __future__ import annotations

import pytest

from modrun import run_module, sc, script_engine

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import rollback as _compose_rollback
from ansible_collections.stellaops.runtime.plugins.modules import stella_rollback as module

TARGET_PAYLOAD = {"Id": "tgt-01", "Name": "vm-01", "Type": "ComposeHost", "Endpoint": "local", "ExecutionMode": "agent"}


@pytest.fixture
def runner(monkeypatch):
    scripted = sc.ScriptedRunner()
    script_engine(monkeypatch, module, scripted)
    return scripted


@pytest.mark.parametrize(
    "args",
    [
        {"payload": {"ProjectName": "p"}},
        {"payload": {"ProjectName": "p", "Target": TARGET_PAYLOAD, "revisionPath": "x"}},
        {"payload": {"ProjectName": "P", "Target": TARGET_PAYLOAD}},
        {"payload": {"ProjectName": "p", "Target": TARGET_PAYLOAD, "RevisionPath": "a"}, "revision_path": "b"},
        {"payload": {"ProjectName": "p", "Target": TARGET_PAYLOAD, "ManifestHash": "sha256:1"}},
        {"project_name": "p"},
        {"project_name": "p", "target": dict(sc.TARGET, type="Other")},
    ],
    ids=["no-target", "wrong-case", "bad-project", "conflict", "bad-hash", "options-no-target", "bad-target-type"],
)
def test_bad_input_fails_in_validate_payload(runner, capsys, monkeypatch, args):
    rc, result = run_module(module, args, capsys, monkeypatch)
    assert rc == 1 and result["failed"] is True
    assert result["code"] == "invalid_payload" and result["failurePhase"] == "validate_payload"
    assert runner.calls == []


def test_unexpected_exception_is_an_internal_error_with_traceback(runner, capsys, monkeypatch, tmp_path):
    def explode(self, request, rec, result, check_mode, diff):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(_compose_rollback.ComposeRollback, "execute", explode)
    args = {
        "payload": {"ProjectName": "p", "Target": TARGET_PAYLOAD},
        "work_directory": str(tmp_path),
        "_ansible_tracebacks_for": ["error"],
    }
    rc, result = run_module(module, args, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "internal_error" and "division by zero" in result["msg"]
    assert "Traceback" in result["exception"] and "ZeroDivisionError" in result["exception"]


def test_no_revision_result_shape(runner, capsys, monkeypatch, tmp_path):
    args = {
        "payload": {"ProjectName": "p", "Target": TARGET_PAYLOAD, "Reason": "probe failed"},
        "work_directory": str(tmp_path),
    }
    rc, result = run_module(module, args, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "no_revision" and result["failurePhase"] == "resolve_revision"
    assert result["rollbackRestored"] is False and result["rollbackReason"] == "probe failed"
    assert result["changed"] is False and result["targetId"] == "tgt-01"
    assert [p["phase"] for p in result["deploymentPhases"]] == ["rollback-pre"]
    assert runner.calls == []
