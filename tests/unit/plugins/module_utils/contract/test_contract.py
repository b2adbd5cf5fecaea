"""contract/tasks.py and contract/vocabulary.py: the payload schemas' one parse rule, the target identity
shape, value checks, and the controller's payload builder against the target parsers of all four tasks."""

from __future__ import annotations

import copy
import datetime

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import request as creq
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import rollback as rb
from ansible_collections.stellaops.runtime.plugins.module_utils.contract import tasks
from ansible_collections.stellaops.runtime.plugins.module_utils.contract import vocabulary as ct
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import request as dreq
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import build_request
from ansible_collections.stellaops.runtime.plugins.modules import stella_preflight
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

T_PAYLOAD = {"Id": "tgt-01", "Name": "vm-01", "Type": "ComposeHost", "Endpoint": "local", "ExecutionMode": "agent"}
T_OPTION = dict(sc.TARGET)
D = "sha256:" + "a" * 64

SCHEMA = tasks.TaskSchema(
    "t.test",
    (
        tasks.Field("Name", "name", "text", required=True),
        tasks.Field("Flag", "flag", "bool", required=True, default=True),
        tasks.Field("Count", "count", "int", default=3),
        tasks.Field("Labels", "labels", "strdict", default={}),
        tasks.Field("Items", "items", "list", default=[]),
        tasks.Field("Extra", None, "dict", default={}),
        tasks.Field("Digest", "digest", "digest"),
        tasks.Field("WorkDirectory", "work_directory", "workdir", default="/var/lib/x"),
        tasks.Field("ProjectName", "project_name", "project"),
        tasks.Field("Target", "target", "target"),
    ),
)
DEFAULTS = {
    "name": "n",
    "flag": True,
    "count": 3,
    "labels": {},
    "items": [],
    "Extra": {},
    "digest": None,
    "work_directory": "/var/lib/x",
    "project_name": None,
    "target": None,
}


# --------------------------------------------------------------------------- TaskSchema.parse


@pytest.mark.parametrize(
    "payload,options,needle",
    [
        ({"Name": "n", "Flag": True, "Nmae": "x"}, None, "unknown key(s) Nmae"),
        ({"Name": "n", "Flag": True, "name": "x"}, None, "unknown key(s) name"),
        ({"Name": "n", "Flag": True, "Labels": {}, "labels": {}}, None, "unknown key(s) labels"),
        ({"Flag": True}, None, "lacks required Name (payload key Name, option name)"),
        (None, {}, "lacks required Name"),
        ({"Name": "n"}, None, "lacks required Flag"),
        ({"Name": "", "Flag": True}, None, "Name must be a non-empty string"),
        ({"Name": 3, "Flag": True}, None, "Name must be a non-empty string"),
        ({"Name": "n", "Flag": "true"}, None, "Flag must be a boolean"),
        ({"Name": "n", "Flag": 1}, None, "Flag must be a boolean"),
        ({"Name": "n", "Flag": True, "Count": -1}, None, "Count must be a non-negative integer"),
        ({"Name": "n", "Flag": True, "Count": True}, None, "Count must be a non-negative integer"),
        ({"Name": "n", "Flag": True, "Count": 1.5}, None, "Count must be a non-negative integer"),
        ({"Name": "n", "Flag": True, "Labels": []}, None, "Labels must be an object"),
        ({"Name": "n", "Flag": True, "Labels": {"a": 1}}, None, "Labels must be an object of strings"),
        ({"Name": "n", "Flag": True, "Items": {}}, None, "Items must be a list"),
        ({"Name": "n", "Flag": True, "Extra": "x"}, None, "Extra must be an object"),
        ({"Name": "n", "Flag": True, "Digest": "sha256:abc"}, None, "must be sha256:<64 hex>"),
        ({"Name": "n", "Flag": True, "Digest": D.upper()}, None, "must be sha256:<64 hex>"),
        ({"Name": "n", "Flag": True, "WorkDirectory": "rel"}, None, "must be an absolute path"),
        ({"Name": "n", "Flag": True, "ProjectName": "Shop"}, None, "ProjectName 'Shop' must match"),
        ({"Name": "n", "Flag": True, "Target": "tgt-01"}, None, "Target must be an object"),
        (["Name"], None, "payload must be an object, got list"),
        ({"Name": "n", "Flag": True}, {"name": "m"}, "payload key Name conflicts with option name"),
        ({"Name": "n", "Flag": True}, {"flag": False}, "payload key Flag conflicts with option flag"),
        ({"Name": "n", "Flag": True, "Count": 0}, {"count": 3}, "payload key Count conflicts with option count"),
        ({"Name": "n", "Flag": True, "WorkDirectory": "/a"}, {"work_directory": "/b"}, "WorkDirectory conflicts"),
        ({"Name": "n", "Flag": True, "Target": T_PAYLOAD}, {"target": dict(T_OPTION, id="tgt-02")}, "Target conflicts"),
        (None, {"name": "n", "flag": "yes"}, "Flag must be a boolean"),
    ],
    ids=[
        "unknown",
        "wrong-case",
        "snake-case-key",
        "missing",
        "missing-options",
        "missing-required-with-default",
        "empty-text",
        "int-text",
        "str-bool",
        "int-bool",
        "negative",
        "bool-int",
        "float-int",
        "list-dict",
        "strdict-values",
        "dict-list",
        "extra-not-object",
        "short-digest",
        "upper-digest",
        "relative-workdir",
        "bad-project",
        "target-string",
        "payload-list",
        "conflict-text",
        "conflict-bool",
        "conflict-falsy-int",
        "conflict-workdir",
        "conflict-target",
        "bad-option-type",
    ],
)
def test_parse_refuses(payload, options, needle):
    with pytest.raises(StellaError) as err:
        SCHEMA.parse(payload, options)
    assert err.value.code == "invalid_payload" and err.value.phase == "validate_payload"
    assert needle in err.value.reason


@pytest.mark.parametrize(
    "payload,options,expected",
    [
        ({"Name": "n", "Flag": True}, None, {}),
        (None, {"name": "n"}, {}),
        ({}, {"name": "n"}, {}),
        ({"Name": "n", "Flag": False}, {"name": "n", "flag": False}, {"flag": False}),
        ({"Name": "n", "Flag": True, "Count": 0}, {"count": 0}, {"count": 0}),
        ({"Name": "n", "Flag": True, "Count": 5}, {"count": None}, {"count": 5}),
        ({"Name": "n", "Flag": True}, {"count": 7, "labels": {"a": "b"}}, {"count": 7, "labels": {"a": "b"}}),
        ({"Name": "n", "Flag": True, "Target": T_PAYLOAD}, {"target": T_OPTION}, {"target": T_OPTION}),
        ({"Name": "n", "Flag": True}, {"target": T_PAYLOAD}, {"target": T_OPTION}),
        (
            {"Name": "n", "Flag": True, "WorkDirectory": "/srv/x/"},
            {"work_directory": "/srv/x"},
            {"work_directory": "/srv/x"},
        ),
        ({"Name": "n", "Flag": True, "WorkDirectory": "/srv/./x"}, None, {"work_directory": "/srv/x"}),
        (
            {"Name": "n", "Flag": True, "Digest": D, "ProjectName": "shop_prod-1"},
            {"digest": D},
            {"digest": D, "project_name": "shop_prod-1"},
        ),
        ({"Name": "n", "Flag": True, "Extra": {"k": 1}}, {"unrelated": "ignored"}, {"Extra": {"k": 1}}),
    ],
    ids=[
        "payload",
        "options",
        "empty-payload-is-options",
        "equal-both-ways",
        "equal-zero",
        "none-option",
        "options-fill-payload",
        "target-both-casings",
        "target-payload-casing-as-option",
        "workdir-normalised-equal",
        "workdir-dot",
        "digest-project",
        "no-option-key",
    ],
)
def test_parse_accepts(payload, options, expected):
    assert SCHEMA.parse(payload, options) == dict(DEFAULTS, **expected)


def test_required_with_default_is_required_only_of_payloads():
    plan = planned()
    payload = dict(plan["payloads"]["compose.up"])
    del payload["PullImages"]
    with pytest.raises(StellaError) as err:
        tasks.COMPOSE_UP.parse(payload)
    assert "lacks required PullImages" in err.value.reason
    options = {
        "project_name": plan["projectName"],
        "compose_lock": plan["lock"],
        "version_sticker": plan["sticker"],
        "target": T_OPTION,
    }
    request = tasks.COMPOSE_UP.parse(None, options)
    assert request["pull_images"] is True and request["backup_existing"] is True
    assert tasks.COMPOSE_UP.parse(None, dict(options, pull_images=False))["pull_images"] is False


def test_defaults_of_the_real_schemas():
    request = tasks.COMPOSE_ROLLBACK.parse({"ProjectName": "p", "Target": T_PAYLOAD})
    assert request == {
        "project_name": "p",
        "revision_path": None,
        "reason": None,
        "manifest_hash": None,
        "work_directory": ct.DEFAULT_WORK_DIRECTORY,
        "target": T_OPTION,
        "Variables": {},
    }
    assert tasks.COMPOSE_PREFLIGHT.parse(None, {}) == {
        "work_directory": ct.DEFAULT_WORK_DIRECTORY,
        "image_reference": None,
        "minimum_free_disk_bytes": ct.DEFAULT_MINIMUM_FREE_DISK_BYTES,
        "registry_reachability_mode": ct.DEFAULT_REACHABILITY_MODE,
        "require_compose": None,
    }


def test_payload_builder():
    assert SCHEMA.payload(Name="n", Flag=False, Count=None) == {"Name": "n", "Flag": False}
    with pytest.raises(ValueError):
        SCHEMA.payload(Name="n", Flag=True, Nope=1)
    with pytest.raises(ValueError):
        SCHEMA.payload(Flag=True)


def test_schemas_are_consistent():
    for schema in tasks.TASKS.values():
        assert len(set(schema.keys)) == len(schema.keys) and len(set(schema.options)) == len(schema.options)
        assert all(key[0].isupper() for key in schema.keys), schema.name
        assert all(option == option.lower() for option in schema.options), schema.name
    steps = {step for _name, parts in ct.DEPLOYMENT_PHASES for step in parts}
    assert set(ct.COMPOSE_STEPS) | set(ct.DOCKER_STEPS) <= steps
    rollback_steps = [step for _name, parts in ct.ROLLBACK_PHASES for step in parts]
    assert [step for step in rollback_steps if step in ct.ROLLBACK_STEPS] == list(ct.ROLLBACK_STEPS)
    assert [step for step in rollback_steps if step in ct.DOCKER_ROLLBACK_STEPS] == list(ct.DOCKER_ROLLBACK_STEPS)
    assert set(rollback_steps) == set(ct.ROLLBACK_STEPS) | set(ct.DOCKER_ROLLBACK_STEPS)
    assert len(ct.PHASES) == 9 and [name for name, _parts in ct.DEPLOYMENT_PHASES] == list(ct.PHASES[:7])
    assert [name for name, _parts in ct.ROLLBACK_PHASES] == list(ct.ROLLBACK_PHASE_NAMES)


# --------------------------------------------------------------------------- target identity


@pytest.mark.parametrize("value", [T_PAYLOAD, T_OPTION], ids=["payload-casing", "option-casing"])
def test_parse_target_both_casings(value):
    assert ct.parse_target(value) == T_OPTION


@pytest.mark.parametrize(
    "value,needle",
    [
        (dict(T_PAYLOAD, Region="eu"), "unknown key(s) Region"),
        (dict(T_OPTION, region="eu"), "unknown key(s) region"),
        ({k: v for k, v in T_PAYLOAD.items() if k != "Endpoint"}, "Target.Endpoint is required"),
        (dict(T_PAYLOAD, Id=""), "Target.Id is required and must be a non-empty string"),
        (dict(T_PAYLOAD, Name=7), "Target.Name is required"),
        (dict(T_PAYLOAD, Type="KubernetesHost"), "Target.Type 'KubernetesHost' is not one of ComposeHost, DockerHost"),
        ("tgt-01", "must be an object"),
        (None, "must be an object"),
        ([T_PAYLOAD], "must be an object"),
    ],
    ids=[
        "extra-payload-key",
        "extra-option-key",
        "missing",
        "empty",
        "not-string",
        "bad-type",
        "string",
        "none",
        "list",
    ],
)
def test_parse_target_refuses(value, needle):
    with pytest.raises(StellaError) as err:
        ct.parse_target(value)
    assert err.value.code == "invalid_payload" and needle in err.value.reason


def test_target_shapes_round_trip():
    assert ct.target_context(T_OPTION) == T_PAYLOAD
    assert ct.parse_target(ct.target_context(T_OPTION)) == T_OPTION
    assert ct.target_evidence(T_OPTION) == {
        "targetId": "tgt-01",
        "targetName": "vm-01",
        "targetType": "ComposeHost",
        "targetEndpoint": "local",
        "targetExecutionMode": "agent",
    }
    labels = ct.target_labels(T_OPTION)
    assert labels == {
        "stella.target.id": "tgt-01",
        "stella.target.name": "vm-01",
        "stella.target.type": "ComposeHost",
        "stella.target.endpoint": "local",
        "stella.execution.mode": "agent",
    }
    assert ct.parse_target({key: labels[label] for label, key in ct.TARGET_LABELS}) == T_OPTION
    evidence = ct.target_evidence(T_OPTION)
    assert ct.parse_target({key: evidence["target" + key[0].upper() + key[1:]] for key in ct.TARGET_KEYS}) == T_OPTION


@pytest.mark.parametrize(
    "endpoint,host",
    [
        ("local", "localhost"),
        ("LOCAL", "localhost"),
        ("localhost", "localhost"),
        ("127.0.0.1", "localhost"),
        ("::1", "localhost"),
        ("[::1]", "localhost"),
        ("unix:///var/run/docker.sock", "localhost"),
        ("npipe:////./pipe/docker_engine", "localhost"),
        ("ssh://deploy@10.0.0.5:22", "10.0.0.5"),
        ("ssh://10.0.0.5", "10.0.0.5"),
        ("ssh://user:pw@h.example:22/x", "h.example"),
        ("root@Host.Example", "host.example"),
        ("host:2222", "host"),
        ("tcp://[fe80::1]:2376", "fe80::1"),
        ("fe80::1", "fe80::1"),
        ("vm-01", "vm-01"),
        ("  vm-01  ", "vm-01"),
        ("", ""),
        (None, ""),
    ],
)
def test_endpoint_host(endpoint, host):
    assert ct.endpoint_host(endpoint) == host


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "value,expected",
    [
        ("/srv/stella", "/srv/stella"),
        ("/srv/stella/", "/srv/stella"),
        ("/srv/./stella", "/srv/stella"),
        ("//srv//x/", "/srv/x"),
        ("/", "/"),
    ],
    ids=["plain", "trailing-slash", "dot", "double-slashes", "root"],
)
def test_check_work_directory_normalises(value, expected):
    assert ct.check_work_directory(value) == expected


@pytest.mark.parametrize(
    "value,needle",
    [
        ("/srv/stella/../elsewhere", "must not contain '..' segments"),
        ("..", "must be an absolute path"),
        ("srv/stella", "must be an absolute path"),
        ("./srv", "must be an absolute path"),
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        (["/srv"], "must be a non-empty string"),
    ],
    ids=["dotdot", "bare-dotdot", "relative", "dot-relative", "empty", "none", "list"],
)
def test_check_work_directory_refuses(value, needle):
    with pytest.raises(StellaError) as err:
        ct.check_work_directory(value)
    assert err.value.code == "invalid_payload" and needle in err.value.reason and "WorkDirectory" in err.value.reason


def test_equal_work_directories_do_not_conflict():
    """``//srv//x/`` names the directory ``/srv/x`` names: given both ways it is no conflict."""
    request = SCHEMA.parse({"Name": "n", "Flag": True, "WorkDirectory": "//srv//x/"}, {"work_directory": "/srv/x"})
    assert request["work_directory"] == "/srv/x"


@pytest.mark.parametrize(
    "value,ok",
    [
        ("a" * 63, True),
        ("a" * 64, False),
        ("shop_prod-1", True),
        ("0shop", True),
        ("Shop", False),
        ("-shop", False),
        ("_shop", False),
        ("shop.prod", False),
        ("", False),
        (None, False),
        ("shop\n", False),
    ],
)
def test_check_project_name(value, ok):
    if ok:
        assert ct.check_project_name(value) == value
    else:
        with pytest.raises(StellaError) as err:
            ct.check_project_name(value)
        assert err.value.code == "invalid_payload" and "at most 63 characters" in err.value.reason


# --------------------------------------------------------------------------- builder -> target parsers


def planned(target_type="ComposeHost", work="/srv/stella"):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "prod",
        "application": "shop",
        "strategy": "rolling",
        "workDirectory": work,
        "target": dict(sc.TARGET, type=target_type, endpoint="ssh://deploy@10.0.0.5:22"),
        "components": [
            {"name": "web", "image": sc.IMAGE, "config": {"env.MODE": "x"}, "ports": ["8080"]},
            {"name": "api", "image": sc.IMAGE, "config": {"runtime.skipPull": True}},
        ],
        "hooks": [{"name": "migrate", "phase": "pre-deploy", "command": "./migrate.sh", "failurePolicy": "warn"}],
        "secretEnv": {"DB_PASSWORD": "hunter2"},
        "preflight": {"minimumFreeDiskBytes": 2048, "registryReachabilityMode": "tcp"},
    }
    return _plan.plan_release(release, {sc.IMAGE: sc.DIGEST})


def target_of(plan):
    return dict(plan["target"])


def test_builder_keys_are_the_schema_keys():
    for target_type in ("ComposeHost", "DockerHost"):
        plan = planned(target_type)
        for name, payloads in plan["payloads"].items():
            schema = tasks.TASKS[name]
            for payload in payloads if isinstance(payloads, list) else [payloads]:
                assert set(payload) <= set(schema.keys), (name, sorted(set(payload) - set(schema.keys)))
                assert schema.payload(**payload) == payload  # the builder's one definition


def test_compose_up_payload_is_accepted():
    plan = planned()
    payload = copy.deepcopy(plan["payloads"]["compose.up"])
    request = creq.parse_request(payload)
    assert request["project_name"] == plan["projectName"] and request["target"] == target_of(plan)
    assert request["work_directory"] == plan["workDirectory"] and request["manifest_hash"] == plan["manifestHash"]
    assert [hook["Name"] for hook in request["hooks"]] == ["migrate"]
    files, sticker = creq.check_artifacts(request, plan["_files"][".env.stella"])
    assert (
        sticker["manifestHash"] == plan["manifestHash"]
        and files["apply-manifest.json"].decode() == plan["applyManifest"]
    )
    # the same values given again as options are no conflict
    again = creq.parse_request(
        payload,
        {
            "project_name": plan["projectName"],
            "work_directory": plan["workDirectory"],
            "target": target_of(plan),
            "manifest_hash": plan["manifestHash"],
        },
    )
    assert again == request


def test_compose_rollback_payload_is_accepted():
    plan = planned()
    payload = plan["payloads"]["compose.rollback"]
    request = rb.parse_request(payload)
    assert request["project_name"] == plan["projectName"] and request["target"] == target_of(plan)
    assert request["manifest_hash"] == plan["manifestHash"] and request["revision_path"] is None
    assert rb.parse_request(payload, {"revision_path": "000001-abcdefabcdef"})["revision_path"] == "000001-abcdefabcdef"


def test_compose_rollback_payload_names_the_planned_work_directory():
    plan = planned()
    assert rb.parse_request(plan["payloads"]["compose.rollback"])["work_directory"] == plan["workDirectory"]


def test_docker_run_payloads_are_accepted():
    plan = planned("DockerHost")
    payloads = plan["payloads"]["docker.run"]
    assert [p["Name"] for p in payloads] == [plan["projectName"] + "-api", plan["projectName"] + "-web"]
    for payload in payloads:
        request = dreq.parse_request(payload)
        assert request["target"] == target_of(plan) and request["work_directory"] == plan["workDirectory"]
        assert request["project_directory"] == plan["projectDirectory"]
        assert request["manifest_hash"] == plan["manifestHash"]
        assert request["env_file"] == plan["paths"]["envArtifactPath"]
        assert all(key in request["labels"] for key in ct.REQUIRED_STELLA_LABELS)
    assert [dreq.parse_request(p)["pull_image"] for p in payloads] == [False, True]


def test_compose_preflight_payload_is_accepted():
    plan = planned()
    payload = plan["payloads"]["compose.preflight"]
    assert tasks.COMPOSE_PREFLIGHT.parse(payload) == {
        "work_directory": plan["workDirectory"],
        "image_reference": sc.PINNED,
        "minimum_free_disk_bytes": 2048,
        "registry_reachability_mode": "tcp",
        "require_compose": True,
    }
    params = {name: spec.get("default") for name, spec in stella_preflight.ARGUMENT_SPEC.items()}
    params["payload"] = payload
    request = build_request(params)
    assert request["work_directory"] == plan["workDirectory"] and request["require_compose"] is True
    assert request["image"].digest == sc.DIGEST
    docker = planned("DockerHost")["payloads"]["compose.preflight"]
    assert build_request(dict(params, payload=docker, target_type="DockerHost"))["require_compose"] is False


def test_utc_timestamp_is_the_one_contract_format():
    moment = datetime.datetime(2026, 3, 1, 10, 5, 0, 123456, tzinfo=datetime.timezone.utc)
    assert ct.utc_timestamp(moment) == "2026-03-01T10:05:00.123456Z"
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    assert ct.utc_timestamp(moment.astimezone(plus_two)) == "2026-03-01T10:05:00.123456Z"  # always UTC
    now = ct.utc_timestamp()
    assert datetime.datetime.strptime(now, ct.TIMESTAMP_FORMAT).year >= 2026 and now.endswith("Z")
