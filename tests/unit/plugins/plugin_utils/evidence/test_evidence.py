"""stella.deployment.evidence.v1 built from registered results.

The fixtures in ``tests/unit/fixtures/evidence/`` are the registered results of real runs of the
``stellaops.runtime.deploy`` role on the lab (``tests/integration/playbooks/deploy_role.yml`` with
``results_file``): ``plan``, ``preflight``, ``apply``, ``probe``, ``rollback`` as the role registered
them, and ``evidence`` (with the ``deployment.json`` record that run wrote under ``records``). No
secrets: the releases had no ``secretEnv`` and the lab registry needs no credentials. The rollback
evidence and the recovery record have their own tests (test_rollback_evidence.py).
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.deployment import (
    DEPLOYMENT_EVIDENCE_VERSION,
    deployment_record,
    project_digest,
    success_boundary,
    verify_record,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import clean as _clean

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "evidence")
CREATED = "2026-05-09T07:35:25Z"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
# Added to stella.deployment.evidence.v1 after the fixtures were captured (and so the digest differs).
ADDED_AFTER_CAPTURE = ("changed", "appliedByJobId", "evidenceDigest")


def load(name):
    with open(os.path.join(FIXTURES, name + ".json"), encoding="utf-8") as handle:
        run = json.load(handle)
    rollback = run["rollback"]
    return {
        "plan": _clean(run["plan"]),
        "preflight": _clean(run["preflight"]),
        "apply": _clean(run["apply"]),
        "probe": _clean(run["probe"]),
        # the role passes a skipped rollback task as "no rollback" (omit)
        "rollback": None if rollback is None or rollback.get("skipped") else _clean(rollback),
        "records": run["evidence"]["records"],
    }


RUNS = [
    "deploy_succeeded",
    "probe_failed_rolled_back",
    "apply_failed_rolled_back",
    "first_deploy_failed_rollback_skipped",
    "rollback_failed",
]


@pytest.fixture(scope="module")
def runs():
    return {name: load(name) for name in RUNS}


def dep(run, created_at=CREATED, **overrides):
    args = {"preflight": run["preflight"], "probe": run["probe"]}
    args.update(overrides)
    return deployment_record(run["plan"], run["apply"], created_at, **args)


# ------------------------------------------------------------------ the records the role wrote


@pytest.mark.parametrize("name", RUNS)
def test_records_rebuilt_from_registered_results_equal_the_written_ones(runs, name):
    run = runs[name]
    written = run["records"]["deployment.json"]
    rebuilt = dep(run, written["createdAt"])
    # Keys the record gained after these runs were captured: compare everything else verbatim.
    assert rebuilt["changed"] is True and rebuilt["appliedByJobId"] in (None, run["plan"]["jobId"])
    assert {k: v for k, v in rebuilt.items() if k not in ADDED_AFTER_CAPTURE} == {
        k: v for k, v in written.items() if k != "evidenceDigest"
    }
    assert verify_record(written) and verify_record(rebuilt)


@pytest.mark.parametrize(
    "name, status, stage, code, phase",
    [
        ("deploy_succeeded", "succeeded", None, None, None),
        ("probe_failed_rolled_back", "failed", "verify", "health_probe_failed", None),
        ("apply_failed_rolled_back", "failed", "deploy", "service_unhealthy", "compose_up"),
        ("first_deploy_failed_rollback_skipped", "failed", "deploy", "service_unhealthy", "compose_up"),
        ("rollback_failed", "failed", "verify", "health_probe_failed", None),
    ],
)
def test_status_and_failure_of_real_runs(runs, name, status, stage, code, phase):
    record = dep(runs[name])
    assert record["evidenceVersion"] == DEPLOYMENT_EVIDENCE_VERSION
    assert record["status"] == status
    if stage is None:
        assert record["failure"] is None
    else:
        assert (record["failure"]["stage"], record["failure"]["code"], record["failure"]["failurePhase"]) == (
            stage,
            code,
            phase,
        )
        assert "\n" not in record["failure"]["reason"]


@pytest.mark.parametrize(
    "name, boundary",
    [
        (
            "deploy_succeeded",
            dict(
                preflightPassed=True,
                imagesPinnedAndPulled=True,
                workloadRunning=True,
                runtimeVerified=True,
                stickerRecorded=True,
                serviceHealthVerified=True,
            ),
        ),
        (
            "probe_failed_rolled_back",
            dict(
                preflightPassed=True,
                imagesPinnedAndPulled=True,
                workloadRunning=True,
                runtimeVerified=True,
                stickerRecorded=True,
                serviceHealthVerified=False,
            ),
        ),
        # the broken container runs, but the apply failed in compose_up: no digest proof, no sticker, no probe
        (
            "apply_failed_rolled_back",
            dict(
                preflightPassed=True,
                imagesPinnedAndPulled=False,
                workloadRunning=True,
                runtimeVerified=False,
                stickerRecorded=False,
                serviceHealthVerified=None,
            ),
        ),
    ],
)
def test_success_boundary_of_real_runs(runs, name, boundary):
    run = runs[name]
    assert success_boundary(run["preflight"], run["plan"], run["apply"], run["probe"]) == boundary


# ------------------------------------------------------------------ success boundary table


def _boundary_case(base, preflight="keep", apply_patch=None, probe="keep", service_patch=None):
    run = copy.deepcopy(base)
    if preflight != "keep":
        run["preflight"] = preflight
    if probe != "keep":
        run["probe"] = probe
    run["apply"].update(apply_patch or {})
    if service_patch:
        for service in run["apply"]["services"]:
            service.update(service_patch)
    return success_boundary(run["preflight"], run["plan"], run["apply"], run["probe"])


BOUNDARY_CASES = [
    # (id, changes, key, expected value)
    ("no-preflight", dict(preflight=None), "preflightPassed", None),
    (
        "preflight-failed",
        dict(preflight={"failed": True, "msg": "disk", "code": "disk_space_low"}),
        "preflightPassed",
        False,
    ),
    ("no-probe", dict(probe=None), "serviceHealthVerified", None),
    (
        "probe-failed",
        dict(probe={"failed": True, "evidence": {"healthProbe.status": "failed"}}),
        "serviceHealthVerified",
        False,
    ),
    (
        "probe-status-failed-only",
        dict(probe={"failed": False, "evidence": {"healthProbe.status": "failed"}}),
        "serviceHealthVerified",
        False,
    ),
    (
        "probe-skipped",
        dict(
            probe={
                "failed": False,
                "evidence": {"healthProbe.status": "skipped", "healthProbe.reason": "waitForHealthCheck=false"},
            }
        ),
        "serviceHealthVerified",
        None,
    ),
    ("no-probe-keys", dict(probe={"failed": False, "evidence": {}}), "serviceHealthVerified", None),
    ("digest-missing", dict(service_patch={"imageDigest": None}), "imagesPinnedAndPulled", False),
    ("not-running", dict(service_patch={"state": "exited"}), "workloadRunning", False),
    (
        "no-inspect",
        dict(apply_patch={"completedPhases": ["write_artifacts", "compose_pull", "compose_up"]}),
        "runtimeVerified",
        False,
    ),
    ("no-sticker", dict(apply_patch={"versionStickerHash": None}), "stickerRecorded", False),
    ("apply-failed", dict(apply_patch={"failed": True}), "stickerRecorded", False),
    ("no-services", dict(apply_patch={"services": []}), "workloadRunning", False),
]


@pytest.mark.parametrize("changes, key, expected", [c[1:] for c in BOUNDARY_CASES], ids=[c[0] for c in BOUNDARY_CASES])
def test_success_boundary_table(runs, changes, key, expected):
    boundary = _boundary_case(runs["deploy_succeeded"], **changes)
    assert boundary[key] is expected
    # exactly that one condition moves away from the passing run's (a failed apply or no services move more)
    moved = {k for k, v in boundary.items() if v is not True}
    if changes.get("apply_patch", {}).get("failed"):
        assert moved == {"imagesPinnedAndPulled", "runtimeVerified", "stickerRecorded"}
    elif changes.get("apply_patch", {}).get("services") == []:
        assert moved == {"imagesPinnedAndPulled", "workloadRunning"}
    else:
        assert moved == {key}


@pytest.mark.parametrize(
    "changes, status",
    [
        (dict(preflight=None), "failed"),  # no preflight on the target, no success
        (dict(probe=None), "succeeded"),
        (dict(probe={"failed": False, "evidence": {"healthProbe.status": "skipped"}}), "succeeded"),
        (dict(service_patch={"state": "restarting"}), "failed"),  # a False condition fails without a failed stage
        (dict(apply_patch={"versionStickerHash": ""}), "failed"),
    ],
)
def test_status_follows_the_boundary(runs, changes, status):
    run = copy.deepcopy(runs["deploy_succeeded"])
    for name in ("preflight", "probe"):
        if name in changes:
            run[name] = changes[name]
    run["apply"].update(changes.get("apply_patch", {}))
    for service in run["apply"]["services"]:
        service.update(changes.get("service_patch", {}))
    record = dep(run)
    assert record["status"] == status
    if status == "failed" and not any(changes.get(k) for k in ("preflight", "probe")) and "preflight" not in changes:
        assert record["failure"] is None  # no stage failed: the boundary alone says why


def test_skipped_probe_is_recorded_not_verified(runs):
    run = copy.deepcopy(runs["deploy_succeeded"])
    run["probe"] = {
        "failed": False,
        "changed": False,
        "msg": "skipped",
        "evidence": {
            "healthProbe.status": "skipped",
            "healthProbe.count": 1,
            "healthProbe.reason": "waitForHealthCheck=false",
        },
    }
    record = dep(run)
    assert record["status"] == "succeeded"
    assert record["successBoundary"]["serviceHealthVerified"] is None
    assert record["health"]["probe"]["healthProbe.status"] == "skipped"


# ------------------------------------------------------------------ failure stage and code selection

PREFLIGHT_FAIL = {
    "failed": True,
    "msg": "Docker Engine 20.10 is older than 24.0.0\nsecond line",
    "code": "runtime_version_too_old",
}
APPLY_FAIL = {"failed": True, "msg": "compose up failed", "code": "service_unhealthy", "failurePhase": "compose_up"}
PROBE_FAIL = {
    "failed": True,
    "msg": "Post-deploy health probe failed for component 'web': ...",
    "code": "health_probe_failed",
    "evidence": {"healthProbe.status": "failed"},
}


@pytest.mark.parametrize(
    "preflight, apply, probe, expected",
    [
        (
            PREFLIGHT_FAIL,
            None,
            None,
            ("preflight", "runtime_version_too_old", "Docker Engine 20.10 is older than 24.0.0", None),
        ),
        (
            dict(PREFLIGHT_FAIL, code=None),
            None,
            None,
            ("preflight", "preflight_failed", "Docker Engine 20.10 is older than 24.0.0", None),
        ),
        ({"failed": False}, APPLY_FAIL, None, ("deploy", "service_unhealthy", "compose up failed", "compose_up")),
        (
            {"failed": False},
            dict(APPLY_FAIL, code=None),
            None,
            ("deploy", "deploy_failed", "compose up failed", "compose_up"),
        ),
        (
            {"failed": False},
            {"failed": False, "services": []},
            PROBE_FAIL,
            ("verify", "health_probe_failed", "Post-deploy health probe failed for component 'web': ...", None),
        ),
        (
            {"failed": False},
            {"failed": False},
            dict(PROBE_FAIL, code=None, msg=""),
            ("verify", "health_probe_failed", "failed", None),
        ),
        # the earliest failed stage wins
        (
            PREFLIGHT_FAIL,
            APPLY_FAIL,
            PROBE_FAIL,
            ("preflight", "runtime_version_too_old", "Docker Engine 20.10 is older than 24.0.0", None),
        ),
        (None, APPLY_FAIL, PROBE_FAIL, ("deploy", "service_unhealthy", "compose up failed", "compose_up")),
    ],
)
def test_failure_stage_and_code(preflight, apply, probe, expected):
    record = deployment_record({"jobId": "job-1"}, apply, CREATED, preflight=preflight, probe=probe)
    failure = record["failure"]
    assert (failure["stage"], failure["code"], failure["reason"], failure["failurePhase"]) == expected
    assert record["status"] == "failed"


# ------------------------------------------------------------------ project digest


@pytest.mark.parametrize(
    "services, expected",
    [
        ([], None),
        (None, None),
        ([{"service": "web", "imageDigest": D1}], D1),
        (
            [{"service": "web", "imageDigest": D1}, {"service": "api", "imageDigest": D2}],
            digest_json({"api": D2, "web": D1}),
        ),
        (
            [{"service": "api", "imageDigest": D2}, {"service": "web", "imageDigest": D1}],
            digest_json({"web": D1, "api": D2}),
        ),
        ([{"service": "web", "imageDigest": D1}, {"service": "api", "imageDigest": None}], None),
        ([{"service": "web", "imageDigest": ""}], None),
    ],
)
def test_project_digest(services, expected):
    assert project_digest(services) == expected


def test_project_digest_of_several_services_is_order_free_and_not_a_single_digest():
    one = project_digest([{"service": "web", "imageDigest": D1}, {"service": "api", "imageDigest": D1}])
    assert one != D1 and one.startswith("sha256:")
    assert one == digest_json({"web": D1, "api": D1})


def test_project_digest_of_real_runs(runs):
    run = runs["probe_failed_rolled_back"]
    assert project_digest(run["apply"]["services"]) == run["apply"]["services"][0]["imageDigest"]
    assert project_digest(run["rollback"]["services"]) == run["rollback"]["restoredDigests"]["web"]


# ------------------------------------------------------------------ target identity


def test_target_identity_falls_back_to_the_plan_with_the_endpoint_redacted():
    plan = {
        "jobId": "job-9",
        "target": {
            "id": "t-9",
            "name": "vm",
            "type": "ComposeHost",
            "endpoint": "ssh://deploy:hunter2@10.0.0.5",
            "executionMode": "ssh",
        },
    }
    record = deployment_record(plan, None, CREATED, preflight=PREFLIGHT_FAIL)
    assert record["target"]["targetId"] == "t-9"
    assert "hunter2" not in json.dumps(record)


# ------------------------------------------------------------------ digests: drift, createdAt


def test_created_at_is_not_digested(runs):
    run = runs["probe_failed_rolled_back"]
    first, second = dep(run, "2026-01-01T00:00:00Z"), dep(run, "2027-12-31T23:59:59.999999Z")
    assert first["evidenceDigest"] == second["evidenceDigest"]
    assert first["createdAt"] != second["createdAt"]


DRIFTS = [
    ("status", lambda r: r.update(status="succeeded")),
    ("digest", lambda r: r["containers"][0].update(imageDigest="sha256:" + "0" * 64)),
    ("boundary", lambda r: r["successBoundary"].update(serviceHealthVerified=True)),
    ("probe", lambda r: r["health"]["probe"].update({"healthProbe.web.observed": "200"})),
    ("label", lambda r: r["containers"][0]["labels"].update({"stella.release.version": "1.0.0"})),
    ("extra-key", lambda r: r.update(note="added later")),
    ("removed-key", lambda r: r.pop("rollbackBaseline")),
    ("evidenceDigest", lambda r: r.update(evidenceDigest="sha256:" + "f" * 64)),
]


@pytest.mark.parametrize("mutate", [d[1] for d in DRIFTS], ids=[d[0] for d in DRIFTS])
def test_verify_record_detects_drift(runs, mutate):
    record = copy.deepcopy(runs["probe_failed_rolled_back"]["records"]["deployment.json"])
    assert verify_record(record)
    mutate(record)
    assert not verify_record(record)


def test_verify_record_ignores_created_at(runs):
    record = copy.deepcopy(runs["deploy_succeeded"]["records"]["deployment.json"])
    record["createdAt"] = "1970-01-01T00:00:00Z"
    assert verify_record(record)
    del record["createdAt"]
    assert verify_record(record)


def test_deployment_record_is_independent_of_input_key_order(runs):
    run = runs["deploy_succeeded"]
    reordered = {
        name: (dict(reversed(list(value.items()))) if isinstance(value, dict) else value) for name, value in run.items()
    }
    assert dep(reordered)["evidenceDigest"] == dep(run)["evidenceDigest"]


def test_why_an_apply_ran_is_recorded_only_when_the_apply_says_it(runs):
    """``appliedBecause`` of the apply is kept in the record (and digested); an apply without it adds no key."""
    run = runs["deploy_succeeded"]
    plain = dep(run)
    assert "appliedBecause" not in plain
    because = ["container of service web: shop-web-1 health is starting"]
    record = deployment_record(
        run["plan"], dict(run["apply"], appliedBecause=because), CREATED, preflight=run["preflight"], probe=run["probe"]
    )
    assert record["appliedBecause"] == because and verify_record(record)
    assert record["evidenceDigest"] != plain["evidenceDigest"]


def test_a_wait_for_a_starting_container_is_recorded_only_when_the_apply_says_it(runs):
    run = runs["deploy_succeeded"]
    plain = dep(run)
    assert "startingWaitMs" not in plain
    record = deployment_record(
        run["plan"],
        dict(run["apply"], startingWaitMs={"shop-web": 4250}),
        CREATED,
        preflight=run["preflight"],
        probe=run["probe"],
    )
    assert record["startingWaitMs"] == {"shop-web": 4250} and verify_record(record)
    assert record["evidenceDigest"] != plain["evidenceDigest"]
