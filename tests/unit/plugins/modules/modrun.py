"""Run a module's ``main()`` in-process with ``patch_module_args`` and read the JSON it prints."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible.module_utils import _internal, basic
from ansible.module_utils._internal import _traceback
from ansible.module_utils.testing import patch_module_args

HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

import scripted as sc  # noqa: E402  pylint: disable=wrong-import-position


def run_module(module, args, capsys, monkeypatch):
    """``(exit code, result)`` of ``module.main()`` with ``args``.

    The module runs as in its own process on a target, even when controller code was imported by other
    tests: warnings are collected into the result, and tracebacks follow ``_ansible_tracebacks_for``
    (what the controller sends from ``DISPLAY_TRACEBACK``).
    """
    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(_traceback, "_is_traceback_enabled", _traceback._is_module_traceback_enabled)
    monkeypatch.setattr(_traceback, "_module_tracebacks_enabled_events", None)
    capsys.readouterr()
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exit_info:
            module.main()
    out = capsys.readouterr().out
    return exit_info.value.code, json.loads(out)


def script_engine(monkeypatch, module, runner):
    """Route the module's engine client and ``run_command`` through ``runner``; nothing real runs."""
    monkeypatch.setattr(
        module,
        "engine_client",
        lambda ansible_module, run_command=None: sc.engine(runner, ansible_module.params["command_timeout"]),
    )
    monkeypatch.setattr(
        basic.AnsibleModule, "run_command", lambda self, argv, **kwargs: runner(argv, kwargs.get("environ_update"))
    )


def warning_texts(result):
    """The warning messages of a result (plain strings, or ansible-core 2.19's ``WarningSummary`` objects)."""
    texts = []
    for warning in result.get("warnings") or []:
        if isinstance(warning, dict):
            warning = (warning.get("event") or {}).get("msg") or warning.get("msg") or ""
        texts.append(warning)
    return texts
