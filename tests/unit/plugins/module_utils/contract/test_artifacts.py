"""Apply manifest, artifact set verification, .env.stella, stdlib-only imports."""

from __future__ import annotations

import ast
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import (
    compose_accepts_every_lock,
    DIGEST_A,
    ROOT,
    TRICKY,
    compose_config,
    compose_value,
    minimal_release,
)  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import (  # noqa: E402
    build_apply_manifest,
    render_env_artifact,
    verify_artifact_set,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402

SECRETS = {"DB_PASSWORD": "hunter2-$ecret\"'\\\n\tx", "API_TOKEN": "tok-${HOME}-#1", "EMPTY": ""}


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


def _plan(**overrides):
    release = minimal_release(**overrides)
    return plan_release(release, {"registry.example.com/shop/web:1.0": DIGEST_A})


def test_apply_manifest_shape():
    files = {"compose.stella.lock.yml": b"lock", "stella.version.json": b"{}", ".env.stella": None}
    manifest = build_apply_manifest("p", "sha256:" + "c" * 64, files)
    assert manifest == {
        "schema": "stella.apply-manifest.v1",
        "projectName": "p",
        "manifestHash": "sha256:" + "c" * 64,
        "artifacts": {"compose.stella.lock.yml": sha256_bytes(b"lock"), "stella.version.json": sha256_bytes(b"{}")},
    }
    with pytest.raises(StellaError):
        build_apply_manifest("p", "x", {"stella.version.json": b"{}"})
    with pytest.raises(StellaError):
        build_apply_manifest("p", "x", {"compose.stella.lock.yml": b"", "stella.version.json": b"", "other": b""})


def test_plan_artifact_set_verifies_and_hash_chain_holds():
    plan = _plan(secretEnv=SECRETS)
    files = plan["_files"]
    manifest = json.loads(files["apply-manifest.json"])
    assert set(manifest["artifacts"]) == {"compose.stella.lock.yml", "stella.version.json", ".env.stella"}
    artifacts = {k: v for k, v in files.items() if k != "apply-manifest.json"}
    assert verify_artifact_set(files["apply-manifest.json"], artifacts, plan["projectName"], plan["manifestHash"]) == []
    sticker = json.loads(files["stella.version.json"])
    assert sticker["composeHash"] == sha256_bytes(files["compose.stella.lock.yml"]) == plan["composeHash"]
    assert sticker["manifestHash"] == plan["manifestHash"] == manifest["manifestHash"]
    assert plan["applyManifestHash"] == sha256_bytes(files["apply-manifest.json"])
    assert plan["artifactHashes"]["apply-manifest.json"] == plan["applyManifestHash"]


@pytest.mark.parametrize(
    "tamper,expect",
    [
        (
            lambda a: a.update({"compose.stella.lock.yml": a["compose.stella.lock.yml"] + b"#"}),
            "compose.stella.lock.yml hash",
        ),
        (
            lambda a: a.update({"stella.version.json": a["stella.version.json"].replace(b"rel-1", b"rel-2")}),
            "stella.version.json hash",
        ),
        (lambda a: a.update({".env.stella": b"X=1\n"}), ".env.stella hash"),
        (lambda a: a.pop(".env.stella"), ".env.stella is listed but missing"),
        (lambda a: a.pop("stella.version.json"), "stella.version.json is listed but missing"),
    ],
    ids=["lock", "sticker", "env", "env-missing", "sticker-missing"],
)
def test_tampering_is_detected(tamper, expect):
    plan = _plan(secretEnv=SECRETS)
    files = dict(plan["_files"])
    manifest = files.pop("apply-manifest.json")
    tamper(files)
    problems = verify_artifact_set(manifest, files)
    assert any(expect in p for p in problems), problems


def test_consistent_rewrite_of_lock_still_breaks_the_chain():
    """Re-hashing a changed lock into the apply manifest is caught by the sticker's composeHash."""
    plan = _plan()
    files = dict(plan["_files"])
    manifest = json.loads(files.pop("apply-manifest.json"))
    files["compose.stella.lock.yml"] += b"# edited\n"
    manifest["artifacts"]["compose.stella.lock.yml"] = sha256_bytes(files["compose.stella.lock.yml"])
    problems = verify_artifact_set(manifest, files)
    assert any("composeHash" in p for p in problems)
    other = _plan(release={"id": "rel-9", "name": "demo", "version": "1.0.0"})["_files"]["compose.stella.lock.yml"]
    files["compose.stella.lock.yml"] = other
    manifest["artifacts"]["compose.stella.lock.yml"] = sha256_bytes(other)
    assert any("stella.manifest.hash" in p for p in verify_artifact_set(manifest, files))


def test_unlisted_artifact_and_wrong_project_are_reported():
    plan = _plan()
    files = dict(plan["_files"])
    manifest = files.pop("apply-manifest.json")
    files[".env.stella"] = b"A=1\n"
    problems = verify_artifact_set(manifest, files, project_name="other", expected_manifest_hash="sha256:" + "0" * 64)
    assert any("not listed" in p for p in problems)
    assert any("projectName" in p for p in problems) and any("expected" in p for p in problems)
    assert verify_artifact_set(b"not json", {}) and verify_artifact_set({"schema": "x"}, {})


def test_env_artifact_values_reach_compose_verbatim():
    secrets = dict(SECRETS)
    secrets.update({"T%d" % i: text for i, text in enumerate(TRICKY) if "\u2028" not in text and "\x85" not in text})
    plan = _plan(secretEnv=secrets)
    files = plan["_files"]
    config = compose_config(
        {"compose.stella.lock.yml": files["compose.stella.lock.yml"], ".env.stella": files[".env.stella"]}
    )
    env = config["services"]["web"]["environment"]
    for name, value in secrets.items():
        assert env[name] == compose_value(value), name


def test_secret_values_never_enter_lock_sticker_manifest_or_desired_state():
    plan = _plan(secretEnv={"DB_PASSWORD": "s3cr3t-value-42"})
    files = plan["_files"]
    for name in ("compose.stella.lock.yml", "stella.version.json", "apply-manifest.json"):
        assert b"s3cr3t-value-42" not in files[name]
    visible = json.dumps({k: v for k, v in plan.items() if k != "_files"})
    assert "s3cr3t-value-42" not in visible
    assert plan["desiredState"]["secretEnv"] == {"DB_PASSWORD": sha256_bytes(b"s3cr3t-value-42")}
    assert b"s3cr3t-value-42" in files[".env.stella"]
    assert '- ".env.stella"' in plan["lock"]


def test_changing_a_secret_changes_the_manifest_hash_and_lock():
    one, two = _plan(secretEnv={"A": "1"}), _plan(secretEnv={"A": "2"})
    assert one["manifestHash"] != two["manifestHash"] and one["lock"] != two["lock"]


def test_render_env_artifact_sorted_and_none_without_secrets():
    assert render_env_artifact({}) is None
    assert render_env_artifact({"B": "x", "A": "$y"}) == b'A="\\$y"\nB="x"\n'


def test_artifacts_module_is_stdlib_only():
    """The contract package, which the controller imports too: only stdlib and the contract itself."""
    allowed_local = {"canonical", "errors", "hints", "vocabulary"}
    for name in ("artifacts.py", "canonical.py", "errors.py", "hints.py", "vocabulary.py"):
        with open(os.path.join(ROOT, "plugins", "module_utils", "contract", name), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible_collections"):
                assert node.module.rsplit(".", 1)[1] in allowed_local, node.module
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert module.split(".")[0] in sys.stdlib_module_names, module
