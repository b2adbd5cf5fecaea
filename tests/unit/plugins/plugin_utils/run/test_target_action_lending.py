"""The action of stella_compose_deploy lends the controller's registry credentials to the target's pull: the
entries of its own images' registries only (the option ``pull_credentials``), none in check mode or when
``lend_registry_credentials`` is false; the preflight gets its own registry's entry only; every value is
scrubbed from the result (planted secrets in a real Docker config on the controller)."""

from __future__ import annotations

import importlib
import json
import os
import types

import pytest
from ansible.plugins.action.normal import ActionModule as NormalAction

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import target_action as _target_action

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
CONFIG = os.path.join(ROOT, "tests", "unit", "fixtures", "docker_config", "linux-docker-login.json")
PINNED = "@sha256:" + "a" * 64
AUTH_IMAGE = "127.0.0.1:5002/stella/app" + PINNED
SHARED_IMAGE = "registry.lab:5001/stella/tool" + PINNED


def lock(*images):
    services = "".join('  s%d:\n    image: "%s"\n' % (index, image) for index, image in enumerate(images))
    return 'name: "p"\nservices:\n' + services


def compose_args(*images, **extra):
    args = {
        "task": "compose.up",
        "payload": {"ProjectName": "p", "ComposeLock": lock(*images)},
        "preflight": {"payload": {"ImageReference": images[0], "RegistryReachabilityMode": "http"}},
    }
    args.update(extra)
    return args


@pytest.fixture
def controller(tmp_path, monkeypatch):
    """A controller whose Docker config holds credentials for Docker Hub and 127.0.0.1:5002; ``run(args,
    check_mode)`` runs the action and returns ``(options sent, result)``."""
    (tmp_path / "config.json").write_text(open(CONFIG, encoding="utf-8").read())
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    sent = []

    def normal_run(self, tmp=None, task_vars=None):
        sent.append(self._task.args)
        return {"changed": True, "msg": "pulled with auth-password-Planted", "evidence": {}}

    monkeypatch.setattr(NormalAction, "run", normal_run)
    module = importlib.import_module("ansible_collections.stellaops.runtime.plugins.action.stella_compose_deploy")

    def run(args, check_mode=False):
        action = object.__new__(module.ActionModule)
        action._task = types.SimpleNamespace(args=args, check_mode=check_mode)
        result = action.run(task_vars={})
        return sent[-1], result

    return run


def test_the_pull_gets_its_own_images_registries_only(controller):
    sent, result = controller(compose_args(AUTH_IMAGE, SHARED_IMAGE))
    assert sent["pull_credentials"] == {
        "127.0.0.1:5002": {"username": "stella", "password": "auth-password-Planted", "source": "docker-config:auths"},
        "registry.lab:5001": None,
    }
    assert "lend_registry_credentials" not in sent
    assert "hub-password-Planted" not in json.dumps(sent)  # Docker Hub's entry is no image's registry here
    assert sent["preflight"]["registry_credentials"] == {"127.0.0.1:5002": sent["pull_credentials"]["127.0.0.1:5002"]}
    assert "auth-password-Planted" not in json.dumps(result)


def test_a_target_whose_images_come_from_another_registry_receives_nothing(controller):
    sent, _result = controller(compose_args(SHARED_IMAGE))
    assert sent["pull_credentials"] == {"registry.lab:5001": None}
    assert "registry_credentials" not in sent["preflight"]
    assert "Planted" not in json.dumps(sent)


@pytest.mark.parametrize("lend", [False, "false"])
def test_lending_turned_off_sends_no_pull_credentials(controller, lend):
    sent, _result = controller(compose_args(AUTH_IMAGE, lend_registry_credentials=lend))
    assert "pull_credentials" not in sent and "lend_registry_credentials" not in sent
    # the preflight's check keeps its credentials
    assert sent["preflight"]["registry_credentials"]["127.0.0.1:5002"]["source"] == "docker-config:auths"


def test_check_mode_lends_nothing_and_a_given_pull_credentials_option_is_dropped(controller):
    planted = {"127.0.0.1:5002": {"username": "x", "password": "given-Planted"}}
    sent, _result = controller(compose_args(AUTH_IMAGE, pull_credentials=planted), check_mode=True)
    assert "pull_credentials" not in sent
    sent, _result = controller(compose_args(SHARED_IMAGE, pull_credentials=planted))
    assert sent["pull_credentials"] == {"registry.lab:5001": None}


def test_docker_run_payloads_lend_for_their_images(controller):
    args = {
        "task": "docker.run",
        "payloads": [{"Image": AUTH_IMAGE, "Name": "a"}, {"Image": "docker.io/library/nginx" + PINNED, "Name": "b"}],
        "preflight": {"payload": {"ImageReference": AUTH_IMAGE, "RegistryReachabilityMode": "http"}},
    }
    sent, result = controller(args)
    assert sorted(sent["pull_credentials"]) == ["127.0.0.1:5002", "docker.io"]
    assert sent["pull_credentials"]["docker.io"]["password"] == "hub-password-Planted"
    assert "Planted" not in json.dumps(result)


def test_explicit_credentials_win_over_the_docker_config(controller):
    explicit = {"127.0.0.1:5002": {"username": "u", "password": "explicit-Planted"}}
    args = compose_args(AUTH_IMAGE)
    args["preflight"]["registry_credentials"] = explicit
    sent, _result = controller(args)
    assert sent["pull_credentials"]["127.0.0.1:5002"] == {
        "username": "u",
        "password": "explicit-Planted",
        "source": "registry_credentials",
    }


def test_images_are_read_from_the_lock_and_payloads():
    assert _target_action.target_images(compose_args(AUTH_IMAGE, SHARED_IMAGE)) == [AUTH_IMAGE, SHARED_IMAGE]
    assert _target_action.target_images({"payload": {"ComposeLock": "not: [yaml"}}) == []
    assert _target_action.image_registries(["sha256:" + "b" * 64, "nginx" + PINNED, AUTH_IMAGE]) == [
        "127.0.0.1:5002",
        "docker.io",
    ]


def test_the_images_of_a_lock_the_planner_rendered(tmp_path):
    import scripted as sc  # pylint: disable=import-outside-toplevel

    plan = sc.Site(tmp_path / "work").plan()
    images = _target_action.target_images({"payload": plan["payloads"]["compose.up"]})
    assert images and all("@sha256:" in image for image in images), images
    assert _target_action.image_registries(images) == sorted({image.split("/")[0] for image in images})
