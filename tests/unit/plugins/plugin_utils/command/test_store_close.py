"""``stella close``: a job whose close step did not finish (the job store unreachable at the end of its run)
is closed from a shell, its evidence written; until then ``stella show`` says its evidence is missing. On
real SQLite stores fed by real job changes (docs/stella-command.md)."""

from __future__ import annotations

import json
import os

from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-03-01T10:00:00.000000Z"
T1 = "2026-03-01T10:05:00.000000Z"


def ended_unclosed(tmp_path, succeeded=True):
    """A store where job-1 ran its one target and ended, and whose close never ran."""
    path = str(tmp_path / "jobs.sqlite3")
    targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}}
    store = _job_store.open_store(path)
    try:
        store.create(
            _job.new_job(
                job_id="job-1",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["a"]],
                targets=targets,
                options={"autoRollbackOnFailure": False},
                now=T0,
            )
        )
        store.update(
            "job-1",
            lambda r: _job.start(r, T0),
            lambda r: _job.finish_target(r, "a", succeeded=succeeded, now=T1, reason=None if succeeded else "boom"),
            lambda r: _job.finish(r, T1),
        )
    finally:
        store.close()
    return path


def run(command, argv, capsys):
    rc = _command.main(["stella", command] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_show_says_the_evidence_is_missing_until_stella_close_writes_it(tmp_path, capsys):
    store = ended_unclosed(tmp_path)
    rc, out, _err = run("show", ["job-1", "--store", store], capsys)
    assert rc == 0 and "evidence: missing: the job's close did not finish" in out and "`stella close job-1`" in out
    rc, out, _err = run("show", ["job-1", "--store", store, "--json"], capsys)
    assert json.loads(out)["evidenceMissing"] is True
    evidence = tmp_path / "evidence"
    rc, out, err = run("close", ["job-1", "--store", store, "--evidence-dir", str(evidence), "--report"], capsys)
    assert (rc, err) == (0, ""), err
    assert "job job-1  Succeeded" in out and "jobs/job-1/job.json" in out
    assert os.path.isfile(evidence / "jobs" / "job-1" / "job.json") and os.path.isfile(
        evidence / "jobs" / "job-1" / "report.html"
    )
    rc, out, _err = run("show", ["job-1", "--store", store], capsys)
    assert rc == 0 and "evidence: missing" not in out
    # closing again writes the same evidence: nothing changes, nothing conflicts
    before = (evidence / "jobs" / "job-1" / "job.json").read_bytes()
    assert run("close", ["job-1", "--store", store, "--evidence-dir", str(evidence)], capsys)[0] == 0
    assert (evidence / "jobs" / "job-1" / "job.json").read_bytes() == before


def test_close_of_a_failed_job_writes_its_evidence_and_exits_1(tmp_path, capsys):
    store = ended_unclosed(tmp_path, succeeded=False)
    rc, out, _err = run("close", ["job-1", "--store", store], capsys)
    assert rc == 1 and "job job-1  Failed" in out and "jobs/job-1/job.json" in out


def test_close_refuses_an_unknown_job_and_a_job_still_running_here(tmp_path, capsys):
    store = ended_unclosed(tmp_path)
    rc, _out, err = run("close", ["job-9", "--store", store], capsys)
    assert rc == 1 and err.startswith("stella close: job_not_found: no job job-9")
    opened = _job_store.open_store(store)
    try:
        opened.create(
            _job.new_job(
                job_id="job-2",
                job_id_source=None,
                summary={"release": {"id": "r1"}},
                batches=[["b"]],
                targets={"b": {"targetId": "id-b", "targetName": "b", "projectName": "shop2"}},
                options={},
                now=T0,
                owner=_job_owner_here(),
            )
        )
        opened.update("job-2", lambda r: _job.start(r, T0))
    finally:
        opened.close()
    rc, _out, err = run("close", ["job-2", "--store", store], capsys)
    assert rc == 1 and err.startswith("stella close: job_running: job job-2 is Running"), err


def _job_owner_here():
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import controller_owner  # pylint: disable=import-outside-toplevel

    return controller_owner()
