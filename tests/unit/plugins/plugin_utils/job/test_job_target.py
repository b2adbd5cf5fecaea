"""One target's outcome from its tasks' results (job/target.py): the nine phases as they ran, the failed
phase from the results themselves, never more than happened."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import target as jt

AGENT = ("preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy")


def agent(statuses=None, failed=False, **extra):
    """An apply result whose agent phases have ``statuses`` (default all succeeded), 10 ms each."""
    statuses = statuses or ["succeeded"] * 7
    phases = [{"phase": name, "status": status, "durationMs": 10} for name, status in zip(AGENT, statuses)]
    phases += [{"phase": name, "status": "not_run", "durationMs": 0} for name in AGENT[len(statuses) :]]
    return dict({"deploymentPhases": phases, "failed": failed, "changed": True}, **extra)


PASSED = {"evidence": {"healthProbe.status": "passed", "healthProbe.count": 1}, "failed": False}
SKIPPED = {"evidence": {"healthProbe.status": "skipped", "healthProbe.reason": "waitForHealthCheck=false"}}
NONE = {"evidence": {}, "msg": "No post-deploy health probes configured"}
PROBE_FAILED = {
    "failed": True,
    "code": "health_probe_failed",
    "msg": "Post-deploy health probe failed for web\nx",
    "evidence": {"healthProbe.status": "failed"},
}


def names(outcome):
    return [(p[0], p[1]) for p in outcome["phases"]]


def test_a_target_that_succeeded_ran_all_nine_phases():
    outcome = jt.deployment_outcome(agent(), PASSED, evidence_written=True, probe_duration_ms=25)
    assert outcome["succeeded"] is True and outcome["failedPhase"] is None and outcome["code"] is None
    assert names(outcome) == [(name, "succeeded") for name in AGENT + ("evidence", "cleanup")]
    verify = [p for p in outcome["phases"] if p[0] == "verify"][0]
    assert verify[2] == 35 and verify[3] == {"probes": "passed"}
    evidence = [p for p in outcome["phases"] if p[0] == "evidence"][0]
    assert evidence[3] == {"written": "deployment.json", "in": ["job store", "evidence directory"]}


@pytest.mark.parametrize(
    "probe, probes, reason",
    [
        (SKIPPED, "skipped", "waitForHealthCheck=false"),
        (NONE, "none", None),
        (None, "not_run", None),
    ],
)
def test_probes_that_did_not_run_are_recorded_as_what_they_were(probe, probes, reason):
    outcome = jt.deployment_outcome(agent(), probe)
    verify = [p for p in outcome["phases"] if p[0] == "verify"][0]
    expected = {"probes": probes}
    if reason:
        expected["reason"] = reason
    assert verify[1] == "succeeded" and verify[3] == expected
    assert [p for p in outcome["phases"] if p[0] == "evidence"][0][3] == {
        "written": "deployment.json",
        "in": ["job store"],
    }
    on_disk = jt.deployment_outcome(agent(), probe, evidence_written=True)
    assert [p for p in on_disk["phases"] if p[0] == "evidence"][0][3]["in"] == ["job store", "evidence directory"]


def test_a_failed_probe_fails_verify_and_no_later_phase_is_recorded():
    outcome = jt.deployment_outcome(agent(), PROBE_FAILED, failure=PROBE_FAILED)
    assert names(outcome) == [(n, "succeeded") for n in AGENT[:4]] + [("verify", "failed")]
    assert (outcome["succeeded"], outcome["failedPhase"], outcome["code"], outcome["reason"]) == (
        False,
        "verify",
        "health_probe_failed",
        "Post-deploy health probe failed for web",
    )


@pytest.mark.parametrize("failed_at", range(7))
def test_an_agent_failure_is_recorded_at_the_phase_the_agent_names_and_not_run_phases_are_not(failed_at):
    apply = agent(
        ["succeeded"] * failed_at + ["failed"], failed=True, code="some_code", msg="it broke", failurePhase="compose_up"
    )
    outcome = jt.deployment_outcome(apply, None, failure=apply)
    assert names(outcome) == [(n, "succeeded") for n in AGENT[:failed_at]] + [(AGENT[failed_at], "failed")]
    assert (outcome["failedPhase"], outcome["code"], outcome["reason"]) == (AGENT[failed_at], "some_code", "it broke")


def test_the_failed_phase_never_comes_from_a_task_name():
    # the failure's task may be named anything: only the results say where it failed
    apply = agent(["succeeded"] * 3 + ["failed"], failed=True, msg="pull denied")
    failure = dict(apply, task="verify | a misleading name", name="promote | another")
    assert jt.deployment_outcome(apply, None, failure=failure)["failedPhase"] == "deploy"


def test_an_apply_failure_without_phases_falls_back_to_its_named_phase_or_deploy():
    assert jt.failed_phase({"failed": True, "failurePhase": "promote"}, None, None) == "promote"
    assert jt.failed_phase({"failed": True, "failurePhase": "validate_payload"}, None, None) == "deploy"
    outcome = jt.deployment_outcome({"failed": True, "msg": ""}, None)
    assert (outcome["code"], outcome["reason"]) == ("deploy_failed", "the deploy phase failed")


def test_a_failure_after_the_apply_and_probes_is_the_records_own():
    failure = {"failed": True, "code": "job_store_failed", "msg": "database is locked"}
    outcome = jt.deployment_outcome(agent(), PASSED, failure=failure)
    assert names(outcome)[-1] == ("cleanup", "failed") and ("evidence", "succeeded") not in names(outcome)
    assert (outcome["failedPhase"], outcome["code"]) == ("cleanup", "job_store_failed")


def test_a_failure_before_the_apply_ran_is_a_preflight_failure():
    outcome = jt.deployment_outcome(None, None, failure={"failed": True, "msg": "undefined variable"})
    assert names(outcome) == [("preflight", "failed")] and outcome["code"] == "deploy_failed"


RESTORED = {
    "rollbackRestored": True,
    "restoredRevisionPath": "/r/1",
    "changed": True,
    "services": [{"service": "web", "state": "running", "imageDigest": "sha256:" + "a" * 64}],
    "deploymentPhases": [
        {"phase": p, "status": "succeeded", "durationMs": 5}
        for p in ("rollback-pre", "rollback-deploy", "rollback-verify", "rollback-post")
    ],
}


def test_a_verified_restoration_is_a_rolled_back_target():
    outcome = jt.rollback_outcome(RESTORED)
    assert outcome["succeeded"] is True and outcome["reason"] is None
    assert [p[0] for p in outcome["phases"]] == ["rollback-pre", "rollback-deploy", "rollback-verify", "rollback-post"]


@pytest.mark.parametrize(
    "change",
    [
        {"rollbackRestored": False},
        {"services": []},
        {"services": [{"service": "web", "state": "exited", "imageDigest": "sha256:" + "a" * 64}]},
        {"services": [{"service": "web", "state": "running", "imageDigest": None}]},
    ],
)
def test_a_restoration_the_agent_did_not_verify_is_not_a_rollback(change):
    outcome = jt.rollback_outcome(dict(RESTORED, **change))
    assert outcome["succeeded"] is False and outcome["reason"].startswith("rollback_unverified: ")


def test_a_failed_rollback_keeps_its_code_and_first_line():
    result = {
        "failed": True,
        "code": "rollback_superseded",
        "msg": "a newer release runs\ndetail",
        "deploymentPhases": [
            {"phase": "rollback-pre", "status": "failed", "durationMs": 1},
            {"phase": "rollback-deploy", "status": "not_run", "durationMs": 0},
        ],
    }
    outcome = jt.rollback_outcome(result, result)
    assert (outcome["succeeded"], outcome["reason"]) == (False, "rollback_superseded: a newer release runs")
    assert [(p[0], p[1]) for p in outcome["phases"]] == [("rollback-pre", "failed")]
    assert jt.rollback_outcome(None, {"failed": True, "msg": "x"})["reason"] == "rollback_failed: x"


SERVICE = {"service": "web", "state": "running", "imageDigest": "sha256:" + "b" * 64, "containerId": "c1"}


def test_an_apply_that_changed_the_target_keeps_the_revision_a_rollback_restores():
    apply = {
        "changed": True,
        "previousRevisionPath": "/p/revisions/000002-x",
        "projectName": "p",
        "versionStickerHash": "sha256:s",
        "composeLockHash": "sha256:l",
        "services": [SERVICE],
    }
    facts = jt.target_facts(apply, {"deployment.json": {"path": "/e/d.json", "sha256": "x"}})
    assert facts["previousRevisionPath"] == "/p/revisions/000002-x" and "unchangedByJob" not in facts
    assert facts["artifacts"] == {"versionStickerHash": "sha256:s", "composeLockHash": "sha256:l"}
    assert facts["evidence"] == {"deployment.json": {"path": "/e/d.json", "sha256": "x"}}
    assert facts["currentDigest"].startswith("sha256:")


@pytest.mark.parametrize(
    "apply",
    [
        # a converged re-run: the agent still names the revision the project retained earlier
        {
            "changed": False,
            "previousRevisionPath": "/p/revisions/000001-x",
            "appliedByJobId": "job-0",
            "services": [SERVICE],
        },
        # a failure that changed nothing (a pre-deploy hook refused; the staged files were put back)
        {"changed": False, "failed": True, "previousRevisionPath": "/p/revisions/000001-x", "code": "hook_failed"},
    ],
)
def test_an_apply_that_did_not_change_the_target_leaves_nothing_to_restore(apply):
    facts = jt.target_facts(apply, {})
    assert facts["unchangedByJob"] is True and "previousRevisionPath" not in facts


def test_no_apply_no_facts_but_the_evidence():
    assert jt.target_facts(None, {}) == {"evidence": {}}


LOST = {
    "unreachable": True,
    "changed": False,
    "msg": "Failed to connect to the host via ssh: Connection closed by 10.0.0.2 port 22\nmore",
}


def test_a_target_that_stopped_answering_during_its_apply_is_failed_unreachable_with_its_outcome_unknown():
    outcome = jt.deployment_outcome(LOST, {"skipped": True, "changed": False})
    assert (outcome["succeeded"], outcome["code"], outcome["failedPhase"]) == (False, "target_unreachable", "preflight")
    assert outcome["phases"] == [("preflight", "failed", 0, {"outcome": "unknown"})]
    assert "Connection closed by 10.0.0.2 port 22" in outcome["reason"] and "more" not in outcome["reason"]
    assert "may have finished" in outcome["reason"]
    # no unchangedByJob (it may have changed), no revision path (its agent finds the one to restore)
    assert jt.target_facts(LOST, {}) == {"evidence": {}, "outcomeUnknown": True}


TIMED_OUT = {"failed": True, "changed": False, "msg": "Timed out after 840 seconds.", "timedout": {"period": 840}}


def test_an_apply_past_its_task_timeout_is_a_target_that_stopped_answering():
    """A host that hangs with its connection up: the task's timeout ends the wait, as unreachable."""
    outcome = jt.deployment_outcome(TIMED_OUT, failure=TIMED_OUT)
    assert (outcome["succeeded"], outcome["code"]) == (False, "target_unreachable")
    assert "Timed out after 840 seconds" in outcome["reason"] and "may have finished" in outcome["reason"]
    assert jt.target_facts(TIMED_OUT, {}) == {"evidence": {}, "outcomeUnknown": True}
    assert jt.rollback_outcome({}, failure=TIMED_OUT)["reason"].startswith("target_unreachable")


def test_a_target_that_does_not_answer_to_its_rollback_is_not_restored():
    outcome = jt.rollback_outcome(LOST)
    assert outcome["succeeded"] is False and outcome["phases"] == []
    assert outcome["reason"].startswith("target_unreachable: the target did not answer (Failed to connect")
    assert jt.rollback_outcome({"skipped": True}, failure=LOST)["succeeded"] is False
