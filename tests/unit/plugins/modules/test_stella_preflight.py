"""stella_preflight through AnsibleModule (patch_module_args): bad input and the catch-all."""

from __future__ import annotations

import pytest

from modrun import run_module

from ansible_collections.stellaops.runtime.plugins.modules import stella_preflight as module


@pytest.mark.parametrize("args,needle", [
    ({"payload": {"WorkDir": "/x"}}, "unknown key(s) WorkDir"),
    ({"payload": {"ImageReference": "a/b:1"}, "image_reference": "c/d:2"}, "conflicts with option image_reference"),
    ({"payload": {"RequireCompose": "yes"}}, "must be a boolean"),
    ({"work_directory": "relative/dir"}, "absolute path"),
], ids=["unknown", "conflict", "type", "relative"])
def test_bad_input_is_refused_before_any_check(capsys, monkeypatch, args, needle):
    def never(*_args, **_kwargs):
        raise AssertionError("no check may run")

    monkeypatch.setattr(module, "run_preflight", never)
    rc, result = run_module(module, args, capsys, monkeypatch)
    assert rc == 1 and result["failed"] is True
    assert result["code"] == "invalid_request" and result["failurePhase"] == "preflight"
    assert needle in result["msg"]


def test_unexpected_exception_is_an_internal_error_with_traceback(capsys, monkeypatch):
    def explode(*_args, **_kwargs):
        raise RuntimeError("observer broke")

    monkeypatch.setattr(module, "run_preflight", explode)
    rc, result = run_module(module, {"_ansible_tracebacks_for": ["error"]}, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "internal_error" and result["failurePhase"] == "preflight"
    assert "observer broke" in result["msg"] and "RuntimeError: observer broke" in result["exception"]
