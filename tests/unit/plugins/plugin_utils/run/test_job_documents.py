"""A job's evidence documents in the job store: written with the target's record and at the close, with
and without an evidence directory (the same bytes in both), written once, pruned with the job, listed,
exported and reported by ``stella`` from the store alone. On a real SQLite store, through the steps'
own entry point."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import documents as _documents
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00.000000Z"
SECRET = "s3cret-Planted-registry-password"
DEPLOYMENT = "shop/job-1/id-a/deployment.json"
JOB_DOCS = ("jobs/job-1/job.json", "jobs/job-1/report.html")
MASK = "********"


def running_job(tmp_path):
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    targets = {"a": {"targetId": "id-a", "targetName": "a", "targetType": "ComposeHost", "projectName": "shop"}}
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a"]],
            targets=targets,
            options={},
            now=T0,
        )
    )
    store.update("job-1", lambda r: _job.start(r, T0))
    store.close()
    return location


def step(location, name, **given):
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, job_id="job-1", **given)
    return JobRunner({}, False).run(args)


def apply_result():
    return {
        "changed": True,
        "projectName": "shop",
        "composeLockHash": "sha256:" + "1" * 64,
        "deploymentPhases": [
            {"name": p, "status": "succeeded", "durationMs": 1}
            for p in ("preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy")
        ],
        "services": [{"service": "web", "containerName": "shop-web-1", "health": "healthy"}],
    }


def plan():
    return {
        "jobId": "job-1",
        "projectName": "shop",
        "target": {"id": "id-a", "type": "ComposeHost"},
        "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
    }


def deploy(location, evidence_dir=None):
    recorded = step(
        location,
        "target",
        target="a",
        result=apply_result(),
        probe={"passed": True, "checks": []},
        plan=plan(),
        evidence_dir=evidence_dir,
    )
    closed = step(location, "close", evidence_dir=evidence_dir, report=True)
    return recorded, closed


def documents(location):
    store = _job_store.open_store(location)
    try:
        return {name: store.document("job-1", name) for name in store.document_index("job-1")}
    finally:
        store.close()


def stella(argv, capsys):
    rc = _command.main(["stella"] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_without_an_evidence_directory_the_store_keeps_the_whole_evidence(tmp_path):
    location = running_job(tmp_path)
    recorded, closed = deploy(location)
    kept = documents(location)
    assert sorted(kept) == sorted((DEPLOYMENT,) + JOB_DOCS)
    entry = recorded["target"]["evidence"]["deployment.json"]
    assert entry == {"sha256": "sha256:" + hashlib.sha256(kept[DEPLOYMENT]).hexdigest(), "document": DEPLOYMENT}
    evidence = [p for p in recorded["target"]["phases"] if p["name"] == "evidence"][0]
    assert evidence["status"] == "succeeded" and evidence["detail"] == {
        "written": "deployment.json",
        "in": ["job store"],
    }
    assert json.loads(kept[DEPLOYMENT])["deploymentId"] == "job-1"
    assert json.loads(kept["jobs/job-1/job.json"])["status"] == "Succeeded"
    assert closed["evidenceFiles"] == {} and closed["outcome"]["evidence"] == {}
    assert closed["evidenceDocuments"] == {
        name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in kept.items()
    }
    # the report links the job's documents as they lie in an exported tree
    page = kept["jobs/job-1/report.html"].decode()
    assert 'href="job.json"' in page and 'href="../../shop/job-1/id-a/deployment.json"' in page


def test_an_evidence_directory_gets_the_same_bytes_as_the_store(tmp_path):
    location = running_job(tmp_path)
    root = str(tmp_path / "evidence")
    recorded, closed = deploy(location, root)
    kept = documents(location)
    on_disk = {}
    for directory, _dirs, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as handle:
                on_disk[os.path.relpath(os.path.join(directory, name), root)] = handle.read()
    assert on_disk == kept
    assert recorded["target"]["evidence"]["deployment.json"]["path"] == os.path.join(root, DEPLOYMENT)
    assert set(closed["evidenceFiles"]) == {"job.json", "report.html"}
    evidence = [p for p in recorded["target"]["phases"] if p["name"] == "evidence"][0]
    assert evidence["detail"]["in"] == ["job store", "evidence directory"]


def test_a_document_is_written_once(tmp_path):
    location = running_job(tmp_path)
    store = _job_store.open_store(location)
    try:
        assert store.put_documents("job-1", {"jobs/job-1/x.json": b"{}"}, T0) == {
            "jobs/job-1/x.json": "sha256:" + hashlib.sha256(b"{}").hexdigest()
        }
        store.put_documents("job-1", {"jobs/job-1/x.json": b"{}"}, T0)  # the same bytes: nothing changes
        with pytest.raises(StellaError) as info:
            store.put_documents("job-1", {"jobs/job-1/x.json": b'{"changed": true}'}, T0)
        assert info.value.code == "evidence_immutable"
        assert store.document("job-1", "jobs/job-1/x.json") == b"{}"
        # a record update whose documents are refused persists nothing of the update either
        before = store.get("job-1")["revision"]
        with pytest.raises(StellaError):
            store.update("job-1", lambda r: _job.finish(r, T0), documents={"jobs/job-1/x.json": b"[]"})
        assert store.get("job-1")["revision"] == before and store.get("job-1")["status"] == "Running"
    finally:
        store.close()


def test_prune_removes_the_documents_with_the_job(tmp_path):
    location = running_job(tmp_path)
    deploy(location)
    store = _job_store.open_store(location)
    try:
        store.update("job-1", lambda r: dict(r, updatedAt="2020-01-01T00:00:00Z"))
        # target health keeps a job that is the last word on a target: forget it for this test
        store._execute("DELETE FROM target_health")  # pylint: disable=protected-access
        assert [p["jobId"] for p in store.prune("2021-01-01T00:00:00Z")] == ["job-1"]
        assert store.document_index("job-1") == {}
    finally:
        store.close()


def test_stella_evidence_lists_and_exports_the_tree_and_refuses_to_overwrite(tmp_path, capsys):
    location = running_job(tmp_path)
    deploy(location)
    kept = documents(location)
    rc, out, err = stella(["evidence", "job-1", "--store", location], capsys)
    assert (rc, err) == (0, "")
    assert [line.split()[-1] for line in out.splitlines()[1:]] == sorted(kept)
    rc, out, _err = stella(["evidence", "job-1", "--store", location, "--json"], capsys)
    assert rc == 0 and set(json.loads(out)["documents"]) == set(kept)

    target = tmp_path / "export"
    rc, out, err = stella(["evidence", "job-1", "--store", location, "--output", str(target)], capsys)
    assert (rc, err) == (0, "") and out == "3 documents of job job-1 in %s (3 written, 0 already there)\n" % target
    assert all((target / name).read_bytes() == data for name, data in kept.items())
    rc, out, _err = stella(["evidence", "job-1", "--store", location, "--output", str(target)], capsys)
    assert rc == 0 and "(0 written, 3 already there)" in out

    (target / "jobs" / "job-1" / "job.json").write_bytes(b"{}")
    (target / DEPLOYMENT).unlink()
    rc, out, err = stella(["evidence", "job-1", "--store", location, "--output", str(target)], capsys)
    assert rc == 1 and err.startswith("stella evidence: evidence_conflict: ") and "; next: " in err
    assert not (target / DEPLOYMENT).exists()  # nothing was written


def test_a_document_that_no_longer_hashes_is_never_exported(tmp_path, capsys):
    location = running_job(tmp_path)
    deploy(location)
    with sqlite3.connect(location) as db:
        db.execute("UPDATE job_documents SET body = '{}' WHERE name = ?", (DEPLOYMENT,))
    rc, _out, err = stella(["evidence", "job-1", "--store", location, "--output", str(tmp_path / "x")], capsys)
    assert rc == 1 and err.startswith("stella evidence: evidence_corrupt: ")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["/etc/passwd", "../x.json", "jobs/../../x.json", "jobs//x.json", "."])
def test_a_document_name_outside_an_evidence_directory_is_refused(name):
    with pytest.raises(StellaError) as info:
        _documents_cli().safe_name(name)
    assert info.value.code == "evidence_invalid"


def _documents_cli():
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import evidence as evidence_cli  # pylint: disable=import-outside-toplevel

    return evidence_cli


def test_stella_report_from_the_store_alone_shows_the_stored_evidence(tmp_path, capsys):
    location = running_job(tmp_path)
    deploy(location)
    rc, page, err = stella(["report", "job-1", "--store", location], capsys)
    assert (rc, err) == (0, "")
    kept = documents(location)
    assert "sha256:" + hashlib.sha256(kept["jobs/job-1/job.json"]).hexdigest() in page
    assert "sha256:" + hashlib.sha256(kept[DEPLOYMENT]).hexdigest() in page
    assert "The job's own evidence files were not given" not in page


def test_no_url_credentials_reach_the_record_or_a_stored_document(tmp_path):
    """A failure message that quotes a URL with its credentials is recorded and kept without them."""
    location = running_job(tmp_path)
    result = dict(
        apply_result(),
        failed=True,
        code="registry_auth_failed",
        failurePhase="preflight",
        msg="pull failed from https://deploy:%s@registry.example/v2/" % SECRET,
    )
    recorded = step(location, "target", target="a", result=result, probe=None, plan=plan(), failure=result)
    assert recorded["target"]["reason"] == "pull failed from https://registry.example/v2/"
    step(location, "close", report=True)
    kept = documents(location)
    assert sorted(kept) == sorted((DEPLOYMENT,) + JOB_DOCS)
    assert all(SECRET.encode() not in data for data in kept.values())
    with open(location, "rb") as handle:
        assert SECRET.encode() not in handle.read()


def test_the_store_name_of_an_evidence_file():
    assert _documents.evidence_path("/ev", "/ev/jobs/job-1/job.json") == "jobs/job-1/job.json"
    assert _documents.evidence_path("", "jobs/job-1/job.json") == "jobs/job-1/job.json"


@pytest.mark.parametrize(
    "name,body,rehash",
    [
        (DEPLOYMENT, '{"health": {"probe": {"healthProbe.status": "passed", "planted": "tampered-probe"}}}', False),
        (DEPLOYMENT, "tampered-probe: not JSON", True),
        ("jobs/job-1/job.json", "tampered-probe", False),
    ],
    ids=["deployment-changed", "deployment-not-json", "job-json-changed"],
)
def test_stella_report_shows_a_document_that_fails_its_check_as_corrupt(tmp_path, capsys, name, body, rehash):
    """A stored document that no longer hashes to its SHA-256 (or is no JSON document) is shown as corrupt with
    a non-zero exit, never its contents; no traceback."""
    location = running_job(tmp_path)
    deploy(location)
    with sqlite3.connect(location) as db:
        db.execute("UPDATE job_documents SET body = ? WHERE name = ?", (body, name))
        if rehash:
            db.execute(
                "UPDATE job_documents SET sha256 = ? WHERE name = ?",
                ("sha256:" + hashlib.sha256(body.encode()).hexdigest(), name),
            )
    rc, page, err = stella(["report", "job-1", "--store", location], capsys)
    assert rc == 1 and err.startswith("stella report: evidence_corrupt: ") and err.count("\n") == 1, err
    assert name in err and "tampered-probe" not in err
    assert "tampered-probe" not in page and 'id="corrupt"' in page and name in page


def test_a_secret_anywhere_in_the_strategy_config_is_masked_in_the_record_and_the_evidence(tmp_path):
    """``password``, ``token``, ``secret`` (any spelling, any depth) of the release's strategyConfig reach
    neither the job store nor any evidence document: masked as the report masks them, the rest kept."""
    config = {
        "batchSize": 1,
        "notify": {"password": SECRET, "targets": [{"apiToken": SECRET, "url": "u"}]},
        "client_secret": SECRET,
        "Token": SECRET,
        "controlSlot": "active",
    }
    release = {
        "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
        "tenant": "t",
        "environment": "lab",
        "application": "shop",
        "strategy": "rolling",
        "target": {"type": "ComposeHost"},
        "strategyConfig": config,
        "components": [{"name": "web", "image": "registry.invalid/shop/web:1@sha256:" + "a" * 64}],
    }
    location = str(tmp_path / "jobs.sqlite3")
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step="start", store=location, job_id="job-1", release=release, targets=["localhost"], claim_lease=0)
    started = JobRunner({"hostvars": {"localhost": {"ansible_connection": "local"}}}, False).run(args)
    assert started["status"] == "Running", started
    step(location, "close", report=True)
    store = _job_store.open_store(location)
    try:
        kept = store.get("job-1")["strategyConfig"]
    finally:
        store.close()
    stored = documents(location)
    assert kept == {
        "batchSize": 1,
        "notify": {"password": MASK, "targets": [{"apiToken": MASK, "url": "u"}]},
        "client_secret": MASK,
        "Token": MASK,
        "controlSlot": "active",
    }
    assert config["notify"]["password"] == SECRET  # the caller's release is not changed
    assert json.loads(stored["jobs/job-1/job.json"])["strategyConfig"] == kept
    assert stored and all(SECRET.encode() not in data for data in stored.values())
    with open(location, "rb") as handle:
        assert SECRET.encode() not in handle.read()


def test_the_evidence_of_a_job_recorded_before_the_masking_masks_its_strategy_config_too(tmp_path):
    location = running_job(tmp_path)
    store = _job_store.open_store(location)
    try:
        store.update("job-1", lambda r: dict(r, strategyConfig={"notify": {"token": SECRET}}))
    finally:
        store.close()
    deploy(location)
    assert json.loads(documents(location)["jobs/job-1/job.json"])["strategyConfig"] == {"notify": {"token": MASK}}
    assert all(SECRET.encode() not in data for data in documents(location).values())
