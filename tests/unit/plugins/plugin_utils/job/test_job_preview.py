"""The preview of a deployment job in check mode (job/preview.py): per target what it would do, from the
results its recording step was handed, and whether the job would run through."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as pv

RUN = {
    "jobId": "job-1",
    "jobIdSource": "job_id",
    "checkMode": True,
    "proceed": True,
    "reason": None,
    "code": None,
    "batches": [["a", "b"], ["c"]],
    "targetOrder": ["a", "b", "c"],
}
FILES = ["apply-manifest.json", "compose.stella.lock.yml", "stella.version.json"]
PREFLIGHT_FAILED = {
    "failed": True,
    "code": "runtime_version_too_old",
    "failurePhase": "preflight",
    "msg": "preflight failed: runtime_version_too_old: 20.10 < 24.0\nmore",
    "deploymentPhases": [
        {"phase": "preflight", "status": "failed", "durationMs": 3},
        {"phase": "prepare", "status": "not_run", "durationMs": 0},
    ],
}


@pytest.mark.parametrize(
    "apply, failure, outcome, summary",
    [
        (
            {"changed": True, "wouldChangeFiles": FILES, "wouldRetainRevision": True},
            None,
            "would_deploy",
            "would deploy (%s would change; the committed release would be retained as a revision)" % ", ".join(FILES),
        ),
        (
            {"changed": True, "wouldReplaceContainers": ["shop-web"]},
            None,
            "would_deploy",
            "would deploy (containers shop-web would be replaced)",
        ),
        (
            {"changed": False, "wouldChangeFiles": [], "appliedByJobId": "job-0"},
            None,
            "converged",
            "converged: nothing would change (applied by job job-0)",
        ),
        (
            PREFLIGHT_FAILED,
            PREFLIGHT_FAILED,
            "would_fail",
            "would fail at preflight: runtime_version_too_old: preflight failed: runtime_version_too_old: 20.10 < 24.0",
        ),
        # a step name is not a phase: the failed phase is the agent's, else deploy
        (
            {"failed": True, "code": "invalid_payload", "failurePhase": "validate_payload", "msg": "bad"},
            None,
            "would_fail",
            "would fail at deploy: invalid_payload: bad",
        ),
        # the record's own failure (what stopped the play after the apply), its phase when it names one
        (
            {"changed": True},
            {"failed": True, "code": "job_store_failed", "msg": "store gone", "failurePhase": "job"},
            "would_fail",
            "would fail at cleanup: job_store_failed: store gone",
        ),
        (
            None,
            {"failed": True, "msg": "templating failed"},
            "would_fail",
            "would fail at preflight: failed: templating failed",
        ),
        (None, None, "not_run", "not reached (the apply did not run on it)"),
        ({"skipped": True}, None, "not_run", "not reached (the apply did not run on it)"),
    ],
)
def test_target_preview(apply, failure, outcome, summary):
    preview = pv.target_preview(apply, failure)
    assert (preview["outcome"], preview["summary"]) == (outcome, summary)


def test_close_sums_up_every_target_in_batch_order():
    previews = {
        "a": pv.target_preview({"changed": True, "wouldChangeFiles": FILES}),
        "b": pv.target_preview({"changed": False}),
        "c": pv.target_preview({"changed": True, "wouldChangeFiles": FILES}),
    }
    done = pv.close(RUN, previews)
    assert (done["status"], done["succeeded"], done["reason"], done["checkMode"]) == ("Preview", True, None, True)
    assert {n: (t["batch"], t["outcome"]) for n, t in done["preview"].items()} == {
        "a": (0, "would_deploy"),
        "b": (0, "converged"),
        "c": (1, "would_deploy"),
    }
    lines = done["text"].splitlines()
    assert lines[0] == "job job-1 (check mode: a preview, nothing was recorded or changed)"
    assert lines[1] == "  batches: a, b | c"
    assert [line.split(":")[0] for line in lines[2:]] == ["  a (batch 1)", "  b (batch 1)", "  c (batch 2)"]
    assert done["outcome"]["status"] == "Preview" and done["outcome"]["evidence"] == {} and done["evidenceFiles"] == {}


def test_close_fails_when_a_target_would_fail_or_was_not_reached():
    failed = {"failed": True, "code": "disk_space_low", "msg": "low", "failurePhase": "preflight"}
    previews = {"a": pv.target_preview({"changed": True}), "b": pv.target_preview(failed, failed)}
    done = pv.close(RUN, previews)
    assert done["succeeded"] is False and done["reason"] == "b, c would not deploy"
    assert done["text"].splitlines()[-1] == "  b, c would not deploy"
    assert done["msg"] == "job job-1 Preview: b, c would not deploy"  # the role's failing close says this


def test_an_unreachable_target_stops_the_preview_at_planning():
    planned = {
        "batches": [["a"]],
        "serial": [1],
        "targetOrder": ["a"],
        "plans": {"a": {}},
        "files": {"a": {".env.stella": None}},
    }
    started = pv.start("job-1", "job_id", planned, {"keepRevisions": 10}, {"a": "ssh: no route"})
    assert (started["proceed"], started["status"], started["code"]) == (False, "Preview", "target_unreachable")
    assert started["reason"] == "target readiness failed: a unreachable" and started["checkMode"] is True
    done = pv.close(dict(started, proceed=False), {})
    assert done["succeeded"] is False and done["reason"] == started["reason"]


@pytest.mark.parametrize(
    "step, expected",
    [
        ("gate", {"proceed": True}),
        ("finish", {"status": "Preview", "rollbackOrder": []}),
        ("traffic", {"skipped": True}),
        ("traffic_rollback", {"skipped": True}),
    ],
)
def test_recording_steps_record_nothing_gates_proceed_and_no_rollback_is_decided(step, expected):
    outcome = pv.passing(step, "job-1", batch=0)
    assert outcome["jobId"] == "job-1" and outcome["checkMode"] is True
    assert {k: outcome[k] for k in expected} == expected


# ---- the operator rollback in check mode

ROLLBACK_RUN = {
    "jobId": "job-1-rollback-abc",
    "kind": "rollback",
    "checkMode": True,
    "status": "Preview",
    "sourceJobId": "job-1",
    "rollbackBatches": [["c"], ["a"]],
    "rollbackOrder": ["c", "a"],
    "skipped": {"b": "no retained revision"},
}
RESTORE = {"changed": True, "restoredRevisionPath": "/srv/p/.stella/revisions/r1", "restoredManifestHash": "sha256:1"}


def test_held_projects_are_those_an_unfinished_job_whose_run_lives_holds():
    record = {
        "jobId": "job-9",
        "targets": {
            "a": {"targetId": "id-a", "projectName": "shop"},
            "b": {"targetId": "id-b", "projectName": "shop"},
            "c": {"targetId": "id-c", "projectName": "shop"},
        },
    }
    claims = {"id-a|shop": "job-2", "id-b|shop": "job-3", "id-c|shop": "job-9", "id-d|shop": "job-2"}
    assert pv.held_projects(record, claims, {"job-2", "job-9"}) == {"a": "job-2"}
    assert pv.held_projects(record, claims, set()) == {}


def test_rollback_start_is_the_orders_with_what_the_preview_shows():
    orders = {
        "jobId": "job-1-rollback-abc",
        "status": "Running",
        "reason": "why",
        "rollbackBatches": [["a"]],
        "rollbackSerial": [1],
        "rollbackOrder": ["a"],
        "rollbackTargets": {"a": {"revisionPath": "/r"}},
    }
    record = {"sourceJobId": "job-1", "rollback": {"skipped": {"b": "no retained revision"}}}
    assert pv.rollback_start(orders, record) == dict(
        orders,
        checkMode=True,
        kind="rollback",
        status="Preview",
        sourceJobId="job-1",
        skipped={"b": "no retained revision"},
    )


@pytest.mark.parametrize(
    "result, failure, outcome, summary",
    [
        (RESTORE, None, "would_restore", "would restore the revision at /srv/p/.stella/revisions/r1"),
        (
            dict(RESTORE, changed=False),
            None,
            "converged",
            "converged: the revision at /srv/p/.stella/revisions/r1 already runs",
        ),
        (
            {
                "failed": True,
                "code": "rollback_superseded",
                "failurePhase": "rollback-pre",
                "msg": "newer release applied\nmore",
            },
            None,
            "would_fail",
            "would fail at rollback-pre: rollback_superseded: newer release applied",
        ),
        ({"failed": True, "msg": ""}, None, "would_fail", "would fail at rollback: failed: failed"),
        (
            None,
            {"failed": True, "code": "job_invalid", "msg": "no job"},
            "would_fail",
            "would fail at rollback: job_invalid: no job",
        ),
        (None, None, "not_run", "not reached (the play did not run on it)"),
        ({"skipped": True}, None, "not_run", "not reached (the play did not run on it)"),
    ],
)
def test_what_one_targets_rollback_would_do(result, failure, outcome, summary):
    preview = pv.rollback_target_preview(result, failure)
    assert (preview["outcome"], preview["summary"]) == (outcome, summary)


def test_rollback_close_lists_each_target_in_reverse_batch_order_and_the_skipped():
    closed = pv.rollback_close(
        ROLLBACK_RUN,
        {"c": pv.rollback_target_preview(RESTORE), "a": pv.rollback_target_preview(dict(RESTORE, changed=False))},
    )
    assert (closed["status"], closed["succeeded"], closed["reason"], closed["checkMode"]) == (
        "Preview",
        True,
        None,
        True,
    )
    assert closed["text"].splitlines() == [
        "rollback job job-1-rollback-abc of job job-1 (check mode: a preview, nothing was recorded or changed)",
        "  batches, in reverse batch order: c | a",
        "  c (batch 1): would restore the revision at /srv/p/.stella/revisions/r1",
        "  a (batch 2): converged: the revision at /srv/p/.stella/revisions/r1 already runs",
        "  b: skipped: no retained revision",
    ]
    assert closed["outcome"]["succeeded"] is True and closed["outcome"]["targets"] == ["a", "c"]
    assert closed["skipped"] == {"b": "no retained revision"} and closed["evidenceFiles"] == {}


def test_a_rollback_that_would_fail_or_not_reach_a_target_does_not_succeed():
    closed = pv.rollback_close(
        ROLLBACK_RUN, {"c": pv.rollback_target_preview({"failed": True, "code": "no_revision", "msg": "gone"})}
    )
    assert (closed["succeeded"], closed["reason"]) == (False, "a, c would not be rolled back")
    assert closed["text"].splitlines()[-1] == "  a, c would not be rolled back"
