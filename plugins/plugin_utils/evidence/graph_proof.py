# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Release script graph proof (``release.script.graph-proof.v1``).

A release carries explicit script/module nodes::

    {"moduleName": "billing", "scriptId": "migrate", "scriptVersion": "3",
     "phase": "start" | "update",
     "dependencies": [{"moduleName": "core", "scriptId": "schema", "scriptVersion": "7"}]}

:func:`build_graph_proof` turns them into a deterministic proof: phase-split topological
orders (Kahn's algorithm, ready nodes taken in ``(moduleName, scriptId, scriptVersion)`` order),
every dependency reference with how it resolved, the update-to-start cross-phase references,
and the blocking issues. The result depends only on the *set* of nodes and dependencies, never
on the order they were supplied in. Pure, stdlib only.

A node is identified by ``(moduleName, scriptId)``: a release graph carries one version of each
script, and a dependency's optional ``scriptVersion`` is checked against that node's version.
"""

from __future__ import annotations

import heapq

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import canonical_json, digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

SCHEMA = "release.script.graph-proof.v1"
PHASES = ("start", "update")

STATUS_PASSED = "passed"
STATUS_FAILED = "failed"

# Stable issue codes.
MISSING_DEPENDENCY = "missing_dependency"
DEPENDENCY_VERSION_MISMATCH = "dependency_version_mismatch"
DUPLICATE_NODE = "duplicate_node"
CYCLE_DETECTED = "cycle_detected"
START_DEPENDS_ON_UPDATE = "start_depends_on_update"

# Dependency reference resolutions recorded in ``dependencyRefs[].resolution``.
RESOLVED = "resolved"

INPUT_INVALID = "graph_proof_input_invalid"


def _text(value, what, required=True):
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise StellaError(INPUT_INVALID, "Release script graph input invalid: %s must be a non-empty string" % what)
    return value.strip()


def _normalize_dependency(dep, where):
    if not isinstance(dep, dict):
        raise StellaError(INPUT_INVALID, "Release script graph input invalid: %s dependency must be an object" % where)
    out = {
        "moduleName": _text(dep.get("moduleName"), where + " dependency moduleName"),
        "scriptId": _text(dep.get("scriptId"), where + " dependency scriptId"),
    }
    version = _text(dep.get("scriptVersion"), where + " dependency scriptVersion", required=False)
    if version is not None:
        out["scriptVersion"] = version
    return out


def _dep_sort_key(dep):
    # A dependency without a version sorts before the same script with a version.
    return (dep["moduleName"], dep["scriptId"], "scriptVersion" in dep, dep.get("scriptVersion", ""))


def _normalize_node(node, index):
    where = "node[%d]" % index
    if not isinstance(node, dict):
        raise StellaError(INPUT_INVALID, "Release script graph input invalid: %s must be an object" % where)
    phase = node.get("phase")
    if phase not in PHASES:
        raise StellaError(
            INPUT_INVALID,
            "Release script graph input invalid: %s phase must be 'start' or 'update', got %r" % (where, phase),
        )
    deps = node.get("dependencies") or []
    if not isinstance(deps, (list, tuple)):
        raise StellaError(INPUT_INVALID, "Release script graph input invalid: %s dependencies must be a list" % where)
    unique = {}
    for dep in deps:
        norm = _normalize_dependency(dep, where)
        unique[canonical_json(norm)] = norm
    return {
        "moduleName": _text(node.get("moduleName"), where + " moduleName"),
        "scriptId": _text(node.get("scriptId"), where + " scriptId"),
        "scriptVersion": _text(node.get("scriptVersion"), where + " scriptVersion"),
        "phase": phase,
        "dependencies": sorted(unique.values(), key=_dep_sort_key),
    }


def _key(node):
    return (node["moduleName"], node["scriptId"])


def _order_key(node):
    return (node["moduleName"], node["scriptId"], node["scriptVersion"])


def _ref(node):
    return {"moduleName": node["moduleName"], "scriptId": node["scriptId"], "scriptVersion": node["scriptVersion"]}


def _kahn(members, edges):
    """Topological order of ``members`` (keys) over ``edges`` (dependent -> set of dependencies).

    Returns ``(ordered_keys, remaining_keys)``; remaining keys sit on or behind a cycle.
    """
    indegree = {key: len(edges.get(key, ())) for key in members}
    dependents = {key: [] for key in members}
    for key in members:
        for dep in edges.get(key, ()):
            dependents[dep].append(key)
    ready = [members[key] for key, deg in indegree.items() if deg == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        sort_key = heapq.heappop(ready)
        key = sort_key[:2]
        ordered.append(key)
        for dependent in dependents[key]:
            indegree[dependent] -= 1
            if indegree[dependent] == 0:
                heapq.heappush(ready, members[dependent])
    done = set(ordered)
    return ordered, sorted((key for key in members if key not in done), key=lambda k: members[k])


def _cycles(keys, edges):
    """Strongly connected components among ``keys`` that form a cycle (size > 1 or self-loop)."""
    keyset = set(keys)
    index_of, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(root):
        # Iterative Tarjan so deep graphs cannot hit the recursion limit.
        work = [(root, iter(sorted(d for d in edges.get(root, ()) if d in keyset)))]
        index_of[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index_of:
                    index_of[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(d for d in edges.get(child, ()) if d in keyset))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index_of[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))

    for key in sorted(keyset):
        if key not in index_of:
            visit(key)
    return sorted(found)


def build_graph_proof(nodes):
    """Build the ``release.script.graph-proof.v1`` proof for ``nodes`` (see module docstring).

    Returns ``{"schema", "status", "startOrder", "updateOrder", "dependencyRefs",
    "crossPhaseReferences", "issues", "proofDigest"}``. ``status`` is ``failed`` whenever
    ``issues`` is non-empty; a failed proof is blocking evidence. Malformed input (not an
    object, missing names, unknown phase) raises :class:`StellaError` with code
    ``graph_proof_input_invalid``.
    """
    if not isinstance(nodes, (list, tuple)):
        raise StellaError(INPUT_INVALID, "Release script graph input invalid: nodes must be a list")
    normalized = [_normalize_node(node, index) for index, node in enumerate(nodes)]
    # A total, content-only order so that which duplicate is kept never depends on input order.
    normalized.sort(key=lambda n: (_order_key(n), n["phase"], canonical_json(n["dependencies"])))

    issues = []
    by_key = {}
    occurrences = {}
    for node in normalized:
        occurrences.setdefault(_key(node), []).append(node)
        by_key.setdefault(_key(node), node)
    for key, found in sorted(occurrences.items()):
        if len(found) > 1:
            issues.append(
                {
                    "code": DUPLICATE_NODE,
                    "moduleName": key[0],
                    "scriptId": key[1],
                    "count": len(found),
                    "occurrences": [{"scriptVersion": n["scriptVersion"], "phase": n["phase"]} for n in found],
                }
            )

    dependency_refs = []
    cross_phase = []
    edges = {phase: {} for phase in PHASES}
    for key in sorted(by_key):
        node = by_key[key]
        for dep in node["dependencies"]:
            target = by_key.get((dep["moduleName"], dep["scriptId"]))
            ref = {
                "from": dict(_ref(node), phase=node["phase"]),
                "to": dict(dep),
                "resolution": RESOLVED,
                "resolvedVersion": target["scriptVersion"] if target else None,
                "resolvedPhase": target["phase"] if target else None,
                "crossPhase": bool(target) and target["phase"] != node["phase"],
            }
            subject = dict(_ref(node), phase=node["phase"], dependency=dict(dep))
            if target is None:
                ref["resolution"] = MISSING_DEPENDENCY
                issues.append(dict(subject, code=MISSING_DEPENDENCY))
            elif "scriptVersion" in dep and dep["scriptVersion"] != target["scriptVersion"]:
                ref["resolution"] = DEPENDENCY_VERSION_MISMATCH
                issues.append(dict(subject, code=DEPENDENCY_VERSION_MISMATCH, availableVersion=target["scriptVersion"]))
            elif node["phase"] == "start" and target["phase"] == "update":
                ref["resolution"] = START_DEPENDS_ON_UPDATE
                issues.append(dict(subject, code=START_DEPENDS_ON_UPDATE))
            elif target["phase"] == node["phase"]:
                edges[node["phase"]].setdefault(key, set()).add(_key(target))
            else:
                # update -> start: preserved as evidence, not an update-ordering edge.
                cross_phase.append({"from": _ref(node), "to": _ref(target)})
            dependency_refs.append(ref)

    orders = {}
    for phase in PHASES:
        members = {key: _order_key(node) for key, node in by_key.items() if node["phase"] == phase}
        ordered, remaining = _kahn(members, edges[phase])
        orders[phase] = [_ref(by_key[key]) for key in ordered]
        if remaining:
            # Every node left over sits on a cycle or behind one; name both.
            issues.append(
                {
                    "code": CYCLE_DETECTED,
                    "phase": phase,
                    "cycles": [
                        [_ref(by_key[key]) for key in component] for component in _cycles(remaining, edges[phase])
                    ],
                    "unordered": [_ref(by_key[key]) for key in remaining],
                }
            )

    issues.sort(key=lambda issue: (issue["code"], canonical_json(issue)))
    status = STATUS_FAILED if issues else STATUS_PASSED
    proof = {
        "schema": SCHEMA,
        "status": status,
        "startOrder": orders["start"],
        "updateOrder": orders["update"],
        "dependencyRefs": dependency_refs,
        "issues": issues,
    }
    digest = digest_json(proof)
    proof["crossPhaseReferences"] = cross_phase
    proof["proofDigest"] = digest
    return proof


def proof_digest(proof):
    """Recompute the digest of a proof (to detect drift in stored evidence)."""
    return digest_json(
        {name: proof[name] for name in ("schema", "status", "startOrder", "updateOrder", "dependencyRefs", "issues")}
    )
