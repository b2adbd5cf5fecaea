"""The malformed-input corpus: every row of tests/unit/fixtures/input_corpus.yml, merged over the basic release,
ends in its stable code with the field named in the reason (or, for valid rows, plans with strings kept strings).

Pure: digests come from the planning helpers, nothing touches a network or a target.
"""

from __future__ import annotations

import copy
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import DIGEST_A, FIXTURES, load_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import validate_release  # noqa: E402

DELETE = "__delete__"
CODES = ("release_invalid", "health_probe_config_invalid")
STAGES = ("validate", "plan")


SURROGATE_TOKEN = "<lone-surrogate>"


def _substitute(value):
    if isinstance(value, str):
        return value.replace(SURROGATE_TOKEN, "\ud800")
    if isinstance(value, dict):
        return {_substitute(k): _substitute(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v) for v in value]
    return value


def _load_corpus():
    with open(os.path.join(FIXTURES, "input_corpus.yml"), "r", encoding="utf-8") as handle:
        return _substitute(yaml.safe_load(handle))


CORPUS = _load_corpus()


def merge(base, fragment):
    """``fragment`` over ``base`` (see the header of input_corpus.yml); returns a new value."""
    if isinstance(fragment, dict) and isinstance(base, dict):
        out = copy.deepcopy(base)
        for key, value in fragment.items():
            if value == DELETE:
                out.pop(key, None)
            else:
                out[key] = merge(out.get(key), value)
        return out
    if isinstance(fragment, dict) and isinstance(base, list) and all(isinstance(k, int) for k in fragment):
        out = copy.deepcopy(base)
        for index, value in sorted(fragment.items()):
            if index == len(out):
                out.append(merge({}, value))
            else:
                out[index] = merge(out[index], value)
        return out
    return copy.deepcopy(fragment)


def resolved(release):
    """A digest for every reference planning would have to resolve (whatever shape the input has)."""
    components = release.get("components") if isinstance(release, dict) else None
    refs = [c.get("image") for c in components if isinstance(c, dict)] if isinstance(components, list) else []
    return {ref: DIGEST_A for ref in refs if isinstance(ref, str) and "@" not in ref}


def test_corpus_table_is_well_formed():
    ids = [row["id"] for row in CORPUS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    failing = [row for row in CORPUS if row["code"] is not None]
    assert len(failing) >= 40
    for row in CORPUS:
        assert set(row) <= {"id", "input", "code", "field", "stage", "expect_env"}, row["id"]
        assert isinstance(row["input"], dict), row["id"]
        assert row["code"] is None or (row["code"] in CODES and row.get("field")), row["id"]
        assert row.get("stage", "validate") in STAGES, row["id"]
        for env in (row.get("expect_env") or {}).values():  # an unquoted YES: key would load as True
            assert all(isinstance(name, str) for name in env), row["id"]
    # each item of the hostile-input report has rows
    for prefix in (
        "probe-",
        "config-integer-beyond",
        "port-host-99999",
        "probe-url-does-not-parse",
        "hook-interpreter-unbalanced",
        "workdir-traversal",
        "secret-",
        "valid-yaml-retyping",
    ):
        assert any(i.startswith(prefix) for i in ids), prefix


@pytest.mark.parametrize("row", [r for r in CORPUS if r["code"] is not None], ids=lambda r: r["id"])
def test_malformed_input_ends_in_its_code_naming_the_field(row):
    release = merge(load_release(), row["input"])
    stage = row.get("stage", "validate")
    calls = [("plan_release", lambda: plan_release(release, resolved(release)))]
    if stage == "validate":
        calls.insert(0, ("validate_release", lambda: validate_release(release)))
    for name, call in calls:
        with pytest.raises(StellaError) as info:
            call()
        err = info.value
        assert err.code == row["code"], "%s: %s gave %s: %s" % (row["id"], name, err.code, err.reason)
        assert row["field"] in err.reason, "%s: %s reason does not name %s: %s" % (
            row["id"],
            name,
            row["field"],
            err.reason,
        )
        assert err.phase == "plan"
        if "field" in err.evidence:
            assert row["field"] in err.evidence["field"] or row["field"] == err.evidence["field"], err.evidence
        if err.code == "health_probe_config_invalid":
            assert err.reason.startswith("Post-deploy health probe configuration invalid: component '")
    if stage == "plan":
        validate_release(release)  # the schema and semantic rules accept it; planning refuses it


@pytest.mark.parametrize("row", [r for r in CORPUS if r["code"] is None], ids=lambda r: r["id"])
def test_valid_input_plans_and_keeps_strings_as_strings(row):
    release = merge(load_release(), row["input"])
    plan = plan_release(release, resolved(release))
    services = yaml.safe_load(plan["lock"])["services"]
    for service, env in (row.get("expect_env") or {}).items():
        environment = services[service]["environment"]
        for name, value in env.items():
            assert isinstance(environment[name], str), (row["id"], name, environment[name])
            assert environment[name] == value, (row["id"], name)


def test_merge_rules():
    base = {"a": {"b": 1, "c": [1, 2]}, "l": [{"x": 1}, {"x": 2}], "d": 1}
    merged = merge(base, {"a": {"b": DELETE, "c": [3]}, "l": {1: {"y": 2}, 2: {"z": 3}}, "d": DELETE, "e": "yes"})
    assert merged == {"a": {"c": [3]}, "l": [{"x": 1}, {"x": 2, "y": 2}, {"z": 3}], "e": "yes"}
    assert base["a"]["b"] == 1
