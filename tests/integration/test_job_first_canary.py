"""A failed first canary puts its traffic back (docs/traffic.md): through the real job playbook on two thin
lab targets, a canary with the ``local-file`` adapter whose first target takes 10 % of the traffic and whose
second fails after its apply ran. Neither target retained a revision (the release's first deployment), so
the automatic rollback of both fails; the traffic is put back on the control slot all the same.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json

import labkit
import thinkit

ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}


def test_a_failed_first_canary_puts_its_traffic_back_though_no_target_could_be_rolled_back(lab, thin_pair, tmp_path):  # pylint: disable=redefined-outer-name
    fj = thinkit.ThinFleetJob(lab, thin_pair, tmp_path, "canary-first", labkit.free_port())
    t1, t2 = fj.names
    route = tmp_path / "route.json"
    hook = {
        "name": "fail-second",
        "phase": "post-deploy",
        "failurePolicy": "fail",
        "command": 'case "$STELLA_TARGET_ID" in %s) exit 3;; esac' % t2,
    }
    config = {
        "batchSize": 1,
        "trafficSteps": [10, 50],
        "trafficAdapter": "local-file",
        "trafficAdapterOptions": {"path": str(route)},
    }
    try:
        run = fj.run(fj.release("app_v1", "1.0.0", "canary", config, hooks=[hook]), extra=ENGINE_GATE)
        assert run.rc != 0, run.output[-4000:]
        record = fj.job(run.job_id)
        shifts = [
            (e["evidence"].get("strategy.traffic.controlWeight"), e["evidence"].get("strategy.traffic.treatmentWeight"))
            for e in record["traffic"]
        ]
        assert shifts == [(90, 10)], record["traffic"]  # t1's batch took 10 %
        assert record["targets"][t2]["status"] == "Failed"
        # both targets applied and were rolled back; neither retained a revision to restore
        assert sorted(n for batch in record["rollback"]["batches"] for n in batch) == sorted([t1, t2])
        assert all(record["targets"][n].get("rollbackError") for n in (t1, t2)), record["targets"]
        # the traffic went back to the control slot: the route file says so, and so does the record
        state = json.loads(route.read_text())
        assert (
            state["jobId"],
            state["action"],
            state["controlSlot"],
            state["controlWeight"],
            state["treatmentWeight"],
        ) == (run.job_id, "rollback", "active", 100, 0), state
        assert record["trafficRollback"]["evidence"]["strategy.traffic.rollback.shifted"] is True, record[
            "trafficRollback"
        ]
    finally:
        fj.cleanup()
