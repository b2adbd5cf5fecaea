"""stella_plan action plugin: helpers directly, and the plugin through a real ansible-playbook run."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))

from planning_support import (  # noqa: E402
    DIGEST_A,
    ROOT,
    FakeRegistry,
    compose_accepts_every_lock,
    compose_config,
    image_manifest,
    minimal_release,
)

from ansible_collections.stellaops.runtime.plugins.action.stella_plan import write_artifacts  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import (  # noqa: E402
    load_credentials,
    resolve_digests,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402

IMAGE = "registry.example.com/shop/web:1.0"
SECRET = "s3cr3t-Planted-7781"


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


def _files(**overrides):
    return plan_release(minimal_release(**overrides), {IMAGE: DIGEST_A})["_files"]


def test_write_artifacts_atomic_modes_and_idempotence(tmp_path):
    dest = str(tmp_path / "out")
    files = _files(secretEnv={"A": SECRET})
    changed, written, before = write_artifacts(dest, files, check_mode=False)
    assert changed and before is None
    assert written == [".env.stella", "compose.stella.lock.yml", "stella.version.json", "apply-manifest.json"]
    assert stat.S_IMODE(os.stat(os.path.join(dest, ".env.stella")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(dest, "compose.stella.lock.yml")).st_mode) == 0o644
    assert not [n for n in os.listdir(dest) if n.startswith(".stella-tmp-")]
    assert write_artifacts(dest, files, check_mode=False)[:2] == (False, [])
    os.chmod(os.path.join(dest, ".env.stella"), 0o644)
    assert write_artifacts(dest, files, check_mode=False)[1] == [".env.stella"]
    assert stat.S_IMODE(os.stat(os.path.join(dest, ".env.stella")).st_mode) == 0o600


def test_stale_env_artifact_is_removed_and_check_mode_writes_nothing(tmp_path):
    dest = str(tmp_path)
    write_artifacts(dest, _files(secretEnv={"A": SECRET}), check_mode=False)
    snapshot = {n: open(os.path.join(dest, n), "rb").read() for n in os.listdir(dest)}
    changed, written, _before = write_artifacts(dest, _files(), check_mode=True)
    assert changed and ".env.stella" in written
    assert {n: open(os.path.join(dest, n), "rb").read() for n in os.listdir(dest)} == snapshot
    write_artifacts(dest, _files(), check_mode=False)
    assert ".env.stella" not in os.listdir(dest)


def test_resolve_digests_with_pre_resolved_and_registry():
    registry = FakeRegistry("registry.example.com")
    digest = registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    release = minimal_release(
        components=[{"name": "web", "image": IMAGE}, {"name": "db", "image": "registry.example.com/x/db:2"}]
    )
    resolved, evidence = resolve_digests(
        release, {}, [], {"registry.example.com/x/db:2": DIGEST_A}, True, 5, transport=registry
    )
    assert resolved == {IMAGE: digest, "registry.example.com/x/db:2": DIGEST_A}
    assert evidence[IMAGE]["resolved"] is True and evidence["registry.example.com/x/db:2"]["source"] == "input"
    with pytest.raises(StellaError, match="resolve=false"):
        resolve_digests(release, {}, [], {}, False, 5)


def test_load_credentials(tmp_path):
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    assert load_credentials({"r:1": {"username": "u", "password_file": str(path)}}).get("r:1") == {
        "username": "u",
        "password": SECRET,
        "source": "registry_credentials",
    }
    with pytest.raises(StellaError):
        load_credentials({"r:1": {"password": "x"}})
    with pytest.raises(StellaError) as info:
        load_credentials({"r:1": {"username": "u", "password_file": str(tmp_path / "missing")}})
    assert SECRET not in info.value.reason


def _playbook(tmp_path, args, check=False, diff=False, verbosity=""):
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
                    "name": "show",
                    "ansible.builtin.copy": {"content": "{{ plan | to_json }}", "dest": str(tmp_path / "result.json")},
                    "check_mode": False,
                },
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
    cmd = [
        os.path.join(ROOT, ".venv", "bin", "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter=" + sys.executable,
        "-e",
        "@" + str(tmp_path / "vars.json"),
        str(tmp_path / "play.yml"),
    ]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    if verbosity:
        cmd.append(verbosity)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "result.json").read_text()), proc.stdout + proc.stderr


def test_playbook_plan_check_mode_diff_and_write(tmp_path):
    dest = tmp_path / "artifacts"
    args = {
        "release": minimal_release(secretEnv={"DB_PASSWORD": SECRET}),
        "resolved": {IMAGE: DIGEST_A},
        "resolve": False,
        "dest": str(dest),
    }
    result, output = _playbook(tmp_path, args, check=True, diff=True, verbosity="-vvv")
    assert result["changed"] is True and not dest.exists()
    assert '+name: "acme_prod_tgt-1_shop"' in output
    assert SECRET not in output and SECRET not in json.dumps(result)
    assert result["payloads"]["compose.up"]["ProjectName"] == result["projectName"] == "acme_prod_tgt-1_shop"
    assert "_files" not in result
    result, _output = _playbook(tmp_path, args)
    assert result["changed"] is True and sorted(os.listdir(dest)) == sorted(
        [".env.stella", "apply-manifest.json", "compose.stella.lock.yml", "stella.version.json"]
    )
    assert (dest / "compose.stella.lock.yml").read_text() == result["lock"]
    config = compose_config({name: (dest / name).read_bytes() for name in os.listdir(dest)})
    assert config["services"]["web"]["environment"]["DB_PASSWORD"] == SECRET
    result, _output = _playbook(tmp_path, args)
    assert result["changed"] is False


def test_playbook_failures_name_the_field_and_code(tmp_path):
    bad = minimal_release()
    bad["components"][0]["image"] = "Not An Image"
    result, _output = _playbook(tmp_path, {"release": bad})
    assert result["failed"] is True and result["code"] == "release_invalid" and "components[0].image" in result["msg"]
    result, _output = _playbook(tmp_path, {"release": minimal_release(), "resolve": False, "dest": str(tmp_path / "d")})
    assert result["code"] == "image_unresolved" and not (tmp_path / "d").exists()
