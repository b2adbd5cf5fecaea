"""The examples in docs/stella_compose_deploy.md, docs/stella_rollback.md and docs/target-layout.md run
(or are compared with reality) here, so the documentation cannot drift from the code."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

import ansible_run as ar

DOCS = os.path.join(ar.ROOT, "docs")


def example(doc, name):
    with open(os.path.join(DOCS, doc), encoding="utf-8") as handle:
        text = handle.read()
    match = re.search(r"<!-- example: %s -->\n```[a-z]*\n(.*?)```" % re.escape(name), text, re.S)
    assert match, "docs/%s has no example %s" % (doc, name)
    return match.group(1)


@pytest.fixture
def ctx():
    c = ar.DeployCtx(ar.load_lab_json(), prefix="docs")
    try:
        yield c
    finally:
        c.cleanup()


def test_deploy_playbook_example_runs(ctx):
    rc, doc = ar.run_playbook(
        example("stella_compose_deploy.md", "deploy-playbook"), {"release": ctx.release(), "resolved": ctx.resolved}
    )
    results = ar.task_results(doc)
    assert rc == 0, json.dumps({k: v.get("msg") for k, v in results.items()})
    applied = results["Apply the compose.up payload on the target"]
    assert applied["changed"] is True and applied["serviceCount"] == 1
    assert results["Re-apply the same artifacts (no hook runs, no container is recreated)"]["changed"] is False
    assert not results["The second apply changed nothing"].get("failed")


def test_rollback_playbook_example_runs(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    assert not ctx.deploy(ctx.planned("app_v2", version="2.0.0"))["failed"]
    rc, doc = ar.run_playbook(
        example("stella_rollback.md", "rollback-playbook"),
        {"release": ctx.release("app_v2", version="2.0.0"), "resolved": ctx.resolved},
    )
    results = ar.task_results(doc)
    assert rc == 0, json.dumps({k: v.get("msg") for k, v in results.items()})
    rolled = results["Restore the latest retained revision"]
    assert rolled["rollbackRestored"] is True and rolled["rollbackReason"] == "post-deploy probe failed"
    assert rolled["restoredManifestHash"] == v1["manifestHash"]


def test_target_layout_example_matches_reality(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    assert not ctx.deploy(ctx.planned("app_v2", version="2.0.0"))["failed"]
    hash12 = v1["manifestHash"].split(":")[1][:12]
    listing = []
    for root, dirs, names in os.walk(ctx.project_dir):
        rel = os.path.relpath(root, ctx.project_dir)
        for name in dirs:
            listing.append(os.path.normpath(os.path.join(rel, name)) + "/")
        for name in names:
            listing.append(os.path.normpath(os.path.join(rel, name)))
    documented = example("target-layout.md", "layout").replace("<v1 hash12>", hash12).split()
    assert sorted(listing) == sorted(documented)

    def sha(data):
        return "sha256:" + hashlib.sha256(data).hexdigest()

    files = v1["_files"]
    record = example("target-layout.md", "revision-json")
    for placeholder, value in (
        ("<sha256 of v1's apply-manifest.json>", sha(files["apply-manifest.json"])),
        ("<sha256 of v1's lock>", sha(files["compose.stella.lock.yml"])),
        ("<sha256 of v1's sticker>", sha(files["stella.version.json"])),
        ("<v1 manifestHash>", v1["manifestHash"]),
        ("<projectName>", ctx.project),
    ):
        record = record.replace(placeholder, value)
    with open(os.path.join(ctx.project_dir, "revisions", "000001-" + hash12, "revision.json"), encoding="utf-8") as f:
        assert f.read() == record
