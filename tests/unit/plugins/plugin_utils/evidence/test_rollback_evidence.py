"""release.rollback.evidence.v1: digest proof, order proof, stable digests, recovery record."""

from __future__ import annotations

import copy
import hashlib

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import (
    EVIDENCE_VERSION,
    build_rollback_evidence,
    projection_keys,
    rollback_target,
    suffixed_reason,
    verify_rollback_evidence,
)

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
D3 = "sha256:" + "3" * 64
D4 = "sha256:" + "4" * 64
CREATED = "2026-05-09T07:35:25Z"

TARGETS = [
    {"targetId": "t-2", "targetName": "web-2", "targetType": "ComposeHost", "currentDigest": D3, "rollbackDigest": D4},
    {"targetId": "t-1", "targetName": "web-1", "targetType": "ComposeHost", "currentDigest": D1, "rollbackDigest": D2},
]
T1 = {"targetId": "t-1", "targetName": "web-1", "targetType": "ComposeHost"}
T2 = {"targetId": "t-2", "targetName": "web-2", "targetType": "ComposeHost"}
DEPLOYMENT_ORDER = [
    {
        "moduleName": "api",
        "target": T1,
        "batchIndex": 1,
        "startedAt": "2026-05-09T07:01:00Z",
        "completedAt": "2026-05-09T07:02:00Z",
        "status": "Failed",
        "dependencies": ["db"],
        "failureReason": "Post-deploy health probe failed for component 'api': HTTP 500",
        "scriptProofDigest": "sha256:" + "a" * 64,
    },
    {
        "moduleName": "db",
        "target": T2,
        "batchIndex": 0,
        "startedAt": "2026-05-09T07:00:00Z",
        "completedAt": "2026-05-09T07:00:30Z",
        "status": "succeeded",
        "dependencies": [],
        "failureReason": None,
        "scriptProofDigest": None,
    },
]
ROLLBACK_ORDER = [
    {
        "moduleName": "db",
        "targetId": "t-2",
        "targetName": "web-2",
        "targetType": "ComposeHost",
        "batchIndex": 1,
        "startedAt": "2026-05-09T07:05:00Z",
        "completedAt": "2026-05-09T07:05:20Z",
        "status": "succeeded",
    },
    {
        "moduleName": "api",
        "target": T1,
        "batchIndex": 0,
        "startedAt": "2026-05-09T07:03:00Z",
        "completedAt": "2026-05-09T07:04:00Z",
        "status": "succeeded",
        "dependencies": ["db"],
    },
]
GOLDEN_PROOF_DIGEST = "sha256:f3c28144fa91aa83edf0e87efc537a9c08fd4eb9dce11a711216c1255354c158"
GOLDEN_ORDER_PROOF_DIGEST = "sha256:79ca1b3afddfe122bf0ff744b02d336c44938acf390a1fe465f7bbccb294ca41"


def full(**overrides):
    args = dict(targets=TARGETS, created_at=CREATED, deployment_order=DEPLOYMENT_ORDER, rollback_order=ROLLBACK_ORDER)
    args.update(overrides)
    return build_rollback_evidence(**args)


def test_complete_evidence():
    ev = full()
    assert ev["evidenceVersion"] == EVIDENCE_VERSION == "release.rollback.evidence.v1"
    assert ev["proofStatus"] == "complete"
    assert [t["targetId"] for t in ev["targets"]] == ["t-1", "t-2"]
    assert all(t["hasDigestProof"] and t["missingProofReason"] is None for t in ev["targets"])
    assert ev["orderProofStatus"] == "complete"
    assert [e["moduleName"] for e in ev["deploymentOrder"]] == ["db", "api"]
    assert [e["moduleName"] for e in ev["rollbackOrder"]] == ["api", "db"]
    assert ev["rollbackOrder"][1]["target"] == T2
    assert ev["deploymentOrder"][1]["status"] == "failed"
    assert ev["failure"] == {
        "moduleName": "api",
        "target": T1,
        "failureReason": "Post-deploy health probe failed for component 'api': HTTP 500",
    }
    assert verify_rollback_evidence(ev) == []


def test_golden_digests():
    ev = full()
    assert ev["proofDigest"] == GOLDEN_PROOF_DIGEST
    assert ev["orderProofDigest"] == GOLDEN_ORDER_PROOF_DIGEST


def test_digests_are_rfc8785_over_the_proof_fields_only():
    ev = full()
    proof = {k: ev[k] for k in ("evidenceVersion", "targets", "proofStatus")}
    order = {k: ev[k] for k in ("evidenceVersion", "deploymentOrder", "rollbackOrder", "failure", "orderProofStatus")}
    assert ev["proofDigest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(proof)).hexdigest()
    assert ev["orderProofDigest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(order)).hexdigest()


def test_digests_do_not_depend_on_created_at_or_ids():
    a = full()
    b = full(created_at="2030-01-01T00:00:00Z", deployment_id="dep-9", rollback_job_id="job-2")
    assert a["createdAt"] != b["createdAt"]
    assert b["deploymentId"] == "dep-9"
    assert (a["proofDigest"], a["orderProofDigest"]) == (b["proofDigest"], b["orderProofDigest"])


def _reorder(value, rnd):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _reorder(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_reorder(v, rnd) for v in value]
    return value


@settings(max_examples=50, deadline=None)
@given(st.randoms(use_true_random=False))
def test_digests_independent_of_dict_key_order_and_list_order(rnd):
    targets = _reorder(copy.deepcopy(TARGETS), rnd)
    rnd.shuffle(targets)
    dep = _reorder(copy.deepcopy(DEPLOYMENT_ORDER), rnd)
    rnd.shuffle(dep)
    rb = _reorder(copy.deepcopy(ROLLBACK_ORDER), rnd)
    rnd.shuffle(rb)
    ev = build_rollback_evidence(targets, CREATED, deployment_order=dep, rollback_order=rb)
    reference = full()
    assert ev["proofDigest"] == reference["proofDigest"]
    assert ev["orderProofDigest"] == reference["orderProofDigest"]
    assert ev == reference


def test_digest_changes_when_a_digest_changes():
    changed = copy.deepcopy(TARGETS)
    changed[0]["rollbackDigest"] = D1
    assert full(targets=changed)["proofDigest"] != full()["proofDigest"]
    changed_order = copy.deepcopy(ROLLBACK_ORDER)
    changed_order[0]["status"] = "failed"
    assert full(rollback_order=changed_order)["orderProofDigest"] != full()["orderProofDigest"]


@pytest.mark.parametrize(
    "current, rollback, reason",
    [
        (None, None, "both_digests_missing"),
        ("", "  ", "both_digests_missing"),
        (None, D2, "current_digest_missing"),
        (D1, None, "rollback_digest_missing"),
        ("latest", D2, "current_digest_invalid"),
        (D1, "sha256:abc", "rollback_digest_invalid"),
        ("nope", None, "rollback_digest_missing"),
        (D1, D2, None),
    ],
    ids=[
        "both-none",
        "both-blank",
        "current",
        "rollback",
        "current-invalid",
        "rollback-invalid",
        "missing-before-invalid",
        "ok",
    ],
)
def test_missing_proof_reasons(current, rollback, reason):
    target = rollback_target({"targetId": "t", "currentDigest": current, "rollbackDigest": rollback})
    assert target["missingProofReason"] == reason
    assert target["hasDigestProof"] is (reason is None)


def test_one_target_without_proof_makes_evidence_incomplete():
    targets = copy.deepcopy(TARGETS)
    del targets[1]["rollbackDigest"]
    ev = full(targets=targets)
    assert ev["proofStatus"] == "incomplete"
    t1 = ev["targets"][0]
    assert (t1["targetId"], t1["hasDigestProof"], t1["missingProofReason"]) == ("t-1", False, "rollback_digest_missing")
    assert ev["targets"][1]["hasDigestProof"] is True


def test_no_targets_is_incomplete():
    assert full(targets=[])["proofStatus"] == "incomplete"


@pytest.mark.parametrize(
    "overrides",
    [
        {"deployment_order": []},
        {"rollback_order": None},
        {"deployment_order": [dict(DEPLOYMENT_ORDER[0], status="succeeded"), DEPLOYMENT_ORDER[1]]},
    ],
    ids=["no-deployment-order", "no-rollback-order", "no-failed-module"],
)
def test_order_proof_incomplete(overrides):
    ev = full(**overrides)
    assert ev["orderProofStatus"] == "incomplete"
    assert ev["proofStatus"] == "complete"


def test_explicit_failure_overrides_derived():
    ev = full(failure={"moduleName": "db", "failureReason": "gate stopped"})
    assert ev["failure"] == {"moduleName": "db", "target": None, "failureReason": "gate stopped"}
    assert ev["orderProofStatus"] == "complete"


def test_drift_is_detected():
    ev = full()
    ev["targets"][0]["rollbackDigest"] = D4
    assert verify_rollback_evidence(ev) == ["proofDigest"]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"targets": "x"}, "targets must be a list"),
        ({"targets": [{"currentDigest": D1}]}, "targets[0] targetId must be a non-empty string"),
        ({"targets": [TARGETS[0], TARGETS[0]]}, "duplicate rollback target 't-2'"),
        ({"created_at": ""}, "createdAt must be a non-empty string"),
        ({"deployment_order": [{"target": T1}]}, "deploymentOrder[0] moduleName"),
        ({"rollback_order": [dict(ROLLBACK_ORDER[1], batchIndex=-1)]}, "rollbackOrder[0] batchIndex"),
    ],
    ids=["targets-type", "target-id", "duplicate", "created-at", "order-module", "batch-index"],
)
def test_invalid_input(kwargs, fragment):
    with pytest.raises(StellaError) as err:
        full(**kwargs)
    assert err.value.code == "rollback_evidence_input_invalid"
    assert err.value.reason.startswith("Rollback evidence input invalid: ")
    assert fragment in err.value.reason


def test_the_projection_keys_of_a_rollback_packet():
    ev = full()
    projection = projection_keys(ev, "ev-7")
    assert projection["rollback.evidence.proofDigest"] == ev["proofDigest"]
    assert projection["rollback.evidence.orderProofStatus"] == "complete"
    assert projection["rollback.evidence.id"] == "ev-7"
    assert projection["rollback.evidence.hash"].startswith("sha256:")
    assert "rollback.evidence.id" not in projection_keys(ev)


def test_the_reason_keeps_the_original_failure_with_the_contract_suffix():
    original = "Post-deploy health probe failed for component 'api': HTTP 500"
    assert suffixed_reason(original, "rolled_back") == (
        original + " (auto-rollback restored the retained previous revision)"
    )
    assert suffixed_reason("boom", "rollback_failed", "compose.rollback timed out") == (
        "boom; auto-rollback failed: compose.rollback timed out"
    )
    assert suffixed_reason("boom", "rollback_skipped", "no target retained a previous revision to restore") == (
        "boom (auto-rollback skipped: no target retained a previous revision to restore)"
    )
