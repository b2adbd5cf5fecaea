"""job/traffic.py: what the adapter is asked after each batch, how traffic evidence lands in the job record,
and how a traffic failure closes the gate and fails a rollback."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import strategy as _strategy

T0 = "2026-01-01T00:00:00Z"


def job(strategy, config=None, batches=(("t1",), ("t2", "t3"))):
    targets = {
        n: {"targetId": n, "slot": {"canary": "canary", "a-b": "b"}.get(strategy, "green")} for b in batches for n in b
    }
    summary = {
        "release": {"id": "r1"},
        "strategy": strategy,
        "strategyConfig": dict(config or {}),
        "application": "shop",
        "environment": "lab",
    }
    record = _job.new_job(
        job_id="job-1",
        job_id_source=None,
        summary=summary,
        batches=[list(b) for b in batches],
        targets=targets,
        options={"autoRollbackOnFailure": True},
        now=T0,
    )
    return _job.start(record, T0)


@pytest.mark.parametrize(
    "strategy,config,expected",
    [
        ("canary", {"trafficSteps": [10, 50, 100]}, [(90, 10, "canary"), (0, 100, "canary")]),
        ("blue-green", {}, [None, (0, 100, "green")]),
        ("a-b", {"trafficWeights": {"control": 80, "treatment": 20}}, [(80, 20, "b"), (80, 20, "b")]),
        ("rolling", {}, [None, None]),
    ],
)
def test_shift_step_per_batch(strategy, config, expected):
    record = job(strategy, config)
    got = []
    for batch in range(2):
        step = _job_traffic.shift_step(record, batch)
        got.append(None if step is None else (step["controlWeight"], step["treatmentWeight"], step["treatmentSlot"]))
        if step:
            assert step["controlSlot"] == "active" and step["batch"] == batch
    assert got == expected


def test_a_traffic_failure_closes_the_gate_of_its_batch_with_its_code():
    record = job("canary")
    for name in ("t1",):
        record = _job.finish_target(record, name, succeeded=True, now=T0)
    step = _job_traffic.shift_step(record, 0)
    failure = {"code": "traffic_adapter_missing", "reason": "no traffic adapter ran: traffic_adapter_missing"}
    record = _job_traffic.record_shift(
        record, step, evidence={"strategy.traffic.shifted": False}, now=T0, failure=failure
    )
    assert _job_traffic.gate_failure(record, 1) is None
    decision = _strategy.gate(0, [("t1", "Succeeded", None)], _job_traffic.gate_failure(record, 0))
    assert decision["proceed"] is False and decision["code"] == "traffic_adapter_missing"
    record = _job.finish(_job.record_gate(record, decision, T0), T0)
    assert (record["status"], record["code"]) == ("Failed", "traffic_adapter_missing")
    assert record["targets"]["t2"]["status"] == "Skipped"
    assert record["strategyEvidence"] == {"strategy.traffic.shifted": False}


def test_a_failed_traffic_rollback_fails_the_rollback():
    record = job("blue-green", batches=(("t1",),))
    record = _job.finish_target(
        record, "t1", succeeded=False, now=T0, reason="boom", facts={"previousRevisionPath": "/p"}
    )
    record = _rollback.auto_rollback(_job.finish(record, T0), T0)
    record = _rollback.finish_rollback_target(record, "t1", succeeded=True, now=T0)
    step = _job_traffic.rollback_step(record, record["reason"])
    assert (step["controlWeight"], step["treatmentWeight"], step["rollback"]) == (100, 0, True)
    record = _job_traffic.record_rollback(
        record,
        evidence={"strategy.traffic.rollback.shifted": False},
        now=T0,
        failure={"code": "traffic_adapter_rollback_failed", "reason": "HTTP 500"},
    )
    record = _rollback.finish_rollback(record, T0)
    assert record["status"] == "Failed" and record["rollback"]["status"] == "failed"
    assert record["reason"].endswith("auto-rollback failed: traffic: traffic_adapter_rollback_failed: HTTP 500")


def test_job_show_prints_each_traffic_step_and_the_traffic_rollback():
    record = _job.finish_target(job("canary"), "t1", succeeded=True, now=T0)
    step = _job_traffic.shift_step(record, 0)
    evidence = {
        "strategy.traffic.mode": "traffic_shift",
        "strategy.traffic.status": "shifted",
        "strategy.traffic.controlWeight": 90,
        "strategy.traffic.treatmentWeight": 10,
        "strategy.traffic.slot": "canary",
        "strategy.traffic.adapter": "webhook",
    }
    record = _job_traffic.record_shift(record, step, evidence=evidence, now=T0)
    record = _job_traffic.record_rollback(
        record,
        evidence={
            "strategy.traffic.rollback.mode": "traffic_rollback",
            "strategy.traffic.rollback.status": "failed",
            "strategy.traffic.rollback.slot": "active",
            "strategy.traffic.rollback.reason": "HTTP 500",
        },
        now=T0,
    )
    text = _job_view.render_text(record)
    assert "  traffic: traffic_shift shifted control 90 / treatment 10 slot canary (webhook)\n" in text
    assert "traffic rollback: traffic_rollback failed slot active: HTTP 500\n" in text


def first_canary_failing_later(auto_rollback=True):
    """A canary whose first target (no previous revision) took 10 % of the traffic in batch 1, then
    failed its probe in batch 2: no target retained a revision, so no target is rolled back."""
    record = job("canary", {"trafficSteps": [10, 50, 100]}, batches=(("t1",), ("t2",)))
    record["options"]["autoRollbackOnFailure"] = auto_rollback
    record = _job.finish_target(record, "t1", succeeded=True, now=T0)
    step = _job_traffic.shift_step(record, 0)
    record = _job_traffic.record_shift(
        record, step, evidence={"strategy.traffic.shifted": True, "strategy.traffic.treatmentWeight": 10}, now=T0
    )
    record = _job.record_gate(record, _strategy.gate(0, [("t1", "Succeeded", None)]), T0)
    record = _job.finish_target(record, "t2", succeeded=False, now=T0, reason="probe failed")
    return _rollback.auto_rollback(_job.finish(record, T0), T0)


def test_traffic_this_job_moved_is_put_back_though_no_target_was_rolled_back():
    record = first_canary_failing_later()
    assert record["status"] == "Failed" and record["rollback"]["attempted"] is False
    assert _job_traffic.puts_traffic_back(record)
    back = _job_traffic.record_rollback(
        record,
        evidence={"strategy.traffic.rollback.shifted": False},
        now=T0,
        failure={"code": "traffic_adapter_rollback_failed", "reason": "HTTP 500"},
    )
    assert back["reason"].endswith("; traffic rollback failed: traffic_adapter_rollback_failed: HTTP 500")
    assert not _job_traffic.puts_traffic_back(back)  # never twice


def test_no_traffic_put_back_when_none_moved_or_auto_rollback_is_off():
    assert not _job_traffic.puts_traffic_back(first_canary_failing_later(auto_rollback=False))
    record = job("canary", batches=(("t1",),))
    record = _rollback.auto_rollback(
        _job.finish(_job.finish_target(record, "t1", succeeded=False, now=T0, reason="boom"), T0), T0
    )
    assert not _job_traffic.puts_traffic_back(record)  # nothing was shifted


def test_traffic_is_put_back_though_the_targets_rollback_found_no_revision():
    """A first canary: t1 took 10 %, t2 failed its probe; both applied (ComposeHost), so both are rolled
    back, and neither retained a revision: the targets' rollback fails, the traffic rollback still runs."""
    record = job("canary", {"trafficSteps": [10, 50, 100]}, batches=(("t1",), ("t2",)))
    applied = {"applyRan": True, "targetType": "ComposeHost"}
    record = _job.finish_target(record, "t1", succeeded=True, now=T0, facts=applied)
    step = _job_traffic.shift_step(record, 0)
    record = _job_traffic.record_shift(
        record, step, evidence={"strategy.traffic.shifted": True, "strategy.traffic.treatmentWeight": 10}, now=T0
    )
    record = _job.record_gate(record, _strategy.gate(0, [("t1", "Succeeded", None)]), T0)
    record = _job.finish_target(record, "t2", succeeded=False, now=T0, reason="probe failed", facts=applied)
    record = _rollback.auto_rollback(_job.finish(record, T0), T0)
    assert record["status"] == "RollingBack" and sorted(n for b in record["rollback"]["batches"] for n in b) == [
        "t1",
        "t2",
    ]
    for name in ("t2", "t1"):
        record = _rollback.finish_rollback_target(
            record, name, succeeded=False, now=T0, reason="no_revision: no retained revision"
        )
    assert _job_traffic.puts_traffic_back(record)
    step = _job_traffic.rollback_step(record, record["reason"])
    assert (step["controlSlot"], step["controlWeight"], step["treatmentWeight"]) == ("active", 100, 0)
    back = _job_traffic.record_rollback(record, evidence={"strategy.traffic.rollback.shifted": True}, now=T0)
    assert not _job_traffic.puts_traffic_back(back)  # never twice


def test_no_traffic_rollback_after_a_failed_target_rollback_when_the_job_moved_no_traffic():
    """A blue-green job whose shift failed (the webhook down): its target's rollback found no revision;
    nothing was moved, so nothing is put back."""
    record = job("blue-green", batches=(("t1",),))
    record = _job.finish_target(
        record, "t1", succeeded=True, now=T0, facts={"applyRan": True, "targetType": "ComposeHost"}
    )
    step = _job_traffic.shift_step(record, 0)
    record = _job_traffic.record_shift(
        record,
        step,
        evidence={"strategy.traffic.shifted": False},
        now=T0,
        failure={"code": "traffic_adapter_failed", "reason": "unreachable"},
    )
    record = _job.record_gate(
        record, _strategy.gate(0, [("t1", "Succeeded", None)], _job_traffic.gate_failure(record, 0)), T0
    )
    record = _rollback.auto_rollback(_job.finish(record, T0), T0)
    record = _rollback.finish_rollback_target(
        record, "t1", succeeded=False, now=T0, reason="no_revision: no retained revision"
    )
    assert record["status"] == "RollingBack" and not _job_traffic.puts_traffic_back(record)
    failed = _job.finish_target(
        job("blue-green", batches=(("t1",),)), "t1", succeeded=False, now=T0, facts={"previousRevisionPath": "/p"}
    )
    restored = _rollback.finish_rollback_target(
        _rollback.auto_rollback(_job.finish(failed, T0), T0), "t1", succeeded=True, now=T0
    )
    assert _job_traffic.puts_traffic_back(restored)  # every planned target restored: put back as always
