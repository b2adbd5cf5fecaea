"""release/policy.py: the image policy merged from the release and the job, checked before any request
(types, component names, key files), described by key path and fingerprint only."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.policy import (  # noqa: E402
    image_policy,
    merged_policy,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import (  # noqa: E402
    generate_private_key,
)


@pytest.fixture(name="keys")
def _keys(tmp_path):
    made = []
    for name in ("a", "b"):
        key = generate_private_key()
        path = tmp_path / ("%s.pub" % name)
        path.write_bytes(key.public_key.pem())
        made.append((str(path), key))
    return made


def _release(policy=None, names=("web",)):
    release = minimal_release(
        components=[{"name": name, "image": "registry.example.com/shop/%s:1.0" % name} for name in names]
    )
    if policy is not None:
        release["imagePolicy"] = policy
    return release


def test_no_policy_is_none_and_loads_nothing():
    assert image_policy(_release()) is None
    assert image_policy(_release({}), {}) is None
    assert merged_policy(None, None) is None


def test_a_key_makes_every_component_required_and_fingerprints_describe_it(keys):
    (path, key), _other = keys
    policy = image_policy(_release({"keys": [path]}, names=("web", "db")))
    assert policy.required()
    assert {name: rule.require for name, rule in policy.rules.items()} == {"web": True, "db": True}
    described = policy.describe()
    assert described["components"]["web"]["keys"] == [{"path": path, "fingerprint": key.public_key.fingerprint}]
    text = json.dumps(described)
    assert "BEGIN" not in text and key.public_key.pem().decode().splitlines()[1] not in text


def test_job_top_level_keys_win_over_the_release(keys):
    (path_a, _a), (path_b, key_b) = keys
    policy = image_policy(_release({"keys": [path_a], "require": False}), {"keys": [path_b]})
    rule = policy.rules["web"]
    assert rule.require is False  # the release's require stays: the job gave none
    policy = image_policy(_release({"keys": [path_a]}), {"keys": [path_b], "require": True})
    assert policy.keys_of(policy.rules["web"]) == [(path_b, key_b.public_key)]


def test_component_overrides(keys):
    (path_a, _a), (path_b, _b) = keys
    policy = image_policy(
        _release(
            {
                "keys": [path_a],
                "identity": "registry.example.com/shop/all",
                "components": {"db": {"require": False}, "web": {"keys": [path_b], "identity": "r.example/x"}},
            },
            names=("web", "db", "cache"),
        )
    )
    assert policy.rules["db"].require is False and policy.rules["db"].keys == []
    assert policy.rules["web"].keys == [path_b] and policy.rules["web"].identity == "r.example/x"
    assert policy.rules["cache"].keys == [path_a] and policy.rules["cache"].identity == "registry.example.com/shop/all"


def test_require_false_without_keys_is_not_required():
    policy = image_policy(_release({"require": False}))
    assert not policy.required() and policy.rules["web"].require is False


@pytest.mark.parametrize(
    "policy, match",
    [
        ({"require": True}, "names no key"),
        ({"keys": "/etc/k.pub"}, "must be a list"),
        ({"keys": [7]}, r"keys\[0\]"),
        ({"keys": ["/nonexistent/key.pub"]}, "not a file"),
        ({"require": "yes"}, "true or false"),
        ({"identity": ""}, "identity"),
        ({"components": {"nope": {"require": False}}}, "nope"),
        ({"components": {"web": {"colour": 1}}}, "unknown field"),
        ({"components": ["web"]}, "mapping"),
        ({"keyz": []}, "unknown field"),
        ({"signatureDirectory": "/nonexistent/sigs"}, "not a directory"),
        ("keys", "mapping"),
    ],
)
def test_invalid_policies(policy, match):
    with pytest.raises(StellaError, match=match) as info:
        image_policy(_release(policy))
    assert info.value.code == "image_policy_invalid" and info.value.phase == "plan"


def test_a_key_file_that_is_not_a_public_key_is_invalid_without_echoing_it(tmp_path):
    secret = "PLANTED-not-a-key-7f3a"
    path = tmp_path / "bad.pub"
    path.write_text(secret)
    with pytest.raises(StellaError) as info:
        image_policy(_release({"keys": [str(path)]}))
    assert info.value.code == "image_policy_invalid" and secret not in info.value.reason
    assert str(path) in info.value.reason


def test_a_private_key_is_not_trusted_as_a_public_key(tmp_path):
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import generate_key_pair

    private_pem, _public = generate_key_pair(b"pw")
    path = tmp_path / "cosign.key"
    path.write_bytes(private_pem)
    with pytest.raises(StellaError) as info:
        image_policy(_release({"keys": [str(path)]}))
    assert info.value.code == "image_policy_invalid"
    assert private_pem.decode().splitlines()[1] not in info.value.reason


def test_a_key_named_for_a_component_not_required_is_still_read(tmp_path, keys):
    (path_a, _a), _b = keys
    with pytest.raises(StellaError, match="not a file") as info:
        image_policy(_release({"keys": [path_a], "components": {"web": {"require": False, "keys": ["/no/k.pub"]}}}))
    assert info.value.code == "image_policy_invalid"
