"""The job evidence report (plugins/plugin_utils/job/report.py, its data in report_view.py, docs/report.md): records
built through the job's own state machine (job/record.py, job/traffic.py), rendered and read back with an HTML
parser."""

from __future__ import annotations

import html.parser
import json
import os
import re
import shlex
import stat

import pytest

from docs_support import doc_commands, doc_text, options_in, parser_options

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import traffic as _job_traffic
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as _report
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.report_view import STATUS_COLOURS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import report_files as _report_files
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.masking import collect_secrets
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import report as _report_cli

T = ["2026-03-0%dT10:00:%02d.000000Z" % (1, s) for s in range(60)]
PHASES = ["preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy", "evidence", "cleanup"]
ROLLBACK = ["rollback-pre", "rollback-deploy", "rollback-verify", "rollback-post"]
V1 = "sha256:" + "1" * 64
V2 = "sha256:" + "2" * 64
HASH = re.compile(r"sha256:[0-9a-f]{64}")


def h(seed):
    return "sha256:" + sha256_bytes(seed.encode())[7:]


def deployment(name, probe_status="passed"):
    """A target's ``deployment.json`` as the evidence phase writes it (the fields the report reads)."""
    return {
        "evidenceVersion": "stella.deployment.evidence.v1",
        "evidenceDigest": h("evidence-" + name),
        "artifacts": {
            "composeLockHash": h("lock-" + name),
            "versionStickerHash": h("sticker-" + name),
            "applyManifestHash": h("apply-" + name),
            "manifestHash": h("manifest-" + name),
            "artifactHashes": {
                "compose.stella.lock.yml": h("lock-" + name),
                "stella.version.json": h("sticker-" + name),
                "apply-manifest.json": h("apply-" + name),
            },
        },
        "containers": [{"service": "web", "imageDigest": V2}],
        "health": {
            "probe": {
                "healthProbe.status": probe_status,
                "healthProbe.count": 1,
                "healthProbe.web.endpoint": "http://127.0.0.1:28201/",
                "healthProbe.web.observed": "200" if probe_status == "passed" else "404",
                "healthProbe.web.attempts": 2,
            }
        },
    }


def base_job(names, batches, strategy="canary", config=None, release=None, auto=True):
    targets = {
        n: {
            "targetId": "id-" + n,
            "targetName": n,
            "targetType": "ComposeHost",
            "endpoint": "ssh://" + n,
            "projectName": "acme_lab_shop_%s_green" % n,
            "slot": "green",
            "manifestHash": h("manifest-" + n),
        }
        for n in names
    }
    summary = {
        "release": release or {"id": "rel-2-0-0", "name": "shop", "version": "2.0.0"},
        "tenant": "acme",
        "environment": "lab",
        "application": "shop",
        "strategy": strategy,
        "strategyConfig": config if config is not None else {"batchSize": [1, "100%"]},
        "resolution": {"registry.lab:5001/stella/app:v2": {"digest": V2, "resolved": True}},
    }
    record = _job.new_job(
        job_id="job-20260301T100000-ab12cd34",
        job_id_source="stella_job_id",
        summary=summary,
        batches=batches,
        targets=targets,
        options={"autoRollbackOnFailure": auto, "autoRollbackSource": "default"},
        now=T[0],
    )
    return _job.start(record, T[1])


def deploy(record, name, ok, at, failed_phase="verify"):
    for index, phase in enumerate(PHASES[: PHASES.index(failed_phase) + 1] if not ok else PHASES):
        status = "failed" if not ok and phase == failed_phase else "succeeded"
        record = _job.record_phase(
            record,
            name,
            entry=_job.phase_entry(phase, status, completed_at=T[at], duration_ms=100 * (index + 1)),
            now=T[at],
        )
    facts = {
        "previousRevisionPath": "/var/lib/stella/projects/%s/revisions/000001" % name,
        "currentDigest": V2,
        "evidence": {
            "deployment.json": {
                "path": "/ev/acme_lab_shop_%s_green/%s/deployment.json" % (name, record["jobId"]),
                "sha256": h("file-" + name),
            }
        },
    }
    return _job.finish_target(
        record,
        name,
        succeeded=ok,
        now=T[at],
        reason=None if ok else "Post-deploy health probe failed",
        code=None if ok else "health_probe_failed",
        facts=facts,
    )


def shift(record, batch, at, weights=(90, 10)):
    step = _job_traffic.shift_step(record, batch)
    evidence = {
        "strategy.traffic.mode": "shift",
        "strategy.traffic.status": "shifted",
        "strategy.traffic.shifted": True,
        "strategy.traffic.adapter": "webhook",
        "strategy.traffic.slot": "green",
        "strategy.traffic.controlWeight": weights[0],
        "strategy.traffic.treatmentWeight": weights[1],
    }
    return _job_traffic.record_shift(record, step, evidence=evidence, now=T[at])


def gate(record, batch, failed, at):
    decision = {
        "batch": batch,
        "proceed": not failed,
        "failedTargets": failed,
        "reason": "batch %d: %s" % (batch + 1, "failed" if failed else "all succeeded"),
    }
    return _job.record_gate(record, decision, T[at])


def rolled_back(release=None, config=None, rollback_ok=True):
    """canary over t1 | t2, t3: a traffic shift after batch 1, t2 fails its probe, the gate closes, the
    job rolls back t2 then t1 (t3 was a first deployment: nothing to restore), then traffic goes back to
    the control slot. t1's rollback records no digest, so the digest proof is incomplete for it."""
    names = ["t1", "t2", "t3"]
    record = base_job(names, [["t1"], ["t2", "t3"]], release=release, config=config)
    record = deploy(record, "t1", True, 2)
    record = shift(record, 0, 3)
    record = gate(record, 0, [], 4)
    record = deploy(record, "t2", False, 5)
    record = _job.record_phase(
        record, "t3", entry=_job.phase_entry("preflight", "succeeded", completed_at=T[5], duration_ms=40), now=T[5]
    )
    record = _job.finish_target(
        record, "t3", succeeded=True, now=T[6], facts={"currentDigest": V2}
    )  # a first deployment
    record = gate(record, 1, ["t2"], 7)
    record = _job.finish(record, T[8])
    record = _rollback.auto_rollback(record, T[9])
    for at, name in enumerate(n for batch in record["rollback"]["batches"] for n in batch):
        for index, phase in enumerate(ROLLBACK):
            record = _job.record_phase(
                record,
                name,
                entry=_job.phase_entry(phase, "succeeded", completed_at=T[10 + at], duration_ms=50 * (index + 1)),
                now=T[10 + at],
            )
        ok = rollback_ok or name != "t1"
        record = _rollback.finish_rollback_target(
            record,
            name,
            succeeded=ok,
            now=T[10 + at],
            reason=None if ok else "compose up failed",
            facts={
                "rollbackDigest": V1 if name != "t1" else None,
                "restoredRevisionPath": "/r/" + name,
                "completedAt": T[10 + at],
            },
        )
    back = {
        "strategy.traffic.rollback.mode": "rollback",
        "strategy.traffic.rollback.status": "restored",
        "strategy.traffic.rollback.shifted": True,
        "strategy.traffic.rollback.adapter": "webhook",
        "strategy.traffic.rollback.slot": "active",
        "strategy.traffic.rollback.controlWeight": 100,
        "strategy.traffic.rollback.treatmentWeight": 0,
    }
    record = _job_traffic.record_rollback(record, evidence=back, now=T[20])
    return _rollback.finish_rollback(record, T[21])


def succeeded():
    record = base_job(["a1", "a2"], [["a1", "a2"]], strategy="rolling", config={"batchSize": 2})
    record = deploy(record, "a1", True, 2)
    record = deploy(record, "a2", True, 3)
    record = gate(record, 0, [], 4)
    return _job.finish(record, T[5])


def failed_without_rollback():
    record = base_job(["a1", "a2"], [["a1"], ["a2"]], strategy="rolling", config={"batchSize": 1}, auto=False)
    record = deploy(record, "a1", False, 2, failed_phase="deploy")
    record = gate(record, 0, ["a1"], 3)
    return _rollback.auto_rollback(_job.finish(record, T[4]), T[5])


def render(record, **kwargs):
    deployments = {
        n: deployment(n, "failed" if t["status"] == "Failed" or t.get("statusBeforeRollback") == "Failed" else "passed")
        for n, t in record["targets"].items()
        if t.get("evidence")
    }
    return _report.render_report(
        record,
        kwargs.pop("files", FILES),
        kwargs.pop("rollback", None),
        kwargs.pop("deployments", deployments),
        **kwargs,
    )


FILES = {
    "job.json": {"path": "/ev/jobs/job-20260301T100000-ab12cd34/job.json", "sha256": h("job.json")},
    "rollback-evidence.json": {
        "path": "/ev/jobs/job-20260301T100000-ab12cd34/rollback-evidence.json",
        "sha256": h("rollback-evidence.json"),
    },
}


class Page(html.parser.HTMLParser):
    """The parts of a page the tests read: tags, attributes, text (entities decoded)."""

    def __init__(self, source):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.chunks, self.banner, self.skip = [], [], [], None, None
        self.feed(source)
        self.text = " ".join(" ".join(self.chunks).split())

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.skip = tag if tag in ("style", "title") else None
        self.attrs.extend((tag, k, v or "") for k, v in attrs)
        if tag == "header":
            self.banner = dict(attrs)

    def handle_endtag(self, tag):
        self.skip = None

    def handle_data(self, data):
        if not self.skip:
            self.chunks.append(data)

    def hrefs(self):
        return [v for _t, k, v in self.attrs if k == "href"]


# ---------------------------------------------------------------------------------------------- status
@pytest.mark.parametrize(
    "build,status,colour",
    [
        (succeeded, "Succeeded", "#1a7f37"),
        (rolled_back, "RolledBack", "#b45309"),
        (lambda: rolled_back(rollback_ok=False), "Failed", "#b91c1c"),
        (failed_without_rollback, "Failed", "#b91c1c"),
    ],
    ids=["succeeded", "rolled-back", "rollback-failed", "failed-no-rollback"],
)
def test_the_banner_shows_the_status_in_its_own_colour(build, status, colour):
    record = build()
    assert record["status"] == status
    source = render(record)
    page = Page(source)
    assert page.banner["data-status"] == status
    assert page.banner["class"] == "banner st-" + status.lower()
    assert ".st-%s{background:%s}" % (status.lower(), colour) in source
    assert len(set(STATUS_COLOURS.values())) == len(STATUS_COLOURS)  # each status its own colour
    assert page.text.startswith("%s Deployment job %s" % (status, record["jobId"]))


def test_the_report_shows_the_release_the_batch_plan_and_every_target_with_its_phases():
    record = rolled_back()
    page = Page(render(record))
    for text in (
        "Release id rel-2-0-0",
        "Release shop 2.0.0",
        "Tenant acme",
        "Environment lab",
        "Application shop",
        "Strategy canary",
        'batchSize [1, "100%"]',
        "1 t1 proceed",
        "2 t2, t3 stop failed: t2 batch 2: failed",
        "before the rollback: Failed",
        "Not rolled back no retained revision",
        "Order (reverse batch order) t2 → t1",
    ):
        assert text in page.text, text
    for name in record["targetOrder"]:
        assert name in page.text
    # every recorded phase with its status and duration, deployment and rollback
    for name, target in record["targets"].items():
        for phase in target["phases"] + target.get("rollbackPhases", []):
            ms = phase["durationMs"]
            duration = "%d ms" % ms if ms < 1000 else "%.1f s" % (ms / 1000.0)
            assert "%s %s %s" % (phase["name"], phase["status"], duration) in page.text, (name, phase)
    assert "verify failed" in page.text and record["targets"]["t2"]["reason"] in page.text


def test_probe_results_and_traffic_evidence_are_shown():
    record = rolled_back()
    page = Page(render(record))
    assert "healthProbe.web.observed 404" in page.text and "healthProbe.web.observed 200" in page.text
    assert "healthProbe.web.endpoint http://127.0.0.1:28201/" in page.text
    # the shift after batch 1 and the traffic rollback: adapter, weights, shifted
    assert "batch 1 shift shifted true webhook green 90 / 10" in page.text
    assert "rollback rollback restored true webhook active 100 / 0" in page.text
    rolling = Page(render(succeeded()))
    assert "No traffic step was recorded (strategy rolling moves no traffic)" in rolling.text


# ---------------------------------------------------------------------------------------------- rollback proof
def test_the_rollback_and_its_proof_status_are_shown_per_target():
    record = rolled_back()
    evidence = _job_view.rollback_evidence(record)
    # t1's rollback recorded no digest: the proof is incomplete for it
    assert evidence["proofStatus"] == "incomplete" and evidence["orderProofStatus"] == "complete"
    page = Page(render(record, rollback=evidence))
    for text in (
        "proofStatus incomplete",
        "proofDigest " + evidence["proofDigest"],
        "orderProofStatus complete",
        "orderProofDigest " + evidence["orderProofDigest"],
        "digests match the evidence",
        "Attempted yes",
        "Automatic yes",
        "Failure t2: ",
    ):
        assert text in page.text, text
    rows = {t["targetName"]: t for t in evidence["targets"]}
    assert rows["t1"]["missingProofReason"] and rows["t2"]["hasDigestProof"] is True and "t3" not in rows
    assert "t1 false %s %s" % (rows["t1"]["missingProofReason"], V2) in page.text
    assert "t2 true %s %s" % (V2, V1) in page.text
    assert "Targets not rolled back t3 no retained revision" in page.text
    # a changed digest is shown as drift, not as proof
    tampered = dict(evidence, proofDigest=h("tampered"))
    assert "drift: proofDigest" in Page(render(record, rollback=tampered)).text


def test_a_job_without_rollback_says_why():
    page = Page(render(failed_without_rollback()))
    assert "Attempted no" in page.text and "Skipped because autoRollbackOnFailure=false" in page.text
    assert "Proof (release.rollback.evidence.v1)" not in page.text


# ---------------------------------------------------------------------------------------------- hashes and links
@pytest.mark.parametrize(
    "build", [succeeded, rolled_back, failed_without_rollback], ids=["succeeded", "rolled-back", "failed"]
)
def test_every_hash_is_rendered(build):
    record = build()
    deployments = {n: deployment(n) for n in record["targets"]}
    evidence = _job_view.rollback_evidence(record)
    source = render(record, deployments=deployments, rollback=evidence)
    expected = set(HASH.findall(json.dumps([record, FILES, evidence, deployments])))
    expected.add(_job_view.job_evidence(record)["evidenceDigest"])
    assert len(expected) > 10
    assert sorted(e for e in expected if e not in source) == []
    page = Page(source)
    for name, target in record["targets"].items():
        assert "%s manifestHash %s" % (name, target["manifestHash"]) in page.text
        assert "%s composeLockHash %s" % (name, h("lock-" + name)) in page.text
        assert "%s versionStickerHash %s" % (name, h("sticker-" + name)) in page.text


def test_links_are_relative_and_the_page_is_self_contained():
    record = rolled_back()
    source = render(record, base="/ev/jobs/" + record["jobId"])
    page = Page(source)
    hrefs = page.hrefs()
    assert "job.json" in hrefs and "rollback-evidence.json" in hrefs
    assert "../../acme_lab_shop_t1_green/%s/deployment.json" % record["jobId"] in hrefs
    for href in hrefs:
        assert not re.match(r"^([a-z][a-z0-9+.-]*:|/)", href, re.I), href
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(page.tags)
    assert not [a for a in page.attrs if a[1] in ("src", "srcset") or a[1].startswith("on")]
    assert "<style>" in source and "url(" not in source and "@import" not in source
    # without a base directory the target evidence (absolute paths) is named, not linked
    unlinked = Page(render(record))
    assert sorted(unlinked.hrefs()) == ["job.json", "rollback-evidence.json"]


# ---------------------------------------------------------------------------------------------- escaping, secrets
HOSTILE = [
    ("release name", {"release": {"id": "rel-x", "name": "<script>alert('x')</script>", "version": '1"><b>'}}),
    ("reason", {"reason": "failed: <img src=x onerror=alert(1)> & done"}),
    ("tenant", {"tenant": "acme</td></tr></table><script>boom()</script>"}),
]


@pytest.mark.parametrize("field,change", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_every_value_is_escaped(field, change):
    record = dict(rolled_back(), **change)
    source = render(record)
    page = Page(source)
    assert not {"script", "img", "b"} & set(page.tags), field
    value = next(iter(change.values()))
    texts = [value] if isinstance(value, str) else list(value.values())
    for text in texts:
        assert " ".join(text.split()) in page.text, (field, text)
    assert "<script" not in source.lower()


def test_a_planted_secret_is_never_rendered():
    planted = {
        "secretEnv": {"DB_PASSWORD": "pl4nted-db-secret"},
        "registryCredentials": {"registry.lab:5001": {"username": "robot", "password": "pl4nted-registry-pw"}},
    }
    config = {
        "batchSize": [1, "100%"],
        "trafficAdapter": "webhook",
        "trafficAdapterOptions": {
            "shiftUrl": "https://ops:pl4nted-url-pw@traffic.lab/shift",
            "headers": {"Authorization": "Bearer pl4nted-token"},
        },
    }
    record = rolled_back(release={"id": "rel-2", "name": "shop", "version": "2.0.0", **planted}, config=config)
    record["strategyConfig"] = config  # as a record kept before its strategyConfig was masked at creation
    record["registry_credentials"] = {"registry.lab:5001": {"password": "pl4nted-registry-pw"}}
    record["targets"]["t2"]["reason"] = "hook printed pl4nted-db-secret and pl4nted-token"
    deployments = {"t1": dict(deployment("t1"), release={"secretEnv": {"API_KEY": "pl4nted-deploy-secret"}})}
    source = render(record, deployments=deployments)
    assert "pl4nted" not in source
    page = Page(source)
    assert "hook printed ******** and ********" in page.text
    assert "trafficAdapterOptions.headers ********" in page.text
    assert "trafficAdapterOptions.shiftUrl https://traffic.lab/shift" in page.text


def test_secret_collection_finds_values_only_under_secret_keys():
    found = collect_secrets(
        {
            "a": {"secretEnv": {"X": "s1", "N": 5}},
            "token": ["s2"],
            "name": "plain",
            "url": "https://u:s3@h/",
            "Authorization-Header": "s4",
        }
    )
    assert sorted(found) == ["s1", "s2", "s3", "s4"]


# ---------------------------------------------------------------------------------------------- files and command
def write_job_evidence(tmp_path, record):
    """The files the close step writes for ``record``, and each target's deployment.json."""
    root = tmp_path / "evidence"
    job_dir = root / "jobs" / record["jobId"]
    job_dir.mkdir(parents=True)
    for name, target in record["targets"].items():
        if target.get("evidence"):
            path = root / target["projectName"] / record["jobId"] / "deployment.json"
            path.parent.mkdir(parents=True)
            data = pretty_json(deployment(name))
            path.write_bytes(data)
            target["evidence"] = {"deployment.json": {"path": str(path), "sha256": sha256_bytes(data)}}
    (job_dir / "job.json").write_bytes(pretty_json(_job_view.job_evidence(record)))
    (job_dir / "rollback-evidence.json").write_bytes(pretty_json(_job_view.rollback_evidence(record)))
    return root, job_dir


def test_write_report_writes_report_html_next_to_the_evidence(tmp_path):
    record = rolled_back()
    _root, job_dir = write_job_evidence(tmp_path, record)
    written = _report_files.write_report(record, str(job_dir))
    path = job_dir / "report.html"
    assert written == {"path": str(path), "sha256": sha256_bytes(path.read_bytes())}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    page = Page(path.read_text())
    for name in ("job.json", "rollback-evidence.json"):
        assert "%s sha256 %s" % (name, sha256_bytes((job_dir / name).read_bytes())) in page.text
    for name in ("t1", "t2"):
        assert "%s composeLockHash %s" % (name, h("lock-" + name)) in page.text
        assert "../../acme_lab_shop_%s_green/%s/deployment.json" % (name, record["jobId"]) in page.hrefs()
    assert [n for n in os.listdir(job_dir) if n.startswith(".stella-tmp-")] == []


def store_with(tmp_path, record):
    path = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(path)
    try:
        store.create(record)
    finally:
        store.close()
    return path


def cli(argv, capsys):
    rc = _command.main(["stella", "report"] + argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_stella_report_writes_next_to_the_evidence_to_a_file_or_to_stdout(tmp_path, capsys):
    record = rolled_back()
    root, job_dir = write_job_evidence(tmp_path, record)
    store = store_with(tmp_path, record)
    rc, out, err = cli([record["jobId"], "--store", store, "--evidence-dir", str(root)], capsys)
    assert (rc, out, err) == (0, "report: %s\n" % (job_dir / "report.html"), "")
    assert Page((job_dir / "report.html").read_text()).banner["data-status"] == "RolledBack"
    output = tmp_path / "out" / "r.html"
    output.parent.mkdir()
    rc, out, _err = cli(
        [record["jobId"], "--store", "sqlite:///" + store, "--evidence-dir", str(root), "--output", str(output)], capsys
    )
    assert rc == 0 and out == "report: %s\n" % output
    assert "../evidence/jobs/%s/job.json" % record["jobId"] in Page(output.read_text()).hrefs()
    rc, out, _err = cli([record["jobId"], "--store", store], capsys)
    assert rc == 0 and Page(out).banner["data-status"] == "RolledBack" and "job.json" not in Page(out).hrefs()


@pytest.mark.parametrize(
    "argv,code",
    [
        (["no-such-job"], "job_not_found: no job no-such-job in the job store"),
        (["no-such-job", "--store", "/nonexistent/jobs.sqlite3"], "job_store_missing: no job store at /nonexistent"),
    ],
    ids=["unknown-job", "no-store"],
)
def test_stella_report_fails_with_one_line_when_the_job_does_not_exist(tmp_path, capsys, argv, code):
    store = store_with(tmp_path, succeeded())
    argv = argv if "--store" in argv else argv + ["--store", store]
    rc, out, err = cli(argv + ["--evidence-dir", str(tmp_path / "ev")], capsys)
    assert rc == 1 and out == ""
    assert err.startswith("stella report: " + code) and err.count("\n") == 1, err
    assert not (tmp_path / "ev").exists()


def test_the_documented_command_and_options_exist(tmp_path, capsys):
    doc = doc_text("report.md")
    commands = doc_commands(doc, "stella report ")
    assert commands, "docs/report.md shows no stella report command"
    options = parser_options(_report_cli.report_parser())
    documented = options_in(doc)
    assert documented == options, (documented, options)
    assert "report: true" in doc and "report.html" in doc
    # the example runs as written against a store and evidence directory at the documented places
    record = rolled_back()
    root, job_dir = write_job_evidence(tmp_path, record)
    store = store_with(tmp_path, record)
    places = {
        "JOB": record["jobId"],
        "~/.local/state/stellaops/jobs.sqlite3": store,
        "/var/lib/stella/evidence": str(root),
    }
    for command in commands:
        argv = shlex.split(command)[2:]
        argv = [places.get(a, a) for a in argv]
        argv = [str(tmp_path / "doc.html") if a == "report.html" else a for a in argv]
        rc, _out, err = cli(argv, capsys)
        assert rc == 0, (command, err)
    assert (job_dir / "report.html").exists()


def test_stella_report_shows_a_changed_or_garbled_evidence_file_as_corrupt(tmp_path, capsys):
    """In an evidence directory: a deployment.json that no longer hashes to the SHA-256 of the record, and a
    rollback-evidence.json that is no JSON document, are shown as corrupt (exit 1), never read as evidence."""
    record = rolled_back()
    root, job_dir = write_job_evidence(tmp_path, record)
    store = store_with(tmp_path, record)
    changed = record["targets"]["t1"]["evidence"]["deployment.json"]["path"]
    with open(changed, "w", encoding="utf-8") as handle:
        json.dump(dict(deployment("t1"), containers=[{"service": "web", "imageDigest": h("tampered")}]), handle)
    (job_dir / "rollback-evidence.json").write_text("<not JSON>")
    rc, out, err = cli([record["jobId"], "--store", store, "--evidence-dir", str(root)], capsys)
    assert rc == 1 and out == "report: %s\n" % (job_dir / "report.html")
    assert err.startswith("stella report: evidence_corrupt: ") and err.count("\n") == 1, err
    assert changed in err and str(job_dir / "rollback-evidence.json") in err
    page = (job_dir / "report.html").read_text()
    assert h("tampered") not in page and 'id="corrupt"' in page and page.count(">corrupt</span>") == 2
