"""Release script graph proof: ordering, every failure code, golden digest, order invariance."""

from __future__ import annotations

import copy
import hashlib

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.graph_proof import (
    SCHEMA,
    build_graph_proof,
    proof_digest,
)


def node(module, script, version="1", phase="start", deps=()):
    return {
        "moduleName": module,
        "scriptId": script,
        "scriptVersion": version,
        "phase": phase,
        "dependencies": [dict(zip(("moduleName", "scriptId", "scriptVersion"), d)) for d in deps],
    }


def ids(order):
    return ["%s/%s@%s" % (r["moduleName"], r["scriptId"], r["scriptVersion"]) for r in order]


def codes(proof):
    return [issue["code"] for issue in proof["issues"]]


# A release graph exercising ties, chains, and an update -> start cross-phase reference.
KNOWN_GRAPH = [
    node("core", "schema", "7"),
    node("billing", "tables", "2", deps=[("core", "schema", "7")]),
    node("auth", "users", "1", deps=[("core", "schema")]),
    node("billing", "backfill", "3", phase="update", deps=[("billing", "tables", "2"), ("billing", "reindex")]),
    node("billing", "reindex", "1", phase="update"),
    node("auth", "rotate", "5", phase="update", deps=[("auth", "users", "1")]),
]
KNOWN_GRAPH_DIGEST = "sha256:d14dceb0b01166fec39d1e7f91e5416e66991039e8b2746a56bbac6b5630735d"


def test_known_graph_passes_with_phase_split_orders():
    proof = build_graph_proof(KNOWN_GRAPH)
    assert proof["schema"] == SCHEMA == "release.script.graph-proof.v1"
    assert proof["status"] == "passed"
    assert proof["issues"] == []
    assert ids(proof["startOrder"]) == ["core/schema@7", "auth/users@1", "billing/tables@2"]
    # auth/rotate and billing/reindex are both ready first; the (module, script) order breaks the tie,
    # and billing/backfill waits for billing/reindex only (its start-phase dependency is not an edge).
    assert ids(proof["updateOrder"]) == ["auth/rotate@5", "billing/reindex@1", "billing/backfill@3"]
    assert proof["crossPhaseReferences"] == [
        {
            "from": {"moduleName": "auth", "scriptId": "rotate", "scriptVersion": "5"},
            "to": {"moduleName": "auth", "scriptId": "users", "scriptVersion": "1"},
        },
        {
            "from": {"moduleName": "billing", "scriptId": "backfill", "scriptVersion": "3"},
            "to": {"moduleName": "billing", "scriptId": "tables", "scriptVersion": "2"},
        },
    ]
    assert all(ref["resolution"] == "resolved" for ref in proof["dependencyRefs"])
    assert len(proof["dependencyRefs"]) == 5


def test_known_graph_digest_is_pinned():
    assert build_graph_proof(KNOWN_GRAPH)["proofDigest"] == KNOWN_GRAPH_DIGEST


def test_digest_is_rfc8785_sha256_over_the_contract_fields():
    proof = build_graph_proof(KNOWN_GRAPH)
    fields = {k: proof[k] for k in ("schema", "status", "startOrder", "updateOrder", "dependencyRefs", "issues")}
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(fields)).hexdigest()
    assert proof["proofDigest"] == expected == proof_digest(proof)
    # crossPhaseReferences is derived evidence and is not part of the digest input.
    assert "crossPhaseReferences" not in fields


def test_update_ordering_ignores_start_dependencies_but_start_chain_is_ordered():
    proof = build_graph_proof(
        [
            node("a", "s2", deps=[("a", "s1")]),
            node("a", "s1"),
            node("a", "u1", phase="update", deps=[("a", "s2")]),
        ]
    )
    assert proof["status"] == "passed"
    assert ids(proof["startOrder"]) == ["a/s1@1", "a/s2@1"]
    assert ids(proof["updateOrder"]) == ["a/u1@1"]


def test_missing_dependency_fails_closed():
    proof = build_graph_proof([node("a", "s1", deps=[("ghost", "x", "1")])])
    assert proof["status"] == "failed"
    assert codes(proof) == ["missing_dependency"]
    assert proof["issues"][0]["dependency"] == {"moduleName": "ghost", "scriptId": "x", "scriptVersion": "1"}
    assert proof["dependencyRefs"][0]["resolution"] == "missing_dependency"
    assert proof["dependencyRefs"][0]["resolvedVersion"] is None


def test_dependency_version_mismatch_fails_closed():
    proof = build_graph_proof([node("a", "s1", "2"), node("b", "s1", deps=[("a", "s1", "1")])])
    assert proof["status"] == "failed"
    assert codes(proof) == ["dependency_version_mismatch"]
    assert proof["issues"][0]["availableVersion"] == "2"


def test_unversioned_dependency_matches_any_version():
    proof = build_graph_proof([node("a", "s1", "2"), node("b", "s1", deps=[("a", "s1")])])
    assert proof["status"] == "passed"
    assert proof["dependencyRefs"][0]["resolvedVersion"] == "2"


def test_duplicate_node_fails_closed_even_with_different_versions():
    proof = build_graph_proof([node("a", "s1", "1"), node("a", "s1", "2")])
    assert proof["status"] == "failed"
    assert codes(proof) == ["duplicate_node"]
    assert proof["issues"][0]["count"] == 2
    assert [o["scriptVersion"] for o in proof["issues"][0]["occurrences"]] == ["1", "2"]


def test_exact_duplicate_node_fails_closed():
    proof = build_graph_proof([node("a", "s1"), node("a", "s1")])
    assert codes(proof) == ["duplicate_node"]


def test_cycle_detected_names_cycle_and_nodes_behind_it():
    proof = build_graph_proof(
        [
            node("a", "x", phase="update", deps=[("a", "y")]),
            node("a", "y", phase="update", deps=[("a", "x")]),
            node("a", "z", phase="update", deps=[("a", "x")]),
            node("a", "free", phase="update"),
        ]
    )
    assert proof["status"] == "failed"
    assert codes(proof) == ["cycle_detected"]
    issue = proof["issues"][0]
    assert issue["phase"] == "update"
    assert [ids(c) for c in issue["cycles"]] == [["a/x@1", "a/y@1"]]
    assert ids(issue["unordered"]) == ["a/x@1", "a/y@1", "a/z@1"]
    assert ids(proof["updateOrder"]) == ["a/free@1"]


def test_self_dependency_is_a_cycle():
    proof = build_graph_proof([node("a", "x", deps=[("a", "x")])])
    assert codes(proof) == ["cycle_detected"]
    assert [ids(c) for c in proof["issues"][0]["cycles"]] == [["a/x@1"]]


def test_start_depending_on_update_fails_closed():
    proof = build_graph_proof([node("a", "s"), node("a", "u", phase="update"), node("b", "s", deps=[("a", "u")])])
    assert proof["status"] == "failed"
    assert codes(proof) == ["start_depends_on_update"]
    assert proof["issues"][0]["moduleName"] == "b"
    assert proof["crossPhaseReferences"] == []


SEVERAL_ISSUES = [
    node("a", "s", deps=[("missing", "m")]),
    node("a", "s"),
    node("b", "u", phase="update"),
    node("b", "s", deps=[("b", "u")]),
    node("c", "s", deps=[("nowhere", "x")]),
]


def test_several_issues_are_all_reported_in_stable_order():
    proof = build_graph_proof(SEVERAL_ISSUES)
    # issues sort by code; of the duplicate a/s the content-smallest (no dependencies) is kept
    assert codes(proof) == ["duplicate_node", "missing_dependency", "start_depends_on_update"]
    assert proof["issues"][1]["moduleName"] == "c"
    assert proof == build_graph_proof(list(reversed(SEVERAL_ISSUES)))


def test_empty_graph_passes():
    proof = build_graph_proof([])
    assert proof["status"] == "passed"
    assert proof["startOrder"] == proof["updateOrder"] == []


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("nope", "nodes must be a list"),
        ([42], "node[0] must be an object"),
        ([node("a", "s", phase="deploy")], "phase must be 'start' or 'update'"),
        ([dict(node("a", "s"), moduleName="")], "node[0] moduleName must be a non-empty string"),
        ([dict(node("a", "s"), scriptVersion=None)], "node[0] scriptVersion must be a non-empty string"),
        ([dict(node("a", "s"), dependencies=[{"moduleName": "b"}])], "node[0] dependency scriptId"),
        ([dict(node("a", "s"), dependencies="b")], "dependencies must be a list"),
    ],
    ids=["not-list", "not-object", "bad-phase", "empty-module", "no-version", "dep-no-script", "deps-not-list"],
)
def test_malformed_input_raises_stable_code(bad, fragment):
    with pytest.raises(StellaError) as err:
        build_graph_proof(bad)
    assert err.value.code == "graph_proof_input_invalid"
    assert fragment in err.value.reason


def _shuffled_graph(graph):
    return (
        st.permutations(graph)
        .flatmap(
            lambda nodes: (
                st.tuples(
                    *[
                        st.permutations(n["dependencies"]).map(lambda deps, n=n: dict(n, dependencies=list(deps)))
                        for n in nodes
                    ]
                )
                if nodes
                else st.just(())
            )
        )
        .flatmap(lambda nodes: st.permutations(list(nodes)))
    )


@settings(max_examples=60, deadline=None)
@given(_shuffled_graph(KNOWN_GRAPH))
def test_shuffle_invariance_known_graph(nodes):
    assert build_graph_proof(copy.deepcopy(list(nodes))) == build_graph_proof(KNOWN_GRAPH)


FAILING_GRAPH = KNOWN_GRAPH + [
    node("core", "schema", "8"),
    node("x", "a", phase="update", deps=[("x", "b")]),
    node("x", "b", phase="update", deps=[("x", "a"), ("nowhere", "q", "1")]),
    node("y", "s", deps=[("x", "a")]),
]


@settings(max_examples=60, deadline=None)
@given(_shuffled_graph(FAILING_GRAPH))
def test_shuffle_invariance_failing_graph(nodes):
    proof = build_graph_proof(copy.deepcopy(list(nodes)))
    assert proof == build_graph_proof(FAILING_GRAPH)
    assert proof["status"] == "failed"
    assert sorted(set(codes(proof))) == [
        "cycle_detected",
        "duplicate_node",
        "missing_dependency",
        "start_depends_on_update",
    ]


_names = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def random_graphs(draw):
    keys = draw(st.lists(st.tuples(_names, _names), unique=True, max_size=8))
    graph = []
    for module, script in keys:
        deps = draw(st.lists(st.sampled_from(keys), max_size=3, unique=True)) if keys else []
        graph.append(
            node(
                module, script, draw(st.sampled_from(["1", "2"])), draw(st.sampled_from(["start", "update"])), deps=deps
            )
        )
    return graph


@settings(max_examples=150, deadline=None)
@given(random_graphs(), st.randoms(use_true_random=False))
def test_random_graphs_are_order_invariant_and_orders_respect_edges(graph, rnd):
    shuffled = copy.deepcopy(graph)
    rnd.shuffle(shuffled)
    for n in shuffled:
        rnd.shuffle(n["dependencies"])
    proof = build_graph_proof(shuffled)
    assert proof == build_graph_proof(graph)
    assert proof["status"] == ("failed" if proof["issues"] else "passed")
    for phase, order in (("start", proof["startOrder"]), ("update", proof["updateOrder"])):
        position = {(r["moduleName"], r["scriptId"]): i for i, r in enumerate(order)}
        for ref in proof["dependencyRefs"]:
            src = (ref["from"]["moduleName"], ref["from"]["scriptId"])
            dst = (ref["to"]["moduleName"], ref["to"]["scriptId"])
            if ref["from"]["phase"] == phase and ref["resolvedPhase"] == phase and src in position:
                assert dst in position and position[dst] < position[src]
        if proof["status"] == "passed":
            assert len(order) == sum(1 for n in graph if n["phase"] == phase)
