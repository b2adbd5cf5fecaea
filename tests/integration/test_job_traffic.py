"""Traffic adapters in the deployment job, against a real data plane: Debian's nginx on loopback in front of
the active and the standby slot of a lab target, and ``lab/router.py`` (the router controller the
``webhook`` adapter talks to). The truth is read through nginx: each app image's page is its version, so
the bodies of requests through the router say which slot served them.

Uses the session's fleet of Debian 13 targets; each test deploys its own application and removes it.
Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import contextlib
import json
import os

import fleetkit as fl
from labkit import free_port
from trafficlab import DataPlane

SECRET = "planted-router-token-7f3a9c"
SHIFT_KEYS = (
    "strategy.traffic.mode",
    "strategy.traffic.status",
    "strategy.traffic.shifted",
    "strategy.traffic.controlWeight",
    "strategy.traffic.treatmentWeight",
    "strategy.traffic.slot",
)


def slots(target, **ports):
    return {slot: "%s:%d" % (target["address"], port) for slot, port in ports.items()}


def webhook_options(plane, token=SECRET, **extra):
    options = {
        "shiftUrl": plane.url("/shift"),
        "rollbackUrl": plane.url("/rollback"),
        "timeoutSeconds": 10,
        "headers": {"Authorization": "Bearer " + token},
    }
    options.update(extra)
    return {"stella_traffic_adapter_options": options}


def failing_hook(target):
    return {"name": "check-host", "phase": "post-deploy", "command": 'test "$(hostname)" != %s' % target["hostname"]}


def store_bytes(fj):
    data = b""
    for suffix in ("", "-wal"):
        if os.path.exists(fj.store_path + suffix):
            with open(fj.store_path + suffix, "rb") as handle:
                data += handle.read()
    return data


@contextlib.contextmanager
def active_behind_router(lab, targets, tmp_path, name, standby_slots, token=None):
    """An application of its own whose v1 runs in the active slot of ``targets`` (one batch), and the
    router's nginx in front of the first target's active slot and its ``standby_slots`` (a port each).
    Yields ``(FleetJob, DataPlane, {slot: port})``; removes both at the end."""
    ports = {slot: free_port() for slot in ("active",) + tuple(standby_slots)}
    fj = fl.FleetJob(lab, targets, tmp_path, name, ports["active"])
    plane = None
    try:
        base = fj.run(fj.release("app_v1", "1.0.0", "rolling", {"batchSize": len(targets)}))
        assert base.rc == 0, base.output[-4000:]
        plane = DataPlane(tmp_path, slots(targets[0], **ports), token=token)
        yield fj, plane, ports
    finally:
        if plane:
            plane.stop()
        fj.cleanup()


def test_blue_green_webhook_switches_to_green_and_a_later_failure_puts_traffic_back_on_blue(lab, fleet, tmp_path):
    t2 = fleet[1]
    with active_behind_router(lab, fleet[:2], tmp_path, "bg", ("green",), token=SECRET) as (fj, plane, ports):
        green = ports["green"]
        assert plane.sample(20) == {"v1": 20}

        # ---- v2 to green, then the switch: every request reaches green
        config = {"trafficAdapter": "webhook"}
        switched = fj.run(
            fj.release("app_v2", "2.0.0", "blue-green", config, port=green), extra=webhook_options(plane), verbose=True
        )
        assert switched.rc == 0, switched.output[-4000:]
        record = fj.job(switched.job_id)
        assert record["status"] == "Succeeded"
        evidence = record["strategyEvidence"]
        assert [evidence[k] for k in SHIFT_KEYS] == ["traffic_shift", "shifted", True, 0, 100, "green"]
        assert evidence["strategy.traffic.adapter"] == "webhook"
        assert evidence["strategy.traffic.webhookUrl"] == plane.url("/shift")
        assert evidence["strategy.traffic.webhookStatus"] == 200 and evidence["strategy.traffic.appliedAt"]
        assert evidence["strategy.traffic.dataPlaneUrl"] == "http://127.0.0.1:%d/" % plane.nginx_port
        assert plane.state()["applied"] == {
            "controlSlot": "active",
            "treatmentSlot": "green",
            "controlWeight": 0,
            "treatmentWeight": 100,
        }
        assert plane.sample(40) == {"v2": 40}
        # the planted router credential: sent (the router answered 200), never printed or stored
        assert SECRET not in switched.output and "-vvv" not in SECRET
        assert SECRET.encode() not in store_bytes(fj)
        for path, data in fl.evidence_files([fj.evidence_dir]).items():
            assert SECRET.encode() not in data, path

        # ---- a later blue-green job fails on t2: both green targets rolled back, traffic back on blue
        failing = fj.run(
            fj.release("app_v1", "3.0.0", "blue-green", config, hooks=[failing_hook(t2)], port=green),
            extra=webhook_options(plane),
        )
        assert failing.rc != 0, failing.output[-4000:]
        record = fj.job(failing.job_id)
        assert (record["status"], record["promotion"]) == ("RolledBack", "Failed"), record["reason"]
        assert {n: t["status"] for n, t in record["targets"].items()} == dict.fromkeys(fj.names, "RolledBack")
        back = record["strategyEvidence"]
        assert back["strategy.traffic.rollback.mode"] == "traffic_rollback"
        assert back["strategy.traffic.rollback.status"] == "restored"
        assert back["strategy.traffic.rollback.shifted"] is True
        assert back["strategy.traffic.rollback.slot"] == "active"
        assert back["strategy.traffic.rollback.reason"].startswith("target %s" % t2["name"])
        assert plane.state()["applied"]["controlWeight"] == 100
        assert plane.sample(40) == {"v1": 40}
        assert [h["action"] for h in plane.state()["history"]] == ["shift", "rollback"]


def test_canary_steps_and_a_b_weights_are_the_split_through_nginx(lab, fleet, tmp_path):
    with active_behind_router(lab, fleet[:3], tmp_path, "canary", ("canary", "b")) as (fj, plane, ports):
        canary, variant = ports["canary"], ports["b"]
        plane.mode("hold")
        config = {"batchSize": 1, "trafficAdapter": "webhook", "trafficSteps": [10, 50]}
        proc = fj.start(
            fj.release("app_v2", "2.0.0", "canary", config, port=canary),
            extra=webhook_options(plane, timeoutSeconds=120),
        )
        observed = []
        try:
            while len(observed) < 3:
                fl.wait_for(lambda: plane.state()["held"] or proc.poll() is not None, 300, what="a held traffic step")
                assert proc.poll() is None, open(proc.output_path, encoding="utf-8").read()[-4000:]
                applied = plane.state()["applied"]
                seen = plane.sample(100)
                observed.append((applied["treatmentWeight"], seen.get("v2", 0), seen.get("v1", 0)))
                plane.release()
                fl.wait_for(lambda: not plane.state()["held"], 30, what="the router to answer")
            assert proc.wait(timeout=300) == 0, open(proc.output_path, encoding="utf-8").read()[-4000:]
        finally:
            if proc.poll() is None:
                proc.kill()
        # each step's split through nginx, 100 requests: within 5 points of the weight the evidence names
        assert [weight for weight, _v2, _v1 in observed] == [10, 50, 100]
        for weight, v2, v1 in observed:
            assert v1 + v2 == 100 and abs(v2 - weight) <= 5, observed
        record = fj.job(fj.job_ids()[-1])
        assert record["status"] == "Succeeded"
        assert [(e["batch"], e["evidence"]["strategy.traffic.treatmentWeight"]) for e in record["traffic"]] == [
            (0, 10),
            (1, 50),
            (2, 100),
        ]
        assert all(e["evidence"]["strategy.traffic.slot"] == "canary" for e in record["traffic"])

        # ---- A/B: variant b beside the active slot, split 70 / 30 by the configured weights
        plane.mode("ok")
        config = {"variantId": "b", "trafficAdapter": "webhook", "trafficWeights": {"control": 70, "treatment": 30}}
        split = fj.run(fj.release("app_v2", "2.0.0", "a-b", config, port=variant), extra=webhook_options(plane))
        assert split.rc == 0, split.output[-4000:]
        record = fj.job(split.job_id)
        assert record["strategyEvidence"]["strategy.traffic.slot"] == "b"
        assert (
            record["strategyEvidence"]["strategy.traffic.controlWeight"],
            record["strategyEvidence"]["strategy.traffic.treatmentWeight"],
        ) == (70, 30)
        seen = plane.sample(100)
        assert seen["v1"] + seen["v2"] == 100 and abs(seen["v2"] - 30) <= 5, seen


def test_without_an_adapter_only_standby_evidence_and_required_adapter_fails_before_batch_2(lab, fleet, tmp_path):
    t1, t2 = fleet[:2]
    with active_behind_router(lab, fleet[:2], tmp_path, "standby", ("green",)) as (fj, plane, ports):
        green = ports["green"]
        standby = fj.run(fj.release("app_v2", "2.0.0", "blue-green", {}, port=green))
        assert standby.rc == 0, standby.output[-4000:]
        record = fj.job(standby.job_id)
        assert record["status"] == "Succeeded"
        assert record["strategyEvidence"] == {
            "strategy.traffic.mode": "standby_only",
            "strategy.traffic.status": "not_shifted",
            "strategy.traffic.shifted": False,
            "strategy.traffic.reason": "traffic_adapter_missing",
            "strategy.traffic.slot": "green",
        }
        assert plane.sample(40) == {"v1": 40} and plane.state()["history"] == []

        required = fj.run(
            fj.release("app_v2", "2.0.0", "canary", {"batchSize": 1, "requireTrafficAdapter": True}, port=free_port())
        )
        assert required.rc != 0
        record = fj.job(required.job_id)
        assert (record["status"], record["code"]) == ("Failed", "traffic_adapter_missing"), record["reason"]
        assert record["targets"][t1["name"]]["status"] == "Succeeded"
        assert record["targets"][t2["name"]]["status"] == "Skipped"
        assert [(g["batch"], g["proceed"]) for g in record["gates"]] == [(0, False)]
        assert record["strategyEvidence"]["strategy.traffic.reason"] == "traffic_adapter_missing"
        assert record["strategyEvidence"]["strategy.traffic.shifted"] is False
        assert plane.sample(20) == {"v1": 20}


def test_webhook_faults_fail_closed_and_nothing_claims_traffic_moved(lab, fleet, tmp_path):
    with active_behind_router(lab, fleet[:1], tmp_path, "faults", ("green",), token=SECRET) as (fj, plane, ports):
        green = ports["green"]
        release = fj.release("app_v2", "2.0.0", "blue-green", {"trafficAdapter": "webhook"}, port=green)
        cases = [
            ("down", "unreachable"),
            ("slow", "timed out"),
            ("500", "answered HTTP 500"),
            ("garbage", "answer invalid"),
            ("headers", "headers must map header names to strings"),
        ]
        for mode, needle in cases:
            if mode == "down":
                options = webhook_options(plane, shiftUrl="http://127.0.0.1:%d/shift" % free_port())
            elif mode == "headers":  # the job ends (it once stayed Running: the traffic step crashed)
                plane.mode("ok")
                options = webhook_options(plane, headers=["Authorization: Bearer " + SECRET])
            else:
                plane.mode(mode)
                options = webhook_options(plane, timeoutSeconds=2)
            run = fj.run(release, extra=options)
            assert run.rc != 0, (mode, run.output[-4000:])
            record = fj.job(run.job_id)
            assert (record["status"], record["code"]) == ("Failed", "traffic_adapter_failed"), (mode, record["reason"])
            assert needle in record["reason"], (mode, record["reason"])
            evidence = record["strategyEvidence"]
            assert evidence["strategy.traffic.status"] == "failed" and evidence["strategy.traffic.shifted"] is False
            assert not any(v == "shifted" for v in evidence.values()), evidence
            assert SECRET not in json.dumps(record) and SECRET not in run.output
            assert plane.sample(10) == {"v1": 10}, mode
        assert plane.state()["applied"] is None


def test_local_file_adapter_state_after_shift_and_after_rollback(lab, fleet, tmp_path):
    t2 = fleet[1]
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "routes", free_port())
    state_path = str(tmp_path / "routes" / "state.json")
    config = {"trafficAdapter": "local-file", "trafficAdapterOptions": {"path": state_path}}

    def state():
        with open(state_path, encoding="utf-8") as handle:
            return json.load(handle)

    try:
        shifted = fj.run(fj.release("app_v2", "2.0.0", "blue-green", config))
        assert shifted.rc == 0, shifted.output[-4000:]
        assert state() == {
            "jobId": shifted.job_id,
            "action": "shift",
            "controlSlot": "active",
            "treatmentSlot": "green",
            "controlWeight": 0,
            "treatmentWeight": 100,
        }
        failing = fj.run(fj.release("app_v1", "3.0.0", "blue-green", config, hooks=[failing_hook(t2)]))
        assert failing.rc != 0
        record = fj.job(failing.job_id)
        assert record["status"] == "RolledBack", record["reason"]
        assert state() == {
            "jobId": failing.job_id,
            "action": "rollback",
            "controlSlot": "active",
            "treatmentSlot": "green",
            "controlWeight": 100,
            "treatmentWeight": 0,
        }
        assert record["strategyEvidence"]["strategy.traffic.rollback.statePath"] == state_path
        assert not [n for n in os.listdir(os.path.dirname(state_path)) if n.startswith(".stella-tmp-")]
    finally:
        fj.cleanup()
