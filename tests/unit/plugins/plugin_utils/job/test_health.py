"""Target health rules: each persisted job fact moves a target to exactly one contract status."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import HEALTH_STATUSES
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import health as _health
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job

T0 = "2026-01-01T00:00:00Z"


def job(names=("a", "b")):
    targets = {n: {"targetId": "id-" + n, "targetName": n} for n in names}
    return _job.new_job(
        job_id="job-1",
        job_id_source=None,
        summary={"release": {"id": "r1"}},
        batches=[list(names)],
        targets=targets,
        options={},
        now=T0,
    )


def with_target(record, name, **fields):
    new = copy.deepcopy(record)
    new["targets"][name].update(fields)
    return new


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"status": "Succeeded"}, "healthy"),
        (
            {
                "status": "Succeeded",
                "phases": [{"name": "verify", "status": "succeeded", "detail": {"probes": "passed"}}],
            },
            "healthy",
        ),
        # waitForHealthCheck=false: deployed, but nothing verified the services' health
        (
            {
                "status": "Succeeded",
                "phases": [
                    {
                        "name": "verify",
                        "status": "succeeded",
                        "detail": {"probes": "skipped", "reason": "waitForHealthCheck=false"},
                    }
                ],
            },
            "unknown",
        ),
        ({"status": "RolledBack"}, "degraded"),
        ({"status": "Failed", "code": "service_unhealthy", "reason": "web unhealthy"}, "unhealthy"),
        ({"status": "Failed", "code": "rollback_failed"}, "unhealthy"),
        ({"status": "Failed", "code": "target_unreachable", "reason": "ssh: no route"}, "unreachable"),
        ({"status": "Failed", "code": "runtime_daemon_unavailable"}, "offline"),
        ({"status": "Failed", "code": "runtime_missing"}, "offline"),
        ({"status": "Failed", "code": "compose_missing"}, "offline"),
        ({"status": "Failed", "code": "project_busy"}, None),
        ({"status": "Skipped"}, None),
        ({"status": "Running"}, None),
    ],
)
def test_each_target_outcome_has_one_health_status(fields, expected):
    before = job()
    after = with_target(before, "a", **fields)
    events = _health.health_events(before, after)
    assert [(e["targetId"], e["status"]) for e in events] == ([("id-a", expected)] if expected else [])
    if expected:
        assert events[0]["jobId"] == "job-1" and events[0]["reason"]


def test_an_unchanged_target_status_changes_no_health():
    before = with_target(job(), "a", status="Succeeded")
    after = with_target(before, "b", phases=[{"name": "deploy"}])
    assert _health.health_events(before, after) == []


def test_a_target_that_answers_again_leaves_unreachable_for_unknown_only():
    pending = job()
    running = _job.start(pending, T0)
    events = _health.health_events(pending, running, {"id-a": "unreachable", "id-b": "healthy"})
    assert [(e["targetId"], e["status"]) for e in events] == [("id-a", "unknown")]
    assert _health.health_events(pending, running, {}) == []


def test_every_status_is_the_contracts():
    assert HEALTH_STATUSES == ("unknown", "healthy", "degraded", "unhealthy", "offline", "unreachable")
    for status in HEALTH_STATUSES:
        assert _health.check_status(status) == status
    with pytest.raises(ValueError):
        _health.check_status("maintenance")


def test_a_target_deployed_with_its_probes_skipped_is_unknown_and_says_why():
    before = _job.start(job(("a",)), T0)
    after = with_target(
        before,
        "a",
        status="Succeeded",
        phases=[{"name": "verify", "status": "succeeded", "detail": {"probes": "skipped"}}],
    )
    [event] = _health.health_events(before, after)
    assert (event["status"], event["targetId"]) == ("unknown", "id-a")
    assert (
        event["reason"] == "job job-1: deployed with its probes skipped (waitForHealthCheck=false), health not verified"
    )
