"""The action of the target-side modules: the module runs as with ``ansible.builtin.normal``, with the
cyclic garbage collector paused for the task and restored as it was found, and the payload Ansible built
for the module in one run is what the next run uses (through the real ``ansible``)."""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import subprocess
import types

import pytest
from ansible import constants as C
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import target_action as _target_action

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
BIN = os.path.join(ROOT, ".venv", "bin")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
TARGET_MODULES = (
    "stella_compose_deploy",
    "stella_preflight",
    "stella_rollback",
    "stella_teardown",
    "stella_relay",
    "stella_runtime_install",
    "stella_inspect",
)


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


def test_the_task_runs_as_normal_with_the_collector_paused_and_the_payload_store(collector_on, monkeypatch):
    seen = []

    def normal_run(self, tmp=None, task_vars=None):
        seen.append((gc.isenabled(), task_vars))
        return {"changed": False, "ran": True}

    @contextlib.contextmanager
    def reused(module, local_tmp, log):
        seen.append(("store", module, local_tmp))
        yield
        seen.append("store closed")

    monkeypatch.setattr(NormalAction, "run", normal_run)
    monkeypatch.setattr(_target_action._payload_cache, "reused", reused)
    module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.action.stella_preflight")
    action = object.__new__(module.ActionModule)
    action._task = types.SimpleNamespace(args={"registry_reachability_mode": "skip"})
    assert action.run(task_vars={"x": 1}) == {"changed": False, "ran": True}
    assert seen == [("store", "stella_preflight", C.DEFAULT_LOCAL_TMP), (False, {"x": 1}), "store closed"]
    assert gc.isenabled()


CONFIG = os.path.join(ROOT, "tests", "unit", "fixtures", "docker_config", "linux-docker-login.json")


@pytest.mark.parametrize("module_name,option", [("stella_preflight", None), ("stella_compose_deploy", "preflight")])
def test_the_preflight_gets_its_registry_s_credentials_only_and_they_are_scrubbed(
    module_name, option, tmp_path, monkeypatch
):
    """The Docker config on the controller holds credentials for Docker Hub and 127.0.0.1:5002; the
    preflight asks 127.0.0.1:5002: only that entry travels, with its source, and the module's answer is
    scrubbed of its password."""
    (tmp_path / "config.json").write_text(open(CONFIG, encoding="utf-8").read())
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    sent = []

    def normal_run(self, tmp=None, task_vars=None):
        sent.append(self._task.args)
        return {"changed": False, "msg": "echo auth-password-Planted", "nested": [{"x": "auth-password-Planted"}]}

    monkeypatch.setattr(NormalAction, "run", normal_run)
    module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.action." + module_name)
    action = object.__new__(module.ActionModule)
    preflight = {"payload": {"ImageReference": "127.0.0.1:5002/stella/app:v1", "RegistryReachabilityMode": "http"}}
    action._task = types.SimpleNamespace(args={option: preflight, "task": "compose.up"} if option else preflight)
    result = action.run(task_vars={})
    options = sent[0][option] if option else sent[0]
    assert options["registry_credentials"] == {
        "127.0.0.1:5002": {"username": "stella", "password": "auth-password-Planted", "source": "docker-config:auths"}
    }
    assert "auth-password-Planted" not in json.dumps(result) and "hub-password-Planted" not in json.dumps(sent)


def test_explicit_credentials_win_and_a_skipped_registry_check_sends_none(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    sent = []
    monkeypatch.setattr(NormalAction, "run", lambda self, tmp=None, task_vars=None: sent.append(self._task.args) or {})
    module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.action.stella_preflight")
    for mode, expected in (
        ("http", {"127.0.0.1:5002": {"username": "u", "password": "p-Planted", "source": "registry_credentials"}}),
        ("skip", None),
    ):
        action = object.__new__(module.ActionModule)
        action._task = types.SimpleNamespace(
            args={
                "image_reference": "127.0.0.1:5002/stella/app:v1",
                "registry_reachability_mode": mode,
                "registry_credentials": {
                    "127.0.0.1:5002": {"username": "u", "password": "p-Planted"},
                    "other.example": {"username": "o", "password": "o-Planted"},
                },
            }
        )
        action.run(task_vars={})
        assert sent[-1].get("registry_credentials") == expected


def adhoc_preflight(tmp_path):
    """``ansible -m stellaops.runtime.stella_preflight`` with a payload the module refuses (the payload is
    built and run all the same), Ansible's debug log on, and the local temporary directory under tmp_path."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_DEBUG="1",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
    )
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run(
        [
            os.path.join(BIN, "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + os.path.join(BIN, "python"),
            "-m",
            "stellaops.runtime.stella_preflight",
            "-a",
            '{"payload": {"Unknown": 1}}',
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "compose.preflight payload has unknown key(s) Unknown" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_the_next_run_uses_the_payload_ansible_built_in_the_first(tmp_path):
    first = adhoc_preflight(tmp_path)
    assert "ANSIBALLZ: Creating module" in first
    store = tmp_path / "local-tmp" / _target_action._payload_cache.STORE_NAME
    [key] = os.listdir(store)
    assert os.listdir(store / key) == [
        "ansible_collections.stellaops.runtime.plugins.modules.stella_preflight-ZIP_DEFLATED-none"
    ]
    second = adhoc_preflight(tmp_path)
    assert "ANSIBALLZ: Creating module" not in second
    assert "ANSIBALLZ: using cached module: " in second
    assert os.listdir(store) == [key]


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
