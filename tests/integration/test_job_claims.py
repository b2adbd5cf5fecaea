"""Claims across job stores and a lost claim file, through the real job playbook on one thin lab target
(docs/job-store.md, "Work already on its way is fenced").

- One store, then the same store restored from a backup, then a new PostgreSQL store, then a SQLite store
  deleted and created again: every job is accepted by the target, none is refused as superseded by a job
  of another store or by a generation the restored store handed out before; each takeover by another store
  is recorded on the target (``takeovers`` in ``.stella-claim.json``) and in the job (``claimTakeover``).
- The claim file deleted, then garbled, where a newer job's release runs: a job that started before it is
  refused with ``claim_lost`` and changes nothing; a new job is accepted and writes the file again.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import os
import shlex

import labkit
import pgkit
import thinkit

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import CLAIM_FILE

ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}
WORK = "/var/lib/stella/projects"


class Claims(thinkit.ThinFleetJob):
    """The application's one target, its project directory and the job store in use (``use``)."""

    def use(self, store):
        self.store_path = store

    def deploy(self, version, **extra):
        image = "app_v1" if version.startswith("1") else "app_v2"
        return self.run(
            self.release(image, version, strategy_config={"batchSize": 1}), extra=dict(ENGINE_GATE, **extra)
        )

    def project_dir(self, record):
        return os.path.join(WORK, record["targets"][self.names[0]]["projectName"])

    def shell(self, script):
        return labkit.ssh(self.fleet[0], script).stdout

    def claim_file(self, record):
        return json.loads(self.shell("cat %s" % shlex.quote(os.path.join(self.project_dir(record), CLAIM_FILE))))

    def sticker_job(self, record):
        return json.loads(self.shell("cat %s/stella.version.json" % shlex.quote(self.project_dir(record))))["jobId"]


def succeeded(fj, run):
    assert run.rc == 0, run.output[-4000:]
    record = fj.job(run.job_id)
    assert record["status"] == "Succeeded", (record["code"], record["reason"])
    return record


def test_jobs_of_a_restored_store_and_of_other_stores_are_accepted_and_each_takeover_is_recorded(
    lab, thin_pair, tmp_path, pg_passfile
):  # pylint: disable=redefined-outer-name,unused-argument
    fj = Claims(lab, thin_pair[:1], tmp_path, "claims", labkit.free_port(), store=str(tmp_path / "a.sqlite3"))
    name = fj.names[0]
    try:
        first = succeeded(fj, fj.deploy("1.0.0"))
        store_a = first["targets"][name]["claim"]["storeId"]
        (tmp_path / "a-backup.sqlite3").write_bytes((tmp_path / "a.sqlite3").read_bytes())
        second = succeeded(fj, fj.deploy("2.0.0"))
        g2 = second["targets"][name]["claim"]["generation"]
        assert g2 > first["targets"][name]["claim"]["generation"]
        assert "claimTakeover" not in second["targets"][name]  # the same store: no takeover

        # ---- the store restored from its backup (taken before the second job): same id, a newer generation
        for suffix in ("", "-wal", "-shm"):
            path = tmp_path / ("a.sqlite3" + suffix)
            if path.exists():
                path.unlink()
        (tmp_path / "a.sqlite3").write_bytes((tmp_path / "a-backup.sqlite3").read_bytes())
        assert second["jobId"] not in fj.job_ids()
        restored = succeeded(fj, fj.deploy("1.0.0"))
        claim = restored["targets"][name]["claim"]
        assert claim["storeId"] == store_a and claim["generation"] > g2
        assert fj.sticker_job(restored) == restored["jobId"]
        kept = fj.claim_file(restored)
        assert (kept["jobId"], kept["generation"], kept["storeId"]) == (restored["jobId"], claim["generation"], store_a)

        # ---- a new store on PostgreSQL (the move job-store.md recommends): it takes the project over
        with pgkit.fresh_database(lab, prefix="claims") as dsn:
            fj.use(dsn)
            moved = succeeded(fj, fj.deploy("2.0.0"))
            store_b = moved["targets"][name]["claim"]["storeId"]
            assert store_b != store_a and moved["targets"][name]["claim"]["generation"] > 2**31  # 64-bit column
            assert moved["targets"][name]["claimTakeover"] == {
                "storeId": store_a,
                "jobId": restored["jobId"],
                "generation": claim["generation"],
            }
            kept = fj.claim_file(moved)
            assert kept["storeId"] == store_b and [s["storeId"] for s in kept["stores"]] == [store_b, store_a]
            taken = kept["takeovers"][0]
            assert (taken["storeId"], taken["jobId"], taken["byStoreId"], taken["byJobId"]) == (
                store_a,
                restored["jobId"],
                store_b,
                moved["jobId"],
            )

        # ---- a SQLite store deleted and created again: a new id, so again a takeover, not a refusal
        fj.use(str(tmp_path / "a.sqlite3"))
        for suffix in ("", "-wal", "-shm"):
            path = tmp_path / ("a.sqlite3" + suffix)
            if path.exists():
                path.unlink()
        recreated = succeeded(fj, fj.deploy("1.0.0"))
        store_c = recreated["targets"][name]["claim"]["storeId"]
        assert store_c not in (store_a, store_b)
        assert recreated["targets"][name]["claimTakeover"]["storeId"] == store_b
        assert fj.sticker_job(recreated) == recreated["jobId"]
    finally:
        fj.cleanup()


def test_a_lost_claim_file_refuses_a_job_older_than_the_stickers_and_a_new_job_repairs_it(lab, thin_pair, tmp_path):  # pylint: disable=redefined-outer-name
    fj = Claims(lab, thin_pair[:1], tmp_path, "claims-lost", labkit.free_port())
    try:
        current = succeeded(fj, fj.deploy("2.0.0"))
        directory = fj.project_dir(current)
        before = fj.shell(
            "cd %s && sha256sum compose.stella.lock.yml stella.version.json apply-manifest.json"
            % shlex.quote(directory)
        )
        for number, damage in enumerate(("rm -f %s", "printf '{not json' > %s")):
            fj.shell(damage % shlex.quote(os.path.join(directory, CLAIM_FILE)))
            # a job that started before the one whose release runs (its id names an earlier second)
            late = fj.deploy("1.0.0", stella_job_id="job-20200101T00000%d-0000000%d" % (number, number))
            assert late.rc != 0, late.output[-3000:]
            record = fj.job(late.job_id)
            target = record["targets"][fj.names[0]]
            assert target["code"] == "claim_lost", (target["code"], target["reason"])
            problem = "missing" if number == 0 else "unreadable"
            assert "started before job %s" % current["jobId"] in target["reason"]
            assert "is %s: nothing was changed" % problem in target["reason"]
            after = fj.shell(
                "cd %s && sha256sum compose.stella.lock.yml stella.version.json apply-manifest.json"
                % shlex.quote(directory)
            )
            assert after == before  # the newer job's release, byte for byte
            assert fj.sticker_job(current) == current["jobId"]
        # a new job (a generated id: newer than the sticker's job) is accepted and writes the file again
        repaired = succeeded(fj, fj.deploy("1.0.0"))
        recreated = {"was": "unreadable", "stickerJobId": current["jobId"]}
        assert repaired["targets"][fj.names[0]]["claimFileRecreated"] == recreated
        assert fj.claim_file(repaired)["jobId"] == repaired["jobId"]
    finally:
        fj.cleanup()


def test_two_stores_sharing_an_evidence_directory_with_one_caller_job_id_never_replace_each_others_files(
    lab, thin_pair, tmp_path
):  # pylint: disable=redefined-outer-name
    fj = Claims(lab, thin_pair[:1], tmp_path, "claims-evidence", labkit.free_port(), store=str(tmp_path / "a.sqlite3"))
    try:
        first = succeeded(fj, fj.deploy("1.0.0", stella_job_id="awx-4242"))
        job_json = os.path.join(fj.evidence_dir, "jobs", "awx-4242", "job.json")
        kept = open(job_json, "rb").read()
        sticker = fj.sticker_job(first)
        fj.use(str(tmp_path / "b.sqlite3"))  # a second AWX: its own store, the same evidence directory
        second = fj.deploy("2.0.0", stella_job_id="awx-4242")
        assert second.rc != 0, second.output[-3000:]
        assert "evidence_conflict" in second.output and "nothing was changed" in second.output, second.output[-3000:]
        assert fj.job_ids() == []  # nothing recorded in the second store
        assert open(job_json, "rb").read() == kept and fj.sticker_job(first) == sticker  # nothing replaced
    finally:
        fj.cleanup()
