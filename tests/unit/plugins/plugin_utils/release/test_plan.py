"""plan_release: determinism (order, dict order, environment, hash seed), pinning, failures, compose acceptance."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import (  # noqa: E402
    compose_accepts_every_lock,
    DIGEST_A,
    DIGEST_B,
    ROOT,
    compose_config,
    load_release,
    minimal_release,
    resolved_for,
)

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


def _big_release(count=8):
    release = load_release()
    base = release["components"][0]
    for i in range(count):
        component = copy.deepcopy(base)
        component["name"] = "svc-%02d" % i
        component["image"] = "127.0.0.1:5000/stella/app:v%d" % (i % 3)
        component["config"]["env.INDEX"] = i
        release["components"].append(component)
    release["secretEnv"] = {"Z_SECRET": "z", "A_SECRET": "a$b", "M": "m"}
    release["hooks"] = [{"name": "h1", "phase": "pre-deploy", "command": "true"}]
    return release


def _reorder(value, rnd):
    """Same value, every dict rebuilt in a shuffled key order (lists of components shuffled too)."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: _reorder(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_reorder(v, rnd) for v in value]
    return value


def _digests(plan):
    return {
        k: plan[k]
        for k in (
            "manifestHash",
            "composeHash",
            "versionStickerHash",
            "applyManifestHash",
            "envArtifactHash",
            "jobId",
            "taskId",
            "projectName",
        )
    }


BASE = _big_release()
BASE_RESOLVED = resolved_for(BASE)
BASE_PLAN = plan_release(BASE, BASE_RESOLVED)


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_component_and_dict_order_never_change_bytes_or_digests(rnd):
    release = _reorder(copy.deepcopy(BASE), rnd)
    rnd.shuffle(release["components"])
    resolved = _reorder(dict(BASE_RESOLVED), rnd)
    plan = plan_release(release, resolved)
    assert plan["_files"] == BASE_PLAN["_files"]
    assert _digests(plan) == _digests(BASE_PLAN)
    assert plan["payloads"] == BASE_PLAN["payloads"]
    assert plan["desiredState"] == BASE_PLAN["desiredState"]


@settings(max_examples=30, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"\A[A-Z_]{1,8}\Z"),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8),
        max_size=5,
    )
)
def test_process_environment_never_changes_the_plan(noise):
    saved = dict(os.environ)
    try:
        os.environ.update(noise)
        os.environ["HOME"] = "/elsewhere"
        os.environ["TZ"] = "Pacific/Kiritimati"
        os.environ["LC_ALL"] = "C"
        plan = plan_release(copy.deepcopy(BASE), dict(BASE_RESOLVED))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert plan["_files"] == BASE_PLAN["_files"] and _digests(plan) == _digests(BASE_PLAN)


_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
from planning_support import load_release, resolved_for
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release
release = load_release()
release["secretEnv"] = {"B": "2", "A": "1", "C": "3"}
release["components"].extend({"name": "c%d" % i, "image": "r.example.com/x/c%d:1" % i,
                              "config": {"env.K%d" % j: str(j) for j in range(5)}} for i in range(20))
plan = plan_release(release, {c["image"]: "sha256:" + "%064x" % i for i, c in enumerate(release["components"])})
out = {k: v.decode("utf-8") for k, v in plan.pop("_files").items()}
out["plan"] = plan
sys.stdout.write(json.dumps(out, sort_keys=True))
"""


def test_two_processes_with_different_hash_seeds_agree():
    outputs = []
    for seed in ("0", "1", "4242", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                _SCRIPT,
                os.path.join(ROOT, ".build", "collections"),
                os.path.join(ROOT, "tests", "unit", "fixtures"),
            ],
            env=env,
            capture_output=True,
            check=True,
        )
        outputs.append(proc.stdout)
    assert len(set(outputs)) == 1
    assert b"compose.stella.lock.yml" in outputs[0]


def test_same_release_planned_twice_is_identical_including_default_ids():
    again = plan_release(copy.deepcopy(BASE), dict(BASE_RESOLVED))
    assert json.dumps({k: v for k, v in again.items() if k != "_files"}, sort_keys=True) == json.dumps(
        {k: v for k, v in BASE_PLAN.items() if k != "_files"}, sort_keys=True
    )
    assert again["jobId"].startswith("job-") and again["taskId"].startswith("task-")


def test_explicit_job_and_task_ids_reach_sticker_and_variables_but_not_the_lock():
    plan = plan_release(
        minimal_release(jobId="job-77", taskId="task-9"), {"registry.example.com/shop/web:1.0": DIGEST_A}
    )
    default = plan_release(minimal_release(), {"registry.example.com/shop/web:1.0": DIGEST_A})
    sticker = json.loads(plan["sticker"])
    assert sticker["jobId"] == "job-77" and sticker["taskId"] == "task-9"
    assert plan["payloads"]["compose.up"]["Variables"]["deploymentJobId"] == "job-77"
    assert plan["lock"] == default["lock"] and plan["manifestHash"] == default["manifestHash"]


def test_sticker_contents():
    sticker = json.loads(BASE_PLAN["sticker"])
    for key in (
        "release",
        "jobId",
        "taskId",
        "target",
        "slot",
        "trafficRole",
        "projectName",
        "workDirectory",
        "manifestHash",
        "composeHash",
        "components",
        "envArtifactHash",
    ):
        assert key in sticker, key
    assert all(set(c) == {"name", "image", "digest"} for c in sticker["components"])
    assert not any(word in BASE_PLAN["sticker"].lower() for word in ("timestamp", "createdat", 'time"'))


def test_digest_change_changes_everything_downstream():
    other = plan_release(BASE, {k: DIGEST_B for k in BASE_RESOLVED})
    assert other["manifestHash"] != BASE_PLAN["manifestHash"] and other["composeHash"] != BASE_PLAN["composeHash"]


def test_images_pinned_with_full_identity():
    components = [
        {"name": "a", "image": "nginx:1.25"},
        {"name": "b", "image": "ghcr.io/org/team/api"},
        {"name": "c", "image": "registry.example.com:5000/x/y:2@" + DIGEST_B},
    ]
    plan = plan_release(
        minimal_release(components=components), {"nginx:1.25": DIGEST_A, "ghcr.io/org/team/api": DIGEST_A}
    )
    images = {c["name"]: c["image"] for c in plan["components"]}
    assert images == {
        "a": "docker.io/library/nginx:1.25@" + DIGEST_A,
        "b": "ghcr.io/org/team/api:latest@" + DIGEST_A,
        "c": "registry.example.com:5000/x/y:2@" + DIGEST_B,
    }
    config = compose_config({"compose.stella.lock.yml": plan["lock"]})
    assert {n: s["image"] for n, s in config["services"].items()} == images


def test_unresolved_image_fails_planning():
    with pytest.raises(StellaError) as info:
        plan_release(minimal_release(), {})
    assert info.value.code == "image_unresolved" and "registry.example.com/shop/web:1.0" in info.value.reason


def test_invalid_release_fails_with_field():
    with pytest.raises(StellaError) as info:
        plan_release(minimal_release(strategy="big-bang"), {})
    assert info.value.code == "release_invalid" and "strategy" in info.value.reason


def test_target_endpoint_userinfo_is_redacted_everywhere():
    release = minimal_release()
    release["target"]["endpoint"] = "https://admin:pw123@agent.example.com:8443"
    plan = plan_release(release, {"registry.example.com/shop/web:1.0": DIGEST_A})
    text = json.dumps({k: v for k, v in plan.items() if k != "_files"}) + b"".join(plan["_files"].values()).decode()
    assert "pw123" not in text and "admin" not in text
    assert plan["target"]["endpoint"] == "https://agent.example.com:8443"


@pytest.mark.parametrize(
    "overrides,slot,role,suffix",
    [
        ({}, "active", "active", ""),
        ({"strategy": "canary"}, "canary", "canary", "_canary"),
        ({"strategy": "blue-green"}, "green", "standby", "_green"),
        ({"strategy": "blue-green", "activeSlot": "green"}, "green", "active", "_green"),
        ({"strategy": "a-b", "variantId": "variant-b"}, "variant-b", "variant", "_variant-b"),
        ({"strategy": "blue-green", "projectName": "shop"}, "green", "standby", None),
    ],
    ids=["rolling", "canary", "blue-green", "blue-green-active", "a-b", "explicit-project"],
)
def test_slots_labels_and_compose_acceptance(overrides, slot, role, suffix):
    plan = plan_release(minimal_release(**overrides), {"registry.example.com/shop/web:1.0": DIGEST_A})
    assert plan["slot"] == slot and plan["trafficRole"] == role
    if suffix is None:
        assert plan["projectName"] == "shop-green"
    else:
        assert plan["projectName"] == "acme_prod_tgt-1_shop" + suffix
    config = compose_config({"compose.stella.lock.yml": plan["lock"]})
    labels = config["services"]["web"]["labels"]
    assert labels["stella.slot"] == slot and labels["stella.traffic.role"] == role
    assert labels["stella.project"] == plan["projectName"] == config["name"]
    assert json.loads(plan["sticker"])["trafficRole"] == role


SCRIPTS = [
    {"moduleName": "db", "scriptId": "schema", "scriptVersion": "1", "phase": "start"},
    {
        "moduleName": "api",
        "scriptId": "seed",
        "scriptVersion": "2",
        "phase": "update",
        "dependencies": [{"moduleName": "db", "scriptId": "schema", "scriptVersion": "1"}],
    },
]


def test_scripts_give_a_passed_graph_proof_in_the_plan():
    release = copy.deepcopy(BASE)
    release["scripts"] = SCRIPTS
    plan = plan_release(release, BASE_RESOLVED)
    proof = plan["scriptGraphProof"]
    assert proof["schema"] == "release.script.graph-proof.v1" and proof["status"] == "passed"
    assert [n["scriptId"] for n in proof["startOrder"]] == ["schema"]
    assert [n["scriptId"] for n in proof["updateOrder"]] == ["seed"]
    # the proof is evidence, not desired state: the lock and manifest hash are unchanged
    assert plan["lock"] == BASE_PLAN["lock"] and plan["manifestHash"] == BASE_PLAN["manifestHash"]
    assert BASE_PLAN["scriptGraphProof"] is None


def test_a_failed_graph_proof_blocks_planning():
    release = copy.deepcopy(BASE)
    release["scripts"] = [
        dict(SCRIPTS[0], phase="start", dependencies=[{"moduleName": "api", "scriptId": "seed"}]),
        SCRIPTS[1],
    ]
    with pytest.raises(StellaError) as info:
        plan_release(release, BASE_RESOLVED)
    assert info.value.code == "graph_proof_failed"
    proof = info.value.evidence["scriptGraphProof"]
    assert proof["status"] == "failed"
    assert "start_depends_on_update" in {issue["code"] for issue in proof["issues"]}
    assert proof["proofDigest"] in info.value.reason


@pytest.mark.parametrize(
    "mutate, code, field",
    [
        (
            lambda r: r["components"][0]["config"].update({"env.BIG": 2**53 + 1}),
            "release_invalid",
            'components[0].config["env.BIG"]',
        ),
        (
            lambda r: r["components"][0]["config"].update({"healthcheck.retries": 2**64}),
            "release_invalid",
            'components[0].config["healthcheck.retries"]',
        ),
        (
            lambda r: r["components"][0]["config"].update({"env.S": "a\ud800"}),
            "release_invalid",
            'components[0].config["env.S"]',
        ),
        (lambda r: r["components"][0].update({"ports": ["99999:8080"]}), "release_invalid", "components[0].ports[0]"),
        (
            lambda r: r.update(
                {"hooks": [{"name": "h", "phase": "pre-deploy", "command": "x", "interpreter": '/bin/sh -c "x'}]}
            ),
            "release_invalid",
            "hooks[0].interpreter",
        ),
        (
            lambda r: r["components"][0]["config"].update({"healthProbe.type": "udp"}),
            "health_probe_config_invalid",
            'components[0].config["healthProbe.type"]',
        ),
        (
            lambda r: r["components"][0]["config"].update({"healthProbe.url": "http://h:0/"}),
            "health_probe_config_invalid",
            'components[0].config["healthProbe.url"]',
        ),
    ],
    ids=[
        "int-beyond-2^53",
        "retries-2^64",
        "lone-surrogate",
        "port-99999",
        "interpreter-quote",
        "probe-udp",
        "probe-url",
    ],
)
def test_bad_values_fail_planning_with_a_code_and_the_field_never_a_crash(mutate, code, field):
    release = load_release()
    mutate(release)
    with pytest.raises(StellaError) as info:
        plan_release(release, resolved_for(release))
    assert info.value.code == code and info.value.phase == "plan"
    assert info.value.evidence["field"] == field
