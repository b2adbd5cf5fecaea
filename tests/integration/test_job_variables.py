"""The job's variables read from one place, wherever the operator put them (docs/jobs.md): as group
variables of ``stella_targets``, as host variables of each target, and as extra variables. Through the
real job playbook on one thin lab target, a blue-green release whose traffic adapter (``local-file``) gets
its path only from ``stella_traffic_adapter_options``:

- every layout: the job ends ``Succeeded`` in the store the variables name, writes ``job.json`` and the
  report in the evidence directory they name, and the traffic step writes the route file;
- group variables: a failing job is rolled back, closed (``RolledBack``, ``job.json``) and its traffic
  rollback reaches the adapter with the options;
- the operator rollback playbook (``stellaops.runtime.rollback``) finds the job in the store named by
  the group variables.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import os

import pytest

import labkit
import thinkit

ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}
JOB_KEYS = ("stella_job_store", "stella_evidence_dir", "stella_job_report", "stella_traffic_adapter_options")


class PlacedJob(thinkit.ThinFleetJob):
    """Runs the job with the job's variables (``JOB_KEYS``) placed as ``layout`` says: ``group`` (group
    variables of ``stella_targets``), ``host`` (host variables of each target) or ``extra``."""

    layout = "extra"
    placed = None

    def _argv(self, release, overrides, extra, verbose=False, controller=None, check=False, playbook=None, env=None):
        argv, env, run = super()._argv(
            release, overrides, extra, verbose, controller, check, playbook or "stellaops.runtime.job", env
        )
        variables = json.loads((run / "vars.json").read_text())
        for key in JOB_KEYS:
            variables.pop(key, None)
        if self.layout == "extra":
            variables.update(self.placed)
        (run / "vars.json").write_text(json.dumps(variables))
        if self.layout != "extra":
            inventory = json.loads((run / "inventory.json").read_text())
            group = inventory["all"]["children"]["stella_targets"]
            if self.layout == "group":
                group["vars"] = dict(self.placed)
            else:
                for host in group["hosts"].values():
                    host.update(self.placed)
            (run / "inventory.json").write_text(json.dumps(inventory))
        return argv, env, run


def placed_job(lab, target, tmp_path, layout):
    fj = PlacedJob(lab, target, tmp_path, "vars-" + layout, labkit.free_port())
    fj.layout = layout
    fj.placed = {
        "stella_job_store": fj.store_path,
        "stella_evidence_dir": fj.evidence_dir,
        "stella_job_report": True,
        "stella_traffic_adapter_options": {"path": str(tmp_path / "route.json")},
    }
    return fj


def release(fj, image, version, hooks=None):
    return fj.release(
        image, version, strategy="blue-green", strategy_config={"trafficAdapter": "local-file"}, hooks=hooks
    )


def job_files(fj, job_id):
    base = os.path.join(fj.evidence_dir, "jobs", job_id)
    return {name: os.path.exists(os.path.join(base, name)) for name in ("job.json", "report.html")}


@pytest.mark.parametrize("layout", ["group", "host", "extra"])
def test_the_job_reads_its_variables_wherever_they_are_given(lab, thin_pair, tmp_path, layout):
    fj = placed_job(lab, thin_pair[:1], tmp_path, layout)
    route = tmp_path / "route.json"
    try:
        ok = fj.run(release(fj, "app_v1", "1.0.0"), extra=ENGINE_GATE)
        assert ok.rc == 0, ok.output[-4000:]
        record = fj.job(ok.job_id)  # in the store the variables name
        assert record["status"] == "Succeeded", (record["code"], record["reason"])
        assert job_files(fj, ok.job_id) == {"job.json": True, "report.html": True}
        state = json.loads(route.read_text())
        assert (state["jobId"], state["action"], state["treatmentWeight"]) == (ok.job_id, "shift", 100)
        if layout != "group":
            return
        # a failing job: rolled back, closed, its traffic put back through the adapter with the options
        hook = {"name": "fail", "phase": "post-deploy", "command": "exit 3", "failurePolicy": "fail"}
        failed = fj.run(release(fj, "app_v2", "2.0.0", hooks=[hook]), extra=ENGINE_GATE)
        assert failed.rc != 0, failed.output[-4000:]
        record = fj.job(failed.job_id)
        assert record["status"] == "RolledBack", (record["status"], record["reason"])
        assert job_files(fj, failed.job_id)["job.json"]
        state = json.loads(route.read_text())
        assert (state["jobId"], state["action"]) == (failed.job_id, "rollback"), state
        # the operator rollback of the first job finds it in the store the group variables name
        back = fj.rollback(ok.job_id)
        assert "no job %s" % ok.job_id not in back.output, back.output[-3000:]
        assert [j for j in back.job_ids if fj.job(j)["isRollback"]], back.output[-3000:]
    finally:
        fj.cleanup()
