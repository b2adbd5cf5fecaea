"""``stella verify JOB --key PUB``: a job closed with a signing key (the steps' own entry point, a real SQLite
store, a real key in cosign's format) verifies from the job store, from its evidence directory and from the tree
``stella evidence --output`` exports; a changed byte, a deleted envelope, an extra document and another key
fail it, naming the document. A wrong passphrase fails the close with signing_key_invalid before any document
is written, and ``stella close --signing-key`` then finishes it; check mode opens the key and signs nothing.
The passphrase and the private key never reach the store, the evidence or the output."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import types

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import verify as _verify
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys

T0 = "2026-01-01T00:00:00.000000Z"
PASSPHRASE = "Planted-passphrase-7f3e9b"
DEPLOYMENT = "shop/job-1/id-a/deployment.json"


@pytest.fixture(scope="module")
def key_files(tmp_path_factory):
    """``(private key path, public key path, private PEM)`` of a key pair in cosign's format."""
    directory = tmp_path_factory.mktemp("keys")
    private, public = keys.generate_key_pair(PASSPHRASE.encode())
    (directory / "cosign.key").write_bytes(private)
    (directory / "cosign.pub").write_bytes(public)
    return str(directory / "cosign.key"), str(directory / "cosign.pub"), private


def running_job(tmp_path, targets=("a",)):
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[list(targets)],
            targets={
                name: {"targetId": "id-" + name, "targetName": name, "targetType": "ComposeHost", "projectName": "shop"}
                for name in targets
            },
            options={},
            now=T0,
        )
    )
    store.update("job-1", lambda r: _job.start(r, T0))
    store.close()
    return location


def step(location, name, check_mode=False, **given):
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, job_id="job-1", **given)
    return JobRunner({}, check_mode).run(args)


def deploy_target(location, name, evidence_dir=None):
    apply = {
        "changed": True,
        "projectName": "shop",
        "composeLockPath": "/srv/shop/compose.lock.yml",
        "composeLockHash": "sha256:" + "1" * 64,
        "versionStickerPath": "/srv/shop/version.json",
        "versionStickerHash": "sha256:" + "2" * 64,
        "services": [{"service": "web", "containerName": "shop-web-1", "health": "healthy", "state": "running"}],
    }
    plan = {
        "jobId": "job-1",
        "projectName": "shop",
        "target": {"id": "id-" + name, "type": "ComposeHost"},
        "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
        "components": [
            {"name": "web", "image": "registry:5000/shop/web:1@sha256:" + "a" * 64, "digest": "sha256:" + "a" * 64}
        ],
    }
    step(
        location,
        "target",
        target=name,
        result=apply,
        probe={"passed": True, "checks": []},
        plan=plan,
        evidence_dir=evidence_dir,
    )


def signed_job(tmp_path, key_files, targets=("a",), evidence_dir=None):
    location = running_job(tmp_path, targets)
    for name in targets:
        deploy_target(location, name, evidence_dir)
    closed = step(
        location,
        "close",
        evidence_dir=evidence_dir,
        report=True,
        signing_key=key_files[0],
        signing_passphrase=PASSPHRASE,
    )
    return location, closed


def stella(argv, capsys):
    rc = _command.main(["stella"] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def flip(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def test_a_signed_job_verifies_from_the_store_its_evidence_directory_and_an_export(tmp_path, key_files, capsys):
    root = str(tmp_path / "evidence")
    location, closed = signed_job(tmp_path, key_files, evidence_dir=root)
    fingerprint = keys.load_public_key(key_files[1]).fingerprint
    assert closed["job"]["evidenceSignedBy"] == fingerprint
    assert sorted(closed["evidenceDocuments"]) == sorted(
        name + suffix
        for name in (DEPLOYMENT, "jobs/job-1/job.json", "jobs/job-1/report.html")
        for suffix in ("", ".dsse.json")
    )
    assert closed["evidenceFiles"]["job.json.dsse.json"]["path"] == os.path.join(root, "jobs/job-1/job.json.dsse.json")
    assert json.load(open(os.path.join(root, "jobs/job-1/job.json")))["evidenceSignedBy"] == fingerprint
    expected = (
        "ok   jobs/job-1/job.json\nok   jobs/job-1/report.html\nok   %s\n"
        "job job-1: all 3 documents verified with the key %s\n" % (DEPLOYMENT, fingerprint)
    )
    assert stella(["verify", "job-1", "--key", key_files[1], "--store", location], capsys) == (0, expected, "")
    assert stella(["verify", "job-1", "--key", key_files[1], "--evidence-dir", root], capsys) == (0, expected, "")
    export = str(tmp_path / "export")
    rc, out, _err = stella(["evidence", "job-1", "--output", export, "--store", location], capsys)
    assert rc == 0 and out.startswith("6 documents of job job-1")
    assert stella(["verify", "job-1", "--key", key_files[1], "--evidence-dir", export], capsys) == (0, expected, "")
    rc, out, _err = stella(["verify", "job-1", "--key", key_files[1], "--json", "--store", location], capsys)
    document = json.loads(out)
    assert rc == 0 and document["verified"] is True and document["key"] == fingerprint
    assert [entry["document"] for entry in document["documents"] if entry["ok"]] == [
        "jobs/job-1/job.json",
        "jobs/job-1/report.html",
        DEPLOYMENT,
    ]
    # closing again writes the same evidence (the envelopes the store keeps) and changes nothing
    again = step(
        location, "close", evidence_dir=root, report=True, signing_key=key_files[0], signing_passphrase=PASSPHRASE
    )
    assert again["evidenceDocuments"] == closed["evidenceDocuments"]


def test_a_changed_byte_a_deleted_envelope_or_an_extra_document_fails_naming_it(tmp_path, key_files, capsys):
    root = str(tmp_path / "evidence")
    signed_job(tmp_path, key_files, evidence_dir=root)
    verify = ["verify", "job-1", "--key", key_files[1], "--evidence-dir", root]
    flip(os.path.join(root, DEPLOYMENT))
    rc, out, _err = stella(verify, capsys)
    assert rc == 1
    assert "FAIL %s: its bytes (sha256 " % DEPLOYMENT in out
    assert out.splitlines()[-1].startswith("job job-1: 1 of 3 documents failed verification")
    flip(os.path.join(root, DEPLOYMENT))  # back as it was
    assert stella(verify, capsys)[0] == 0
    os.remove(os.path.join(root, "jobs/job-1/report.html.dsse.json"))
    rc, out, _err = stella(verify, capsys)
    assert rc == 1 and "FAIL jobs/job-1/report.html: no envelope: report.html.dsse.json is missing\n" in out
    extra = os.path.join(root, "shop/job-1/id-z")
    os.makedirs(extra)
    with open(os.path.join(extra, "deployment.json"), "w") as handle:
        handle.write("{}\n")
    rc, out, _err = stella(verify, capsys)
    assert rc == 1 and "FAIL shop/job-1/id-z/deployment.json: no envelope" in out


def test_a_changed_envelope_in_the_store_or_another_key_fails(tmp_path, key_files, capsys):
    location, _closed = signed_job(tmp_path, key_files)
    other = tmp_path / "other.pub"
    other.write_bytes(keys.generate_private_key(keys.ED25519).public_key.pem())
    rc, out, _err = stella(["verify", "job-1", "--key", str(other), "--store", location], capsys)
    assert rc == 1 and out.count("FAIL ") == 3 and "no signature of the envelope verifies with the key" in out
    with sqlite3.connect(location) as db:
        db.execute(
            "UPDATE job_documents SET body=replace(body, '\"payloadType\"', '\"payloadtype\"') WHERE name=?",
            ("jobs/job-1/job.json.dsse.json",),
        )
    rc, out, _err = stella(["verify", "job-1", "--key", key_files[1], "--store", location], capsys)
    assert rc == 1 and "FAIL jobs/job-1/job.json: envelope: the DSSE envelope has the fields" in out


def test_verify_without_a_key_a_job_or_a_readable_public_key(tmp_path, key_files, capsys):
    location, _closed = signed_job(tmp_path, key_files)
    rc, _out, err = stella(["verify", "job-1", "--store", location], capsys)
    assert rc == 2 and "--key" in err
    rc, _out, err = stella(["verify", "job-9", "--key", key_files[1], "--store", location], capsys)
    assert rc == 1 and err.startswith("stella verify: job_not_found: no job job-9")
    rc, _out, err = stella(["verify", "job-1", "--key", key_files[0], "--store", location], capsys)
    assert rc == 1 and err.startswith("stella verify: signing_key_invalid: ") and "a private key" in err
    rc, _out, err = stella(["verify", "job-1", "--key", key_files[1], "--evidence-dir", str(tmp_path)], capsys)
    assert rc == 1 and "no evidence of job job-1 under" in err


def test_an_unsigned_job_fails_every_document_for_want_of_an_envelope(tmp_path, key_files, capsys):
    location = running_job(tmp_path)
    deploy_target(location, "a")
    step(location, "close")
    rc, out, _err = stella(["verify", "job-1", "--key", key_files[1], "--store", location], capsys)
    assert rc == 1 and out.count("FAIL ") == 2 and "FAIL jobs/job-1/job.json: no envelope" in out


def test_a_wrong_passphrase_fails_the_close_before_any_document_and_stella_close_finishes_it(
    tmp_path, key_files, capsys, monkeypatch
):
    root = str(tmp_path / "evidence")
    location = running_job(tmp_path)
    deploy_target(location, "a", root)
    with pytest.raises(StellaError) as caught:
        step(location, "close", evidence_dir=root, report=True, signing_key=key_files[0], signing_passphrase="wrong")
    assert caught.value.code == "signing_key_invalid" and "passphrase does not open" in caught.value.reason
    store = _job_store.open_store(location)
    try:
        assert sorted(store.document_index("job-1")) == [DEPLOYMENT]  # the target's, from before
        assert store.get("job-1")["status"] == "Succeeded" and "evidenceSignedBy" not in store.get("job-1")
    finally:
        store.close()
    assert not os.path.exists(os.path.join(root, "jobs"))
    # no passphrase at all: the same code, from the environment's absence
    monkeypatch.delenv("STELLA_SIGNING_PASSPHRASE", raising=False)
    rc, _out, err = stella(["close", "job-1", "--store", location, "--signing-key", key_files[0]], capsys)
    assert rc == 1 and err.startswith("stella close: signing_key_invalid: ") and "no passphrase was given" in err
    passphrase = tmp_path / "passphrase"
    passphrase.write_text(PASSPHRASE + "\n")
    rc, out, err = stella(
        [
            "close", "job-1", "--store", location, "--evidence-dir", root, "--report",
            "--signing-key", key_files[0], "--passphrase-file", str(passphrase),
        ],
        capsys,
    )  # fmt: skip
    assert (rc, err) == (0, "") and "jobs/job-1/job.json.dsse.json" in out
    assert stella(["verify", "job-1", "--key", key_files[1], "--store", location], capsys)[0] == 0
    assert stella(["verify", "job-1", "--key", key_files[1], "--evidence-dir", root], capsys)[0] == 0
    # the environment's passphrase serves as well, and a job closed signed is not signed again with another key
    monkeypatch.setenv("STELLA_SIGNING_PASSPHRASE", PASSPHRASE)
    other = tmp_path / "other.key"
    other.write_bytes(keys.generate_key_pair(PASSPHRASE.encode())[0])
    rc, _out, err = stella(["close", "job-1", "--store", location, "--signing-key", str(other)], capsys)
    assert rc == 1 and err.startswith("stella close: evidence_immutable: ")
    assert stella(["close", "job-1", "--store", location, "--signing-key", key_files[0]], capsys)[0] == 0


def test_check_mode_opens_the_key_and_signs_nothing(tmp_path, key_files):
    location = running_job(tmp_path)
    started = {"jobId": "job-1", "checkMode": True, "kind": "deployment", "targetOrder": []}
    with pytest.raises(StellaError) as caught:
        step(location, "close", check_mode=True, started=started, signing_key=key_files[0], signing_passphrase="no")
    assert caught.value.code == "signing_key_invalid"
    preview = step(
        location, "close", check_mode=True, started=started, signing_key=key_files[0], signing_passphrase=PASSPHRASE
    )
    assert preview["evidenceSigningKey"] == keys.load_public_key(key_files[1]).fingerprint
    store = _job_store.open_store(location)
    try:
        assert store.document_index("job-1") == {}
    finally:
        store.close()


def test_the_passphrase_and_the_private_key_reach_no_store_evidence_or_output(tmp_path, key_files, capsys):
    root = str(tmp_path / "evidence")
    location, closed = signed_job(tmp_path, key_files, evidence_dir=root)
    pem = key_files[2]
    body = b"".join(pem.splitlines()[1:-1])  # the key's base64 without its PEM lines
    planted = [PASSPHRASE.encode(), pem, body, body[:40]]
    outputs = [json.dumps(closed).encode()]
    for argv in (
        ["verify", "job-1", "--key", key_files[1], "--store", location],
        ["verify", "job-1", "--key", key_files[1], "--json", "--evidence-dir", root],
        ["show", "job-1", "--json", "--store", location],
        ["evidence", "job-1", "--store", location],
    ):
        rc, out, err = stella(argv, capsys)
        assert rc == 0
        outputs.append((out + err).encode())
    with sqlite3.connect(location) as db:
        outputs.append("\n".join(db.iterdump()).encode())
    for directory, _dirs, names in os.walk(root):
        for name in names:
            outputs.append(open(os.path.join(directory, name), "rb").read())
    assert len(outputs) > 8
    for text in outputs:
        for secret in planted:
            assert secret not in text
    # a failure's message neither
    (tmp_path / "again").mkdir()
    again = running_job(tmp_path / "again")
    with pytest.raises(StellaError) as caught:
        step(again, "close", signing_key=key_files[0], signing_passphrase=PASSPHRASE + "x")
    assert caught.value.code == "signing_key_invalid" and PASSPHRASE not in caught.value.reason


def test_verify_live_goes_to_the_drift_check(monkeypatch):
    seen = []
    drift = types.ModuleType(_verify.DRIFT_MODULE)
    drift.live = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, _verify.DRIFT_MODULE, drift)
    assert _verify.verify(["--live", "shop", "--json"]) == 3
    assert seen == [["shop", "--json"]]


def test_a_100_target_job_verifies_every_document(tmp_path, key_files, capsys):
    """Its time is bench/trust_bench.py's (--verify); here, that every one of its 102 documents is checked."""
    targets = ["t%03d" % n for n in range(100)]
    location, closed = signed_job(tmp_path, key_files, targets=targets)
    assert len(closed["evidenceDocuments"]) == 2 * 102
    rc, out, _err = stella(["verify", "job-1", "--key", key_files[1], "--store", location], capsys)
    assert rc == 0 and out.splitlines()[-1].startswith("job job-1: all 102 documents verified")
    assert sum(line.startswith("ok   ") for line in out.splitlines()) == 102
