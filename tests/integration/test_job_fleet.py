"""The deployment job (``stellaops.runtime.job``) over a fleet of four Debian 13 lab targets.

One module-scoped fleet (``fleet1``..``fleet4``, Engine 26.1, so the contract's default preflight gates
pass) is shared by every scenario; each scenario deploys its own application (so its own Compose project
on every target), with its own job store and evidence directory under ``tmp_path``, through the real
``ansible-playbook``, and removes its projects at the end. Every scenario asserts what the targets run
(``docker inspect``: digest, ``stella.*`` labels, container ids; the sticker bytes) and what the job store
persisted (contract sections "Strategy Evidence Boundary" and "Automatic rollback on failed deployment").

Every scenario runs twice, with the job store on SQLite and on the lab's PostgreSQL server (a fresh
database each time), and must behave the same on both.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest

import fleetkit as fl
import labkit
from labkit import free_port
from fleetkit import PHASES, ROLLBACK_PHASES, web

from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import verify_rollback_evidence

ROLLED_BACK_SUFFIX = " (auto-rollback restored the retained previous revision)"


@pytest.fixture(autouse=True)
def _job_store_backend(job_store_location, monkeypatch):
    """Each scenario on each backend (``job_store_location`` is parametrized over SQLite and PostgreSQL)."""
    monkeypatch.setattr(fl.FleetJob, "default_store", job_store_location)


def sticker(state):
    assert state["sticker"] is not None, "the project has no version sticker"
    return json.loads(state["sticker"])


def assert_runs(fj, state, image_key, record, name):
    """The target's project runs ``image_key`` as planned by ``record`` for target ``name``."""
    facts = web(state)
    digest = fj.digests[image_key]
    assert facts["running"], facts
    assert facts["ref"] == "%s@%s" % (fj.refs[image_key], digest)
    assert facts["stella"]["stella.image.digest"] == digest
    assert facts["stella"]["stella.manifest.hash"] == record["targets"][name]["manifestHash"]
    assert facts["stella"]["stella.project"] == record["targets"][name]["projectName"]
    assert facts["stella"]["stella.target.name"] == name
    assert sticker(state)["manifestHash"] == record["targets"][name]["manifestHash"]
    return facts


def untouched(facts):
    """What must not change on a target a job did not touch: the container, its start, image and labels."""
    return {k: facts[k] for k in ("id", "startedAt", "ref", "stella", "running")}


def assert_phases(target, statuses=None):
    """Phases recorded in the contract's order, each with its completion time and duration.

    (Not in time order: the target agent's one compose.up transaction reports prepare..post-deploy at
    once, and the controller's probes, recorded under verify, run after it.)"""
    phases = target["phases"]
    names = [p["name"] for p in phases]
    assert names == PHASES[: len(names)], names
    if statuses is not None:
        assert [p["status"] for p in phases] == statuses, phases
    assert all(p["completedAt"] and isinstance(p["durationMs"], int) for p in phases), phases


def evidence_paths(fj, record):
    """The job's evidence: ``jobs/<id>/`` and each target's deployment evidence directory."""
    paths = [os.path.join(fj.evidence_dir, "jobs", record["jobId"])]
    for target in record["targets"].values():
        paths += [os.path.dirname(f["path"]) for f in (target.get("evidence") or {}).values()]
    return paths


def assert_projection_persisted_only(fj, record, snapshots):
    """What a monitor saw of the ``deployments`` projection while the job ran: only states the job had
    persisted (the status at the projected revision), a recorded phase and its share of the nine as
    progress, never a terminal status before the terminal step, which came after job.json."""
    store = fl.open_store(fj.store_path)
    try:
        history = {h["revision"]: h["status"] for h in store.history(record["jobId"])}
        final = store.projection(record["jobId"])
        written = store.projection_history(record["jobId"])
    finally:
        store.close()
    assert snapshots, "the projection was never observed while the job ran"
    seen = [projection["status"] for projection, _evidence in snapshots]
    assert "Running" in seen, seen
    assert [w["jobRevision"] for w in written] == sorted({w["jobRevision"] for w in written})
    for projection, evidence_existed in snapshots:
        persisted = history[projection["jobRevision"]]
        if projection["terminal"]:
            assert evidence_existed and projection["status"] == persisted == record["status"], projection
        else:
            assert projection["status"] not in ("Succeeded", "Failed", "RolledBack"), projection
            assert projection["status"] == persisted or persisted in ("Succeeded", "Failed", "RolledBack")
        for name, view in projection["targets"].items():  # a phase the job recorded, its share of nine
            recorded = [p["name"] for p in record["targets"][name].get("phases") or []]
            assert view["phase"] is None or view["phase"] in recorded, (name, view)
            expected = (recorded.index(view["phase"]) + 1) * 100 // 9 if view["phase"] else 0
            assert view["progress"] == expected, (name, view)
    assert final["terminal"] and final["status"] == record["status"] and written[-1]["terminal"]
    assert not any(w["terminal"] for w in written[:-1])
    evidence = final["strategyEvidence"]
    for key in ("id", "hash", "proofDigest", "proofStatus", "orderProofDigest", "orderProofStatus"):
        assert evidence["rollback.evidence." + key], key
    assert evidence["rollback.evidence.proofStatus"] == "complete"
    assert evidence["evidenceFiles"]["job.json"] and evidence["evidenceFiles"]["rollback-evidence.json"]


# --------------------------------------------------------------------------------------------- scenarios


def test_rolling_v1_rerun_then_failing_v2_rolls_back_in_reverse_batch_order(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet, tmp_path, "roll", free_port())
    t1, t2, t3, t4 = fj.names
    try:
        # ---- v1: rolling, batches of two
        v1 = fj.run(fj.release(), extra={"stella_keep_revisions": 5})
        assert v1.rc == 0, v1.output[-4000:]
        rec1 = fj.job(v1.job_id)
        assert rec1["options"]["keepRevisions"] == 5
        assert (rec1["status"], rec1["promotion"], rec1["reason"]) == ("Succeeded", "Succeeded", None)
        assert (rec1["strategy"], rec1["strategyConfig"]) == ("rolling", {"batchSize": 2})
        assert rec1["batches"] == [[t1, t2], [t3, t4]] and rec1["targetOrder"] == [t1, t2, t3, t4]
        for index, name in enumerate(fj.names):
            target = rec1["targets"][name]
            assert (target["status"], target["batch"], target["order"]) == ("Succeeded", index // 2, index)
            assert_phases(target, ["succeeded"] * len(PHASES))
            assert len(target["phases"]) == 9
        gates = sorted(rec1["gates"], key=lambda g: g["batch"])
        assert [(g["batch"], g["proceed"], g["failedTargets"]) for g in gates] == [(0, True, []), (1, True, [])]
        assert gates[0]["reason"] == "batch 1: 2 of 2 target(s) succeeded"
        # the gate after batch 1 was decided after batch 1 ended and before batch 2 started
        batch1_end = max(p["completedAt"] for n in (t1, t2) for p in rec1["targets"][n]["phases"])
        batch2_start = min(p["completedAt"] for n in (t3, t4) for p in rec1["targets"][n]["phases"])
        assert batch1_end <= gates[0]["at"] <= batch2_start
        assert rec1["events"] == [] and rec1["rollback"] is None
        assert fj.statuses(v1.job_id) == ["Pending", "Running", "Succeeded"]
        state1 = fj.states(rec1)
        for name in fj.names:
            assert_runs(fj, state1[name], "app_v1", rec1, name)
            assert sticker(state1[name])["jobId"] == v1.job_id
        assert fj.health() == dict.fromkeys(fj.names, "healthy")
        v1_evidence = fl.evidence_files(evidence_paths(fj, rec1))
        assert len(v1_evidence) == 5, sorted(v1_evidence)  # job.json + four deployment.json

        # ---- the same v1 again: a new job that changes nothing and keeps the first job's stickers
        again = fj.run(fj.release())
        assert again.rc == 0, again.output[-4000:]
        assert set(again.recap) == set(fj.names) | {"localhost"}
        assert {host: counts[1] for host, counts in again.recap.items()} == dict.fromkeys(again.recap, 0), again.recap
        assert again.job_id != v1.job_id
        rec_again = fj.job(again.job_id)
        assert rec_again["status"] == "Succeeded"
        assert rec_again["options"]["keepRevisions"] == 10
        assert all(rec_again["targets"][n]["appliedByJobId"] == v1.job_id for n in fj.names)
        state_again = fj.states(rec_again)
        for name in fj.names:
            assert state_again[name]["sticker"] == state1[name]["sticker"], name
            assert web(state_again[name])["id"] == web(state1[name])["id"]
            assert web(state_again[name])["startedAt"] == web(state1[name])["startedAt"]

        # ---- v2 whose post-deploy hook fails on the first target of batch 2
        hook = {
            "name": "check-host",
            "phase": "post-deploy",
            "command": 'test "$(hostname)" != %s' % fleet[2]["hostname"],
        }
        with fl.ProjectionWatcher(fj, fj.job_ids()) as watcher:
            v2 = fj.run(fj.release("app_v2", "2.0.0", hooks=[hook]))
        assert v2.rc != 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        assert_projection_persisted_only(fj, rec2, watcher.snapshots)
        assert fj.health() == dict.fromkeys(fj.names, "degraded")  # each runs its retained v1, not v2
        failed = rec2["targets"][t3]
        assert (rec2["status"], rec2["promotion"], rec2["isRollback"]) == ("RolledBack", "Failed", True)
        original = "target %s: %s" % (t3, failed["reason"])
        assert failed["reason"].startswith("post-deploy hook check-host failed"), failed["reason"]
        assert rec2["reason"] == original + ROLLED_BACK_SUFFIX
        assert rec2["code"] == failed["code"]
        assert [e["kind"] for e in rec2["events"]] == ["RollbackStarted", "RollbackCompleted"]
        assert fj.statuses(v2.job_id) == ["Pending", "Running", "Failed", "RollingBack", "RolledBack"]
        rollback = rec2["rollback"]
        assert rollback["batches"] == [[t3, t4], [t1, t2]]
        assert (rollback["attempted"], rollback["automatic"], rollback["status"]) == (True, True, "succeeded")
        # what each target did before the rollback: batch 1 and t4 finished all nine phases, t3 failed
        assert failed["statusBeforeRollback"] == "Failed"
        assert_phases(failed, ["succeeded"] * 6 + ["failed"])
        for name in (t1, t2, t4):
            assert rec2["targets"][name]["statusBeforeRollback"] == "Succeeded", name
            assert_phases(rec2["targets"][name], ["succeeded"] * len(PHASES))
        gates = sorted(rec2["gates"], key=lambda g: g["batch"])
        assert [(g["batch"], g["proceed"], g["failedTargets"]) for g in gates] == [(0, True, []), (1, False, [t3])]
        for name in fj.names:
            target = rec2["targets"][name]
            assert target["status"] == "RolledBack", name
            assert [p["name"] for p in target["rollbackPhases"]] == ROLLBACK_PHASES
            assert all(p["status"] == "succeeded" for p in target["rollbackPhases"]), target["rollbackPhases"]
            assert target["rollback"]["rollbackDigest"] == fj.digests["app_v1"]
            assert target["currentDigest"] == fj.digests["app_v2"]
        # reverse batch order: batch 2 was restored before batch 1
        done = {n: rec2["targets"][n]["rollback"]["completedAt"] for n in fj.names}
        assert max(done[t3], done[t4]) < min(done[t1], done[t2]), done
        # every target back on v1: digest, every stella label, the v1 sticker byte for byte
        state2 = fj.states(rec2)
        for name in fj.names:
            facts = web(state2[name])
            assert facts["running"]
            assert facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"])
            assert facts["stella"] == web(state1[name])["stella"], name
            assert facts["stella"]["stella.manifest.hash"] == rec1["targets"][name]["manifestHash"]
            assert state2[name]["sticker"] == state1[name]["sticker"], name
        # the job's evidence
        job_dir = os.path.join(fj.evidence_dir, "jobs", v2.job_id)
        assert sorted(os.listdir(job_dir)) == ["job.json", "rollback-evidence.json"]
        with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as handle:
            job_doc = json.load(handle)
        assert (job_doc["jobId"], job_doc["status"], job_doc["evidenceVersion"]) == (
            v2.job_id,
            "RolledBack",
            "stella.job.evidence.v1",
        )
        with open(os.path.join(job_dir, "rollback-evidence.json"), encoding="utf-8") as handle:
            evidence = json.load(handle)
        assert evidence["evidenceVersion"] == "release.rollback.evidence.v1"
        assert evidence["deploymentId"] == v2.job_id
        assert verify_rollback_evidence(evidence) == []
        assert (evidence["proofStatus"], evidence["orderProofStatus"]) == ("complete", "complete")
        # deploymentOrder: the deployment's batches; rollbackOrder: the rollback's own batches, which
        # ran in reverse batch order (batch 2's targets first).
        # (within a batch, entries are ordered by their timestamps)

        def batches(key):
            return [
                {e["target"]["targetName"] for e in evidence[key] if e["batchIndex"] == index}
                for index in sorted({e["batchIndex"] for e in evidence[key]})
            ]

        assert batches("deploymentOrder") == [{t1, t2}, {t3, t4}]
        assert batches("rollbackOrder") == [{t3, t4}, {t1, t2}]
        assert [e["batchIndex"] for e in evidence["rollbackOrder"]] == [0, 0, 1, 1]
        assert {e["target"]["targetName"]: e["status"] for e in evidence["deploymentOrder"]} == {
            t1: "succeeded",
            t2: "succeeded",
            t3: "failed",
            t4: "succeeded",
        }
        assert all(e["status"] == "succeeded" for e in evidence["rollbackOrder"])
        assert evidence["failure"]["target"]["targetName"] == t3
        assert {
            t["targetName"]: (t["currentDigest"], t["rollbackDigest"]) for t in evidence["targets"]
        } == dict.fromkeys(fj.names, (fj.digests["app_v2"], fj.digests["app_v1"]))
        # the succeeded v1 job's evidence is untouched by the later jobs
        assert fl.evidence_files(evidence_paths(fj, rec1)) == v1_evidence
    finally:
        fj.cleanup()


def test_canary_failing_probe_on_the_first_target_restores_it_and_skips_the_rest(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet, tmp_path, "canary", free_port())
    t1, t2, t3, t4 = fj.names
    try:
        v1 = fj.run(fj.release(strategy="canary", strategy_config={"batchSize": "100%"}))
        assert v1.rc == 0, v1.output[-4000:]
        rec1 = fj.job(v1.job_id)
        assert rec1["status"] == "Succeeded" and rec1["batches"] == [[t1, t2, t3, t4]]
        assert {t["slot"] for t in rec1["targets"].values()} == {"canary"}
        state1 = fj.states(rec1)
        for name in fj.names:
            assert_runs(fj, state1[name], "app_v1", rec1, name)

        bad_probe = {"healthProbe.path": "/no-such-page", "healthProbe.attempts": 2}
        v2 = fj.run(
            fj.release(
                "app_v2", "2.0.0", strategy="canary", strategy_config={"batchSize": [1, "50%", "100%"]}, probe=bad_probe
            )
        )
        assert v2.rc != 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        assert rec2["batches"] == [[t1], [t2, t3], [t4]]
        assert rec2["strategyConfig"] == {"batchSize": [1, "50%", "100%"]}
        first = rec2["targets"][t1]
        assert_phases(first)
        assert {p["name"]: p["status"] for p in first["phases"]}["verify"] == "failed", first["phases"]
        assert [(g["batch"], g["proceed"], g["failedTargets"]) for g in rec2["gates"]] == [(0, False, [t1])]
        for name in (t2, t3, t4):
            target = rec2["targets"][name]
            assert target["status"] == "Skipped", (name, target["status"])
            assert target["phases"] == [] and "rollback" not in target, name
            assert target["reason"].startswith("not started: strategy gate closed after batch 1"), target["reason"]
        assert rec2["rollback"]["batches"] == [[t1]]

        # on the targets: only the first one was touched by v2, and it runs v1 again
        state2 = fj.states(rec2)
        restored = web(state2[t1])
        assert restored["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"])
        assert restored["stella"] == web(state1[t1])["stella"]
        assert restored["id"] != web(state1[t1])["id"]
        assert state2[t1]["sticker"] == state1[t1]["sticker"]
        for name in (t2, t3, t4):  # never touched by v2: same container, same start, same v1
            assert untouched(web(state2[name])) == untouched(web(state1[name])), name
            assert state2[name]["sticker"] == state1[name]["sticker"], name

        # ... so the job rolled back: RolledBack, the deployment itself still Failed
        assert (rec2["status"], rec2["promotion"], first.get("rollbackError")) == ("RolledBack", "Failed", None), rec2[
            "reason"
        ]
        assert (first["status"], first["statusBeforeRollback"]) == ("RolledBack", "Failed")
        assert rec2["reason"].startswith("target %s: Post-deploy health probe failed" % t1), rec2["reason"]
        assert rec2["reason"].endswith(ROLLED_BACK_SUFFIX), rec2["reason"]
        assert [e["kind"] for e in rec2["events"]] == ["RollbackStarted", "RollbackCompleted"]
    finally:
        fj.cleanup()


def test_auto_rollback_disabled_leaves_the_failed_target_on_v2(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "norb", free_port())
    t1, t2 = fj.names
    try:
        # v1 without waiting for health: the probes are recorded as skipped
        v1 = fj.run(
            fj.release(strategy_config={"batchSize": 2, "autoRollbackOnFailure": False, "waitForHealthCheck": False})
        )
        assert v1.rc == 0, v1.output[-4000:]
        rec1 = fj.job(v1.job_id)
        assert rec1["status"] == "Succeeded"
        assert (rec1["options"]["waitForHealthCheck"], rec1["options"]["waitForHealthCheckSource"]) == (
            False,
            "strategyConfig.waitForHealthCheck",
        )
        for name in fj.names:
            path = rec1["targets"][name]["evidence"]["deployment.json"]["path"]
            with open(path, encoding="utf-8") as handle:
                probe = json.load(handle)["health"]["probe"]
            assert probe["healthProbe.status"] == "skipped", probe
            assert probe["healthProbe.reason"] == "waitForHealthCheck=false", probe
            verify = [p for p in rec1["targets"][name]["phases"] if p["name"] == "verify"][0]
            assert verify["detail"] == {"probes": "skipped", "reason": "waitForHealthCheck=false"}, verify
        # deployed, but nothing verified the services' health: never "healthy"
        assert fj.health() == dict.fromkeys(fj.names, "unknown")
        state1 = fj.states(rec1)

        bad_probe = {"healthProbe.path": "/no-such-page", "healthProbe.attempts": 2}
        v2 = fj.run(
            fj.release(
                "app_v2", "2.0.0", strategy_config={"batchSize": 1, "autoRollbackOnFailure": False}, probe=bad_probe
            )
        )
        assert v2.rc != 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        assert (rec2["status"], rec2["promotion"], rec2["isRollback"]) == ("Failed", "Failed", False)
        assert rec2["rollback"] == {
            "attempted": False,
            "skipReason": "autoRollbackOnFailure=false",
            "source": "strategyConfig.autoRollbackOnFailure",
        }
        assert rec2["events"] == []
        assert fj.statuses(v2.job_id) == ["Pending", "Running", "Failed"]
        assert rec2["reason"] == "target %s: %s" % (t1, rec2["targets"][t1]["reason"])
        assert rec2["targets"][t1]["status"] == "Failed" and "rollbackPhases" not in rec2["targets"][t1]
        assert rec2["targets"][t2]["status"] == "Skipped"
        state2 = fj.states(rec2)
        failed = assert_runs(fj, state2[t1], "app_v2", rec2, t1)  # still v2, as the failed job left it
        assert sticker(state2[t1])["jobId"] == v2.job_id
        assert failed["id"] != web(state1[t1])["id"]
        assert state2[t2]["sticker"] == state1[t2]["sticker"]
        assert web(state2[t2])["id"] == web(state1[t2])["id"]
    finally:
        fj.cleanup()


def test_unreachable_target_fails_the_job_before_any_target_changes(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet, tmp_path, "unreach", free_port())
    t1, t2, t3, t4 = fj.names
    try:
        # t3's connection goes to a loopback port nothing listens on
        run = fj.run(fj.release(), overrides={t3: {"ansible_host": "127.0.0.1", "ansible_port": free_port()}})
        assert run.rc != 0, run.output[-4000:]
        record = fj.job(run.job_id)
        assert (record["status"], record["promotion"], record["code"]) == ("Failed", "Failed", "target_unreachable")
        assert t3 in record["reason"], record["reason"]
        assert record["reason"].startswith(
            "target readiness failed before any target was changed: %s unreachable" % t3
        ), record["reason"]
        # nothing changed, so no target is eligible: the contract's skipped automatic rollback
        assert record["reason"].endswith(" (auto-rollback skipped: no target retained a previous revision to restore)")
        assert record["rollback"] == {"attempted": False, "skipReason": "no_eligible_target", "skipped": {}}
        assert (record["targets"][t3]["status"], record["targets"][t3]["code"]) == ("Failed", "target_unreachable")
        for name in (t1, t2, t4):
            assert record["targets"][name]["status"] == "Skipped", name
            assert record["targets"][name]["phases"] == [], name
        assert record["gates"] == [] and record["events"] == []
        # target health: the failed readiness check made t3 unreachable; the skipped targets are unknown
        assert fj.health([t3, t1]) == {t3: "unreachable", t1: "unknown"}
        for name in (t1, t2, t4):
            project = fj.project(record, name)
            assert not fj.project_dir_exists(name, project), (name, project)
            assert fj.state(name, project)["containers"] == [], name
    finally:
        fj.cleanup()


FILES = "apply-manifest.json, compose.stella.lock.yml, stella.version.json"


def application_containers(fj):
    """``{host: ids of this application's containers}``, read on every target."""
    script = "docker ps -aq --no-trunc --filter label=stella.application=%s" % fj.application
    return {t["name"]: sorted(labkit.ssh(t, script, timeout=120).stdout.split()) for t in fj.fleet}


def preview_lines(run):
    """The preview's per-target lines (``name (batch N): ...``) from the job's debug output."""
    return {
        line.split(" (batch ")[0]: line.split("): ", 1)[1]
        for line in (raw.strip().strip('",').strip() for raw in run.output.splitlines())
        if " (batch " in line and "): " in line
    }


def test_check_mode_previews_the_job_and_records_or_changes_nothing(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "check", free_port())
    t1, t2 = fj.names
    try:
        # ---- a preview on targets that run nothing of the application: both would deploy
        first = fj.run(fj.release(), check=True)
        assert first.rc == 0, first.output[-4000:]
        assert "check mode: a preview, nothing was recorded or changed" in first.output
        lines = preview_lines(first)
        assert lines == dict.fromkeys((t1, t2), "would deploy (%s would change)" % FILES), lines
        assert fj.job_ids() == [] and application_containers(fj) == {t1: [], t2: []}
        if "://" not in fj.store_path:
            assert not os.path.exists(fj.store_path)
        assert not os.path.exists(fj.evidence_dir) or os.listdir(fj.evidence_dir) == []
        # a preview whose preflight fails on every target: the play fails and says where
        failing = fj.run(fj.release(), extra={"stella_min_engine_version": "99.0.0"}, check=True)
        assert failing.rc != 0, failing.output[-4000:]
        lines = preview_lines(failing)
        assert set(lines) == {t1, t2} and all(
            line.startswith("would fail at preflight: runtime_version_too_old: ") for line in lines.values()
        ), failing.output[-4000:]
        assert "Preview: %s, %s would not deploy" % tuple(sorted((t1, t2))) in failing.output, failing.output[-4000:]
        assert fj.job_ids() == [] and application_containers(fj) == {t1: [], t2: []}

        # ---- v1 for real, then a preview of v2: it would deploy and retain v1, and nothing changes
        v1 = fj.run(fj.release())
        assert v1.rc == 0, v1.output[-4000:]
        rec1 = fj.job(v1.job_id)
        before = fj.states(rec1)
        preview = fj.run(fj.release("app_v2", "2.0.0"), check=True)
        assert preview.rc == 0, preview.output[-4000:]
        assert preview_lines(preview) == dict.fromkeys(
            (t1, t2), "would deploy (%s would change; the committed release would be retained as a revision)" % FILES
        )
        assert fj.job_ids() == [v1.job_id]
        after = fj.states(rec1)
        for name in (t1, t2):
            assert after[name]["sticker"] == before[name]["sticker"]
            assert (web(after[name])["id"], web(after[name])["startedAt"], web(after[name])["ref"]) == (
                web(before[name])["id"],
                web(before[name])["startedAt"],
                web(before[name])["ref"],
            )

        # ---- a preview of v1 again: converged
        again = fj.run(fj.release(), check=True)
        assert again.rc == 0, again.output[-4000:]
        assert preview_lines(again) == dict.fromkeys(
            (t1, t2), "converged: nothing would change (applied by job %s)" % v1.job_id
        )
        assert fj.job_ids() == [v1.job_id]

        # ---- v2 for real, then the operator rollback of it previewed: each target would restore the
        # revision v2 retained, and nothing is stored or changed
        v2 = fj.run(fj.release("app_v2", "2.0.0"))
        assert v2.rc == 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        on_v2 = fj.states(rec2)
        back_preview = fj.rollback(v2.job_id, check=True)
        assert back_preview.rc == 0, back_preview.output[-4000:]
        assert "of job %s (check mode: a preview, nothing was recorded or changed)" % v2.job_id in back_preview.output
        assert preview_lines(back_preview) == {
            name: "would restore the revision at %s" % rec2["targets"][name]["previousRevisionPath"]
            for name in (t1, t2)
        }, back_preview.output[-4000:]
        assert fj.job_ids() == [v1.job_id, v2.job_id]
        for name, state in fj.states(rec2).items():
            assert (state["sticker"], web(state)["id"], web(state)["startedAt"]) == (
                on_v2[name]["sticker"],
                web(on_v2[name])["id"],
                web(on_v2[name])["startedAt"],
            )

        # ---- the operator rollback for real: a rollback job, and both targets run v1 again
        back = fj.rollback(v2.job_id)
        assert back.rc == 0, back.output[-4000:]
        [rollback_id] = back.job_ids
        rollback = fj.job(rollback_id)
        # recovery, never a deployment: the rollback job ends RolledBack and promotes nothing
        assert (rollback["kind"], rollback["status"], rollback["sourceJobId"]) == ("rollback", "RolledBack", v2.job_id)
        assert rollback["promotion"] == "Succeeded" and [e["kind"] for e in rollback["events"]] == [
            "RollbackStarted",
            "RollbackCompleted",
        ]
        assert {n: t["status"] for n, t in rollback["targets"].items()} == {t1: "RolledBack", t2: "RolledBack"}
        # the deployment it rolled back went through RollingBack to RolledBack, with the Rollback* events
        source = fj.job(v2.job_id)
        assert (source["status"], source["promotion"]) == ("RolledBack", "Succeeded")
        assert [(e["kind"], e.get("rollbackJobId")) for e in source["events"]] == [
            ("RollbackStarted", rollback_id),
            ("RollbackCompleted", rollback_id),
        ]
        assert fj.statuses(v2.job_id)[-3:] == ["Succeeded", "RollingBack", "RolledBack"]
        assert {n: source["targets"][n]["status"] for n in (t1, t2)} == {t1: "RolledBack", t2: "RolledBack"}
        # its rollback evidence: about v2 (deploymentId), each target's digest before and after: complete
        with open(
            os.path.join(fj.evidence_dir, "jobs", rollback_id, "rollback-evidence.json"), encoding="utf-8"
        ) as handle:
            evidence = json.load(handle)
        assert (evidence["deploymentId"], evidence["rollbackJobId"], evidence["proofStatus"]) == (
            v2.job_id,
            rollback_id,
            "complete",
        )
        assert sorted(entry["target"]["targetName"] for entry in evidence["deploymentOrder"]) == [t1, t2]
        store = fj._store()
        try:
            strategy = store.projection(v2.job_id)["strategyEvidence"]
            assert store.projection(v2.job_id)["status"] == "RolledBack"
        finally:
            store.close()
        assert strategy["rollback.evidence.id"] == "jobs/%s/rollback-evidence.json" % rollback_id
        assert strategy["rollback.evidence.proofStatus"] == "complete" and strategy["rollback.jobId"] == rollback_id
        for name, state in fj.states(rec2).items():
            assert sticker(state)["manifestHash"] == sticker(before[name])["manifestHash"]
            assert web(state)["ref"] == web(before[name])["ref"] and web(state)["id"] != web(on_v2[name])["id"]
    finally:
        fj.cleanup()


def test_a_second_job_for_a_held_project_fails_closed_while_the_first_runs(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "busy", free_port())
    t1, t2 = fj.names
    hold = {"name": "hold", "phase": "pre-deploy", "command": "sleep 12"}
    try:
        proc = fj.start(fj.release(hooks=[hold]))
        try:

            def running():
                ids = fj.job_ids()
                return ids[0] if ids and fj.job(ids[0])["status"] == "Running" else None

            first = fl.wait_for(running, 240, what="the first job Running")
            # another controller run for the same projects, while the first job holds them
            second = fj.run(fj.release())
            assert second.rc != 0, second.output[-4000:]
            assert proc.wait(420) == 0, proc.output_path.read_text()[-4000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        refused = fj.job(second.job_id)
        assert (refused["status"], refused["code"]) == ("Failed", "project_busy"), refused["reason"]
        assert first in refused["reason"] and "nothing was changed" in refused["reason"], refused["reason"]
        for name in (t1, t2):
            assert (refused["targets"][name]["status"], refused["targets"][name]["code"]) == ("Failed", "project_busy")
            assert refused["targets"][name]["phases"] == [], name
        assert fj.statuses(second.job_id) == ["Pending", "Failed"]
        record = fj.job(first)
        assert record["status"] == "Succeeded", record["reason"]
        state = fj.states(record)
        for name in fj.names:
            assert_runs(fj, state[name], "app_v1", record, name)
            assert sticker(state[name])["jobId"] == first  # the refused job wrote nothing
        assert fj.health() == dict.fromkeys(fj.names, "healthy")  # a refusal says nothing of the targets
        store = fl.open_store(fj.store_path)
        try:
            assert store.claims() == {}  # the finished job let its projects go
        finally:
            store.close()
    finally:
        fj.cleanup()


def test_killed_controller_run_is_failed_and_the_same_release_converges(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet[:3], tmp_path, "kill", free_port())
    t1, t2, t3 = fj.names
    release = fj.release(strategy_config={"batchSize": 1})
    try:
        proc = fj.start(release)
        try:

            def second_batch_running():
                ids = fj.job_ids()
                if not ids:
                    return None
                record = fj.job(ids[0])
                return record if record["targets"][t2]["status"] == "Running" else None

            killed = fl.wait_for(second_batch_running, 240, what="a target of batch 2 Running")
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        job_id = killed["jobId"]
        assert killed["targets"][t1]["status"] == "Succeeded"
        assert fj.job(job_id)["status"] == "Running"  # nobody is left to finish it ...

        shown = fj.show(job_id)  # ... and reading it records the interruption
        assert shown.rc == 0, shown.output[-4000:]
        assert "job %s  Failed" % job_id in shown.output, shown.output[-4000:]
        assert fj.job(job_id)["status"] == "Failed"

        run = fj.run(release)  # the same release again converges
        assert run.rc == 0, run.output[-4000:]
        interrupted = fj.job(job_id)
        assert (interrupted["status"], interrupted["promotion"], interrupted["code"]) == (
            "Failed",
            "Failed",
            "job_interrupted",
        )
        assert "interrupted" in interrupted["reason"]
        assert interrupted["targets"][t1]["status"] == "Succeeded"
        assert (interrupted["targets"][t2]["status"], interrupted["targets"][t2]["code"]) == (
            "Failed",
            "job_interrupted",
        )
        assert interrupted["targets"][t3]["status"] == "Skipped"
        assert "Running" not in [t["status"] for t in interrupted["targets"].values()]
        assert "Pending" not in [t["status"] for t in interrupted["targets"].values()]
        assert fj.statuses(job_id) == ["Pending", "Running", "Failed"]

        record = fj.job(run.job_id)
        assert run.job_id != job_id and record["status"] == "Succeeded"
        assert record["batches"] == [[t1], [t2], [t3]]
        state = fj.states(record)
        for name in fj.names:
            assert_runs(fj, state[name], "app_v1", record, name)
        assert sticker(state[t1])["jobId"] == job_id  # the interrupted job had finished t1
        assert sticker(state[t3])["jobId"] == run.job_id
    finally:
        fj.cleanup()


def test_slots_all_at_once_active_then_blue_green_and_a_b_leave_the_active_project_untouched(lab, fleet, tmp_path):
    """all-at-once deploys the active slot in one batch; blue-green deploys the green slot and a-b the
    variant slot, each in its own Compose project, while the active project keeps running untouched."""
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "slots", free_port())
    t1, t2 = fj.names
    try:
        run = fj.run(fj.release(strategy="all-at-once", strategy_config={}))
        assert run.rc == 0, run.output[-4000:]
        active = fj.job(run.job_id)
        assert active["batches"] == [[t1, t2]] and active["status"] == "Succeeded"
        before = fj.states(active)
        for name in fj.names:
            facts = assert_runs(fj, before[name], "app_v1", active, name)
            assert (facts["stella"]["stella.slot"], active["targets"][name]["slot"]) == ("active", "active")

        for strategy, config, slot in (("blue-green", {}, "green"), ("a-b", {"variantId": "b"}, "b")):
            port = free_port()
            release = fj.release(
                "app_v2", "2.0.0", strategy=strategy, strategy_config=config, probe={"healthProbe.port": port}
            )
            release["components"][0]["ports"] = ["%d:8080" % port]
            run = fj.run(release)
            assert run.rc == 0, run.output[-4000:]
            record = fj.job(run.job_id)
            assert record["batches"] == [[t1, t2]] and record["status"] == "Succeeded", record["reason"]
            for name in fj.names:
                assert record["targets"][name]["slot"] == slot
                assert record["targets"][name]["projectName"] != active["targets"][name]["projectName"]
                assert record["targets"][name]["projectName"].endswith(slot)
            after = fj.states(record)
            for name in fj.names:
                facts = assert_runs(fj, after[name], "app_v2", record, name)
                assert facts["stella"]["stella.slot"] == slot
                assert sticker(after[name])["slot"] == slot
            # the active slot's project: same containers, same start, same sticker bytes
            still = fj.states(active)
            for name in fj.names:
                assert web(still[name]) == web(before[name]), (strategy, name)
                assert still[name]["sticker"] == before[name]["sticker"], (strategy, name)
    finally:
        fj.cleanup()


def deployment_record(target):
    """The target's ``deployment.json`` written by the job's evidence phase."""
    with open(target["evidence"]["deployment.json"]["path"], encoding="utf-8") as handle:
        return json.load(handle)


def test_dockerhost_fleet_deploys_records_success_and_rolls_back_to_the_retained_containers(lab, fleet, tmp_path):
    fj = fl.FleetJob(lab, fleet, tmp_path, "dock", free_port())
    t1, t2, t3, t4 = fj.names
    label = "stella.project"
    try:
        # ---- v1 as docker.run on every target, rolling in batches of two
        v1 = fj.run(fj.release(target_type="DockerHost"))
        assert v1.rc == 0, v1.output[-4000:]
        rec1 = fj.job(v1.job_id)
        assert (rec1["status"], rec1["promotion"]) == ("Succeeded", "Succeeded")
        state1 = fj.states(rec1, label)
        for name in fj.names:
            target = rec1["targets"][name]
            assert (target["targetType"], target["status"]) == ("DockerHost", "Succeeded")
            assert_phases(target, ["succeeded"] * len(PHASES))
            facts = assert_runs(fj, state1[name], "app_v1", rec1, name)
            assert facts["stella"]["stella.target.type"] == "DockerHost"
            assert state1[name]["containers"][0]["Name"] == "/%s-web" % target["projectName"]
            assert sticker(state1[name])["jobId"] == v1.job_id
            record = deployment_record(target)
            assert (record["status"], record["changed"], record["appliedByJobId"]) == ("succeeded", True, v1.job_id)
            assert all(record["successBoundary"].values()), record["successBoundary"]

        # ---- the same release again: nothing recreated, the first job's stickers kept, and said so
        again = fj.run(fj.release(target_type="DockerHost"))
        assert again.rc == 0, again.output[-4000:]
        assert {host: counts[1] for host, counts in again.recap.items()} == dict.fromkeys(again.recap, 0), again.recap
        rec_again = fj.job(again.job_id)
        state_again = fj.states(rec_again, label)
        for name in fj.names:
            assert state_again[name]["sticker"] == state1[name]["sticker"], name
            assert untouched(web(state_again[name])) == untouched(web(state1[name]))
            record = deployment_record(rec_again["targets"][name])
            assert (record["status"], record["changed"], record["appliedByJobId"]) == ("succeeded", False, v1.job_id)

        # ---- v2 whose post-deploy hook fails on the first target of batch 2
        hook = {
            "name": "check-host",
            "phase": "post-deploy",
            "command": 'test "$(hostname)" != %s' % fleet[2]["hostname"],
        }
        v2 = fj.run(fj.release("app_v2", "2.0.0", hooks=[hook], target_type="DockerHost"))
        assert v2.rc != 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        assert (rec2["status"], rec2["promotion"], rec2["isRollback"]) == ("RolledBack", "Failed", True)
        assert rec2["targets"][t3]["reason"].startswith("post-deploy hook check-host failed")
        # t3's own transaction put v1 back; the three targets that ran v2 are rolled back, batch 2 first
        assert rec2["rollback"]["batches"] == [[t4], [t1, t2]]
        assert rec2["rollback"]["skipped"] == {
            t3: "restored in place: the target agent's failed transaction put the previous release back"
        }
        assert rec2["targets"][t3]["status"] == "Failed" and rec2["targets"][t3]["restoredInPlace"] is True
        for name in (t1, t2, t4):
            target = rec2["targets"][name]
            assert target["status"] == "RolledBack", name
            assert [p["name"] for p in target["rollbackPhases"]] == ROLLBACK_PHASES
            assert all(p["status"] == "succeeded" for p in target["rollbackPhases"]), target["rollbackPhases"]
            assert target["rollback"]["rollbackDigest"] == fj.digests["app_v1"]
        done = {n: rec2["targets"][n]["rollback"]["completedAt"] for n in (t1, t2, t4)}
        assert done[t4] < min(done[t1], done[t2]), done
        # every target runs v1's own container again (the retained one, same id), nothing else is left
        # (no -stella-previous, -stella-replaced or -stella-rolled-back container), v1's sticker byte for byte
        state2 = fj.states(rec2, label)
        for name in fj.names:
            facts = web(state2[name])
            assert facts["running"] and facts["id"] == web(state1[name])["id"], name
            assert facts["stella"] == web(state1[name])["stella"], name
            assert state2[name]["sticker"] == state1[name]["sticker"], name
    finally:
        fj.cleanup()
