"""Signed evidence (evidence/signing.py): the subjects of each document's statement, envelopes made with a real
key and opened by securesystemslib itself, and every kind of tampering found by verify_documents: a changed byte
in a document or an envelope, a missing envelope, a missing or extra document, an envelope moved to another
document, a statement whose subjects are not what the document records, and another key."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence import signing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import dsse, keys

JOB = "job-1"
LOCK, STICKER, MANIFEST = ("sha256:" + c * 64 for c in "123")
WEB = "sha256:" + "a" * 64
DB = "sha256:" + "b" * 64


def hexof(data):
    return hashlib.sha256(data).hexdigest()


def deployment(target="id-a"):
    return {
        "evidenceVersion": "stella.deployment.evidence.v1",
        "deploymentId": JOB,
        "target": {"targetId": target},
        "images": [
            {
                "name": "web",
                "reference": "registry:5000/shop/web:1",
                "image": "registry:5000/shop/web:1@" + WEB,
                "digest": WEB,
            },
            # a local pin: the image is the id alone; its repository is the reference's
            {"name": "db", "reference": "postgres:16", "image": DB, "digest": DB},
        ],
        "artifacts": {
            "composeLockPath": "/srv/shop/.stella/compose.lock.yml",
            "composeLockHash": LOCK,
            "versionStickerPath": "/srv/shop/.stella/version.json",
            "versionStickerHash": STICKER,
            "applyManifestPath": "/srv/shop/.stella/apply-manifest.json",
            "applyManifestHash": MANIFEST,
        },
        "status": "succeeded",
    }


def job_documents(targets=1):
    """A job's documents as the store keeps them: each target's deployment.json, job.json, the rollback
    evidence and the report."""
    documents = {
        "shop/%s/id-%d/deployment.json" % (JOB, n): pretty_json(deployment("id-%d" % n)) for n in range(targets)
    }
    documents["jobs/%s/job.json" % JOB] = pretty_json({"jobId": JOB, "status": "Succeeded"})
    documents["jobs/%s/rollback-evidence.json" % JOB] = pretty_json({"evidenceVersion": "release.rollback.evidence.v1"})
    documents["jobs/%s/report.html" % JOB] = b"<html><body>job-1 Succeeded</body></html>\n"
    return documents


@pytest.fixture(scope="module")
def key():
    return keys.generate_private_key(keys.ECDSA_P256)


@pytest.fixture(scope="module")
def signed(key):
    """The job's documents with their envelopes (as JSON bytes, as the store keeps them)."""
    documents = job_documents()
    envelopes = signing.sign_documents(JOB, documents, key)
    return {**documents, **{name: pretty_json(envelope) for name, envelope in envelopes.items()}}


def verdicts(files, key):
    return {entry["document"]: entry["reason"] for entry in signing.verify_documents(JOB, files, key.public_key)}


def failures(files, key):
    return {name: reason for name, reason in verdicts(files, key).items() if reason is not None}


def test_repository_drops_tag_and_digest_and_keeps_a_registry_port():
    assert signing.repository("registry:5000/shop/web:1@" + WEB) == "registry:5000/shop/web"
    assert signing.repository("registry:5000/shop/web") == "registry:5000/shop/web"
    assert signing.repository("nginx:1.27") == "nginx"
    assert signing.repository("nginx@" + WEB) == "nginx"
    assert signing.repository(WEB) is None and signing.repository(None) is None


def test_a_deployment_statement_names_the_document_its_images_and_its_committed_files():
    data = pretty_json(deployment())
    name = "shop/job-1/id-a/deployment.json"
    assert signing.subjects(name, data) == sorted(
        [
            {"name": name, "digest": {"sha256": hexof(data)}},
            {"name": "registry:5000/shop/web", "digest": {"sha256": "a" * 64}},
            {"name": "postgres", "digest": {"sha256": "b" * 64}},
            {"name": "compose.lock.yml", "digest": {"sha256": "1" * 64}},
            {"name": "version.json", "digest": {"sha256": "2" * 64}},
            {"name": "apply-manifest.json", "digest": {"sha256": "3" * 64}},
        ],
        key=lambda s: (s["name"], s["digest"]["sha256"]),
    )
    statement = signing.statement_of(JOB, name, data)
    assert statement["_type"] == dsse.STATEMENT_TYPE and statement["predicateType"] == signing.PREDICATE_TYPE
    assert statement["predicate"] == {"jobId": JOB, "document": name, "kind": "deployment"}


def test_what_a_deployment_does_not_record_is_left_out():
    bare = {"images": [{"name": "web", "image": "shop/web:1"}], "artifacts": {"versionStickerHash": STICKER}}
    assert signing.deployment_subjects(bare) == [{"name": "version-sticker", "digest": {"sha256": "2" * 64}}]
    assert signing.deployment_subjects(None) == []


def test_job_json_lists_every_other_document_and_the_report_is_its_digest():
    documents = job_documents(2)
    job = "jobs/job-1/job.json"
    listed = signing.subjects(job, documents[job], {**documents, job + ".dsse.json": b"{}"})
    assert [s["name"] for s in listed] == sorted(documents)
    assert {s["name"]: s["digest"]["sha256"] for s in listed} == {n: hexof(d) for n, d in documents.items()}
    report = "jobs/job-1/report.html"
    assert signing.subjects(report, documents[report]) == [
        {"name": report, "digest": {"sha256": hexof(documents[report])}}
    ]
    assert signing.statement_of(JOB, report, documents[report])["predicate"]["kind"] == "report"


def test_every_document_verifies_and_securesystemslib_accepts_every_envelope(signed, key):
    from securesystemslib.dsse import Envelope

    assert verdicts(signed, key) == dict.fromkeys(job_documents(), None)
    envelopes = [name for name in signed if signing.is_envelope(name)]
    assert len(envelopes) == 4
    for name in envelopes:
        envelope = json.loads(signed[name])
        assert envelope["payloadType"] == dsse.PAYLOAD_TYPE
        assert envelope["signatures"][0]["keyid"] == key.public_key.fingerprint.split(":", 1)[1]
        # securesystemslib's own verification, with the key alone
        Envelope.from_dict(json.loads(signed[name])).verify([dsse.public_sslib_key(key.public_key)], 1)
        statement = json.loads(base64.b64decode(envelope["payload"]))
        assert statement["predicate"]["document"] == name[: -len(".dsse.json")]


@pytest.mark.parametrize("name", sorted(job_documents()))
def test_a_changed_byte_in_any_document_is_found(signed, key, name):
    files = dict(signed)
    data = bytearray(files[name])
    data[len(data) // 2] ^= 0x01
    files[name] = bytes(data)
    found = failures(files, key)
    assert list(found) == [name]
    assert "not the ones signed" in found[name] or "no JSON" in found[name]


@pytest.mark.parametrize("name", sorted(signing.envelope_name(n) for n in job_documents()))
def test_a_changed_byte_in_any_envelope_is_found(signed, key, name):
    envelope = json.loads(signed[name])
    for field in ("payload", "sig"):
        entry = envelope if field == "payload" else envelope["signatures"][0]
        raw = bytearray(base64.b64decode(entry[field]))
        raw[len(raw) // 2] ^= 0x01
        files = dict(signed)
        files[name] = pretty_json(
            {**envelope, field: base64.b64encode(raw).decode()}
            if field == "payload"
            else {**envelope, "signatures": [{**entry, "sig": base64.b64encode(raw).decode()}]}
        )
        found = failures(files, key)
        assert list(found) == [name[: -len(".dsse.json")]]
        assert "envelope" in found[name[: -len(".dsse.json")]]
    files = dict(signed)
    files[name] = signed[name].replace(b"{", b"[", 1)  # no JSON any more
    assert list(failures(files, key)) == [name[: -len(".dsse.json")]]


def test_a_missing_envelope_is_found(signed, key):
    files = dict(signed)
    del files["shop/job-1/id-0/deployment.json.dsse.json"]
    assert failures(files, key) == {
        "shop/job-1/id-0/deployment.json": "no envelope: deployment.json.dsse.json is missing"
    }
    codes = {e["document"]: e["code"] for e in signing.verify_documents(JOB, files, key.public_key)}
    assert codes == dict(dict.fromkeys(job_documents()), **{"shop/job-1/id-0/deployment.json": dsse.INVALID})


def test_a_missing_document_is_found_by_job_json_and_by_its_envelope(signed, key):
    files = dict(signed)
    del files["jobs/job-1/rollback-evidence.json"]
    assert failures(files, key) == {
        "jobs/job-1/rollback-evidence.json": "missing: jobs/job-1/job.json's signed statement lists it"
    }
    del files["jobs/job-1/job.json"]
    found = failures(files, key)
    assert found["jobs/job-1/job.json"].startswith("missing: no job.json")
    assert found["jobs/job-1/rollback-evidence.json"].startswith("missing: its envelope")


def test_an_extra_document_is_found_even_with_an_envelope_of_its_own(signed, key):
    files = dict(signed)
    extra = {"shop/job-1/id-9/deployment.json": pretty_json(deployment("id-9"))}
    files.update(extra)
    files.update({n: pretty_json(e) for n, e in signing.sign_documents(JOB, extra, key).items()})
    assert failures(files, key) == {
        "shop/job-1/id-9/deployment.json": "not listed in the signed statement of jobs/job-1/job.json"
    }


def test_an_envelope_moved_to_another_document_is_found(signed, key):
    files = dict(signed)
    files["jobs/job-1/report.html.dsse.json"] = signed["jobs/job-1/rollback-evidence.json.dsse.json"]
    found = failures(files, key)
    assert list(found) == ["jobs/job-1/report.html"]
    assert "of jobs/job-1/rollback-evidence.json of job job-1, not of this document" in found["jobs/job-1/report.html"]
    other = dict(signed)  # the envelope of another job's document of the same name
    name = "jobs/job-1/report.html"
    moved = dsse.statement(
        signing.subjects(name, signed[name]), signing.PREDICATE_TYPE, {"jobId": "job-2", "document": name}
    )
    other[name + ".dsse.json"] = pretty_json(dsse.sign_statement(moved, key))
    assert list(failures(other, key)) == [name]


def test_a_statement_that_does_not_match_what_a_deployment_records_is_found(signed, key):
    name = "shop/job-1/id-0/deployment.json"
    wrong = [s for s in signing.subjects(name, signed[name]) if s["name"] != "postgres"]
    wrong.append({"name": "postgres", "digest": {"sha256": "c" * 64}})
    statement = dsse.statement(wrong, signing.PREDICATE_TYPE, {"jobId": JOB, "document": name, "kind": "deployment"})
    files = dict(signed)
    files[name + ".dsse.json"] = pretty_json(dsse.sign_statement(statement, key))
    assert failures(files, key) == {name: "the signed subjects differ from what it records (postgres)"}


def test_another_key_verifies_nothing(signed):
    other = keys.generate_private_key(keys.ED25519)
    found = failures(signed, other)
    assert sorted(found) == sorted(job_documents())
    assert all(
        reason.startswith("envelope: no signature of the envelope verifies with the key") for reason in found.values()
    )


def test_an_ed25519_key_signs_as_well():
    key = keys.generate_private_key(keys.ED25519)
    documents = job_documents()
    files = {**documents, **{n: pretty_json(e) for n, e in signing.sign_documents(JOB, documents, key).items()}}
    assert failures(files, key) == {}


def test_a_100_target_job_verifies_in_well_under_two_seconds(key):
    documents = job_documents(100)
    started = time.perf_counter()
    files = {**documents, **{n: pretty_json(e) for n, e in signing.sign_documents(JOB, documents, key).items()}}
    signed_in = time.perf_counter() - started
    started = time.perf_counter()
    results = signing.verify_documents(JOB, files, key.public_key)
    took = time.perf_counter() - started
    assert len(results) == 103 and all(entry["ok"] for entry in results)
    assert took < 2.0, "verifying 100 targets took %.2f s (signing %.2f s)" % (took, signed_in)
