"""Release input schema: one copy (generated docs file), jsonschema agreement, errors that name the field."""

from __future__ import annotations

import copy
import json
import os
import sys

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import ROOT, load_release, minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import (  # noqa: E402
    DEFAULT_WORK_DIRECTORY,
    RELEASE_SCHEMA,
    field_path,
    normalize_release,
    schema_document,
    schema_errors,
    validate_release,
)

VALIDATOR = jsonschema.Draft202012Validator(RELEASE_SCHEMA)


def test_docs_schema_file_is_generated_from_the_module():
    with open(os.path.join(ROOT, "docs", "schemas", "release-input.schema.json"), "rb") as handle:
        on_disk = handle.read()
    assert on_disk == schema_document(), "run: .venv/bin/python docs/schemas/generate.py"
    assert json.loads(on_disk) == RELEASE_SCHEMA


def test_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(RELEASE_SCHEMA)


def _mutate(path, value):
    release = minimal_release(
        hooks=[{"name": "h", "phase": "pre-deploy", "command": "true"}],
        secretEnv={"DB_PASSWORD": "x"},
        preflight={"minimumFreeDiskBytes": 1},
    )
    node = release
    for part in path[:-1]:
        node = node[part]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return release


_DELETE = object()

CASES = [
    ("valid-minimal", (), None, None),
    ("missing-release", ("release",), _DELETE, "release"),
    ("missing-release-id", ("release", "id"), _DELETE, "release.id"),
    ("bad-release-id", ("release", "id"), " spaced", "release.id"),
    ("extra-top-level", ("unexpected",), 1, "unexpected"),
    ("target-type", ("target", "type"), "Kubernetes", "target.type"),
    ("target-endpoint-space", ("target", "endpoint"), "ssh://a b", "target.endpoint"),
    ("strategy", ("strategy",), "yolo", "strategy"),
    ("components-empty", ("components",), [], "components"),
    ("component-name-upper", ("components", 0, "name"), "Web", "components[0].name"),
    ("component-image-type", ("components", 0, "image"), 5, "components[0].image"),
    ("component-extra", ("components", 0, "cpu"), 1, "components[0].cpu"),
    ("config-key", ("components", 0, "config"), {"bad key": "x"}, 'components[0].config["bad key"]'),
    ("config-value-float", ("components", 0, "config"), {"env.A": 1.5}, 'components[0].config["env.A"]'),
    (
        "config-list-items",
        ("components", 0, "config"),
        {"healthcheck.test": [1]},
        'components[0].config["healthcheck.test"][0]',
    ),
    ("port-pattern", ("components", 0, "ports"), ["80:80:80:80"], "components[0].ports[0]"),
    ("port-int-range", ("components", 0, "ports"), [70000], "components[0].ports[0]"),
    ("port-int-ok", ("components", 0, "ports"), [8080, "127.0.0.1:80:8080/udp"], None),
    ("slot-pattern", ("slot",), "Blue", "slot"),
    ("project-pattern", ("projectName",), "-x", "projectName"),
    ("workdir-relative", ("workDirectory",), "var/lib", "workDirectory"),
    ("secret-name", ("secretEnv",), {"1BAD": "x"}, 'secretEnv["1BAD"]'),
    ("secret-value-type", ("secretEnv",), {"OK": 1}, "secretEnv.OK"),
    ("hook-phase", ("hooks", 0, "phase"), "during", "hooks[0].phase"),
    ("hook-timeout", ("hooks", 0, "timeoutSeconds"), 0, "hooks[0].timeoutSeconds"),
    ("hook-missing-command", ("hooks", 0, "command"), _DELETE, "hooks[0].command"),
    ("bool-type", ("pullImages",), "false", "pullImages"),
    ("preflight-mode", ("preflight", "registryReachabilityMode"), "ping", "preflight.registryReachabilityMode"),
    ("preflight-bool-as-int", ("preflight", "minimumFreeDiskBytes"), True, "preflight.minimumFreeDiskBytes"),
    ("strategy-config-extra-ok", ("strategyConfig",), {"waitForHealthCheck": False}, None),
    # a string boolean would read as on ("false" is truthy): refused, whichever of the four
    (
        "strategy-config-auto-rollback-string",
        ("strategyConfig",),
        {"autoRollbackOnFailure": "false"},
        "strategyConfig.autoRollbackOnFailure",
    ),
    (
        "strategy-config-rollback-alias-string",
        ("strategyConfig",),
        {"rollbackOnFailure": "no"},
        "strategyConfig.rollbackOnFailure",
    ),
    (
        "strategy-config-wait-string",
        ("strategyConfig",),
        {"waitForHealthCheck": "false"},
        "strategyConfig.waitForHealthCheck",
    ),
    (
        "strategy-config-require-adapter-int",
        ("strategyConfig",),
        {"requireTrafficAdapter": 0},
        "strategyConfig.requireTrafficAdapter",
    ),
    ("strategy-config-control-slot", ("strategyConfig",), {"controlSlot": "Blue"}, "strategyConfig.controlSlot"),
    ("tenant-control-char", ("tenant",), "a\nb", "tenant"),
]


@pytest.mark.parametrize("path,value,field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validator_agrees_with_jsonschema_and_names_the_field(path, value, field):
    release = minimal_release() if not path else _mutate(path, value)
    ours = schema_errors(release)
    theirs = list(VALIDATOR.iter_errors(release))
    assert bool(ours) == bool(theirs), (ours, [e.message for e in theirs])
    if field is None:
        assert not ours
        validate_release(release)
        return
    fields = {field_path(p) for p, _message in ours}
    theirs_paths = [tuple(e.absolute_path) for e in theirs]
    assert field in fields, fields
    with pytest.raises(StellaError) as info:
        validate_release(release)
    assert info.value.code == "release_invalid"
    assert field in info.value.reason
    # jsonschema reports the same location (required/additionalProperties errors point at the parent there)
    assert any(not p or field.startswith(field_path(p)) for p in theirs_paths), theirs_paths


_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 70000),
    st.text(max_size=6),
    st.sampled_from(["rolling", "ComposeHost", "active", "8080:80", "env.A", "a-b"]),
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["id", "name", "version", "type", "image", "config", "ports", "slot", "env.A", "x", "phase", "command"]
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)
_FIELDS = [
    "release",
    "components",
    "target",
    "tenant",
    "strategy",
    "slot",
    "secretEnv",
    "hooks",
    "preflight",
    "strategyConfig",
    "projectName",
    "pullImages",
    "workDirectory",
]


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(_FIELDS), value=_json)
def test_validator_agrees_with_jsonschema_on_random_values(field, value):
    release = minimal_release()
    release[field] = value
    assert bool(schema_errors(release)) == (not VALIDATOR.is_valid(release))


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, 0), key=st.sampled_from(["name", "image", "config", "ports", "extra"]), value=_json)
def test_validator_agrees_with_jsonschema_inside_components(index, key, value):
    release = minimal_release()
    release["components"][index][key] = value
    assert bool(schema_errors(release)) == (not VALIDATOR.is_valid(release))


@pytest.mark.parametrize(
    "components,field",
    [
        ([{"name": "a", "image": "r.io/x:1"}, {"name": "a", "image": "r.io/y:1"}], "components[1].name"),
        ([{"name": "a", "image": "r.io/X:1"}], "components[0].image"),
        (
            [{"name": "a", "image": "r.io/x:1", "config": {"env.STELLA_SLOT": "x"}}],
            'components[0].config["env.STELLA_SLOT"]',
        ),
        ([{"name": "a", "image": "r.io/x:1", "config": {"env.1A": "x"}}], 'components[0].config["env.1A"]'),
        (
            [{"name": "a", "image": "r.io/x:1", "config": {"healthcheck.interval": "often"}}],
            'components[0].config["healthcheck.interval"]',
        ),
        (
            [{"name": "a", "image": "r.io/x:1", "config": {"healthcheck.retries": "three"}}],
            'components[0].config["healthcheck.retries"]',
        ),
        (
            [{"name": "a", "image": "r.io/x:1", "config": {"healthcheck.test": ["RUN", "x"]}}],
            'components[0].config["healthcheck.test"]',
        ),
        (
            [{"name": "a", "image": "r.io/x:1", "config": {"healthcheck.bogus": "x"}}],
            'components[0].config["healthcheck.bogus"]',
        ),
        ([{"name": "a", "image": "r.io/x:1", "config": {"other": ["x"]}}], "components[0].config.other"),
    ],
    ids=[
        "duplicate-name",
        "bad-image",
        "reserved-env",
        "env-name",
        "duration",
        "retries",
        "test-list",
        "hc-key",
        "list-value",
    ],
)
def test_semantic_errors_name_the_field(components, field):
    with pytest.raises(StellaError) as info:
        validate_release(minimal_release(components=components))
    assert info.value.code == "release_invalid" and field in info.value.reason, info.value.reason
    assert info.value.evidence["field"] == field


def test_secret_env_key_cannot_also_be_plain_env():
    release = minimal_release(
        secretEnv={"TOKEN": "s"}, components=[{"name": "a", "image": "r.io/x:1", "config": {"env.TOKEN": "x"}}]
    )
    with pytest.raises(StellaError, match=r'config\["env.TOKEN"\] is also a secretEnv key'):
        validate_release(release)


def test_workdirectory_without_dot_segments():
    with pytest.raises(StellaError, match="workDirectory"):
        validate_release(minimal_release(workDirectory="/var/../etc"))


def test_normalize_fills_defaults_without_touching_the_input():
    release = load_release()
    before = copy.deepcopy(release)
    data = normalize_release(release)
    assert release == before
    assert data["workDirectory"] == DEFAULT_WORK_DIRECTORY
    assert data["secretEnv"] == {} and data["hooks"] == [] and data["backupExisting"] is True
    assert data["components"][0]["ports"] == ["18080:8080", "9090"]
    assert normalize_release(minimal_release(workDirectory="/srv/stella/"))["workDirectory"] == "/srv/stella"


@pytest.mark.parametrize("path", [("release", "id"), ("tenant",), ("slot",), ("components", 0, "name")])
def test_trailing_newline_is_refused_even_where_python_dollar_would_accept_it(path):
    release = minimal_release(slot="active")
    node = release
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = node[path[-1]] + "\n"
    with pytest.raises(StellaError, match="newline"):
        validate_release(release)


@pytest.mark.parametrize(
    "port",
    [
        "8080",
        "18080:8080",
        "127.0.0.1:80:8080/udp",
        "[::1]:80:8080",
        "8000-8010:80",
        "8000-8010:9000-9010/tcp",
        "80-90",
        1,
        65535,
        "65535:65535",
    ],
)
def test_valid_port_specs_still_plan(port):
    validate_release(minimal_release(components=[{"name": "a", "image": "r.io/x:1", "ports": [port]}]))


@pytest.mark.parametrize(
    "port, message",
    [
        ("99999:8080", "host port 99999 is out of range 1..65535"),
        ("0:80", "host port 0 is out of range 1..65535"),
        ("80:0", "container port 0 is out of range 1..65535"),
        ("8080:99999/udp", "container port 99999 is out of range 1..65535"),
        ("9000-8000:80", "host port range 9000-8000 is reversed"),
        ("8000-8001:80-90", "host port range 8000-8001 does not match container port range 80-90"),
        ("8000:80-90", "host port range 8000 does not match container port range 80-90"),
        ("300.0.0.1:80:80", "has an invalid IP address '300.0.0.1'"),
        ("[fe80::1::2]:80:80", "has an invalid IP address 'fe80::1::2'"),
    ],
)
def test_port_specs_are_checked_at_planning(port, message):
    with pytest.raises(StellaError) as info:
        validate_release(minimal_release(components=[{"name": "a", "image": "r.io/x:1", "ports": ["80", port]}]))
    assert info.value.code == "release_invalid"
    assert info.value.reason == "release input field components[0].ports[1] " + message
    assert info.value.evidence["field"] == "components[0].ports[1]"


@pytest.mark.parametrize(
    "value, field",
    [
        (2**53, 'components[0].config["env.N"]'),
        (-(2**63), 'components[0].config["env.N"]'),
        (10**5000, 'components[0].config["env.N"]'),
        ("a\ud800", 'components[0].config["env.N"]'),
        ("a\x00b", 'components[0].config["env.N"]'),
    ],
    ids=["2^53", "-2^63", "5000-digits", "lone-surrogate", "nul"],
)
def test_values_that_cannot_be_hashed_or_passed_on_are_refused_with_the_field(value, field):
    release = minimal_release(components=[{"name": "a", "image": "r.io/x:1", "config": {"env.N": value}}])
    with pytest.raises(StellaError) as info:
        validate_release(release)
    assert info.value.code == "release_invalid" and field in info.value.reason
    assert info.value.evidence["field"] == field


def test_safe_integers_and_open_strategy_config_floats_are_kept():
    release = minimal_release(
        components=[{"name": "a", "image": "r.io/x:1", "config": {"env.N": 2**53 - 1}}], strategyConfig={"weight": 0.5}
    )
    validate_release(release)
    with pytest.raises(StellaError, match=r"strategyConfig.weight must be a finite number"):
        validate_release(dict(release, strategyConfig={"weight": float("inf")}))


@pytest.mark.parametrize(
    "hook, field, message",
    [
        ({"interpreter": '/bin/sh -c "x'}, "hooks[0].interpreter", "cannot be split into words (No closing quotation)"),
        ({"interpreter": "'"}, "hooks[0].interpreter", "cannot be split into words (No closing quotation)"),
        ({"interpreter": "   "}, "hooks[0].interpreter", "must name a program"),
        ({"name": "  "}, "hooks[0].name", "must not be blank"),
        ({"command": " \t "}, "hooks[0].command", "must not be blank"),
    ],
)
def test_hooks_the_target_could_not_run_are_refused(hook, field, message):
    entry = dict({"name": "h", "phase": "pre-deploy", "command": "true"}, **hook)
    with pytest.raises(StellaError) as info:
        validate_release(minimal_release(hooks=[entry]))
    assert info.value.reason == "release input field %s %s" % (field, message)


def test_healthcheck_retries_must_not_be_negative():
    for value in (-1, "-1", "\u00b2", "9" * 20):
        release = minimal_release(
            components=[{"name": "a", "image": "r.io/x:1", "config": {"healthcheck.retries": value}}]
        )
        with pytest.raises(StellaError, match=r'config\["healthcheck.retries"\] must be a non-negative integer'):
            validate_release(release)


def test_probe_configuration_is_validated_with_the_release():
    release = minimal_release(components=[{"name": "a", "image": "r.io/x:1", "config": {"healthProbe.type": "udp"}}])
    with pytest.raises(StellaError) as info:
        validate_release(release)
    assert info.value.code == "health_probe_config_invalid"
    assert info.value.reason == (
        "Post-deploy health probe configuration invalid: component 'a': unsupported "
        "healthProbe.type 'udp' (supported: http, tcp)"
    )
    assert info.value.evidence["field"] == 'components[0].config["healthProbe.type"]'
