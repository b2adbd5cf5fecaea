"""Signed evidence of a REAL deployment job (docs/trust.md), verified offline by ``stella verify``.

Two lab targets of the shared fleet, ONE job through the job playbook with ``stella_evidence_signing_key`` (a
key in cosign's format, made by trust/keys.py) and an evidence directory. The job is given a wrong
``stella_evidence_signing_passphrase`` first: its close fails with ``signing_key_invalid`` and writes no document
(the job's outcome is recorded, only the targets' deployment.json are there, nothing under jobs/JOB/), and
``stella close JOB --signing-key KEY --passphrase-file FILE`` then finishes it, signed. Then: ``stella verify JOB
--key PUB`` from the store and from the evidence directory exits 0; securesystemslib itself accepts every
envelope; one flipped byte in a deployment.json on disk fails naming it; a deleted envelope fails; and neither
passphrase nor the private key appears in the playbook's output, the store, the evidence or stella's output.

Fails (never skips) when the lab is not running.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys

import ansible_run as ar
import fleetkit as fl
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import dsse, keys

STELLA = os.path.join(ar.ROOT, "scripts", "stella.py")


def stella(*args, env=None):
    environ = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS, **(env or {}))
    environ.pop("STELLA_SIGNING_PASSPHRASE", None)
    return subprocess.run(
        [sys.executable, STELLA] + list(args), capture_output=True, text=True, env=environ, timeout=120, check=False
    )


def flip(path):
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def test_a_real_jobs_signed_evidence_verifies_offline_and_tampering_is_found(lab, fleet, tmp_path, monkeypatch):
    monkeypatch.delenv("STELLA_SIGNING_PASSPHRASE", raising=False)  # the playbook's passphrase only
    passphrase = "pl4nted-pass-" + secrets.token_hex(8)
    wrong = "pl4nted-wrong-" + secrets.token_hex(8)
    private_pem, public_pem = keys.generate_key_pair(passphrase.encode())
    key_path, pub_path, pass_path = tmp_path / "cosign.key", tmp_path / "cosign.pub", tmp_path / "passphrase"
    key_path.write_bytes(private_pem)
    pub_path.write_bytes(public_pem)
    pass_path.write_text(passphrase + "\n")
    fingerprint = keys.load_public_key(str(pub_path)).fingerprint
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "signed", free_port())
    try:
        # ---- the job, its close given a wrong passphrase: signing_key_invalid, no document of the close
        run = fj.run(
            fj.release(strategy_config={"batchSize": 2}),
            extra={
                "stella_evidence_signing_key": str(key_path),
                "stella_evidence_signing_passphrase": wrong,
                "stella_job_report": True,
            },
        )
        assert run.rc != 0, run.output[-4000:]
        assert "signing_key_invalid" in run.output and "passphrase does not open" in run.output, run.output[-4000:]
        job_id = run.job_id
        record = fj.job(job_id)
        assert record["status"] == "Succeeded" and "evidenceSignedBy" not in record, record["reason"]
        job_dir = os.path.join(fj.evidence_dir, "jobs", job_id)
        assert not os.path.exists(job_dir)
        deployments = {name: record["targets"][name]["evidence"]["deployment.json"]["document"] for name in fj.names}
        listed = stella("evidence", job_id, "--store", fj.store_path)
        assert listed.returncode == 0 and sorted(line.split()[-1] for line in listed.stdout.splitlines()[1:]) == sorted(
            deployments.values()
        ), listed.stdout

        # ---- stella close with the right passphrase finishes it, signed
        closed = stella(
            "close", job_id, "--store", fj.store_path, "--evidence-dir", fj.evidence_dir, "--report",
            "--signing-key", str(key_path), "--passphrase-file", str(pass_path),
        )  # fmt: skip
        assert closed.returncode == 0, closed.stderr
        assert fj.job(job_id)["evidenceSignedBy"] == fingerprint
        documents = sorted([*deployments.values(), "jobs/%s/job.json" % job_id, "jobs/%s/report.html" % job_id])
        for name in documents:
            for suffix in ("", ".dsse.json"):
                assert os.path.isfile(os.path.join(fj.evidence_dir, name + suffix)), name + suffix

        # ---- stella verify, from the store and from the evidence directory
        expected = "".join("ok   %s\n" % name for name in documents) + (
            "job %s: all %d documents verified with the key %s\n" % (job_id, len(documents), fingerprint)
        )
        from_store = stella("verify", job_id, "--key", str(pub_path), "--store", fj.store_path)
        assert (from_store.returncode, from_store.stdout, from_store.stderr) == (0, expected, ""), from_store
        from_dir = stella("verify", job_id, "--key", str(pub_path), "--evidence-dir", fj.evidence_dir)
        assert (from_dir.returncode, from_dir.stdout) == (0, expected), from_dir
        # securesystemslib's own verifier accepts every envelope stella wrote, with the public key alone
        from securesystemslib.dsse import Envelope

        sslib_key = dsse.public_sslib_key(keys.load_public_key(str(pub_path)))
        for name in documents:
            with open(os.path.join(fj.evidence_dir, name + ".dsse.json"), encoding="utf-8") as handle:
                Envelope.from_dict(json.load(handle)).verify([sslib_key], 1)

        # ---- one changed byte in a target's deployment.json on disk: found, named
        tampered = os.path.join(fj.evidence_dir, deployments[fj.names[1]])
        flip(tampered)
        found = stella("verify", job_id, "--key", str(pub_path), "--evidence-dir", fj.evidence_dir)
        assert found.returncode == 1, found.stdout
        assert (
            [line for line in found.stdout.splitlines() if line.startswith("FAIL ")]
            == [
                line
                for line in found.stdout.splitlines()
                if line.startswith("FAIL %s: its bytes (sha256 " % deployments[fj.names[1]])
            ]
            != []
        ), found.stdout
        flip(tampered)
        # ---- one envelope deleted: found
        os.remove(os.path.join(fj.evidence_dir, "jobs", job_id, "job.json.dsse.json"))
        found = stella("verify", job_id, "--key", str(pub_path), "--evidence-dir", fj.evidence_dir)
        assert found.returncode == 1
        assert "FAIL jobs/%s/job.json: no envelope: job.json.dsse.json is missing\n" % job_id in found.stdout
        # the store still has it
        assert stella("verify", job_id, "--key", str(pub_path), "--store", fj.store_path).returncode == 0

        # ---- the planted secrets: nowhere
        texts = [run.output, closed.stdout + closed.stderr, from_store.stdout, from_dir.stdout, found.stdout]
        texts.append(stella("show", job_id, "--json", "--store", fj.store_path).stdout)
        with sqlite3.connect(fj.store_path) as db:
            texts.append("\n".join(db.iterdump()))
        for directory, _dirs, names in os.walk(fj.evidence_dir):
            for name in names:
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                    texts.append(handle.read())
        body = "".join(private_pem.decode().splitlines()[1:-1])
        for text in texts:
            for secret in (passphrase, wrong, body[:48], body[-48:]):
                assert secret not in text
    finally:
        fj.cleanup()
