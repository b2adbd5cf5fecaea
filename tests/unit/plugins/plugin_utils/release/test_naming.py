"""Compose project names, slots and traffic roles."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.naming import (
    derive_project_name,
    explicit_project_name,
    select_slot,
    traffic_role,
)

COMPOSE_PROJECT = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


def valid(name):
    return bool(COMPOSE_PROJECT.match(name)) and len(name) <= 63


@pytest.mark.parametrize(
    "parts,expected",
    [
        (("acme", "prod", "tgt-1", "shop", "active"), "acme_prod_tgt-1_shop"),
        (("acme", "prod", "tgt-1", "shop", "green"), "acme_prod_tgt-1_shop_green"),
        (("acme", "prod", "tgt-1", "shop", "canary"), "acme_prod_tgt-1_shop_canary"),
    ],
    ids=["active-no-suffix", "green", "canary"],
)
def test_lossless_names_are_readable(parts, expected):
    assert derive_project_name(*parts) == expected


def test_lossy_cleaning_adds_a_hash_of_the_raw_tuple():
    upper = derive_project_name("Acme", "prod", "tgt-1", "shop", "active")
    lower = derive_project_name("acme", "prod", "tgt-1", "shop", "active")
    assert upper != lower and valid(upper)
    assert re.match(r"^acme_prod_tgt-1_shop__[0-9a-f]{12}$", upper)
    spaced = derive_project_name("Acme Corp", "Prod/EU", "tgt_1", "Shop Web!", "blue")
    assert valid(spaced) and "__" in spaced


def test_long_names_are_cut_with_a_hash_and_stay_distinct():
    a = derive_project_name("t" * 80, "prod", "tgt", "shop", "active")
    b = derive_project_name("t" * 81, "prod", "tgt", "shop", "active")
    assert len(a) == 63 and valid(a) and valid(b) and a != b


def test_names_are_stable():
    assert derive_project_name("A", "b", "c", "d", "green") == derive_project_name("A", "b", "c", "d", "green")


_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF), min_size=1, max_size=40)
_simple = st.from_regex(r"\A[a-z0-9]{1,3}(-[a-z0-9]{1,3}){0,2}\Z")
_part = st.one_of(_text, _simple, st.sampled_from(["a-b", "a", "b", "a_b", "A", "a--b", "-a", "x"]))
_slot = st.sampled_from(["active", "canary", "blue", "green", "variant-b", "b"])


@settings(max_examples=2000, deadline=None)
@given(one=st.tuples(_part, _part, _part, _part, _slot), two=st.tuples(_part, _part, _part, _part, _slot))
def test_different_tuples_never_collide_and_names_are_always_valid(one, two):
    assume(one != two)
    first, second = derive_project_name(*one), derive_project_name(*two)
    assert valid(first) and valid(second)
    assert first != second, (one, two)


@pytest.mark.parametrize(
    "project,slot,expected",
    [
        ("shop", "active", "shop"),
        ("shop", "green", "shop-green"),
        ("shop-green", "green", "shop-green"),
        ("shop_green", "green", "shop_green"),
        ("shop-blue", "green", "shop-blue-green"),
        ("shop", "canary", "shop-canary"),
        ("shop", "variant-b", "shop-variant-b"),
    ],
    ids=["active", "append", "already-dash", "already-underscore", "other-slot", "canary", "variant"],
)
def test_explicit_project_gets_the_non_active_slot(project, slot, expected):
    assert explicit_project_name(project, slot) == expected


def test_explicit_project_length_bound():
    name = explicit_project_name("p" * 63, "green")
    assert valid(name) and len(name) == 63 and name != explicit_project_name("p" * 63, "blue")


def test_explicit_project_must_be_valid():
    with pytest.raises(StellaError, match="projectName"):
        explicit_project_name("Shop", "active")


def _release(strategy, **extra):
    data = {"strategy": strategy}
    data.update(extra)
    return data


@pytest.mark.parametrize(
    "release,slot",
    [
        (_release("rolling"), "active"),
        (_release("all-at-once"), "active"),
        (_release("canary"), "canary"),
        (_release("blue-green"), "green"),
        (_release("a-b"), "green"),
        (_release("blue-green", slot="blue"), "blue"),
        (_release("rolling", strategyConfig={"slot": "canary"}), "canary"),
        (_release("blue-green", strategyConfig={"deployment.slot": "blue"}), "blue"),
        (_release("a-b", strategyConfig={"variantId": "variant-b"}), "variant-b"),
        (_release("a-b", variantId="b2"), "b2"),
        (_release("canary", slot="active", strategyConfig={"slot": "blue"}), "active"),
        (_release("a-b", slot="exp-7"), "exp-7"),
    ],
    ids=[
        "rolling",
        "all-at-once",
        "canary",
        "blue-green",
        "a-b",
        "explicit",
        "config-slot",
        "deployment.slot",
        "config-variant",
        "variantId",
        "release-wins",
        "a-b-variant-slot",
    ],
)
def test_slot_selection(release, slot):
    assert select_slot(release)[0] == slot


def test_unknown_slot_outside_a_b_is_an_error_naming_the_field():
    with pytest.raises(StellaError, match="strategyConfig.slot"):
        select_slot(_release("rolling", strategyConfig={"slot": "purple"}))
    with pytest.raises(StellaError, match=r'strategyConfig\["deployment.slot"\]'):
        select_slot(_release("rolling", strategyConfig={"deployment.slot": "Bad Slot"}))


@pytest.mark.parametrize(
    "slot,active,role",
    [
        ("active", None, "active"),
        ("canary", None, "canary"),
        ("green", None, "standby"),
        ("blue", None, "standby"),
        ("blue", "blue", "active"),
        ("green", "blue", "standby"),
        ("variant-b", None, "variant"),
    ],
)
def test_traffic_roles(slot, active, role):
    assert traffic_role(slot, active) == role
