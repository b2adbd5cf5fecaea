"""Planning a whole job once: target identities, one digest per image, batches, options."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import DIGEST_A, compose_accepts_every_lock, minimal_release, resolved_for  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import plan as _job_plan  # noqa: E402


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


def hosts(count):
    return [
        ("vm%d" % i, {"ansible_host": "10.0.0.%d" % i, "ansible_user": "root", "ansible_port": 22})
        for i in range(1, count + 1)
    ]


@pytest.mark.parametrize(
    "host, expected",
    [
        ({"ansible_connection": "local"}, ("local", "local")),
        ({"ansible_host": "10.0.0.9", "ansible_user": "deploy", "ansible_port": 2222}, ("ssh://10.0.0.9:2222", "ssh")),
        ({"ansible_host": "vm.example"}, ("ssh://vm.example", "ssh")),
        ({}, ("ssh://vm1", "ssh")),
    ],
)
def test_target_identity_from_the_connection(host, expected):
    identity = _job_plan.target_identity("vm1", host, "ComposeHost")
    assert (identity["endpoint"], identity["executionMode"]) == expected
    assert (identity["id"], identity["name"], identity["type"]) == ("vm1", "vm1", "ComposeHost")


def test_stella_target_wins():
    identity = _job_plan.target_identity(
        "vm1", {"ansible_host": "10.0.0.1", "stella_target": {"id": "tgt-7", "name": "shop-vm-7"}}, "ComposeHost"
    )
    assert (identity["id"], identity["name"], identity["endpoint"]) == ("tgt-7", "shop-vm-7", "ssh://10.0.0.1")


def test_every_target_planned_with_one_job_id_and_the_same_digests():
    release = minimal_release(strategyConfig={"batchSize": 2})
    job = _job_plan.plan_job(release, hosts(5), resolved_for(release), "job-x")
    assert job["batches"] == [["vm1", "vm2"], ["vm3", "vm4"], ["vm5"]] and job["serial"] == [2, 2, 1]
    assert job["targetOrder"] == ["vm1", "vm2", "vm3", "vm4", "vm5"]
    plans = job["plans"]
    assert {p["jobId"] for p in plans.values()} == {"job-x"}
    assert len({p["taskId"] for p in plans.values()}) == 5
    assert {p["components"][0]["digest"] for p in plans.values()} == {DIGEST_A}
    assert plans["vm3"]["target"]["endpoint"] == "ssh://10.0.0.3:22"
    assert len({p["projectName"] for p in plans.values()}) == 5
    assert "_files" not in plans["vm1"] and set(job["files"]) == set(plans)


def test_the_lock_does_not_depend_on_the_job_but_the_sticker_names_it():
    release = minimal_release()
    first = _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-a")
    second = _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-b")
    assert first["files"]["vm1"]["compose.stella.lock.yml"] == second["files"]["vm1"]["compose.stella.lock.yml"]
    assert first["plans"]["vm1"]["manifestHash"] == second["plans"]["vm1"]["manifestHash"]
    assert b'"jobId": "job-a"' in first["files"]["vm1"]["stella.version.json"]
    assert first["files"]["vm1"]["stella.version.json"] != second["files"]["vm1"]["stella.version.json"]


def test_duplicate_target_ids_and_empty_jobs_are_refused():
    release = minimal_release()
    same = [(n, dict(v, stella_target={"id": "same"})) for n, v in hosts(2)]
    with pytest.raises(StellaError) as info:
        _job_plan.plan_job(release, same, resolved_for(release), "job-x")
    assert "same target id" in info.value.reason
    with pytest.raises(StellaError):
        _job_plan.plan_job(release, [], resolved_for(release), "job-x")


@pytest.mark.parametrize(
    "config, overrides, expected",
    [
        ({}, {}, (True, "default", True, "default")),
        (
            {"waitForHealthCheck": False, "rollbackOnFailure": False},
            {},
            (False, "strategyConfig.rollbackOnFailure", False, "strategyConfig.waitForHealthCheck"),
        ),
        (
            {"waitForHealthCheck": False},
            {"waitForHealthCheck": True, "autoRollbackOnFailure": False},
            (False, "override", True, "override"),
        ),
    ],
)
def test_job_options(config, overrides, expected):
    options = _job_plan.job_options({"strategyConfig": config}, overrides)
    assert (
        options["autoRollbackOnFailure"],
        options["autoRollbackSource"],
        options["waitForHealthCheck"],
        options["waitForHealthCheckSource"],
    ) == expected


def test_each_target_plan_carries_its_tasks_options_for_a_compose_host():
    release = minimal_release(
        components=[
            {
                "name": "web",
                "image": "registry.example.com/shop/web:1.0",
                "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": "80"},
            }
        ]
    )
    settings = {
        "waitForHealthCheck": False,
        "waitTimeout": 30,
        "keepRevisions": 3,
        "minEngineVersion": "25.0.0",
        "minComposeVersion": "2.30.0",
        "insecureRegistries": ["registry.lab:5001"],
        "claimLeaseSeconds": 0,
    }
    plan = _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-x", settings)["plans"]["vm1"]
    inputs = plan["inputs"]
    assert inputs["apply"] == {
        "task": "compose.up",
        "payload": plan["payloads"]["compose.up"],
        "wait_timeout": 30,
        "keep_revisions": 3,
        "task_timeout": 2 * 30 + 600,  # no hooks: the waits and the allowance (record.task_timeout)
        "preflight": {
            "payload": plan["payloads"]["compose.preflight"],
            "target_type": "ComposeHost",
            "min_engine_version": "25.0.0",
            "min_compose_version": "2.30.0",
            "insecure_registries": ["registry.lab:5001"],
        },
    }
    assert inputs["probe"] == {
        "components": [{"name": "web", "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": "80"}}],
        "target": plan["target"],
        "wait_for_health_check": False,
    }
    assert inputs["rollback"] == {
        "task": "compose.rollback",
        "payload": plan["payloads"]["compose.rollback"],
        "wait_timeout": 30,
        "task_timeout": 660,
    }
    given = _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-x", dict(settings, taskTimeout=90))
    assert given["plans"]["vm1"]["inputs"]["apply"]["task_timeout"] == 90


def test_a_docker_host_plan_applies_every_components_payload_and_commits_the_sticker():
    release = minimal_release(
        target={
            "id": "tgt-1",
            "name": "vm-1",
            "type": "DockerHost",
            "endpoint": "ssh://10.0.0.5",
            "executionMode": "ssh",
        }
    )
    plan = _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-x")["plans"]["vm1"]
    apply = plan["inputs"]["apply"]
    assert (apply["task"], apply["payloads"], apply["version_sticker"]) == (
        "docker.run",
        plan["payloads"]["docker.run"],
        plan["sticker"],
    )
    assert "payload" not in apply and apply["preflight"]["target_type"] == "DockerHost"
    # without settings, the contract's defaults
    assert (apply["wait_timeout"], apply["keep_revisions"], apply["preflight"]["min_engine_version"]) == (
        120,
        10,
        "24.0.0",
    )
    assert plan["inputs"]["rollback"]["task"] == "docker.rollback"
    assert plan["inputs"]["probe"]["wait_for_health_check"] is True


@pytest.mark.parametrize("strategy", ["yolo", "", None, 7])
def test_an_unknown_or_empty_strategy_is_release_invalid_naming_the_field(strategy):
    release = minimal_release(strategy=strategy)
    with pytest.raises(StellaError) as info:
        _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-x")
    assert info.value.code == "release_invalid" and "release input field strategy" in info.value.reason, info.value


@pytest.mark.parametrize("slot", ["Blue", "", "../x", 5])
def test_a_bad_control_slot_is_release_invalid_like_every_slot(slot):
    release = minimal_release(strategy="canary", strategyConfig={"controlSlot": slot})
    with pytest.raises(StellaError) as info:
        _job_plan.plan_job(release, hosts(1), resolved_for(release), "job-x")
    assert info.value.code == "release_invalid" and "strategyConfig.controlSlot" in info.value.reason, info.value
