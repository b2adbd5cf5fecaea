"""agent/manager.py: phase recording, OSError mapping, and the one result/failure shape of every target task."""

from __future__ import annotations

import errno

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import manager as mg
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import ROLLBACK_PHASES


def test_phase_recorder_and_deployment_phases():
    rec = mg.PhaseRecorder()
    with rec.phase("write_artifacts"):
        pass
    rec.skip("pre_deploy_hooks")
    with pytest.raises(StellaError) as err:
        with rec.phase("compose_pull"):
            raise StellaError("image_pull_failed", "boom")
    assert err.value.phase == "compose_pull"
    evidence = rec.evidence()
    assert evidence["completedPhases"] == ["write_artifacts"]
    assert evidence["failurePhase"] == "compose_pull"
    assert {p["phase"]: p["status"] for p in evidence["deploymentPhases"]} == {
        "prepare": "succeeded",
        "pre-deploy": "skipped",
        "deploy": "failed",
    }
    assert set(evidence["phaseDurationsMs"]) == {"write_artifacts", "pre_deploy_hooks", "compose_pull"}


def test_phase_recorder_keeps_an_inner_phase_and_unrecorded_steps():
    rec = mg.PhaseRecorder()
    with rec.phase("verify_target", record=False):
        pass
    with pytest.raises(StellaError) as err:
        with rec.phase("resolve_revision"):
            raise StellaError("revision_tampered", "x", phase="validate_revision")
    assert err.value.phase == "validate_revision" and rec.failure_phase == "validate_revision"
    assert rec.completed == [] and "verify_target" not in rec.durations


def test_phase_recorder_counts_carried_time_in_the_step_that_runs_only():
    rec = mg.PhaseRecorder()
    rec.carry("inspect_container", 1500)
    rec.carry("inspect_container", 500)
    rec.carry("prepare_container", 700)  # never runs: its carried time is in no duration
    with rec.phase("verify_target", record=False):
        pass
    with rec.phase("inspect_container"):
        pass
    durations = rec.evidence()["phaseDurationsMs"]
    assert 2000 <= durations["inspect_container"] < 2500 and "prepare_container" not in durations
    with rec.phase("inspect_container"):  # carried once: a second run of the step adds only its own time
        pass
    assert rec.evidence()["phaseDurationsMs"]["inspect_container"] < 2500


@pytest.mark.parametrize(
    "number,code",
    [
        (errno.ENOSPC, "disk_full"),
        (errno.EDQUOT, "disk_full"),
        (errno.EACCES, "workdir_not_writable"),
        (errno.EPERM, "workdir_not_writable"),
        (errno.EROFS, "workdir_not_writable"),
        (errno.EIO, "io_error"),
    ],
)
def test_io_error_codes(number, code):
    error = mg.io_error(OSError(number, "why", "/w/p/file"), "write_sticker")
    assert error.code == code and error.phase == "write_sticker"
    assert error.reason == "write_sticker (/w/p/file): why"


def test_phase_recorder_maps_os_errors():
    rec = mg.PhaseRecorder()
    with pytest.raises(StellaError) as err:
        with rec.phase("write_sticker"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.code == "disk_full" and err.value.phase == "write_sticker"
    assert isinstance(err.value.__cause__, OSError)
    assert rec.evidence()["failurePhase"] == "write_sticker"


@pytest.mark.parametrize(
    "groups,completed,failure,skipped,expected",
    [
        (
            None,
            [
                "write_artifacts",
                "pre_deploy_hooks",
                "compose_pull",
                "compose_up",
                "inspect_services",
                "write_sticker",
                "post_deploy_hooks",
            ],
            None,
            [],
            ["succeeded"] * 6,
        ),
        (None, ["write_artifacts"], "pre_deploy_hooks", [], ["succeeded", "failed"]),
        (None, [], None, ["write_artifacts"], ["skipped"]),
        (ROLLBACK_PHASES, ["resolve_revision"], "validate_revision", [], ["failed"]),
        (
            ROLLBACK_PHASES,
            ["resolve_revision", "validate_revision", "restore_lock", "compose_pull"],
            "compose_up",
            [],
            ["succeeded", "failed"],
        ),
    ],
    ids=["all", "hook-failed", "skipped", "rollback-pre", "rollback-up"],
)
def test_deployment_phases_table(groups, completed, failure, skipped, expected):
    durations = dict.fromkeys(completed + ([failure] if failure else []) + skipped, 1)
    kwargs = {"groups": groups} if groups else {}
    phases = mg.deployment_phases(completed, durations, failure, skipped, **kwargs)
    assert [p["status"] for p in phases] == expected


class Steps(mg.Manager):
    """A manager whose steps are given by the test."""

    def __init__(self, body):
        super().__init__(cli=None, run_command=None)
        self.body = body

    def execute(self, request, rec, result, check_mode, diff):
        self.body(rec, result)


def request():
    return {"target": dict(sc.TARGET)}


def test_manager_result_shape():
    def body(rec, result):
        with rec.phase("write_artifacts"):
            result["changed"] = True
        result["warnings"].append("w")

    result = Steps(body).run(request())
    assert result["changed"] is True and result["warnings"] == ["w"]
    evidence = result["evidence"]
    assert evidence["targetId"] == "tgt-01" and evidence["targetExecutionMode"] == "agent"
    assert evidence["completedPhases"] == ["write_artifacts"] and evidence["failurePhase"] is None


def test_manager_failure_carries_evidence_changed_and_warnings():
    def body(rec, result):
        result["warnings"].append("hook x failed; FailurePolicy=warn recorded it and went on")
        with rec.phase("compose_up"):
            result["changed"] = True
            raise StellaError("service_unhealthy", "web is unhealthy", evidence={"problems": ["p"]})

    with pytest.raises(StellaError) as err:
        Steps(body).run(request())
    assert err.value.phase == "compose_up" and err.value.evidence["failurePhase"] == "compose_up"
    assert err.value.evidence["changed"] is True and err.value.evidence["problems"] == ["p"]
    assert err.value.evidence["targetId"] == "tgt-01"
    assert err.value.warnings == ["hook x failed; FailurePolicy=warn recorded it and went on"]


def test_manager_maps_an_os_error_outside_any_phase():
    def body(rec, result):
        with rec.phase("write_artifacts"):
            pass
        raise OSError(errno.EACCES, "Permission denied", "/w/p/.stella.lock")

    with pytest.raises(StellaError) as err:
        Steps(body).run(request())
    assert err.value.code == "workdir_not_writable" and err.value.phase == "prepare"
    assert err.value.evidence["completedPhases"] == ["write_artifacts"]


def test_manager_lets_unexpected_exceptions_through():
    def body(rec, result):
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        Steps(body).run(request())
