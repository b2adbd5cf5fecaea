"""The deployments projection mirrors only persisted job state; the terminal projection is its own step."""

from __future__ import annotations

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import build_rollback_evidence

T0 = "2026-01-01T00:00:00Z"


def job():
    targets = {n: {"targetId": n, "targetName": n} for n in ("a", "b")}
    return dict(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a"], ["b"]],
            targets=targets,
            options={},
            now=T0,
        ),
        revision=1,
    )


def test_a_new_deployment_is_projected_pending_from_its_first_revision():
    projection = _projection.initial(job())
    assert projection["status"] == "Pending" and projection["jobRevision"] == 1 and not projection["terminal"]
    assert projection["targets"]["a"] == {
        "status": "Pending",
        "batch": 0,
        "phase": None,
        "progress": 0,
        "code": None,
        "error": None,
        "reason": None,
    }
    with pytest.raises(ValueError):
        _projection.initial(dict(_job.start(job(), T0), revision=2))


def test_refresh_mirrors_only_what_changed_and_progress_is_persisted_phases():
    record = job()
    projection = _projection.initial(record)
    assert _projection.refresh(projection, dict(record, revision=2, updatedAt="later")) is None  # nothing it mirrors
    running = dict(_job.start(record, T0), revision=2)
    projection = _projection.refresh(projection, running)
    assert projection["status"] == "Running" and projection["jobRevision"] == 2
    for revision, phase in enumerate(("preflight", "prepare", "deploy"), start=3):
        running = dict(
            _job.record_phase(
                running,
                "a",
                entry=_job.phase_entry(phase, "passed", started_at=T0, completed_at=T0, duration_ms=1),
                now=T0,
            ),
            revision=revision,
        )
        projection = _projection.refresh(projection, running)
    assert projection["targets"]["a"]["progress"] == 33 and projection["targets"]["a"]["phase"] == "deploy"
    assert projection["targets"]["a"]["status"] == "Running" and projection["jobRevision"] == 5


def test_a_terminal_job_status_waits_for_the_terminal_step():
    record = dict(_job.start(job(), T0), revision=2)
    projection = _projection.refresh(_projection.initial(job()), record)
    done = dict(_job.finish_target(record, "a", succeeded=True, now=T0), revision=3)
    done = dict(_job.finish_target(done, "b", succeeded=True, now=T0), revision=4)
    finished = dict(_job.finish(done, T0), revision=5)
    refreshed = _projection.refresh(projection, finished)
    assert refreshed["status"] == "Running" and refreshed["targets"]["b"]["status"] == "Succeeded"
    assert not refreshed["terminal"]
    with pytest.raises(ValueError):
        _projection.terminal(refreshed, record, {})
    final = _projection.terminal(refreshed, finished, _projection.strategy_evidence(finished))
    assert final["status"] == "Succeeded" and final["terminal"] and final["jobRevision"] == 5
    assert _projection.refresh(final, finished) is None  # nothing moves a terminal projection


def test_strategy_evidence_carries_the_rollback_evidence_keys():
    evidence = build_rollback_evidence(
        [
            {
                "targetId": "a",
                "targetName": "a",
                "targetType": "ComposeHost",
                "currentDigest": "sha256:" + "1" * 64,
                "rollbackDigest": "sha256:" + "2" * 64,
            }
        ],
        T0,
        deployment_id="job-1",
        rollback_job_id="job-1-rollback",
    )
    strategy = _projection.strategy_evidence(
        job(), evidence, "jobs/job-1/rollback-evidence.json", {"job.json": {"sha256": "abc"}}
    )
    assert strategy["rollback.evidence.id"] == "jobs/job-1/rollback-evidence.json"
    assert strategy["rollback.evidence.proofStatus"] == evidence["proofStatus"] == "complete"
    for key in ("hash", "proofDigest", "orderProofDigest", "orderProofStatus"):
        assert strategy["rollback.evidence." + key]
    assert strategy["evidenceFiles"] == {"job.json": "abc"}
    assert "rollback.evidence.id" not in _projection.strategy_evidence(job())


def test_traffic_is_projected_under_the_contract_s_keys():
    """The last traffic step's ``strategy.traffic.*`` keys (the traffic as the job left it) and the traffic
    rollback's ``strategy.traffic.rollback.*`` keys, flat in the strategy evidence; no nested list."""
    shifted = {
        "strategy.traffic.mode": "traffic_shift",
        "strategy.traffic.status": "shifted",
        "strategy.traffic.shifted": True,
        "strategy.traffic.slot": "canary",
        "strategy.traffic.controlWeight": 50,
        "strategy.traffic.treatmentWeight": 50,
    }
    first = dict(shifted, **{"strategy.traffic.controlWeight": 90, "strategy.traffic.treatmentWeight": 10})
    back = {
        "strategy.traffic.rollback.mode": "traffic_rollback",
        "strategy.traffic.rollback.status": "failed",
        "strategy.traffic.rollback.shifted": False,
        "strategy.traffic.rollback.slot": "active",
        "strategy.traffic.rollback.reason": "controller answered HTTP 500",
    }
    record = dict(
        job(),
        traffic=[{"batch": 0, "evidence": first}, {"batch": 1, "evidence": shifted}],
        trafficRollback={"at": T0, "evidence": back, "failure": {"code": "x", "reason": "y"}},
    )
    evidence = _projection.strategy_evidence(record)
    assert "traffic" not in evidence
    for key, value in list(shifted.items()) + list(back.items()):
        assert evidence[key] == value, key
    assert evidence["strategy.traffic.batch"] == 1
    assert not [k for k in _projection.strategy_evidence(job()) if k.startswith("strategy.traffic")]


def test_the_projection_uses_the_contract_s_spellings_with_the_current_keys_as_aliases():
    """``deploymentStatus`` spells the status as the contract does (``rolling_back``), ``status`` keeps the
    job's spelling; each target's failure is ``error`` (the contract's ``targets[].error``), ``reason``
    kept with the same value."""
    record = job()
    projection = _projection.initial(record)
    assert (projection["status"], projection["deploymentStatus"]) == ("Pending", "pending")
    running = dict(_job.start(record, T0), revision=2)
    failed = dict(
        _job.finish_target(running, "a", succeeded=False, now=T0, reason="probe failed", code="probe_failed"),
        revision=3,
    )
    projection = _projection.refresh(projection, failed)
    assert projection["deploymentStatus"] == "running"
    assert projection["targets"]["a"]["error"] == projection["targets"]["a"]["reason"] == "probe failed"
    assert projection["targets"]["b"]["error"] is None
    done = dict(_job.finish(failed, T0), revision=4)
    assert _projection.refresh(projection, done)["deploymentStatus"] == "running"  # waits for the terminal step
    projection = _projection.terminal(projection, done, _projection.strategy_evidence(done))
    assert (projection["status"], projection["deploymentStatus"]) == ("Failed", "failed")
    rolling = dict(done, status="RollingBack", revision=5)
    projection = _projection.refresh(projection, rolling)
    assert (projection["status"], projection["deploymentStatus"]) == ("RollingBack", "rolling_back")
    projection = _projection.recovery(projection, dict(done, status="RolledBack", revision=6), {})
    assert (projection["status"], projection["deploymentStatus"]) == ("RolledBack", "rolled_back")
    assert set(_projection.DEPLOYMENT_STATUS) == set(_job.JOB_STATUSES)
