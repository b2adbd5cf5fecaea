"""stella_plan through ``ansible-playbook -vvv`` against the lab's auth registry: the password never shows.

Fails (never skips) when the lab is not running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "fixtures"))

from planning_support import compose_config, minimal_release  # noqa: E402
from test_plan_registry import auth_credentials, lab  # noqa: E402,F401 pylint: disable=unused-import

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import verify_artifact_set  # noqa: E402

SECRET_ENV = "planted-secret-env-5521"


def run_playbook(tmp_path, args):
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "plan",
                    "stellaops.runtime.stella_plan": "{{ plan_args }}",
                    "register": "plan",
                    "ignore_errors": True,
                },
                {
                    "name": "keep",
                    "ansible.builtin.copy": {"content": "{{ plan | to_json }}", "dest": str(tmp_path / "plan.json")},
                },
                {"name": "show", "ansible.builtin.debug": {"var": "plan"}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    (tmp_path / "vars.json").write_text(json.dumps({"plan_args": args}))
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    proc = subprocess.run(
        [
            os.path.join(ROOT, ".venv", "bin", "ansible-playbook"),
            "-vvv",
            "--diff",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + sys.executable,
            "-e",
            "@" + str(tmp_path / "vars.json"),
            str(tmp_path / "play.yml"),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "plan.json").read_text()), proc.stdout + proc.stderr


def _release(lab):
    return minimal_release(
        secretEnv={"DB_PASSWORD": SECRET_ENV},
        components=[
            {"name": "web", "image": lab["images"]["auth_app_v1"]["ref"], "config": {"env.MODE": "yes"}},
            {"name": "plain", "image": lab["images"]["app_v2"]["loopback_ref"]},
        ],
    )


def test_password_never_printed_with_vvv_and_artifacts_written(lab, tmp_path):
    address, username, password = auth_credentials(lab)
    dest = tmp_path / "artifacts"
    plan, output = run_playbook(
        tmp_path,
        {
            "release": _release(lab),
            "dest": str(dest),
            "registry_credentials": {address: {"username": username, "password": password}},
        },
    )
    assert plan.get("failed") is not True, plan.get("msg")
    assert password not in output and SECRET_ENV not in output
    assert {c["name"]: c["digest"] for c in plan["components"]} == {
        "web": lab["images"]["auth_app_v1"]["digest"],
        "plain": lab["images"]["app_v2"]["digest"],
    }
    files = {name: (dest / name).read_bytes() for name in os.listdir(dest)}
    assert verify_artifact_set(files.pop("apply-manifest.json"), files, plan["projectName"], plan["manifestHash"]) == []
    for name, data in files.items():
        assert password.encode() not in data
        assert (SECRET_ENV.encode() in data) == (name == ".env.stella")
    assert oct((dest / ".env.stella").stat().st_mode & 0o777) == "0o600"
    config = compose_config({name: (dest / name).read_bytes() for name in os.listdir(dest)})
    assert (
        config["services"]["web"]["image"]
        == lab["images"]["auth_app_v1"]["ref"] + "@" + lab["images"]["auth_app_v1"]["digest"]
    )
    assert config["services"]["web"]["environment"]["DB_PASSWORD"] == SECRET_ENV


def test_password_file_option_and_wrong_password(lab, tmp_path):
    address, username, password = auth_credentials(lab)
    (tmp_path / "pw").write_text(password + "\n")
    plan, output = run_playbook(
        tmp_path,
        {
            "release": _release(lab),
            "registry_credentials": {address: {"username": username, "password_file": str(tmp_path / "pw")}},
        },
    )
    assert plan.get("failed") is not True and password not in output
    wrong = password + "-not-it"
    plan, output = run_playbook(
        tmp_path,
        {
            "release": _release(lab),
            "dest": str(tmp_path / "nothing"),
            "registry_credentials": {address: {"username": username, "password": wrong}},
        },
    )
    assert plan["failed"] is True and plan["code"] == "image_unresolved" and "credentials were refused" in plan["msg"]
    assert wrong not in output and password not in output
    assert not (tmp_path / "nothing").exists()


def test_unknown_tag_fails_planning_and_writes_nothing(lab, tmp_path):
    release = minimal_release(
        components=[{"name": "web", "image": lab["registries"]["plain"]["address"] + "/stella/app:does-not-exist"}]
    )
    plan, _output = run_playbook(tmp_path, {"release": release, "dest": str(tmp_path / "out")})
    assert plan["failed"] is True and plan["code"] == "image_unresolved" and "not found" in plan["msg"]
    assert not (tmp_path / "out").exists()
