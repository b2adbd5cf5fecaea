"""The job record's state machine (pure)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import recovery as _recovery
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import timeouts as _timeouts
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import plan as _job_plan

T0 = "2026-01-01T00:00:00Z"
BATCHES = [["t1", "t2"], ["t3", "t4"], ["t5"]]


def make(options=None):
    targets = {n: {"targetId": "id-" + n} for batch in BATCHES for n in batch}
    opts = {"autoRollbackOnFailure": True, "autoRollbackSource": "default"}
    opts.update(options or {})
    record = _job.new_job(
        job_id="job-1",
        job_id_source=None,
        summary={"release": {"id": "r1"}, "strategy": "rolling"},
        batches=BATCHES,
        targets=targets,
        options=opts,
        now=T0,
    )
    return _job.start(record, T0)


def run(record, name, ok, previous=True, reason="boom"):
    record = _job.record_phase(
        record,
        name,
        entry=_job.phase_entry("preflight", "passed", started_at=T0, completed_at=T0, duration_ms=5),
        now=T0,
    )
    facts = {"previousRevisionPath": "/p/%s/revisions/000001-x" % name} if previous else {}
    return _job.finish_target(
        record, name, succeeded=ok, now=T0, reason=reason, code="health_probe_failed", facts=facts
    )


def test_new_job_is_pending_with_every_target_pending_in_order():
    record = _job.new_job(
        job_id="job-1",
        job_id_source="stella_job_id",
        summary={},
        batches=BATCHES,
        targets={n: {} for b in BATCHES for n in b},
        options={},
        now=T0,
    )
    assert record["status"] == "Pending" and record["targetOrder"] == ["t1", "t2", "t3", "t4", "t5"]
    assert [(n, t["batch"], t["order"], t["status"]) for n, t in record["targets"].items()] == [
        ("t1", 0, 0, "Pending"),
        ("t2", 0, 1, "Pending"),
        ("t3", 1, 2, "Pending"),
        ("t4", 1, 3, "Pending"),
        ("t5", 2, 4, "Pending"),
    ]
    with pytest.raises(StellaError):
        _job.new_job(
            job_id="j", job_id_source=None, summary={}, batches=BATCHES, targets={"t1": {}}, options={}, now=T0
        )


def test_functions_never_change_their_input():
    record = make()
    before = copy.deepcopy(record)
    run(record, "t1", True)
    _job.record_gate(record, {"batch": 0, "proceed": False, "reason": "x", "failedTargets": []}, T0)
    assert record == before


def test_a_change_of_one_target_copies_that_target_and_shares_the_rest():
    record = make()
    before = copy.deepcopy(record)
    one = _job.record_phase(
        record, "t3", entry=_job.phase_entry("deploy", "passed", started_at=T0, completed_at=T0, duration_ms=5), now=T0
    )
    ended = _job.finish_target(one, "t3", succeeded=False, now=T0, reason="boom", code="deploy_failed")
    assert record == before  # the input is never changed
    assert one["targets"]["t3"] is not record["targets"]["t3"] and one["targets"] is not record["targets"]
    assert all(one["targets"][n] is record["targets"][n] for n in ("t1", "t2", "t4", "t5"))
    assert ended["targets"]["t3"]["status"] == "Failed" and one["targets"]["t3"]["status"] == "Running"
    assert ended["updatedAt"] == T0 and [p["name"] for p in ended["targets"]["t3"]["phases"]] == ["deploy"]
    rolled = _rollback.finish_rollback_target(ended, "t3", succeeded=True, now=T0)
    assert rolled["targets"]["t3"]["status"] == "RolledBack" and ended["targets"]["t3"]["status"] == "Failed"


def test_all_targets_succeed():
    record = make()
    for name in ("t1", "t2", "t3", "t4", "t5"):
        record = run(record, name, True)
    for batch in range(3):
        record = _job.record_gate(record, {"batch": batch, "proceed": True, "reason": "ok", "failedTargets": []}, T0)
    record = _job.finish(record, T0)
    assert (record["status"], record["promotion"], record["reason"]) == ("Succeeded", "Succeeded", None)


def test_closed_gate_skips_later_batches_and_rolls_back_in_reverse_batch_order():
    record = make()
    record = run(run(record, "t1", True), "t2", True)
    record = _job.record_gate(record, {"batch": 0, "proceed": True, "reason": "ok", "failedTargets": []}, T0)
    record = run(run(record, "t3", False, reason="probe failed"), "t4", True)
    record = _job.record_gate(
        record, {"batch": 1, "proceed": False, "reason": "gate closed", "failedTargets": ["t3"]}, T0
    )
    assert record["targets"]["t5"]["status"] == "Skipped"
    assert record["targets"]["t5"]["reason"] == "not started: gate closed"
    record = _job.finish(record, T0)
    assert (record["status"], record["promotion"], record["code"]) == ("Failed", "Failed", "health_probe_failed")
    assert record["reason"] == "target t3: probe failed"
    record = _rollback.auto_rollback(record, T0)
    assert record["status"] == "RollingBack" and record["isRollback"] is True
    assert record["rollback"]["batches"] == [["t3", "t4"], ["t1", "t2"]]
    assert record["events"][-1]["kind"] == "RollbackStarted"
    for name in ("t3", "t4", "t1", "t2"):
        record = _rollback.finish_rollback_target(
            record, name, succeeded=True, now=T0, facts={"restoredRevisionPath": "x"}
        )
    record = _rollback.finish_rollback(record, T0)
    assert record["status"] == "RolledBack" and record["promotion"] == "Failed"
    assert record["reason"] == "target t3: probe failed (auto-rollback restored the retained previous revision)"
    assert [e["kind"] for e in record["events"]] == ["RollbackStarted", "RollbackCompleted"]
    assert record["targets"]["t5"]["status"] == "Skipped"
    with pytest.raises(StellaError) as info:
        _rollback.auto_rollback(record, T0)
    assert info.value.code == "job_state_invalid"


def test_a_failed_rollback_is_never_retried():
    record = _job.finish(run(make(), "t1", False), T0)
    record = _rollback.auto_rollback(record, T0)
    assert record["rollback"]["batches"] == [["t1"]]
    record = _rollback.finish_rollback_target(record, "t1", succeeded=False, now=T0, reason="compose_up_failed: x")
    record = _rollback.finish_rollback(record, T0)
    assert record["status"] == "Failed"
    assert record["reason"] == "target t1: boom; auto-rollback failed: t1: compose_up_failed: x"
    assert record["events"][-1] == {"kind": "RollbackFailed", "at": T0, "error": "t1: compose_up_failed: x"}
    with pytest.raises(StellaError):
        _rollback.auto_rollback(record, T0)


def test_no_eligible_target_suffixes_the_reason_and_stays_failed():
    record = _job.finish(run(make(), "t1", False, previous=False), T0)
    record = _rollback.auto_rollback(record, T0)
    assert record["status"] == "Failed"
    assert record["reason"] == (
        "target t1: boom (auto-rollback skipped: no target retained a previous revision to restore)"
    )
    # t2, of t1's batch, started and never ended: failed, and it retained nothing either
    assert record["rollback"]["skipped"] == {"t1": _job.NO_REVISION, "t2": _job.NO_REVISION}
    assert (record["targets"]["t2"]["status"], record["targets"]["t3"]["status"]) == ("Failed", "Skipped")


def test_a_batch_starts_its_targets_when_the_job_starts_or_the_gate_before_it_opens():
    record = make()
    assert [record["targets"][n]["status"] for n in ("t1", "t2", "t3")] == ["Running", "Running", "Pending"]
    opened = _job.record_gate(record, {"batch": 0, "proceed": True, "reason": "ok"}, T0)
    assert [opened["targets"][n]["status"] for n in ("t3", "t4", "t5")] == ["Running", "Running", "Pending"]
    closed = _job.record_gate(record, {"batch": 0, "proceed": False, "reason": "no"}, T0)
    assert [closed["targets"][n]["status"] for n in ("t3", "t5")] == ["Skipped", "Skipped"]
    rollback = _rollback.operator_rollback(
        _job.finish(run(run(record, "t1", True), "t2", True), T0), job_id="job-1-r", now=T0
    )
    assert {t["status"] for t in rollback["targets"].values()} == {"Pending"}  # a rollback job's targets wait


def test_a_rollback_leaves_the_targets_this_job_did_not_change_and_says_why():
    record = _job.finish_target(make(), "t1", succeeded=True, now=T0, facts={"unchangedByJob": True})
    record = _job.finish_target(
        record,
        "t2",
        succeeded=False,
        now=T0,
        reason="boom",
        code="deploy_failed",
        facts={"previousRevisionPath": "/p/t2/revisions/000001-x"},
    )
    record = _rollback.auto_rollback(_job.finish(record, T0), T0)
    assert record["status"] == "RollingBack" and record["rollback"]["batches"] == [["t2"]]
    assert record["rollback"]["skipped"] == {"t1": _job.UNCHANGED}
    assert record["targets"]["t1"]["rollbackSkipped"] == _job.UNCHANGED
    source = _job.finish_target(
        _job.finish_target(make(), "t1", succeeded=True, now=T0, facts={"unchangedByJob": True}),
        "t2",
        succeeded=True,
        now=T0,
        facts={"previousRevisionPath": "/r"},
    )
    operator = _rollback.operator_rollback(_job.finish(source, T0), job_id="job-1-r", now=T0)
    assert operator["rollback"]["batches"] == [["t2"]] and operator["rollback"]["skipped"]["t1"] == _job.UNCHANGED


def test_disabled_auto_rollback_leaves_the_job_untouched():
    record = _job.finish(
        run(
            make({"autoRollbackOnFailure": False, "autoRollbackSource": "strategyConfig.autoRollbackOnFailure"}),
            "t1",
            False,
        ),
        T0,
    )
    after = _rollback.auto_rollback(record, T0)
    assert (after["status"], after["reason"]) == ("Failed", "target t1: boom")
    assert after["rollback"] == {
        "attempted": False,
        "skipReason": "autoRollbackOnFailure=false",
        "source": "strategyConfig.autoRollbackOnFailure",
    }


@pytest.mark.parametrize(
    "config, override, expected",
    [
        ({}, None, (True, "default")),
        ({"autoRollbackOnFailure": False}, None, (False, "strategyConfig.autoRollbackOnFailure")),
        ({"rollbackOnFailure": False}, None, (False, "strategyConfig.rollbackOnFailure")),
        (
            {"autoRollbackOnFailure": True, "rollbackOnFailure": False},
            None,
            (True, "strategyConfig.autoRollbackOnFailure"),
        ),
        ({"autoRollbackOnFailure": True}, False, (False, "override")),
    ],
)
def test_rollback_options(config, override, expected):
    assert _job_plan.rollback_options(config, override) == expected


@pytest.mark.parametrize(
    "variables, expected",
    [
        ({"awx_job_id": 42}, ("awx-42", "awx_job_id")),
        ({"tower_job_id": "7", "stella_job_id": "x"}, ("tower-7", "tower_job_id")),
        ({"stella_job_id": "job-abc"}, ("job-abc", "stella_job_id")),
        ({"awx_job_id": ""}, (None, None)),
        ({}, (None, None)),
    ],
)
def test_job_ids_from_the_caller(variables, expected):
    assert _job.job_id_from(variables) == expected


def test_illegal_transitions_are_refused():
    record = make()
    with pytest.raises(StellaError):
        _job.start(record, T0)
    done = _job.finish(run(record, "t1", True), T0)
    with pytest.raises(StellaError):
        _job.finish(done, T0)
    with pytest.raises(StellaError):
        _job.finish_target(done, "t1", succeeded=True, now=T0)
    with pytest.raises(StellaError):
        _job.record_phase(
            record,
            "t1",
            entry=_job.phase_entry("warmup", "passed", started_at=T0, completed_at=T0, duration_ms=1),
            now=T0,
        )


def test_fail_closed_names_the_unreachable_targets():
    record = _job.fail_closed(
        make(),
        code="target_unreachable",
        reason="target t4 is unreachable",
        failed_targets={"t4": "ssh: connect to host t4 port 22: Connection refused"},
        now=T0,
    )
    assert record["status"] == "Failed" and record["code"] == "target_unreachable"
    assert record["targets"]["t4"]["status"] == "Failed"
    assert {n for n, t in record["targets"].items() if t["status"] == "Skipped"} == {"t1", "t2", "t3", "t5"}


def test_interrupted_job_is_failed_never_running():
    record = _job.record_phase(
        make(),
        "t3",
        entry=_job.phase_entry("preflight", "passed", started_at=T0, completed_at=T0, duration_ms=1),
        now=T0,
    )
    record = _job.interrupted(record, T0, "interrupted: the controller run ended (pid 9)")
    assert record["status"] == "Failed" and record["code"] == "job_interrupted"
    assert record["targets"]["t3"]["status"] == "Failed"
    assert record["targets"]["t5"]["status"] == "Skipped"


def test_an_interrupted_job_gets_its_rollback_decision_and_its_mid_apply_targets_are_outcome_unknown():
    """t1 finished with a retained revision, t2 without one (known), t3 and t4 were mid-apply when the run
    ended (their batch had started), t5 never started."""
    record = _job.record_gate(
        run(run(make(), "t1", True), "t2", True, previous=False), {"batch": 0, "proceed": True, "reason": None}, T0
    )
    record = _job.record_phase(
        record,
        "t4",
        entry=_job.phase_entry("preflight", "passed", started_at=T0, completed_at=T0, duration_ms=1),
        now=T0,
    )
    assert [record["targets"][n]["status"] for n in ("t3", "t4", "t5")] == ["Running", "Running", "Pending"]
    record = _job.interrupted(record, T0, "interrupted: the controller run ended (pid 9)")
    for name in ("t3", "t4"):
        assert record["targets"][name]["outcomeUnknown"] is True and _job.eligible(record["targets"][name])
    assert not record["targets"]["t1"].get("outcomeUnknown") and _job.eligible(record["targets"]["t1"])
    # its rollback decision: no automatic rollback (no run is left to run one), what an operator's would do
    assert record["rollback"] == {
        "attempted": False,
        "skipReason": "job_interrupted",
        "batches": [["t3", "t4"], ["t1"]],
        "skipped": {"t2": _job.NO_REVISION},
    }
    rollback = _rollback.operator_rollback(record, job_id="job-1-rollback-a", now=T0)
    assert rollback["rollback"]["batches"] == [["t3", "t4"], ["t1"]]
    assert rollback["rollback"]["skipped"] == {"t2": _job.NO_REVISION, "t5": _job.NOT_STARTED}
    # an interrupted rollback keeps the decision it made
    ran = run(run(run(run(run(make(), "t1", False), "t2", True), "t3", True), "t4", True), "t5", True)
    rolling = _rollback.auto_rollback(_job.finish(ran, T0), T0)
    assert _job.interrupted(rolling, T0, "gone")["rollback"]["attempted"] is True


def test_phases_are_kept_in_contract_order():
    record = make()
    for phase in ("verify", "preflight", "deploy", "cleanup"):
        record = _job.record_phase(
            record, "t1", entry=_job.phase_entry(phase, "passed", started_at=T0, completed_at=T0, duration_ms=1), now=T0
        )
    record = _job.record_phase(
        record,
        "t1",
        entry=_job.phase_entry("rollback-deploy", "passed", started_at=T0, completed_at=T0, duration_ms=1),
        now=T0,
    )
    assert [p["name"] for p in record["targets"]["t1"]["phases"]] == ["preflight", "deploy", "verify", "cleanup"]
    assert [p["name"] for p in record["targets"]["t1"]["rollbackPhases"]] == ["rollback-deploy"]


def test_operator_rollback_is_a_rollback_job_over_the_eligible_targets():
    source = make()
    source = run(run(source, "t1", True), "t2", True, previous=False)
    source = run(run(source, "t3", True), "t4", True)
    source = _job.finish(run(source, "t5", True), T0)
    record = _rollback.operator_rollback(source, job_id="job-1-rollback-a", now=T0, reason="operator: bad release")
    # recovery, never a deployment: it rolls back from its start, and promotes nothing
    assert (record["kind"], record["isRollback"], record["status"], record["sourceJobId"]) == (
        "rollback",
        True,
        "RollingBack",
        "job-1",
    )
    assert record["promotion"] == source["promotion"] == "Succeeded"
    assert [e["kind"] for e in record["events"]] == ["RollbackStarted"]
    assert record["rollback"]["batches"] == [["t5"], ["t3", "t4"], ["t1"]]
    assert record["rollback"]["skipped"] == {"t2": _job.NO_REVISION}
    assert record["batches"] == [["t5"], ["t3", "t4"], ["t1"]]
    record = _rollback.finish_rollback_target(record, "t5", succeeded=True, now=T0)
    record = _rollback.finish_rollback_target(
        record, "t3", succeeded=False, now=T0, reason="rollback_superseded: newer release"
    )
    record = _rollback.finish_rollback_target(record, "t4", succeeded=True, now=T0)
    record = _rollback.finish_rollback_target(record, "t1", succeeded=True, now=T0)
    record = _rollback.finish_rollback(record, T0)
    assert record["status"] == "Failed" and record["targets"]["t3"]["status"] == "Failed"
    assert record["reason"] == "operator: bad release; rollback failed: t3: rollback_superseded: newer release"
    assert (record["code"], record["rollback"]["status"]) == ("rollback_failed", "failed")
    assert [e["kind"] for e in record["events"]] == ["RollbackStarted", "RollbackFailed"]


@pytest.mark.parametrize("restore_all", [True, False])
def test_the_deployment_an_operator_rolled_back_goes_through_rolling_back(restore_all):
    source = _job.finish(run(run(make(), "t1", True), "t2", True), T0)
    rollback = _rollback.operator_rollback(source, job_id="job-1-rollback-a", now=T0, reason="operator: bad release")
    for name in ("t2", "t1"):
        rollback = _rollback.finish_rollback_target(
            rollback,
            name,
            succeeded=restore_all or name == "t2",
            now=T0,
            reason=None if restore_all else "rollback_failed: boom",
        )
    rollback = _rollback.finish_rollback(rollback, "T1")
    assert rollback["status"] == ("RolledBack" if restore_all else "Failed")
    after = _recovery.recovery_ended(_recovery.recovery_started(source, rollback, "T1"), rollback, "T1")
    assert after["status"] == ("RolledBack" if restore_all else "Failed")
    assert after["promotion"] == "Succeeded" and after["reason"] == source["reason"]
    assert [(e["kind"], e["rollbackJobId"]) for e in after["events"]] == [
        ("RollbackStarted", "job-1-rollback-a"),
        ("RollbackCompleted" if restore_all else "RollbackFailed", "job-1-rollback-a"),
    ]
    assert (after["targets"]["t2"]["status"], after["targets"]["t2"]["statusBeforeRollback"]) == (
        "RolledBack",
        "Succeeded",
    )
    assert after["targets"]["t1"]["status"] == ("RolledBack" if restore_all else "Succeeded")
    assert restore_all or after["targets"]["t1"]["rollbackError"].startswith("rollback_failed")
    assert after["recovery"]["status"] == ("rolled_back" if restore_all else "rollback_failed")
    # what the rollback restored is never eligible again
    assert not _job.eligible(after["targets"]["t2"])


def test_rollback_orders_are_the_rollback_batches_with_each_targets_revision_payload_and_task():
    source = make()
    source["targets"]["t1"].update(rollbackPayload={"ProjectName": "p1"}, targetType="DockerHost")
    source["targets"]["t3"].update(rollbackPayload={"ProjectName": "p3"})
    source = _job.finish(run(run(run(source, "t1", True), "t2", True, previous=False), "t3", True), T0)
    record = _rollback.operator_rollback(source, job_id="job-1-rollback-a", now=T0)
    claim = {"jobId": "job-1-rollback-a", "generation": 2, "projectKey": "t1|p1"}  # the rollback job's own, stored
    record["targets"]["t1"]["claim"] = claim
    orders = _rollback.rollback_orders(record, source=source)
    assert (orders["jobId"], orders["status"], orders["rollbackBatches"], orders["rollbackSerial"]) == (
        "job-1-rollback-a",
        "RollingBack",
        [["t3"], ["t1"]],
        [1, 1],
    )
    assert orders["rollbackOrder"] == ["t3", "t1"]
    assert orders["rollbackTargets"]["t1"] == {
        "revisionPath": "/p/t1/revisions/000001-x",
        "payload": {"ProjectName": "p1"},
        "task": "docker.rollback",
        "target": None,
        "waitTimeout": 120,
        "taskTimeout": 840,
        "jobId": "job-1-rollback-a",
        "reason": record["reason"] or "",
        "claim": claim,
    }
    assert orders["rollbackTargets"]["t3"]["claim"] is None  # a record the store never claimed carries none
    source["options"]["taskTimeout"] = 1500  # the job rolled back knew its hooks: its task timeout is kept
    assert _rollback.rollback_orders(record, source=source)["rollbackTargets"]["t1"]["taskTimeout"] == 1500
    assert orders["rollbackTargets"]["t3"]["task"] == "compose.rollback"
    # a job that is not rolling back orders no rollback
    assert (
        _rollback.rollback_orders(source)["rollbackOrder"] == []
        and _rollback.rollback_orders(source)["rollbackTargets"] == {}
    )


def test_a_task_timeout_is_the_waits_the_hooks_and_the_allowance_unless_given():
    assert _timeouts.task_timeout(120) == 2 * 120 + _timeouts.TASK_ALLOWANCE == 840
    hooks = [{"name": "a", "timeoutSeconds": 30}, {"name": "b"}]  # b: the hook default, 300 s
    assert _timeouts.task_timeout(60, hooks) == 120 + 30 + 300 + 600
    assert _timeouts.task_timeout(60, hooks, given=45) == 45
    assert _timeouts.task_timeout(None) == 840


def test_operator_rollback_fails_closed_without_an_eligible_target():
    source = _job.finish(run(make(), "t1", True, previous=False), T0)
    record = _rollback.operator_rollback(source, job_id="r", now=T0)
    assert (record["status"], record["code"]) == ("Failed", "rollback_no_eligible_target")
    with_path = _rollback.operator_rollback(source, job_id="r2", now=T0, revision_paths={"t1": "/p/revisions/000003-x"})
    assert with_path["status"] == "RollingBack" and with_path["targets"]["t1"]["previousRevisionPath"].endswith(
        "000003-x"
    )
    with pytest.raises(StellaError):
        _rollback.operator_rollback(source, job_id="r3", now=T0, revision_paths={"nope": "/x"})


def test_a_target_whose_agent_put_the_previous_release_back_is_skipped_as_restored_in_place():
    record = _job.finish_target(make(), "t1", succeeded=True, now=T0, facts={"previousRevisionPath": "/p/previous"})
    record = _job.finish_target(record, "t2", succeeded=False, now=T0, reason="boom", facts={"restoredInPlace": True})
    record = _job.record_gate(
        record, {"batch": 0, "proceed": False, "reason": "batch 1 failed", "failedTargets": ["t2"]}, T0
    )
    record = _rollback.auto_rollback(_job.finish(record, T0), T0)
    assert record["status"] == "RollingBack" and record["rollback"]["batches"] == [["t1"]]
    assert record["rollback"]["skipped"] == {"t2": _job.RESTORED_IN_PLACE}


def test_a_target_lost_during_its_apply_is_rolled_back_with_the_others_and_its_agent_finds_the_revision():
    """It may run the failed release: the rollback includes it (no revision path: the target's own agent
    restores the newest revision that is not this release), in reverse batch order."""
    record = run(run(make(), "t1", True), "t2", True)
    lost = _job.finish_target(
        record,
        "t3",
        succeeded=False,
        now=T0,
        reason="stopped answering",
        code="target_unreachable",
        facts={"outcomeUnknown": True},
    )
    assert _job.eligible(lost["targets"]["t3"])
    failed = _rollback.auto_rollback(_job.finish(lost, T0), T0)
    assert failed["status"] == "RollingBack" and failed["rollback"]["batches"] == [["t3"], ["t1", "t2"]]
    orders = _rollback.rollback_orders(failed)
    assert orders["rollbackOrder"] == ["t3", "t1", "t2"] and orders["rollbackTargets"]["t3"]["revisionPath"] is None
    # without outcomeUnknown and without a revision, a failed target is left alone
    plain_failure = _job.finish_target(record, "t3", succeeded=False, now=T0, reason="boom", code="deploy_failed")
    assert not _job.eligible(plain_failure["targets"]["t3"])


@pytest.mark.parametrize(
    "facts,target_type,expected",
    [
        ({"applyRan": True}, "ComposeHost", True),  # its agent resolves the revision (and fails there without one)
        ({"applyRan": True}, "DockerHost", False),  # a DockerHost needs the revision its run retained
        ({"applyRan": True, "previousRevisionPath": "/p/previous"}, "DockerHost", True),
        ({}, "ComposeHost", False),  # the task never ran
        ({"applyRan": True, "unchangedByJob": True}, "ComposeHost", False),
        ({"applyRan": True, "restoredInPlace": True, "previousRevisionPath": "/p/previous"}, "DockerHost", False),
    ],
    ids=["compose-ran", "docker-ran-no-revision", "docker-revision", "never-ran", "unchanged", "restored-in-place"],
)
def test_the_contracts_retained_revision_rule(facts, target_type, expected):
    record = make()
    record["targets"]["t1"]["targetType"] = target_type
    record = _job.finish_target(record, "t1", succeeded=False, now=T0, reason="boom", code="deploy_failed", facts=facts)
    assert _job.eligible(record["targets"]["t1"]) is expected


def test_a_job_that_failed_closed_says_its_automatic_rollback_was_skipped_unless_disabled():
    closed = _job.fail_closed(make(), code="project_busy", reason="project held", failed_targets={"t1": "held"}, now=T0)
    assert closed["reason"] == "project held (auto-rollback skipped: no target retained a previous revision to restore)"
    assert closed["rollback"] == {"attempted": False, "skipReason": "no_eligible_target", "skipped": {}}
    disabled = _job.fail_closed(
        make({"autoRollbackOnFailure": False, "autoRollbackSource": "strategyConfig"}),
        code="project_busy",
        reason="project held",
        failed_targets={"t1": "held"},
        now=T0,
    )
    assert disabled["reason"] == "project held"
    assert disabled["rollback"] == {
        "attempted": False,
        "skipReason": "autoRollbackOnFailure=false",
        "source": "strategyConfig",
    }


def test_a_targets_outcome_phases_are_recorded_in_order_completed_at_the_same_time():
    record = make()
    phases = [("preflight", "passed", 5, None), ("deploy", "failed", 7, {"code": "compose_up_failed"})]
    after = _job.record_phases(record, "t1", phases=phases, now="2026-01-01T00:00:09Z")
    target = after["targets"]["t1"]
    assert target["status"] == "Running" and not record["targets"]["t1"].get("phases")  # the input is unchanged
    assert [(p["name"], p["status"], p["durationMs"], p["completedAt"]) for p in target["phases"]] == [
        ("preflight", "passed", 5, "2026-01-01T00:00:09Z"),
        ("deploy", "failed", 7, "2026-01-01T00:00:09Z"),
    ]
    assert target["phases"][1]["detail"] == {"code": "compose_up_failed"} and "detail" not in target["phases"][0]
