"""The ``stellaops.runtime.deploy`` role through the real ``ansible-playbook`` (issue 5, operator level).

Each scenario deploys with ``tests/integration/playbooks/deploy_role.yml`` (the role, the release passed
as extra vars from a JSON file) on localhost (``-c local``) or on a DinD lab target over SSH. Every run of
the role is a one-target deployment job in the scenario's own job store (a SQLite file under
``tmp_path``); the test reads what the role registered, the job's evidence on the controller
(``<evidence_dir>/<project>/<job id>/<target>/deployment.json``, ``<evidence_dir>/jobs/<job id>/job.json`` and,
after a rollback, ``rollback-evidence.json``) and the state of the target's engine. Every scenario has
its own tenant/application (so its own Compose project) and removes its project in a ``finally`` block.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

import ansible_run as ar
import labkit

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEPLOYMENT_PHASES,
    PHASES,
    ROLLBACK_PHASE_NAMES,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.deployment import (
    deployment_record,
    preflight_evidence,
    verify_record,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import clean
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import job_evidence, rollback_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import verify_rollback_evidence

ROOT = ar.ROOT
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "deploy_role.yml")
TARGET_WORK = "/var/lib/stella-role-it"
PROBE_KEYS = {
    "healthProbe.status",
    "healthProbe.count",
    "healthProbe.web.endpoint",
    "healthProbe.web.healthy",
    "healthProbe.web.attempts",
    "healthProbe.web.observed",
}
ROLLED_BACK_SUFFIX = " (auto-rollback restored the retained previous revision)"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
# The contract phase each step of the target agent belongs to (compose_up -> deploy, ...).
STEP_PHASE = {step: phase for phase, steps in DEPLOYMENT_PHASES for step in steps}


def free_loopback_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sha256_file(path):
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


class Scenario:
    """One tenant/application (one Compose project) on localhost (``host=None``) or a lab target."""

    def __init__(self, lab, tmp_path, name, host=None):
        self.lab, self.host, self.tmp = lab, host, tmp_path
        self.application = "%s-%s" % (name, uuid.uuid4().hex[:8])
        self.tenant = "role-it"
        self.evidence_dir = str(tmp_path / "evidence")
        self.job_store = str(tmp_path / "jobs.sqlite3")
        self.hostname = host["name"] if host else "localhost"
        self.runs = 0
        if host is None:
            self.work = str(tmp_path / "work")
            os.makedirs(self.work)
            self.refs = {k: v["loopback_ref"] for k, v in lab["images"].items() if "loopback_ref" in v}
            self.target = {
                "id": "tgt-local",
                "name": "localhost",
                "type": "ComposeHost",
                "endpoint": "local",
                "executionMode": "local",
            }
            self.port = free_loopback_port()
            self.publish = "127.0.0.1:%d:8080" % self.port
            self.docker_argv = ("docker",)
            self.insecure = []
        else:
            self.work = TARGET_WORK
            self.refs = {k: v["ref"] for k, v in lab["images"].items()}
            self.target = {
                "id": "tgt-" + host["name"],
                "name": host["name"],
                "type": "ComposeHost",
                "endpoint": "ssh://root@%s" % host["address"],
                "executionMode": "ssh",
            }
            self.port = 20000 + int(uuid.uuid4().hex[:4], 16) % 20000
            self.publish = "%d:8080" % self.port
            self.docker_argv = tuple(labkit.ssh_argv(host)) + ("docker",)
            self.insecure = [lab["registries"]["shared"]["address"]]
        self.project = "%s_test_%s_%s" % (self.tenant, self.target["id"], self.application)
        self.project_dir = os.path.join(self.work, self.project)
        self.digests = {k: v["digest"] for k, v in lab["images"].items()}

    # ------------------------------------------------------------------ release and play
    def release(self, image_key="app_v1", version="1.0.0", probe_path="/", hooks=None, attempts=5):
        config = {
            "healthProbe.type": "http",
            "healthProbe.attempts": attempts,
            "healthProbe.intervalSeconds": 1,
            "healthProbe.timeoutSeconds": 3,
        }
        if self.host is None:
            config["healthProbe.url"] = "http://127.0.0.1:%d%s" % (self.port, probe_path)
        else:  # host from the target endpoint (ssh://root@<address>), the port published on the target
            config.update({"healthProbe.port": self.port, "healthProbe.path": probe_path})
        if image_key != "app_broken":  # the broken image keeps its own failing docker healthcheck
            config.update(
                {
                    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                    "healthcheck.interval": "1s",
                    "healthcheck.retries": 15,
                }
            )
        release = {
            "release": {"id": "rel-" + version.replace(".", "-"), "name": "app", "version": version},
            "tenant": self.tenant,
            "environment": "test",
            "application": self.application,
            "strategy": "rolling",
            "target": self.target,
            "workDirectory": self.work,
            "components": [{"name": "web", "image": self.refs[image_key], "ports": [self.publish], "config": config}],
        }
        if hooks:
            release["hooks"] = hooks
        return release

    def play(
        self,
        release,
        wait_timeout=60,
        rollback_on_failure=True,
        keep_revisions=None,
        env=None,
        options=(),
        extra_vars=None,
    ):
        """Run the test playbook; return (rc, recap {host: (ok, changed, unreachable, failed)}, results, output).

        ``results``: what the role registered (deploy_job, deploy_apply_result, deploy_probe_result,
        deploy_job_finish, deploy_restore_result, deploy_job_closed; ``None`` when not registered)."""
        self.runs += 1
        run = self.tmp / ("run%d" % self.runs)
        run.mkdir()
        variables = {
            "release": release,
            "job_store": self.job_store,
            "evidence_dir": self.evidence_dir,
            "insecure_registries": self.insecure,
            "wait_timeout": wait_timeout,
            "rollback_on_failure": rollback_on_failure,
            "results_file": str(run / "results.json"),
        }
        if keep_revisions is not None:
            variables["keep_revisions"] = keep_revisions
        variables.update(extra_vars or {})
        (run / "vars.json").write_text(json.dumps(variables))
        argv = [os.path.join(ar.VENV_BIN, "ansible-playbook")]
        if self.host is None:
            argv += [
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                "ansible_python_interpreter=" + os.path.join(ar.VENV_BIN, "python"),
            ]
        else:
            (run / "inventory.ini").write_text(ar.inventory_text(self.host))
            argv += ["-i", str(run / "inventory.ini")]
        argv += list(options) + ["-e", "@" + str(run / "vars.json"), PLAYBOOK]
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS,
            ANSIBLE_STDOUT_CALLBACK="default",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_HOST_KEY_CHECKING="False",
            **(env or {}),
        )
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
        output = proc.stdout + proc.stderr
        (run / "output.txt").write_text(output)
        recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(proc.stdout)}
        assert recap, "ansible-playbook printed no PLAY RECAP (rc=%d):\n%s" % (proc.returncode, output[-4000:])
        results = json.loads((run / "results.json").read_text())
        assert results["deploy_job"] and results["deploy_job_closed"], output[-4000:]
        return proc.returncode, recap, results, output

    # ------------------------------------------------------------------ the job and its evidence on the controller
    def job_id(self, results):
        return results["deploy_job"]["jobId"]

    def plan(self, results):
        return results["deploy_job"]["plans"][self.hostname]

    def evidence_dirs(self, results):
        """``(the target's deployment evidence directory, the job's evidence directory)`` of the run's job."""
        job_id = self.job_id(results)
        plan = self.plan(results)
        return (
            os.path.join(self.evidence_dir, plan["projectName"], job_id, plan["target"]["id"]),
            os.path.join(self.evidence_dir, "jobs", job_id),
        )

    def evidence(self, results):
        """``{file name: document}``: deployment.json, job.json and rollback-evidence.json, as written."""
        files = {}
        for directory in self.evidence_dirs(results):
            for name in sorted(os.listdir(directory)):
                assert name not in files, name
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    files[name] = json.load(handle)
        return files

    def evidence_bytes(self, results):
        """``{path relative to the evidence directory: bytes}`` of every evidence file of the run's job."""
        files = {}
        for directory in self.evidence_dirs(results):
            for name in sorted(os.listdir(directory)):
                with open(os.path.join(directory, name), "rb") as handle:
                    files[os.path.relpath(os.path.join(directory, name), self.evidence_dir)] = handle.read()
        return files

    def stored(self, job_id):
        """``(the job record, its deployments projection)`` in the scenario's job store."""
        store = open_store(self.job_store)
        try:
            return store.get(job_id), store.projection(job_id)
        finally:
            store.close()

    # ------------------------------------------------------------------ target state
    def inspect(self):
        ids = subprocess.run(
            list(self.docker_argv)
            + ["ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % self.project],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split()
        if not ids:
            return []
        return json.loads(
            subprocess.run(
                list(self.docker_argv) + ["inspect"] + ids, capture_output=True, text=True, check=True, timeout=120
            ).stdout
        )

    def sticker(self):
        path = os.path.join(self.project_dir, "stella.version.json")
        if self.host is None:
            with open(path, "rb") as handle:
                return handle.read()
        return subprocess.run(
            labkit.ssh_argv(self.host, "cat", path), capture_output=True, check=True, timeout=120
        ).stdout

    def cleanup(self):
        subprocess.run(
            list(self.docker_argv) + ["compose", "-p", self.project, "down", "-v", "-t", "1", "--remove-orphans"],
            capture_output=True,
            check=False,
            timeout=300,
        )
        if self.host is None:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            subprocess.run(
                labkit.ssh_argv(self.host, "rm", "-rf", self.project_dir), capture_output=True, check=False, timeout=120
            )


def stella_labels(container):
    return {k: v for k, v in container["Config"]["Labels"].items() if k.startswith("stella.")}


def rollback_ran(results):
    """Whether the role's rollback task ran (its result is absent or skipped when it did not)."""
    restore = results["deploy_restore_result"]
    return bool(restore) and not restore.get("skipped")


def phase_statuses(target, key="phases"):
    return [(p["name"], p["status"]) for p in target.get(key) or []]


def assert_job_documents(sc, results, files):
    """What every run's job wrote: job.json is the record the role closed (and the store keeps), the
    target's deployment.json is the one its record names, and every file lies in this job's directories."""
    job_id = sc.job_id(results)
    closed = results["deploy_job_closed"]
    job = files["job.json"]
    assert (job["evidenceVersion"], job["jobId"], job["kind"]) == ("stella.job.evidence.v1", job_id, "deployment")
    assert job["jobIdSource"] == "generated"  # a new id for every run, never one derived from the release
    assert job == job_evidence(closed["job"])
    stored, projection = sc.stored(job_id)
    assert job_evidence(stored) == job, "the job store holds another record than job.json"
    assert (closed["jobId"], closed["status"], closed["reason"]) == (job_id, job["status"], job["reason"])
    assert closed["succeeded"] is (job["status"] == "Succeeded")
    assert job["batches"] == [[sc.hostname]] and job["targetOrder"] == [sc.hostname]
    deployment_dir, job_dir = sc.evidence_dirs(results)
    assert {name: entry["path"] for name, entry in closed["evidenceFiles"].items()} == {
        name: os.path.join(job_dir, name) for name in files if name != "deployment.json"
    }
    for entry in closed["evidenceFiles"].values():
        assert sha256_file(entry["path"]) == entry["sha256"], entry
    target = job["targets"][sc.hostname]
    assert (target["projectName"], target["targetId"]) == (sc.project, sc.target["id"])
    assert target["manifestHash"] == sc.plan(results)["manifestHash"]
    assert set(target["evidence"]) == {"deployment.json"}
    assert target["evidence"]["deployment.json"]["path"] == os.path.join(deployment_dir, "deployment.json")
    assert target["evidence"]["deployment.json"]["sha256"] == sha256_file(
        os.path.join(deployment_dir, "deployment.json")
    )
    deployment = files["deployment.json"]
    assert deployment["deploymentId"] == job_id and deployment["projectName"] == sc.project
    assert verify_record(deployment)
    # the terminal projection, written after the terminal evidence, names its files by their SHA-256
    assert projection["terminal"] and projection["status"] == job["status"]
    assert projection["strategyEvidence"]["evidenceFiles"] == {
        name: entry["sha256"] for name, entry in closed["evidenceFiles"].items()
    }
    return job, target, projection


def assert_v1_succeeded(sc, rc, recap, results, output):
    assert rc == 0 and recap[sc.hostname][3] == 0, output[-4000:]
    files = sc.evidence(results)
    assert set(files) == {"deployment.json", "job.json"}, "rollback evidence without a rollback"
    record = files["deployment.json"]
    assert record["evidenceVersion"] == "stella.deployment.evidence.v1"
    assert record["status"] == "succeeded", record["failure"]
    assert record["failure"] is None
    assert record["successBoundary"] == {
        "preflightPassed": True,
        "imagesPinnedAndPulled": True,
        "workloadRunning": True,
        "runtimeVerified": True,
        "stickerRecorded": True,
        "serviceHealthVerified": True,
    }
    probe = record["health"]["probe"]
    assert set(probe) == PROBE_KEYS
    assert probe["healthProbe.status"] == "passed" and probe["healthProbe.count"] == 1
    assert probe["healthProbe.web.healthy"] is True and probe["healthProbe.web.observed"] == "200"
    host_part = "127.0.0.1" if sc.host is None else sc.host["address"]
    assert probe["healthProbe.web.endpoint"] == "http://%s:%d/" % (host_part, sc.port)
    assert record["containers"][0]["imageDigest"] == sc.digests["app_v1"]
    assert record["projectName"] == sc.project and record["services"] == ["web"]
    assert record["rollbackBaseline"] is None
    assert (record["changed"], record["appliedByJobId"]) == (True, sc.job_id(results))

    job, target, projection = assert_job_documents(sc, results, files)
    assert (job["status"], job["promotion"], job["reason"], job["code"]) == ("Succeeded", "Succeeded", None, None)
    assert (job["isRollback"], job["rollback"], job["events"]) == (False, None, [])
    assert (target["status"], target["code"], target["reason"]) == ("Succeeded", None, None)
    assert phase_statuses(target) == [(name, "succeeded") for name in PHASES]
    assert "rollbackPhases" not in target and "previousRevisionPath" not in target
    assert target["currentDigest"] == sc.digests["app_v1"]
    assert projection["strategyEvidence"]["rollback.attempted"] is False
    assert results["deploy_job_finish"].get("skipped") is True  # nothing to decide: the close ended the job
    assert not rollback_ran(results)
    return record


def assert_rolled_back_to_v1(sc, v1, failed_results, rc, recap, output, current_key, stage, phase):
    """The play failed for the host, v1 runs again, and the job's record and evidence prove it.

    ``stage``: the failure's stage in deployment.json (deploy: the apply, verify: the probes);
    ``phase``: the contract phase the job records as failed."""
    job_id = sc.job_id(failed_results)
    assert rc != 0 and recap[sc.hostname][3] == 1, output[-4000:]
    assert "job %s RolledBack: " % job_id in output, output[-4000:]
    assert job_id != v1["job_id"], "the failed deployment reused the first job's id"
    containers = sc.inspect()
    assert len(containers) == 1
    container = containers[0]
    assert container["State"]["Status"] == "running"
    assert container["State"]["Health"]["Status"] == "healthy"
    assert container["Config"]["Image"].endswith("@" + sc.digests["app_v1"]), container["Config"]["Image"]
    assert stella_labels(container) == v1["labels"]
    assert container["Config"]["Labels"]["stella.manifest.hash"] == sc.plan(v1["results"])["manifestHash"]
    assert container["Config"]["Labels"]["stella.release.version"] == "1.0.0"
    assert sc.sticker() == v1["sticker"], "the sticker on the target is not v1's"

    files = sc.evidence(failed_results)
    assert set(files) == {"deployment.json", "job.json", "rollback-evidence.json"}
    evidence = files["rollback-evidence.json"]
    assert evidence["evidenceVersion"] == "release.rollback.evidence.v1"
    assert evidence["deploymentId"] == job_id
    assert evidence["proofStatus"] == "complete"
    assert evidence["orderProofStatus"] == "complete"
    [target_evidence] = evidence["targets"]
    assert target_evidence["hasDigestProof"] is True and target_evidence["missingProofReason"] is None
    assert target_evidence["currentDigest"] == sc.digests[current_key]
    assert target_evidence["rollbackDigest"] == sc.digests["app_v1"]
    assert target_evidence["targetId"] == sc.target["id"]
    assert [e["status"] for e in evidence["rollbackOrder"]] == ["succeeded"]
    assert verify_rollback_evidence(evidence) == []

    apply = failed_results["deploy_apply_result"]
    job, target, projection = assert_job_documents(sc, failed_results, files)
    # the job: rolled back, its deployment (promotion) still failed, the reason suffixed by the contract
    assert (job["status"], job["promotion"], job["isRollback"]) == ("RolledBack", "Failed", True)
    assert job["reason"] == "target %s: %s%s" % (sc.hostname, target["reason"], ROLLED_BACK_SUFFIX), job["reason"]
    assert job["code"] == target["code"]
    assert [e["kind"] for e in job["events"]] == ["RollbackStarted", "RollbackCompleted"]
    rollback = job["rollback"]
    assert (rollback["attempted"], rollback["automatic"], rollback["status"]) == (True, True, "succeeded")
    assert (rollback["batches"], rollback["skipped"]) == ([[sc.hostname]], {})
    # the target: failed at `stage`'s phase, then restored to the revision its deployment retained
    assert (target["status"], target["statusBeforeRollback"]) == ("RolledBack", "Failed")
    phases = phase_statuses(target)
    assert phases == [(name, "succeeded") for name in PHASES[: PHASES.index(phase)]] + [(phase, "failed")], phases
    assert phase_statuses(target, "rollbackPhases") == [(name, "succeeded") for name in ROLLBACK_PHASE_NAMES]
    assert "rollbackError" not in target
    assert target["previousRevisionPath"] == apply["previousRevisionPath"]
    assert target["rollback"]["restoredRevisionPath"] == apply["previousRevisionPath"]
    assert target["rollback"]["succeeded"] is True
    assert target["rollback"]["rollbackDigest"] == sc.digests["app_v1"]
    assert target["currentDigest"] == sc.digests[current_key]
    # what the role registered on the way
    finish = failed_results["deploy_job_finish"]
    assert finish["rollbackOrder"] == [sc.hostname]
    assert finish["rollbackTargets"][sc.hostname]["revisionPath"] == apply["previousRevisionPath"]
    assert failed_results["deploy_restore_result"]["rollbackRestored"] is True
    # the terminal projection navigates to the rollback evidence
    strategy = projection["strategyEvidence"]
    assert strategy["rollback.attempted"] is True and strategy["rollback.status"] == "succeeded"
    assert strategy["rollback.evidence.proofDigest"] == evidence["proofDigest"]
    assert strategy["rollback.evidence.orderProofDigest"] == evidence["orderProofDigest"]
    assert strategy["rollback.evidence.proofStatus"] == "complete"
    assert strategy["rollback.evidence.hash"] == digest_json(evidence)

    deployment = files["deployment.json"]
    assert deployment["status"] == "failed" and deployment["failure"]["stage"] == stage
    assert deployment["rollbackBaseline"] == apply["previousRevisionPath"]
    return files


def deploy_v1(sc):
    rc, recap, results, output = sc.play(sc.release())
    record = assert_v1_succeeded(sc, rc, recap, results, output)
    [container] = sc.inspect()
    sticker = sc.sticker()
    assert json.loads(sticker)["jobId"] == sc.job_id(results)
    return {
        "results": results,
        "record": record,
        "labels": stella_labels(container),
        "sticker": sticker,
        "job_id": sc.job_id(results),
    }


def probe_failure_scenario(sc):
    """v1 healthy, then v2 whose container is healthy but whose probe path 404s."""
    v1 = deploy_v1(sc)
    rc, recap, results, output = sc.play(sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=2))
    files = assert_rolled_back_to_v1(sc, v1, results, rc, recap, output, "app_v2", "verify", "verify")
    deployment = files["deployment.json"]
    assert deployment["failure"]["stage"] == "verify"
    assert deployment["failure"]["code"] == "health_probe_failed"
    assert deployment["successBoundary"]["serviceHealthVerified"] is False
    assert deployment["health"]["probe"]["healthProbe.web.observed"] == "404"
    target = files["job.json"]["targets"][sc.hostname]
    assert target["code"] == "health_probe_failed"
    assert target["reason"].startswith("Post-deploy health probe failed for component 'web'"), target["reason"]
    [verify] = [p for p in target["phases"] if p["name"] == "verify"]
    assert verify["detail"]["probes"] == "failed", verify
    return v1, results, files


# ---------------------------------------------------------------------------------------- scenarios


def test_a_v1_healthy_then_rerun_is_a_new_job_that_changes_nothing(lab, tmp_path):
    sc = Scenario(lab, tmp_path, "a")
    try:
        v1 = deploy_v1(sc)
        assert v1["results"]["deploy_apply_result"]["changed"] is True
        before = {c["Id"]: c["State"]["StartedAt"] for c in sc.inspect()}
        first_evidence = sc.evidence_bytes(v1["results"])
        rc, recap, results, output = sc.play(sc.release())
        assert rc == 0, output[-4000:]
        assert recap["localhost"][1] == 0 and recap["localhost"][3] == 0, "re-run changed something:\n" + output
        assert {c["Id"]: c["State"]["StartedAt"] for c in sc.inspect()} == before
        # a new job, which kept the sticker bytes of the job that applied the release
        assert sc.job_id(results) != v1["job_id"]
        assert sc.sticker() == v1["sticker"]
        assert results["deploy_apply_result"]["changed"] is False
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "job.json"}
        job, target, _projection = assert_job_documents(sc, results, files)
        assert (job["status"], job["promotion"], job["rollback"]) == ("Succeeded", "Succeeded", None)
        # converged: nothing prepared, deployed, promoted or hooked; verified, recorded, the sticker kept
        assert phase_statuses(target) == [
            (name, "skipped" if name in ("prepare", "pre-deploy", "deploy", "promote", "post-deploy") else "succeeded")
            for name in PHASES
        ]
        assert (target["status"], target["appliedByJobId"]) == ("Succeeded", v1["job_id"])
        first_target = sc.evidence(v1["results"])["job.json"]["targets"]["localhost"]
        assert target["artifacts"]["versionStickerHash"] == first_target["artifacts"]["versionStickerHash"]
        deployment = files["deployment.json"]
        assert (deployment["status"], deployment["changed"], deployment["appliedByJobId"]) == (
            "succeeded",
            False,
            v1["job_id"],
        )
        # the first job's evidence is where it was, byte for byte, next to the new job's
        assert sc.evidence_bytes(v1["results"]) == first_evidence
        assert not set(sc.evidence_bytes(results)) & set(first_evidence)
    finally:
        sc.cleanup()


@pytest.fixture(scope="module")
def probe_failure_run(lab, tmp_path_factory):
    """Scenario b on localhost, run once; test_b asserts it and test_f reuses its registered results."""
    sc = Scenario(lab, tmp_path_factory.mktemp("b"), "b")
    try:
        v1, results, files = probe_failure_scenario(sc)
        yield {"sc": sc, "v1": v1, "results": results, "files": files}
    finally:
        sc.cleanup()


def test_b_failed_probe_rolls_back_to_v1(probe_failure_run):
    files = probe_failure_run["files"]
    assert files["rollback-evidence.json"]["failure"]["failureReason"].startswith(
        "Post-deploy health probe failed for component 'web'"
    )
    assert files["job.json"]["reason"].startswith(
        "target localhost: Post-deploy health probe failed for component 'web'"
    )
    assert probe_failure_run["results"]["deploy_restore_result"]["rollbackRestored"] is True


def test_c_unhealthy_image_rolls_back_to_v1(lab, tmp_path):
    sc = Scenario(lab, tmp_path, "c")
    try:
        v1 = deploy_v1(sc)
        rc, recap, results, output = sc.play(sc.release("app_broken", "1.1.0-broken"), wait_timeout=20)
        apply = results["deploy_apply_result"]
        assert apply["failurePhase"] in ("compose_up", "inspect_services"), apply.get("msg")
        files = assert_rolled_back_to_v1(
            sc, v1, results, rc, recap, output, "app_broken", "deploy", STEP_PHASE[apply["failurePhase"]]
        )
        assert files["deployment.json"]["failure"]["failurePhase"] == apply["failurePhase"]
        assert results["deploy_probe_result"] is None, "the probe ran after a failed apply"
        target = files["job.json"]["targets"]["localhost"]
        assert target["code"] == apply["code"] == files["deployment.json"]["failure"]["code"]
    finally:
        sc.cleanup()


def test_d_first_deploy_failing_attempts_its_rollback_which_fails_at_revision_resolution(lab, tmp_path):
    """The contract's retained-revision rule: a ComposeHost target whose task ran and changed it is
    eligible; with no revision retained (a first deploy) its agent fails at revision resolution, and the
    job says so (auto-rollback failed), with the rollback's evidence: never RolledBack."""
    sc = Scenario(lab, tmp_path, "d")
    try:
        rc, recap, results, output = sc.play(sc.release("app_broken", "1.0.0-broken"), wait_timeout=20)
        job_id = sc.job_id(results)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert "previousRevisionPath" not in results["deploy_apply_result"]
        assert results["deploy_job_finish"]["rollbackOrder"] == ["localhost"]
        assert rollback_ran(results), "the eligible target's rollback did not run"
        restore = results["deploy_restore_result"]
        assert (restore["failed"], restore["code"], restore["failurePhase"]) == (
            True,
            "no_revision",
            "resolve_revision",
        )
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "job.json", "rollback-evidence.json"}, sorted(files)
        job, target, projection = assert_job_documents(sc, results, files)
        assert (job["status"], job["promotion"], job["isRollback"]) == ("Failed", "Failed", True)
        assert job["reason"].startswith(
            "target localhost: %s; auto-rollback failed: localhost: no_revision: " % (target["reason"])
        ), job["reason"]
        assert (job["rollback"]["attempted"], job["rollback"]["status"]) == (True, "failed")
        assert [e["kind"] for e in job["events"]] == ["RollbackStarted", "RollbackFailed"]
        assert (target["status"], target["code"]) == ("Failed", results["deploy_apply_result"]["code"])
        assert target["rollbackError"].startswith("no_revision: "), target["rollbackError"]
        assert phase_statuses(target)[-1] == (STEP_PHASE[results["deploy_apply_result"]["failurePhase"]], "failed")
        assert "previousRevisionPath" not in target and "statusBeforeRollback" not in target
        assert projection["strategyEvidence"]["rollback.attempted"] is True
        assert projection["strategyEvidence"]["rollback.evidence.id"] == "jobs/%s/rollback-evidence.json" % job_id
        assert files["deployment.json"]["status"] == "failed"
        assert "job %s Failed: " % job_id in output, output[-4000:]
        assert "RolledBack" not in output

        # the same without an evidence directory: the job store keeps the packet, so it is named, and
        # the id is the packet's document in the store, whose bytes hash as the projection says
        rc, _recap, again, output = sc.play(
            sc.release("app_broken", "1.0.0-broken"), wait_timeout=20, extra_vars={"evidence_dir": ""}
        )
        assert rc != 0 and rollback_ran(again), output[-4000:]
        again_id = sc.job_id(again)
        _record, projection = sc.stored(again_id)
        strategy = projection["strategyEvidence"]
        packet = "jobs/%s/rollback-evidence.json" % again_id
        assert (strategy["rollback.attempted"], strategy["rollback.evidence.id"]) == (True, packet)
        assert set(strategy["evidenceFiles"]) == {"job.json", "rollback-evidence.json"}
        assert strategy["rollback.evidence.proofStatus"] == "incomplete"
        store = open_store(sc.job_store)
        try:
            data = store.document(again_id, packet)
        finally:
            store.close()
        assert strategy["evidenceFiles"]["rollback-evidence.json"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert not os.path.exists(os.path.join(str(sc.evidence_dir), "jobs", again_id))
    finally:
        sc.cleanup()


def test_e_failed_probe_rolls_back_on_a_target_over_ssh(lab, tmp_path, target_factory):
    host = target_factory("role-deploy")
    sc = Scenario(lab, tmp_path, "e", host=host)
    try:
        v1, results, files = probe_failure_scenario(sc)
        assert results["deploy_apply_result"]["targetEndpoint"] == "ssh://%s" % host["address"]
        assert files["deployment.json"]["health"]["probe"][
            "healthProbe.web.endpoint"
        ] == "http://%s:%d/no-such-page" % (host["address"], sc.port)
        assert v1["record"]["target"]["targetEndpoint"] == "ssh://%s" % host["address"]
        target = files["job.json"]["targets"][host["name"]]
        assert (target["targetName"], target["targetType"]) == (host["name"], "ComposeHost")
        # nothing of this project runs on the controller's engine
        assert ar.project_containers(sc.project) == {}
    finally:
        sc.cleanup()


def test_g_failed_rollback_is_recorded_as_rollback_failed(lab, tmp_path):
    """v2's post-deploy hook tampers the retained v1 revision, then v2's probe fails: the rollback
    refuses the revision, and neither the job, its evidence nor the play may claim that v1 was restored."""
    sc = Scenario(lab, tmp_path, "g")
    try:
        deploy_v1(sc)
        tamper = {
            "name": "tamper-baseline",
            "phase": "post-deploy",
            "command": "for f in revisions/*/compose.stella.lock.yml; do echo '# tampered' >> \"$f\"; done",
        }
        rc, recap, results, output = sc.play(
            sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=1, hooks=[tamper])
        )
        job_id = sc.job_id(results)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert results["deploy_restore_result"]["rollbackRestored"] is False
        assert results["deploy_restore_result"]["code"] == "revision_tampered"
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "job.json", "rollback-evidence.json"}
        job, target, projection = assert_job_documents(sc, results, files)
        assert (job["status"], job["promotion"], job["isRollback"]) == ("Failed", "Failed", True), job["reason"]
        assert target["status"] == "Failed" and "statusBeforeRollback" not in target
        assert target["rollbackError"].startswith("revision_tampered: "), target["rollbackError"]
        assert target["rollback"]["succeeded"] is False
        original = "target localhost: %s" % target["reason"]
        assert job["reason"] == "%s; auto-rollback failed: localhost: %s" % (original, target["rollbackError"]), job[
            "reason"
        ]
        assert (job["rollback"]["attempted"], job["rollback"]["status"]) == (True, "failed")
        assert [e["kind"] for e in job["events"]] == ["RollbackStarted", "RollbackFailed"]
        assert ("rollback-pre", "failed") in phase_statuses(target, "rollbackPhases"), target.get("rollbackPhases")
        evidence = files["rollback-evidence.json"]
        assert evidence["proofStatus"] == "incomplete"
        assert [e["status"] for e in evidence["rollbackOrder"]] == ["failed"]
        assert projection["strategyEvidence"]["rollback.status"] == "failed"
        assert projection["strategyEvidence"]["rollback.evidence.proofStatus"] == "incomplete"
        assert "job %s Failed: " % job_id in output, output[-4000:]
        assert "RolledBack" not in output
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v2"])
    finally:
        sc.cleanup()


def test_h_rollback_disabled_leaves_v2_and_says_why(lab, tmp_path):
    """deploy_rollback_on_failure=false: a revision is retained but no rollback runs; the job records
    the opt-out as the reason it skipped the rollback, not a missing revision."""
    sc = Scenario(lab, tmp_path, "h")
    try:
        deploy_v1(sc)
        rc, recap, results, output = sc.play(
            sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=1), rollback_on_failure=False
        )
        job_id = sc.job_id(results)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert results["deploy_apply_result"]["previousRevisionPath"]
        assert not rollback_ran(results)
        assert results["deploy_job_finish"]["rollbackOrder"] == []
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "job.json"}
        job, target, _projection = assert_job_documents(sc, results, files)
        assert (job["status"], job["promotion"], job["isRollback"]) == ("Failed", "Failed", False)
        assert job["options"]["autoRollbackOnFailure"] is False
        assert job["rollback"] == {
            "attempted": False,
            "skipReason": "autoRollbackOnFailure=false",
            "source": "override",
        }
        assert job["reason"] == "target localhost: %s" % target["reason"], job["reason"]
        assert "auto-rollback" not in job["reason"]
        assert job["events"] == []
        assert target["status"] == "Failed" and "rollbackPhases" not in target
        assert target["previousRevisionPath"] == results["deploy_apply_result"]["previousRevisionPath"]
        assert "job %s Failed: " % job_id in output, output[-4000:]
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v2"])
        assert json.loads(sc.sticker())["jobId"] == job_id
    finally:
        sc.cleanup()


def test_j_keep_revisions_prunes_the_oldest_retained_revision(lab, tmp_path):
    """deploy_keep_revisions=1: v1, v2, then v1 again retain v1's and then v2's revision; only v2's stays,
    and it is the baseline the last apply reports and its job records."""
    sc = Scenario(lab, tmp_path, "j")
    revisions = os.path.join(sc.project_dir, "revisions")
    job_ids = []
    try:
        for image_key, version in (("app_v1", "1.0.0"), ("app_v2", "2.0.0"), ("app_v1", "1.0.0")):
            rc, recap, results, output = sc.play(sc.release(image_key, version), keep_revisions=1)
            assert rc == 0 and recap["localhost"][3] == 0, output[-4000:]
            assert results["deploy_apply_result"]["changed"] is True
            job_ids.append(sc.job_id(results))
        assert len(set(job_ids)) == 3, job_ids
        [kept] = os.listdir(revisions)
        with open(os.path.join(revisions, kept, "stella.version.json"), encoding="utf-8") as handle:
            assert json.load(handle)["release"]["version"] == "2.0.0"
        assert results["deploy_apply_result"]["previousRevisionPath"] == os.path.join(revisions, kept)
        job = sc.evidence(results)["job.json"]
        assert job["options"]["keepRevisions"] == 1
        assert job["targets"]["localhost"]["previousRevisionPath"] == os.path.join(revisions, kept)
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v1"])
    finally:
        sc.cleanup()


def test_k_same_release_twice_the_failed_second_job_leaves_the_first_jobs_evidence(lab, tmp_path):
    """The same release twice: the first job succeeds; then its container goes away and another process
    takes its published port, so the second job's apply fails. The two runs are two jobs, each with its
    own evidence directories, and the first job's deployment.json and job.json stay byte for byte."""
    sc = Scenario(lab, tmp_path, "k")
    squatter = "%s-squatter" % sc.project  # not of the Compose project: sc.inspect() does not see it
    try:
        first = deploy_v1(sc)
        first_files = sc.evidence_bytes(first["results"])
        assert set(first_files) == {
            "%s/%s/%s/deployment.json" % (sc.project, first["job_id"], sc.target["id"]),
            "jobs/%s/job.json" % first["job_id"],
        }, sorted(first_files)
        # the deployed container goes away and another container takes its published port
        [container] = sc.inspect()
        subprocess.run(
            list(sc.docker_argv) + ["rm", "-f", container["Id"]], capture_output=True, check=True, timeout=120
        )
        subprocess.run(
            list(sc.docker_argv) + ["run", "-d", "--name", squatter, "-p", sc.publish, container["Image"]],
            capture_output=True,
            check=True,
            timeout=120,
        )

        rc, recap, results, output = sc.play(sc.release())
        second_id = sc.job_id(results)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert second_id != first["job_id"]
        assert sc.plan(results)["manifestHash"] == sc.plan(first["results"])["manifestHash"], "not the same release"
        apply = results["deploy_apply_result"]
        assert apply["failed"] is True and STEP_PHASE[apply["failurePhase"]] == "deploy", apply.get("msg")
        assert str(sc.port) in apply["msg"], apply["msg"]
        # two jobs, each with its own evidence directories
        second_dirs, first_dirs = sc.evidence_dirs(results), sc.evidence_dirs(first["results"])
        assert not set(second_dirs) & set(first_dirs)
        assert second_dirs == (
            os.path.join(sc.evidence_dir, sc.project, second_id, sc.target["id"]),
            os.path.join(sc.evidence_dir, "jobs", second_id),
        )
        assert "job %s Failed: " % second_id in output, output[-4000:]
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "job.json", "rollback-evidence.json"}
        job, target, _projection = assert_job_documents(sc, results, files)
        assert (target["status"], target["code"]) == ("Failed", apply["code"])
        assert phase_statuses(target) == [
            ("preflight", "succeeded"),
            ("prepare", "succeeded"),
            ("pre-deploy", "succeeded"),
            ("deploy", "failed"),
        ]
        # the revision this job retained (the same release) cannot come up on the taken port either
        assert target["previousRevisionPath"] == apply["previousRevisionPath"]
        assert (job["status"], job["promotion"], job["isRollback"]) == ("Failed", "Failed", True)
        assert (job["rollback"]["attempted"], job["rollback"]["status"]) == (True, "failed")
        assert job["reason"] == "target localhost: %s; auto-rollback failed: localhost: %s" % (
            target["reason"],
            target["rollbackError"],
        ), job["reason"]
        assert files["rollback-evidence.json"]["proofStatus"] == "incomplete"
        deployment = files["deployment.json"]
        assert (deployment["status"], deployment["deploymentId"]) == ("failed", second_id)
        assert deployment["failure"]["stage"] == "deploy"
        # the first job's evidence: unchanged, and still the first job's
        assert sc.evidence_bytes(first["results"]) == first_files
        first_job, _projection = sc.stored(first["job_id"])
        assert first_job["status"] == "Succeeded"
        assert set(os.listdir(os.path.join(sc.evidence_dir, sc.project))) == {first["job_id"], second_id}
        assert set(os.listdir(os.path.join(sc.evidence_dir, "jobs"))) == {first["job_id"], second_id}
    finally:
        subprocess.run(list(sc.docker_argv) + ["rm", "-f", squatter], capture_output=True, check=False, timeout=120)
        sc.cleanup()


# ---------------------------------------------------------------------------------------- f: stable digests

DIGEST_SCRIPT = r"""
import json, sys
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import digest_json
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.deployment import deployment_record, preflight_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.view import job_evidence, rollback_evidence
inputs = json.load(open(sys.argv[1]))
dep = deployment_record(inputs["plan"], inputs["apply"], inputs["createdAt"],
                        preflight=preflight_evidence(inputs["apply"]), probe=inputs["probe"])
job = job_evidence(inputs["job"])
ev = rollback_evidence(inputs["job"])
print(json.dumps({"evidenceDigest": dep["evidenceDigest"], "jobEvidenceDigest": job["evidenceDigest"],
                  "proofDigest": ev["proofDigest"], "orderProofDigest": ev["orderProofDigest"],
                  "hash": digest_json(ev)}))
"""


def test_f_evidence_digests_are_stable(probe_failure_run, tmp_path):
    sc, results, files = probe_failure_run["sc"], probe_failure_run["results"], probe_failure_run["files"]
    plan = sc.plan(results)
    apply, probe = clean(results["deploy_apply_result"]), clean(results["deploy_probe_result"])
    job = results["deploy_job_closed"]["job"]
    stored_dep, stored_job, stored_ev = files["deployment.json"], files["job.json"], files["rollback-evidence.json"]

    # built twice in this process from the registered results: equal, and equal to what the role wrote
    first = deployment_record(plan, apply, stored_dep["createdAt"], preflight=preflight_evidence(apply), probe=probe)
    second = deployment_record(
        copy.deepcopy(plan),
        copy.deepcopy(apply),
        "1999-01-01T00:00:00Z",
        preflight=preflight_evidence(copy.deepcopy(apply)),
        probe=copy.deepcopy(probe),
    )
    assert first == stored_dep
    assert second["evidenceDigest"] == first["evidenceDigest"] == stored_dep["evidenceDigest"]
    assert job_evidence(job) == stored_job
    volatile = dict(copy.deepcopy(job), createdAt="1999-01-01T00:00:00Z", updatedAt="1999-01-01T00:00:00Z", owner=None)
    assert job_evidence(volatile)["evidenceDigest"] == stored_job["evidenceDigest"]
    assert rollback_evidence(job) == stored_ev
    later = copy.deepcopy(job)
    later["rollback"]["completedAt"] = "2000-01-01T00:00:00Z"  # the rollback evidence's createdAt
    ev2 = rollback_evidence(later)
    assert ev2["createdAt"] != stored_ev["createdAt"]
    assert (ev2["proofDigest"], ev2["orderProofDigest"]) == (stored_ev["proofDigest"], stored_ev["orderProofDigest"])
    assert stored_ev["rollbackOrder"][0]["completedAt"] == job["targets"]["localhost"]["rollback"]["completedAt"]

    # in subprocesses with different hash seeds
    path = tmp_path / "inputs.json"
    path.write_text(
        json.dumps({"plan": plan, "apply": apply, "probe": probe, "job": job, "createdAt": stored_dep["createdAt"]})
    )
    outputs = []
    for seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=ar.COLLECTIONS)
        proc = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT, str(path)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]["evidenceDigest"] == stored_dep["evidenceDigest"]
    assert outputs[0]["jobEvidenceDigest"] == stored_job["evidenceDigest"]
    assert outputs[0]["proofDigest"] == stored_ev["proofDigest"]
    assert outputs[0]["orderProofDigest"] == stored_ev["orderProofDigest"]
    _record, projection = sc.stored(job["jobId"])
    assert outputs[0]["hash"] == projection["strategyEvidence"]["rollback.evidence.hash"]


def test_i_release_with_secret_env_deploys_and_its_secret_stays_on_the_target(lab, tmp_path):
    """A release with secretEnv: the role hands it to the target, which renders .env.stella (0600) exactly
    as planned; the container gets the value; the value is in no output, result, evidence file or job store."""
    sc = Scenario(lab, tmp_path, "i")
    secret = "s3cr3t-%s" % uuid.uuid4().hex
    try:
        release = sc.release()
        release["secretEnv"] = {"APP_TOKEN": secret}
        rc, recap, results, output = sc.play(release)
        assert rc == 0 and recap["localhost"][3] == 0, output[-4000:]
        assert results["deploy_apply_result"]["failed"] is False and results["deploy_apply_result"]["changed"] is True
        env_path = os.path.join(sc.project_dir, ".env.stella")
        assert oct(os.stat(env_path).st_mode & 0o777) == "0o600"
        with open(env_path, encoding="utf-8") as handle:
            assert handle.read() == 'APP_TOKEN="%s"\n' % secret
        [container] = sc.inspect()
        assert "APP_TOKEN=%s" % secret in container["Config"]["Env"]
        files = sc.evidence(results)
        assert files["deployment.json"]["status"] == "succeeded" and files["job.json"]["status"] == "Succeeded"
        first_job = sc.job_id(results)
        # the same release again: a new job, nothing changes
        rc, recap, again, output2 = sc.play(release)
        assert rc == 0 and again["deploy_apply_result"]["changed"] is False, output2[-2000:]
        assert recap["localhost"][1] == 0, output2[-2000:]
        assert sc.job_id(again) != first_job
        for text in (output, output2, json.dumps(results), json.dumps(again)):
            assert secret not in text
        for root, _dirs, names in os.walk(sc.evidence_dir):
            for name in names:
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    assert secret not in handle.read(), name
        for name in os.listdir(str(tmp_path)):
            if name.startswith(os.path.basename(sc.job_store)):
                with open(os.path.join(str(tmp_path), name), "rb") as handle:
                    assert secret.encode() not in handle.read(), name
    finally:
        sc.cleanup()


def test_l_the_role_honours_the_release_strategy_config_and_runs_its_traffic_step(lab, tmp_path):
    """A blue-green release through the role, its strategyConfig asking for no automatic rollback and
    requiring a traffic adapter it does not name; the role's own rollback variable left unset. The role runs
    the traffic step: the missing adapter closes the gate, so the job never ends Succeeded without traffic
    evidence; it fails with traffic_adapter_missing, and no rollback runs, as the release asked."""
    sc = Scenario(lab, tmp_path, "l")
    try:
        release = sc.release()
        release.update(
            strategy="blue-green", strategyConfig={"requireTrafficAdapter": True, "autoRollbackOnFailure": False}
        )
        rc, recap, results, output = sc.play(release, rollback_on_failure=None)
        sc.project = sc.plan(results)["projectName"]  # the green slot's project
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        job, _projection = sc.stored(sc.job_id(results))
        assert (job["status"], job["code"]) == ("Failed", "traffic_adapter_missing"), (job["status"], job["reason"])
        assert job["targets"]["localhost"]["status"] == "Succeeded"  # the target itself deployed
        assert [g["proceed"] for g in job["gates"]] == [False]
        assert job["traffic"] and job["traffic"][0]["evidence"]["strategy.traffic.shifted"] is False
        assert job["options"]["autoRollbackOnFailure"] is False
        assert job["options"]["autoRollbackSource"] == "strategyConfig.autoRollbackOnFailure"
        assert job["rollback"]["skipReason"] == "autoRollbackOnFailure=false"
        assert not rollback_ran(results)
    finally:
        sc.cleanup()
