"""contract/canonical.py: canonical_json against the rfc8785 reference implementation."""

from __future__ import annotations

import math

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import (
    canonical_json,
    clone,
    digest_json,
)

_SAFE = 2**53 - 1
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-_SAFE, _SAFE), _floats, st.text(st.characters(exclude_categories=("Cs",)))
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(st.characters(exclude_categories=("Cs",)), max_size=8), inner, max_size=5),
    ),
    max_leaves=25,
)


@settings(max_examples=1000, deadline=None)
@given(_floats)
def test_floats_match_rfc8785(value):
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_unicode_strings_match_rfc8785(value):
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json({value: 1, "a": value}) == rfc8785.dumps({value: 1, "a": value})


@settings(max_examples=500, deadline=None)
@given(_values)
def test_nested_values_match_rfc8785(value):
    assert canonical_json(value) == rfc8785.dumps(value)


def test_known_vectors():
    for value in (
        1e21,
        1e-7,
        5e-324,
        1.7976931348623157e308,
        -0.0,
        0.1 + 0.2,
        123456789012345680000.0,
        {"\u20ac": 1, "\r": 2, "\U0001f600": 3, "\ufb33": 4, "1": 5},
    ):
        if isinstance(value, float):
            assert not math.isnan(value)
        assert canonical_json(value) == rfc8785.dumps(value)


def test_digest_is_sha256_over_canonical_bytes():
    assert digest_json({"b": 1, "a": [1.5, "x"]}) == digest_json({"a": [1.5, "x"], "b": 1})
    assert digest_json({}).startswith("sha256:") and len(digest_json({})) == 71


def test_clone_is_a_deep_copy_in_order_of_json_like_documents_and_falls_back_for_other_types():
    document = {"b": [1, 2.5, None, True, {"x": "é"}], "a": {"nested": ["t"]}, "z": (1, 2)}
    copied = clone(document)
    assert copied == document and list(copied) == ["b", "a", "z"]
    copied["b"][4]["x"] = "changed"
    copied["a"]["nested"].append("u")
    assert document == {"b": [1, 2.5, None, True, {"x": "é"}], "a": {"nested": ["t"]}, "z": (1, 2)}

    class Tagged(str):
        pass

    tagged = {"value": Tagged("kept"), "list": [Tagged("x")]}
    again = clone(tagged)
    assert isinstance(again["value"], Tagged) and again == tagged and again["list"] is not tagged["list"]
