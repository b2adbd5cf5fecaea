"""job/view.py outcome: what the job publishes through set_stats for workflows (pure)."""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view

T0 = "2026-01-01T00:00:00Z"


def finished(ok):
    targets = {"t1": {"targetId": "id-t1"}, "t2": {"targetId": "id-t2"}}
    record = _job.start(
        _job.new_job(
            job_id="awx-42",
            job_id_source="awx_job_id",
            summary={"release": {"id": "r1"}, "strategy": "rolling"},
            batches=[["t2", "t1"]],
            targets=targets,
            options={"autoRollbackOnFailure": False},
            now=T0,
        ),
        T0,
    )
    for name in ("t2", "t1"):
        record = _job.record_phase(
            record,
            name,
            entry=_job.phase_entry("preflight", "passed", started_at=T0, completed_at=T0, duration_ms=5),
            now=T0,
        )
        record = _job.finish_target(
            record,
            name,
            succeeded=ok or name == "t2",
            now=T0,
            reason=None if ok else "probe failed",
            code=None if ok else "health_probe_failed",
            facts={},
        )
    record = _job.record_gate(
        record,
        {"batch": 0, "proceed": ok, "reason": "ok" if ok else "t1 failed", "failedTargets": [] if ok else ["t1"]},
        T0,
    )
    return _job.finish(record, T0)


def test_a_succeeded_job_publishes_its_id_status_and_evidence_digests():
    record = finished(True)
    files = {"job.json": {"path": "/e/job.json", "sha256": "sha256:" + "a" * 64}}
    out = _job_view.outcome(record, files)
    assert out["deploymentId"] == "awx-42" and out["jobIdSource"] == "awx_job_id"
    assert (out["status"], out["succeeded"], out["rolledBack"]) == ("Succeeded", True, False)
    assert out["targets"] == ["t1", "t2"] and out["evidence"] == files
    assert out["evidenceDigest"] == _job_view.job_evidence(record)["evidenceDigest"]
    files["job.json"]["path"] = "changed"
    assert out["evidence"]["job.json"]["path"] == "/e/job.json"  # a copy, not the caller's dict


def test_a_failed_job_publishes_its_code_and_reason():
    out = _job_view.outcome(finished(False))
    assert (out["status"], out["succeeded"]) == ("Failed", False)
    assert out["code"] and out["reason"] and out["evidence"] == {}


def test_the_closing_line_names_the_job_its_status_and_why():
    assert _job_view.closing_line("job-1", "Succeeded", None) == "job job-1 Succeeded"
    assert _job_view.closing_line("job-1", "RolledBack", "target a: unhealthy (auto-rollback restored it)") == (
        "job job-1 RolledBack: target a: unhealthy (auto-rollback restored it)"
    )
