"""The ``stellaops.runtime.deploy`` role through the real ``ansible-playbook`` (issue 5, operator level).

Each scenario deploys with ``tests/integration/playbooks/deploy_role.yml`` (the role, the release passed
as extra vars from a JSON file) on localhost (``-c local``) or on a DinD lab target over SSH, then reads
the evidence the role wrote on the controller and the state of the target's engine. Every scenario has
its own tenant/application (so its own Compose project) and removes its project in a ``finally`` block.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

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

from ansible_collections.stellaops.runtime.plugins.action.stella_evidence import _clean as clean
from ansible_collections.stellaops.runtime.plugins.plugin_utils._evidence import (
    deployment_record,
    rollback_records,
    verify_record,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils._rollback_evidence import verify_rollback_evidence

ROOT = ar.ROOT
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "deploy_role.yml")
TARGET_WORK = "/var/lib/stella-role-it"
PROBE_KEYS = {"healthProbe.status", "healthProbe.count", "healthProbe.web.endpoint", "healthProbe.web.healthy",
              "healthProbe.web.attempts", "healthProbe.web.observed"}
SKIP_REASON = "no target retained a previous revision to restore"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def free_loopback_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Scenario:
    """One tenant/application (one Compose project) on localhost (``host=None``) or a lab target."""

    def __init__(self, lab, tmp_path, name, host=None):
        self.lab, self.host, self.tmp = lab, host, tmp_path
        self.application = "%s-%s" % (name, uuid.uuid4().hex[:8])
        self.tenant = "role-it"
        self.evidence_dir = str(tmp_path / "evidence")
        self.runs = 0
        if host is None:
            self.work = str(tmp_path / "work")
            os.makedirs(self.work)
            self.refs = {k: v["loopback_ref"] for k, v in lab["images"].items() if "loopback_ref" in v}
            self.target = {"id": "tgt-local", "name": "localhost", "type": "ComposeHost", "endpoint": "local",
                           "executionMode": "local"}
            self.port = free_loopback_port()
            self.publish = "127.0.0.1:%d:8080" % self.port
            self.docker_argv = ("docker",)
            self.insecure = []
        else:
            self.work = TARGET_WORK
            self.refs = {k: v["ref"] for k, v in lab["images"].items()}
            self.target = {"id": "tgt-" + host["name"], "name": host["name"], "type": "ComposeHost",
                           "endpoint": "ssh://root@%s" % host["address"], "executionMode": "ssh"}
            self.port = 20000 + int(uuid.uuid4().hex[:4], 16) % 20000
            self.publish = "%d:8080" % self.port
            self.docker_argv = tuple(labkit.ssh_argv(host)) + ("docker",)
            self.insecure = [lab["registries"]["shared"]["address"]]
        self.project = "%s_test_%s_%s" % (self.tenant, self.target["id"], self.application)
        self.project_dir = os.path.join(self.work, self.project)
        self.digests = {k: v["digest"] for k, v in lab["images"].items()}

    # ------------------------------------------------------------------ release and play
    def release(self, image_key="app_v1", version="1.0.0", probe_path="/", hooks=None, attempts=5):
        config = {"healthProbe.type": "http", "healthProbe.attempts": attempts, "healthProbe.intervalSeconds": 1,
                  "healthProbe.timeoutSeconds": 3}
        if self.host is None:
            config["healthProbe.url"] = "http://127.0.0.1:%d%s" % (self.port, probe_path)
        else:  # host from the target endpoint (ssh://root@<address>), the port published on the target
            config.update({"healthProbe.port": self.port, "healthProbe.path": probe_path})
        if image_key != "app_broken":  # the broken image keeps its own failing docker healthcheck
            config.update({"healthcheck.test": "wget -q -O- http://127.0.0.1:8080/", "healthcheck.interval": "1s",
                           "healthcheck.retries": 15})
        release = {
            "release": {"id": "rel-" + version.replace(".", "-"), "name": "app", "version": version},
            "tenant": self.tenant, "environment": "test", "application": self.application, "strategy": "rolling",
            "target": self.target, "workDirectory": self.work,
            "components": [{"name": "web", "image": self.refs[image_key], "ports": [self.publish], "config": config}],
        }
        if hooks:
            release["hooks"] = hooks
        return release

    def play(self, release, keep_results=True, wait_timeout=60, rollback_on_failure=True, keep_revisions=None):
        """Run the test playbook; return (rc, recap {host: (ok, changed, unreachable, failed)}, results, output)."""
        self.runs += 1
        run = self.tmp / ("run%d" % self.runs)
        run.mkdir()
        variables = {"release": release, "evidence_dir": self.evidence_dir, "insecure_registries": self.insecure,
                     "wait_timeout": wait_timeout, "rollback_on_failure": rollback_on_failure}
        if keep_revisions is not None:
            variables["keep_revisions"] = keep_revisions
        if keep_results:
            variables["results_file"] = str(run / "results.json")
        (run / "vars.json").write_text(json.dumps(variables))
        argv = [os.path.join(ar.VENV_BIN, "ansible-playbook")]
        if self.host is None:
            argv += ["-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" +
                     os.path.join(ar.VENV_BIN, "python")]
        else:
            (run / "inventory.ini").write_text(ar.inventory_text(self.host))
            argv += ["-i", str(run / "inventory.ini")]
        argv += ["-e", "@" + str(run / "vars.json"), PLAYBOOK]
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="default",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_HOST_KEY_CHECKING="False")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
        output = proc.stdout + proc.stderr
        (run / "output.txt").write_text(output)
        recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(proc.stdout)}
        assert recap, "ansible-playbook printed no PLAY RECAP (rc=%d):\n%s" % (proc.returncode, output[-4000:])
        results = json.loads((run / "results.json").read_text()) if keep_results else None
        return proc.returncode, recap, results, output

    # ------------------------------------------------------------------ evidence on the controller
    def evidence(self, results):
        plan = results["plan"]
        directory = os.path.join(self.evidence_dir, plan["projectName"], plan["jobId"])
        return {name: json.load(open(os.path.join(directory, name), encoding="utf-8"))
                for name in sorted(os.listdir(directory))}

    # ------------------------------------------------------------------ target state
    def inspect(self):
        ids = subprocess.run(list(self.docker_argv) + ["ps", "-aq", "--no-trunc", "--filter",
                                                       "label=com.docker.compose.project=%s" % self.project],
                             capture_output=True, text=True, check=True, timeout=120).stdout.split()
        if not ids:
            return []
        return json.loads(subprocess.run(list(self.docker_argv) + ["inspect"] + ids, capture_output=True, text=True,
                                         check=True, timeout=120).stdout)

    def sticker(self):
        path = os.path.join(self.project_dir, "stella.version.json")
        if self.host is None:
            with open(path, "rb") as handle:
                return handle.read()
        return subprocess.run(labkit.ssh_argv(self.host, "cat", path), capture_output=True, check=True,
                              timeout=120).stdout

    def cleanup(self):
        subprocess.run(list(self.docker_argv) + ["compose", "-p", self.project, "down", "-v", "-t", "1",
                                                 "--remove-orphans"], capture_output=True, check=False, timeout=300)
        if self.host is None:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            subprocess.run(labkit.ssh_argv(self.host, "rm", "-rf", self.project_dir), capture_output=True,
                           check=False, timeout=120)


def stella_labels(container):
    return {k: v for k, v in container["Config"]["Labels"].items() if k.startswith("stella.")}


def assert_v1_succeeded(sc, rc, recap, results, output):
    host = sc.host["name"] if sc.host else "localhost"
    assert rc == 0 and recap[host][3] == 0, output[-4000:]
    record = sc.evidence(results)["deployment.json"]
    assert record["evidenceVersion"] == "stella.deployment.evidence.v1"
    assert record["status"] == "succeeded", record["failure"]
    assert record["failure"] is None
    assert record["successBoundary"] == {"preflightPassed": True, "imagesPinnedAndPulled": True,
                                         "workloadRunning": True, "runtimeVerified": True, "stickerRecorded": True,
                                         "serviceHealthVerified": True}
    probe = record["health"]["probe"]
    assert set(probe) == PROBE_KEYS
    assert probe["healthProbe.status"] == "passed" and probe["healthProbe.count"] == 1
    assert probe["healthProbe.web.healthy"] is True and probe["healthProbe.web.observed"] == "200"
    host_part = "127.0.0.1" if sc.host is None else sc.host["address"]
    assert probe["healthProbe.web.endpoint"] == "http://%s:%d/" % (host_part, sc.port)
    assert record["containers"][0]["imageDigest"] == sc.digests["app_v1"]
    assert record["projectName"] == sc.project and record["services"] == ["web"]
    assert record["rollbackBaseline"] is None
    assert verify_record(record)
    return record


def assert_rolled_back_to_v1(sc, v1, failed_results, rc, recap, output, current_key, stage):
    """The play failed for the host, v1 runs again and the three evidence files prove it."""
    host = sc.host["name"] if sc.host else "localhost"
    assert rc != 0 and recap[host][3] == 1, output[-4000:]
    assert "rolled back to" in output
    containers = sc.inspect()
    assert len(containers) == 1
    container = containers[0]
    assert container["State"]["Status"] == "running"
    assert container["State"]["Health"]["Status"] == "healthy"
    assert container["Config"]["Image"].endswith("@" + sc.digests["app_v1"]), container["Config"]["Image"]
    assert stella_labels(container) == v1["labels"]
    assert container["Config"]["Labels"]["stella.manifest.hash"] == v1["results"]["plan"]["manifestHash"]
    assert container["Config"]["Labels"]["stella.release.version"] == "1.0.0"
    assert sc.sticker() == v1["sticker"], "the sticker on the target is not v1's"

    files = sc.evidence(failed_results)
    assert set(files) == {"deployment.json", "rollback-evidence.json", "recovery.json"}
    evidence = files["rollback-evidence.json"]
    assert evidence["evidenceVersion"] == "release.rollback.evidence.v1"
    assert evidence["proofStatus"] == "complete"
    assert evidence["orderProofStatus"] == "complete"
    [target] = evidence["targets"]
    assert target["hasDigestProof"] is True and target["missingProofReason"] is None
    assert target["currentDigest"] == sc.digests[current_key]
    assert target["rollbackDigest"] == sc.digests["app_v1"]
    assert target["targetId"] == sc.target["id"]
    assert verify_rollback_evidence(evidence) == []
    recovery = files["recovery.json"]
    assert recovery["deploymentStatus"] == "failed" and recovery["recoveryStatus"] == "rolled_back"
    assert recovery["reason"].endswith("(auto-rollback restored the retained previous revision)")
    assert recovery["strategyEvidence"]["rollback.evidence.proofDigest"] == evidence["proofDigest"]
    assert recovery["strategyEvidence"]["rollback.evidence.orderProofDigest"] == evidence["orderProofDigest"]
    deployment = files["deployment.json"]
    assert deployment["status"] == "failed" and deployment["failure"]["stage"] == stage
    assert deployment["rollbackBaseline"] == failed_results["apply"]["previousRevisionPath"]
    assert verify_record(deployment)
    return files


def deploy_v1(sc):
    rc, recap, results, output = sc.play(sc.release())
    record = assert_v1_succeeded(sc, rc, recap, results, output)
    [container] = sc.inspect()
    return {"results": results, "record": record, "labels": stella_labels(container), "sticker": sc.sticker()}


def probe_failure_scenario(sc):
    """v1 healthy, then v2 whose container is healthy but whose probe path 404s."""
    v1 = deploy_v1(sc)
    rc, recap, results, output = sc.play(sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=2))
    files = assert_rolled_back_to_v1(sc, v1, results, rc, recap, output, "app_v2", "verify")
    deployment = files["deployment.json"]
    assert deployment["failure"]["code"] == "health_probe_failed"
    assert deployment["successBoundary"]["serviceHealthVerified"] is False
    assert deployment["health"]["probe"]["healthProbe.web.observed"] == "404"
    assert "Post-deploy health probe failed for component 'web'" in files["recovery.json"]["originalFailureReason"]
    return v1, results, files


# ---------------------------------------------------------------------------------------- scenarios

def test_a_v1_healthy_then_rerun_changes_nothing(lab, tmp_path):
    sc = Scenario(lab, tmp_path, "a")
    try:
        v1 = deploy_v1(sc)
        assert v1["results"]["apply"]["changed"] is True
        before = {c["Id"]: c["State"]["StartedAt"] for c in sc.inspect()}
        rc, recap, _results, output = sc.play(sc.release(), keep_results=False)
        assert rc == 0, output[-4000:]
        assert recap["localhost"][1] == 0 and recap["localhost"][3] == 0, "re-run changed something:\n" + output
        assert {c["Id"]: c["State"]["StartedAt"] for c in sc.inspect()} == before
    finally:
        sc.cleanup()


@pytest.fixture(scope="module")
def probe_failure_run(lab, tmp_path_factory):
    """Scenario b on localhost, run once; test_b asserts it and test_f reuses its registered results."""
    sc = Scenario(lab, tmp_path_factory.mktemp("b"), "b")
    try:
        v1, results, files = probe_failure_scenario(sc)
        yield {"v1": v1, "results": results, "files": files}
    finally:
        sc.cleanup()


def test_b_failed_probe_rolls_back_to_v1(probe_failure_run):
    files = probe_failure_run["files"]
    assert files["rollback-evidence.json"]["failure"]["failureReason"].startswith(
        "Post-deploy health probe failed for component 'web'")
    assert probe_failure_run["results"]["rollback"]["rollbackRestored"] is True


def test_c_unhealthy_image_rolls_back_to_v1(lab, tmp_path):
    sc = Scenario(lab, tmp_path, "c")
    try:
        v1 = deploy_v1(sc)
        rc, recap, results, output = sc.play(sc.release("app_broken", "1.1.0-broken"), wait_timeout=20)
        files = assert_rolled_back_to_v1(sc, v1, results, rc, recap, output, "app_broken", "deploy")
        assert results["apply"]["failurePhase"] in ("compose_up", "inspect_services")
        assert files["deployment.json"]["failure"]["failurePhase"] == results["apply"]["failurePhase"]
        assert results["probe"] is None, "the probe ran after a failed apply"
    finally:
        sc.cleanup()


def test_d_first_deploy_failing_skips_rollback(lab, tmp_path):
    sc = Scenario(lab, tmp_path, "d")
    try:
        rc, recap, results, output = sc.play(sc.release("app_broken", "1.0.0-broken"), wait_timeout=20)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert results["rollback"]["skipped"] is True, "a rollback ran without a retained revision"
        assert "previousRevisionPath" not in results["apply"]
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "recovery.json"}, "rollback evidence without a rollback"
        recovery = files["recovery.json"]
        assert recovery["deploymentStatus"] == "failed"
        assert recovery["recoveryStatus"] == "rollback_skipped"
        assert recovery["reason"] == recovery["originalFailureReason"] + " (auto-rollback skipped: %s)" % SKIP_REASON
        assert "strategyEvidence" not in recovery
        assert files["deployment.json"]["status"] == "failed"
        assert "rolled back to" not in output
    finally:
        sc.cleanup()


def test_e_failed_probe_rolls_back_on_a_target_over_ssh(lab, tmp_path, target_factory):
    host = target_factory("role-deploy")
    sc = Scenario(lab, tmp_path, "e", host=host)
    try:
        v1, results, files = probe_failure_scenario(sc)
        assert results["apply"]["targetEndpoint"] == "ssh://%s" % host["address"]
        assert files["deployment.json"]["health"]["probe"]["healthProbe.web.endpoint"] == \
            "http://%s:%d/no-such-page" % (host["address"], sc.port)
        assert v1["record"]["target"]["targetEndpoint"] == "ssh://%s" % host["address"]
        # nothing of this project runs on the controller's engine
        assert ar.project_containers(sc.project) == {}
    finally:
        sc.cleanup()


def test_g_failed_rollback_is_recorded_as_rollback_failed(lab, tmp_path):
    """v2's post-deploy hook tampers the retained v1 revision, then v2's probe fails: the rollback
    refuses the revision, and neither the evidence nor the play may claim that v1 was restored."""
    sc = Scenario(lab, tmp_path, "g")
    try:
        deploy_v1(sc)
        tamper = {"name": "tamper-baseline", "phase": "post-deploy",
                  "command": "for f in revisions/*/compose.stella.lock.yml; do echo '# tampered' >> \"$f\"; done"}
        rc, recap, results, output = sc.play(sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=1,
                                                        hooks=[tamper]))
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert results["rollback"]["rollbackRestored"] is False
        assert results["rollback"]["code"] == "revision_tampered"
        files = sc.evidence(results)
        recovery = files["recovery.json"]
        assert recovery["recoveryStatus"] == "rollback_failed", recovery
        assert "; auto-rollback failed: " in recovery["reason"]
        assert files["rollback-evidence.json"]["proofStatus"] == "incomplete"
        assert "rolled back to" not in output
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v2"])
    finally:
        sc.cleanup()


def test_h_rollback_disabled_leaves_v2_and_says_why(lab, tmp_path):
    """deploy_rollback_on_failure=false: a revision is retained but no rollback runs; the recovery
    record gives the opt-out as the skip reason, not a missing revision."""
    sc = Scenario(lab, tmp_path, "h")
    try:
        deploy_v1(sc)
        rc, recap, results, output = sc.play(sc.release("app_v2", "2.0.0", probe_path="/no-such-page", attempts=1),
                                             rollback_on_failure=False)
        assert rc != 0 and recap["localhost"][3] == 1, output[-4000:]
        assert results["apply"]["previousRevisionPath"]
        assert results["rollback"]["skipped"] is True
        files = sc.evidence(results)
        assert set(files) == {"deployment.json", "recovery.json"}
        recovery = files["recovery.json"]
        assert recovery["recoveryStatus"] == "rollback_skipped"
        assert recovery["reason"].endswith("(auto-rollback skipped: autoRollbackOnFailure=false)"), recovery["reason"]
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v2"])
    finally:
        sc.cleanup()


def test_j_keep_revisions_prunes_the_oldest_retained_revision(lab, tmp_path):
    """deploy_keep_revisions=1: v1, v2, then v1 again retain v1's and then v2's revision; only v2's stays,
    and it is the baseline the last apply reports."""
    sc = Scenario(lab, tmp_path, "j")
    revisions = os.path.join(sc.project_dir, "revisions")
    try:
        for image_key, version in (("app_v1", "1.0.0"), ("app_v2", "2.0.0"), ("app_v1", "1.0.0")):
            rc, recap, results, output = sc.play(sc.release(image_key, version), keep_revisions=1)
            assert rc == 0 and recap["localhost"][3] == 0, output[-4000:]
            assert results["apply"]["changed"] is True
        [kept] = os.listdir(revisions)
        with open(os.path.join(revisions, kept, "stella.version.json"), encoding="utf-8") as handle:
            assert json.load(handle)["release"]["version"] == "2.0.0"
        assert results["apply"]["previousRevisionPath"] == os.path.join(revisions, kept)
        [container] = sc.inspect()
        assert container["Config"]["Image"].endswith("@" + sc.digests["app_v1"])
    finally:
        sc.cleanup()


# ---------------------------------------------------------------------------------------- f: stable digests

DIGEST_SCRIPT = r"""
import json, sys
from ansible_collections.stellaops.runtime.plugins.plugin_utils._evidence import deployment_record, rollback_records
inputs = json.load(open(sys.argv[1]))
dep = deployment_record(inputs["plan"], inputs["apply"], inputs["createdAt"], preflight=inputs["preflight"],
                        probe=inputs["probe"])
ev, rec = rollback_records(inputs["plan"], inputs["apply"], inputs["rollback"], inputs["rollbackCreatedAt"],
                           failed_probe=inputs["probe"], preflight=inputs["preflight"], timestamps=inputs["times"])
print(json.dumps({"evidenceDigest": dep["evidenceDigest"], "proofDigest": ev["proofDigest"],
                  "orderProofDigest": ev["orderProofDigest"], "hash": rec["strategyEvidence"]["rollback.evidence.hash"]}))
"""


def test_f_evidence_digests_are_stable(probe_failure_run, tmp_path):
    results, files = probe_failure_run["results"], probe_failure_run["files"]
    inputs = {name: clean(results[name]) for name in ("plan", "preflight", "apply", "probe", "rollback")}
    inputs["times"] = results["times"]
    assert set(inputs["times"]) == {"deployStartedAt", "deployCompletedAt", "rollbackStartedAt", "rollbackCompletedAt"}
    stored_dep, stored_ev = files["deployment.json"], files["rollback-evidence.json"]

    # built twice in this process from the registered results: equal, and equal to what the role wrote
    first = deployment_record(inputs["plan"], inputs["apply"], stored_dep["createdAt"], preflight=inputs["preflight"],
                              probe=inputs["probe"])
    second = deployment_record(json.loads(json.dumps(inputs["plan"])), json.loads(json.dumps(inputs["apply"])),
                               "1999-01-01T00:00:00Z", preflight=inputs["preflight"], probe=inputs["probe"])
    assert first == stored_dep
    assert second["evidenceDigest"] == first["evidenceDigest"] == stored_dep["evidenceDigest"]
    ev1, rec1 = rollback_records(inputs["plan"], inputs["apply"], inputs["rollback"], stored_ev["createdAt"],
                                 failed_probe=inputs["probe"], preflight=inputs["preflight"], timestamps=inputs["times"])
    ev2, _rec2 = rollback_records(inputs["plan"], inputs["apply"], inputs["rollback"], "2000-01-01T00:00:00Z",
                                  failed_probe=inputs["probe"], preflight=inputs["preflight"], timestamps=inputs["times"])
    assert ev1["rollbackOrder"][0]["completedAt"] == inputs["times"]["rollbackCompletedAt"]
    assert ev1 == stored_ev and rec1 == files["recovery.json"]
    assert (ev2["proofDigest"], ev2["orderProofDigest"]) == (stored_ev["proofDigest"], stored_ev["orderProofDigest"])

    # in subprocesses with different hash seeds
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps(dict(inputs, createdAt=stored_dep["createdAt"], rollbackCreatedAt=stored_ev["createdAt"])))
    outputs = []
    for seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=ar.COLLECTIONS)
        proc = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT, str(path)], capture_output=True, text=True,
                              env=env, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]["evidenceDigest"] == stored_dep["evidenceDigest"]
    assert outputs[0]["proofDigest"] == stored_ev["proofDigest"]
    assert outputs[0]["orderProofDigest"] == stored_ev["orderProofDigest"]
    assert outputs[0]["hash"] == files["recovery.json"]["strategyEvidence"]["rollback.evidence.hash"]


def test_i_release_with_secret_env_deploys_and_its_secret_stays_on_the_target(lab, tmp_path):
    """A release with secretEnv: the role hands it to the target, which renders .env.stella (0600) exactly
    as planned; the container gets the value; the value is in no output, result or evidence file."""
    sc = Scenario(lab, tmp_path, "i")
    secret = "s3cr3t-%s" % uuid.uuid4().hex
    try:
        release = sc.release()
        release["secretEnv"] = {"APP_TOKEN": secret}
        rc, recap, results, output = sc.play(release)
        assert rc == 0 and recap["localhost"][3] == 0, output[-4000:]
        assert results["apply"]["failed"] is False and results["apply"]["changed"] is True
        env_path = os.path.join(sc.project_dir, ".env.stella")
        assert oct(os.stat(env_path).st_mode & 0o777) == "0o600"
        with open(env_path, encoding="utf-8") as handle:
            assert handle.read() == 'APP_TOKEN="%s"\n' % secret
        [container] = sc.inspect()
        assert "APP_TOKEN=%s" % secret in container["Config"]["Env"]
        assert sc.evidence(results)["deployment.json"]["status"] == "succeeded"
        assert secret not in output and secret not in json.dumps(results)
        for root, _dirs, names in os.walk(sc.evidence_dir):
            for name in names:
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    assert secret not in handle.read(), name
        # the same release again: nothing changes
        rc, recap, results, output = sc.play(release)
        assert rc == 0 and results["apply"]["changed"] is False, output[-2000:]
    finally:
        sc.cleanup()
