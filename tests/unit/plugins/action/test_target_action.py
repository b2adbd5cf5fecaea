"""The action of the target-side modules: the module runs as with ``ansible.builtin.normal``, with the
cyclic garbage collector paused for the task and restored as it was found."""

from __future__ import annotations

import gc
import importlib
import os

import pytest
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.stellaops.runtime.plugins.plugin_utils import _target_action

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
TARGET_MODULES = ("stella_compose_deploy", "stella_preflight", "stella_rollback", "stella_teardown", "stella_relay",
                  "stella_runtime_install")


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_collector_paused_inside_and_restored_after(collector_on):
    with _target_action.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_collector_restored_when_the_block_fails(collector_on):
    with pytest.raises(RuntimeError):
        with _target_action.collector_paused():
            raise RuntimeError("task failed")
    assert gc.isenabled()


def test_a_paused_collector_stays_paused(collector_on):
    gc.disable()
    with _target_action.collector_paused():
        pass
    assert not gc.isenabled()


def test_the_task_runs_as_normal_with_the_collector_paused(collector_on, monkeypatch):
    seen = []

    def normal_run(self, tmp=None, task_vars=None):
        seen.append((gc.isenabled(), task_vars))
        return {"changed": False, "ran": True}

    monkeypatch.setattr(NormalAction, "run", normal_run)
    action = object.__new__(_target_action.TargetModuleAction)
    assert action.run(task_vars={"x": 1}) == {"changed": False, "ran": True}
    assert seen == [(False, {"x": 1})]
    assert gc.isenabled()


def test_every_target_module_has_the_action_and_only_those():
    actions = {name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "action")) if name.endswith(".py")}
    target_actions = set()
    for name in sorted(actions):
        module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.action.%s" % name)
        if issubclass(module.ActionModule, _target_action.TargetModuleAction):
            target_actions.add(name)
    assert target_actions == set(TARGET_MODULES)
    for name in TARGET_MODULES:
        # the module it runs is target-side: it has its own argument spec and main()
        module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.modules.%s" % name)
        assert isinstance(module.ARGUMENT_SPEC, dict) and callable(module.main)
