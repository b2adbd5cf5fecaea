"""compose.stella.lock.yml: the deterministic YAML emitter, golden output, and the real Compose parser."""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import (  # noqa: E402
    compose_accepts_every_lock,
    DIGEST_A,
    FIXTURES,
    TRICKY,
    compose_config,
    compose_value,
    load_release,
    minimal_release,
    resolved_for,
)

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.lock import (  # noqa: E402
    emit_yaml,
    healthcheck,
    quote,
    render_lock,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402

_TEXT = st.text(st.characters(exclude_categories=("Cs",)))


@pytest.fixture(autouse=True)
def every_lock_is_accepted_by_compose(monkeypatch):
    yield from compose_accepts_every_lock(monkeypatch)


@pytest.mark.parametrize("text", TRICKY, ids=[repr(t) for t in TRICKY])
def test_tricky_strings_stay_strings_for_a_yaml_1_1_reader(text):
    assert yaml.safe_load("v: %s\n" % quote(text)) == {"v": text}


@settings(max_examples=1000, deadline=None)
@given(_TEXT)
def test_any_string_round_trips_through_pyyaml(text):
    assert yaml.safe_load(emit_yaml({"k": text, "l": [text]})) == {"k": text, "l": [text]}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, st.one_of(_TEXT, st.integers(-(10**12), 10**12), st.booleans()), max_size=6))
def test_keys_and_scalars_round_trip(mapping):
    assert yaml.safe_load(emit_yaml({"m": mapping})) == {"m": mapping}


def test_ints_and_bools_are_unquoted_and_empty_collections_are_inline():
    assert emit_yaml({"a": 3, "b": True, "c": False, "d": [], "e": {}, "yes": "on"}) == (
        'a: 3\nb: true\nc: false\nd: []\ne: {}\n"yes": "on"\n'
    )


def test_lone_surrogates_are_refused():
    with pytest.raises(StellaError):
        quote("\ud800")


def test_healthcheck_from_config():
    assert healthcheck({"env.A": "1"}) is None
    assert healthcheck({"healthcheck.test": "curl -f x", "healthcheck.retries": "3", "healthcheck.interval": "5s"}) == {
        "test": ["CMD-SHELL", "curl -f x"],
        "interval": "5s",
        "retries": 3,
    }
    assert healthcheck({"healthcheck.test": ["CMD", "wget", "$x"]})["test"] == ["CMD", "wget", "$$x"]


def _golden(name):
    with open(os.path.join(FIXTURES, "golden", name), "rb") as handle:
        return handle.read()


def test_golden_lock_and_sticker():
    release = load_release()
    plan = plan_release(release, resolved_for(release))
    files = plan["_files"]
    assert files["compose.stella.lock.yml"] == _golden("compose.stella.lock.yml")
    assert files["stella.version.json"] == _golden("stella.version.json")
    assert files["apply-manifest.json"] == _golden("apply-manifest.json")


def test_lock_bytes_shape():
    release = load_release()
    lock = plan_release(release, resolved_for(release))["_files"]["compose.stella.lock.yml"]
    assert lock.endswith(b"\n") and b"\r" not in lock and not lock.endswith(b"\n\n")
    assert lock.startswith(b'name: "acme_prod_tgt-01_shop"\n')
    assert b"version" not in lock.split(b"services:", maxsplit=1)[0]


def test_golden_lock_accepted_by_compose_with_tricky_values_unchanged():
    release = load_release()
    plan = plan_release(release, resolved_for(release))
    config = compose_config({"compose.stella.lock.yml": plan["lock"]})
    web = config["services"]["web"]
    for key, value in release["components"][0]["config"].items():
        if key.startswith("env."):
            expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
            assert web["environment"][key[4:]] == compose_value(expected), key
    assert web["image"] == "127.0.0.1:5000/stella/app:v1@" + DIGEST_A
    assert config["services"]["worker"]["environment"] == {"yes": "no"}
    assert web["healthcheck"]["test"] == ["CMD-SHELL", "wget -q -O- http://127.0.0.1:8080/ || exit 1"]
    assert web["healthcheck"]["retries"] == 3 and web["healthcheck"]["start_period"] == "2s"
    assert [p["target"] for p in web["ports"]] == [8080, 9090]
    assert config["name"] == plan["projectName"]


def test_every_tricky_string_survives_compose_in_env_labels_and_healthcheck():
    config = {"env.V%d" % i: text for i, text in enumerate(TRICKY)}
    config["healthcheck.test"] = ["CMD", "echo"] + TRICKY[:10]
    release = minimal_release(
        application="010",
        tenant="yes",
        environment="3.8",
        components=[
            {"name": "010", "image": "registry.example.com/shop/web:1.0", "config": config},
            {"name": "on", "image": "registry.example.com/shop/web:1.0"},
        ],
        emitComposeVersion=True,
    )
    plan = plan_release(release, {"registry.example.com/shop/web:1.0": DIGEST_A})
    assert plan["lock"].startswith('version: "3.8"\n')
    out = compose_config({"compose.stella.lock.yml": plan["lock"]})
    service = out["services"]["010"]
    for i, text in enumerate(TRICKY):
        assert service["environment"]["V%d" % i] == compose_value(text), repr(text)
    assert service["healthcheck"]["test"] == ["CMD", "echo"] + [compose_value(t) for t in TRICKY[:10]]
    assert service["labels"]["stella.tenant"] == "yes" and service["labels"]["stella.environment"] == "3.8"
    assert service["labels"]["stella.application"] == "010" and "on" in out["services"]
    assert service["image"] == "registry.example.com/shop/web:1.0@" + DIGEST_A


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.text(st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="\u2028\u2029\u0085"), max_size=12),
        min_size=1,
        max_size=4,
    )
)
def test_random_env_values_survive_compose(values):
    config = {"env.V%d" % i: text for i, text in enumerate(values)}
    release = minimal_release(
        components=[{"name": "web", "image": "registry.example.com/shop/web:1.0", "config": config}]
    )
    plan = plan_release(release, {"registry.example.com/shop/web:1.0": DIGEST_A})
    env = compose_config({"compose.stella.lock.yml": plan["lock"]})["services"]["web"]["environment"]
    assert env == {"V%d" % i: compose_value(text) for i, text in enumerate(values)}


def test_render_lock_direct():
    services = [
        {"name": "b", "image": "r.io/x:1@" + DIGEST_A, "config": {}, "ports": [], "labels": {"z": "1", "a": "2"}},
        {"name": "a", "image": "r.io/y:1@" + DIGEST_A, "config": {}, "ports": ["80"], "labels": {}},
    ]
    text = render_lock("p", services).decode()
    assert text.index("  a:") < text.index("  b:")
    assert text.index('a: "2"') < text.index('z: "1"')
