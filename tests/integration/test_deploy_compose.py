"""stella_compose_deploy against the real Docker Engine and Compose v2 on this host (ansible -c local).

Artifacts always come from the real planner (``plan_release`` of release/plan.py) with digests from the lab's
registry. Each test uses its own Compose project and work directory and removes the project in a
``finally`` block. The lab must be up (``make lab``); without it every test fails with a clear message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

import ansible_run as ar
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import verify_artifact_set

UNKNOWN_DIGEST = "sha256:" + "1" * 64
# Where the Docker CLI looks for plugins on Linux, besides ~/.docker/cli-plugins
PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/local/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
)


@pytest.fixture(scope="module")
def lab():
    return ar.load_lab_json()


@pytest.fixture
def ctx(lab):
    """A unique project, its work directory, and a planner bound to the lab's digests."""
    project = "it-%s" % uuid.uuid4().hex[:10]
    work = tempfile.mkdtemp(prefix="stella-it-")
    images = lab["images"]
    resolved = {images[key]["loopback_ref"]: images[key]["digest"] for key in images if "loopback_ref" in images[key]}

    class Ctx:
        pass

    c = Ctx()
    c.project, c.work, c.images, c.resolved = project, work, images, resolved
    c.project_dir = os.path.join(work, project)

    def planned(image_key="app_v1", version="1.0.0", hooks=None, extra=None, **kw):
        comps = {"web": images[image_key]["loopback_ref"]}
        comps.update(extra or {})
        release = ar.release_input(project, comps, work, hooks=hooks, version=version, **kw)
        return ar.plan(release, resolved)

    def deploy(planned_release, **kw):
        args = {"payload": planned_release["payloads"]["compose.up"]}
        args.update(kw.pop("args", {}))
        return ar.ansible_module(ar.DEPLOY_MODULE, args, **kw)

    c.planned, c.deploy = planned, deploy
    try:
        yield c
    finally:
        ar.compose_down(project)
        shutil.rmtree(work, ignore_errors=True)


def files_of(project_dir):
    out = {}
    for name in ("compose.stella.lock.yml", "stella.version.json", "apply-manifest.json"):
        path = os.path.join(project_dir, name)
        out[name] = open(path, "rb").read() if os.path.exists(path) else None
    return out


def temps_under(path):
    found = []
    for root, dirs, files in os.walk(path):
        found += [os.path.join(root, n) for n in dirs + files if n.startswith(".stella-tmp-")]
    return found


def assert_ok(result):
    assert not result["failed"], "deploy failed: %s (%s, phase %s)" % (
        result.get("msg"),
        result.get("code"),
        result.get("failurePhase"),
    )


def assert_runs(project, digest, manifest_hash):
    containers = ar.project_containers(project)
    assert containers, "no container for %s" % project
    data = json.loads(ar.docker("inspect", *[pair[0] for pair in containers.values()]))
    for item in data:
        assert item["State"]["Running"] and item["State"]["Health"]["Status"] == "healthy"
        labels = item["Config"]["Labels"]
        assert labels["stella.manifest.hash"] == manifest_hash
        assert labels["stella.image.digest"] == digest
        assert item["Config"]["Image"].endswith("@" + digest)


def test_v1_deploy_then_identical_rerun_is_a_noop(ctx):
    planned = ctx.planned()
    result = ctx.deploy(planned)
    assert_ok(result)
    assert result["changed"] is True
    assert result["completedPhases"] == [
        "write_artifacts",
        "pre_deploy_hooks",
        "compose_pull",
        "compose_up",
        "inspect_services",
        "write_sticker",
        "post_deploy_hooks",
    ]
    assert [p["phase"] for p in result["deploymentPhases"]] == [
        "prepare",
        "pre-deploy",
        "deploy",
        "verify",
        "promote",
        "post-deploy",
    ]
    assert all(p["status"] == "succeeded" for p in result["deploymentPhases"])
    assert result["failurePhase"] is None
    assert result["targetId"] == "tgt-local" and result["targetType"] == "ComposeHost"
    assert result["targetEndpoint"] == "local" and result["targetExecutionMode"] == "ssh"
    assert result["serviceCount"] == 1 and result["services"][0]["health"] == "healthy"
    assert result["services"][0]["imageDigest"] == ctx.images["app_v1"]["digest"]
    assert result["composeVersion"] and result["dockerVersion"]
    files = files_of(ctx.project_dir)
    assert files["compose.stella.lock.yml"] == planned["_files"]["compose.stella.lock.yml"]
    assert files["stella.version.json"] == planned["_files"]["stella.version.json"]
    assert result["artifactHashes"] == planned["artifactHashes"]
    assert result["versionStickerHash"] == planned["versionStickerHash"]
    assert result["composeLockHash"] == planned["composeHash"]
    assert not verify_artifact_set(
        files["apply-manifest.json"],
        {k: v for k, v in files.items() if k != "apply-manifest.json"},
        ctx.project,
        planned["manifestHash"],
    )
    assert "previousRevisionPath" not in result
    assert_runs(ctx.project, ctx.images["app_v1"]["digest"], planned["manifestHash"])

    before = ar.project_containers(ctx.project)
    mtimes = {n: os.stat(os.path.join(ctx.project_dir, n)).st_mtime_ns for n in files}
    check = ctx.deploy(planned, check=True)
    assert_ok(check)
    assert check["changed"] is False
    again = ctx.deploy(planned)
    assert_ok(again)
    assert again["changed"] is False
    assert ar.project_containers(ctx.project) == before, "a container was recreated or restarted"
    assert {n: os.stat(os.path.join(ctx.project_dir, n)).st_mtime_ns for n in files} == mtimes
    assert again["hookResults"] == []


def test_rerun_over_a_restarted_container_applies_and_reports_no_change(ctx):
    """The operator restarted the container: the re-run's first look finds its health ``starting`` (the
    healthcheck runs every 10 s), so it applies (and says why); ``docker compose up`` leaves the running
    container alone, the committed files are not rewritten, and the result is ``changed: false``."""
    planned = ctx.planned(config={"web": {"healthcheck.interval": "10s"}})
    assert_ok(ctx.deploy(planned))
    files = files_of(ctx.project_dir)
    stats = {n: os.stat(os.path.join(ctx.project_dir, n)) for n in files}
    ar.docker("restart", ar.project_containers(ctx.project)["web"][0])
    restarted = ar.project_containers(ctx.project)
    again = ctx.deploy(planned)
    assert_ok(again)
    assert "compose_up" in again["completedPhases"], "the first look verified the restarted container"
    assert len(again["appliedBecause"]) == 1 and again["appliedBecause"][0].endswith("health is starting")
    assert again["changed"] is False
    assert again["services"][0]["health"] == "healthy"
    assert ar.project_containers(ctx.project) == restarted, "compose up recreated or restarted the container"
    assert {n: (s.st_ino, s.st_mtime_ns) for n, s in stats.items()} == {
        n: (s.st_ino, s.st_mtime_ns) for n, s in ((n, os.stat(os.path.join(ctx.project_dir, n))) for n in files)
    }


def test_check_mode_and_diff_change_nothing(ctx):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    before_files, before = files_of(ctx.project_dir), ar.project_containers(ctx.project)
    v2 = ctx.planned("app_v2", version="2.0.0")
    result = ctx.deploy(v2, check=True, diff=True)
    assert_ok(result)
    assert result["changed"] is True
    assert result["wouldRetainRevision"] is True
    assert "compose.stella.lock.yml" in result["wouldChangeFiles"]
    assert result["diff"]["before"] == v1["lock"] and result["diff"]["after"] == v2["lock"]
    assert files_of(ctx.project_dir) == before_files
    assert ar.project_containers(ctx.project) == before
    assert not os.path.exists(os.path.join(ctx.project_dir, "revisions"))


def test_v2_retains_v1_revision_with_intact_hashes(ctx):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    v1_files = files_of(ctx.project_dir)
    v2 = ctx.planned("app_v2", version="2.0.0")
    result = ctx.deploy(v2, diff=True)
    assert_ok(result)
    assert result["changed"] is True
    rev = result["previousRevisionPath"]
    assert os.path.dirname(rev) == os.path.join(ctx.project_dir, "revisions")
    assert os.path.basename(rev) == "000001-" + v1["manifestHash"].split(":")[1][:12]
    record = json.load(open(os.path.join(rev, "revision.json")))
    for name, data in v1_files.items():
        assert open(os.path.join(rev, name), "rb").read() == data
        assert record["files"][name] == "sha256:" + __import__("hashlib").sha256(data).hexdigest()
    assert record["manifestHash"] == v1["manifestHash"]
    assert result["diff"]["before"] == v1["lock"] and result["diff"]["after"] == v2["lock"]
    assert files_of(ctx.project_dir)["stella.version.json"] == v2["_files"]["stella.version.json"]
    assert_runs(ctx.project, ctx.images["app_v2"]["digest"], v2["manifestHash"])
    # the same v2 again retains nothing new and still names the baseline
    again = ctx.deploy(v2)
    assert_ok(again)
    assert again["changed"] is False and again["previousRevisionPath"] == rev
    assert sorted(os.listdir(os.path.join(ctx.project_dir, "revisions"))) == [os.path.basename(rev)]


def test_sticker_is_written_only_after_inspection(ctx):
    hooks = [
        {
            "name": "seen-before",
            "phase": "pre-deploy",
            "redactionPolicy": "none",
            "command": "cat stella.version.json 2>/dev/null || echo NO-STICKER",
        },
        {
            "name": "seen-after",
            "phase": "post-deploy",
            "redactionPolicy": "none",
            "command": "grep -c manifestHash stella.version.json",
        },
    ]
    planned = ctx.planned(hooks=hooks)
    result = ctx.deploy(planned)
    assert_ok(result)
    pre, post = result["hookResults"]
    assert pre["stdout"].strip() == "NO-STICKER" and pre["outcome"] == "succeeded"
    assert post["stdout"].strip() == "1"
    order = result["completedPhases"]
    assert order.index("inspect_services") < order.index("write_sticker")
    # a deploy whose services never become healthy writes no sticker at all
    broken = ar.plan(
        ar.release_input(ctx.project + "b", {"web": ctx.images["app_broken"]["loopback_ref"]}, ctx.work), ctx.resolved
    )
    try:
        failed = ar.ansible_module(ar.DEPLOY_MODULE, {"payload": broken["payloads"]["compose.up"], "wait_timeout": 20})
        assert failed["failed"] and failed["failurePhase"] == "compose_up"
        assert not os.path.exists(os.path.join(ctx.work, ctx.project + "b", "stella.version.json"))
        assert not os.path.exists(os.path.join(ctx.work, ctx.project + "b", "apply-manifest.json"))
    finally:
        ar.compose_down(ctx.project + "b")


def _assert_v1_untouched(ctx, v1, before, v1_files):
    assert ar.project_containers(ctx.project) == before, "the running v1 containers changed"
    assert files_of(ctx.project_dir) == v1_files, "v1's committed files changed"
    assert_runs(ctx.project, ctx.images["app_v1"]["digest"], v1["manifestHash"])


def test_unknown_digest_fails_in_pull_and_leaves_v1_running(ctx):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    before, v1_files = ar.project_containers(ctx.project), files_of(ctx.project_dir)
    release = ar.release_input(
        ctx.project, {"web": "127.0.0.1:5000/stella/app:v9@" + UNKNOWN_DIGEST}, ctx.work, version="9.0.0"
    )
    bad = ar.plan(release, {})
    result = ctx.deploy(bad)
    assert result["failed"] and result["code"] == "image_pull_failed"
    assert result["failurePhase"] == "compose_pull"
    assert "manifest unknown" in result["msg"] and "\n" not in result["msg"]
    assert result["completedPhases"] == ["write_artifacts", "pre_deploy_hooks"]
    assert result["lockRestored"] is True
    assert {p["phase"]: p["status"] for p in result["deploymentPhases"]}["deploy"] == "failed"
    _assert_v1_untouched(ctx, v1, before, v1_files)
    assert not temps_under(ctx.project_dir)


def test_digest_mismatch_fails_before_compose_up(ctx, tmp_path):
    """A local image store whose RepoDigests lack the pinned digest (a consistent engine never shows this,
    so a wrapper around the real docker CLI rewrites ``image inspect`` output; everything else is real)."""
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    before, v1_files = ar.project_containers(ctx.project), files_of(ctx.project_dir)
    wrapper = tmp_path / "docker"
    wrapper.write_text(
        "#!%s\nimport json, os, subprocess, sys\n"
        "argv = sys.argv[1:]\n"
        "if argv[:2] != ['image', 'inspect']:\n    os.execvp('docker', ['docker'] + argv)\n"
        "p = subprocess.run(['docker'] + argv, capture_output=True, text=True)\n"
        "if p.returncode:\n    sys.stderr.write(p.stderr); sys.exit(p.returncode)\n"
        "data = json.loads(p.stdout)\n"
        "for item in data:\n    item['RepoDigests'] = [d.split('@')[0] + '@sha256:' + '0' * 64 for d in item['RepoDigests']]\n"
        "print(json.dumps(data))\n" % os.path.join(ar.VENV_BIN, "python")
    )
    wrapper.chmod(0o755)
    v2 = ctx.planned("app_v2", version="2.0.0")
    result = ctx.deploy(v2, args={"docker_cli": str(wrapper)})
    assert result["failed"] and result["code"] == "digest_mismatch", result.get("msg")
    assert result["failurePhase"] == "compose_pull"
    assert "compose_up" not in result["completedPhases"]
    _assert_v1_untouched(ctx, v1, before, v1_files)


def test_container_that_exits_fails_compose_up_and_keeps_v1_sticker(ctx):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    v1_files = files_of(ctx.project_dir)
    quits = ctx.planned(version="1.1.0", extra={"worker": ctx.images["tool"]["loopback_ref"]})
    result = ctx.deploy(quits, args={"wait_timeout": 30})
    assert result["failed"] and result["failurePhase"] == "compose_up"
    assert result["code"] == "service_not_running", result["msg"]
    assert "exited" in result["msg"]
    worker = [s for s in result["services"] if s["service"] == "worker"]
    assert worker and worker[0]["state"] == "exited"
    now = files_of(ctx.project_dir)
    assert now["stella.version.json"] == v1_files["stella.version.json"]
    assert now["apply-manifest.json"] == v1_files["apply-manifest.json"]
    assert result["previousRevisionPath"].endswith("000001-" + v1["manifestHash"].split(":")[1][:12])
    assert "write_sticker" not in result["completedPhases"]


@pytest.mark.parametrize(
    "policy,outcome", [("fail", "failed"), ("ignore", "ignored"), ("continue", "continued"), ("warn", "warned")]
)
def test_failing_pre_deploy_hook_under_each_policy(ctx, policy, outcome):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    before, v1_files = ar.project_containers(ctx.project), files_of(ctx.project_dir)
    hooks = [{"name": "gate", "phase": "pre-deploy", "command": "echo checking; exit 7", "failurePolicy": policy}]
    v2 = ctx.planned("app_v2", version="2.0.0", hooks=hooks)
    result = ctx.deploy(v2)
    hook = result["hookResults"][0]
    assert hook["exitCode"] == 7 and hook["outcome"] == outcome and hook["failurePolicy"] == policy
    assert hook["stdout"]["redacted"] is True and hook["stdout"]["length"] == len("checking\n")
    if policy == "fail":
        assert result["failed"] and result["code"] == "hook_failed"
        assert result["failurePhase"] == "pre_deploy_hooks"
        _assert_v1_untouched(ctx, v1, before, v1_files)
    else:
        assert_ok(result)
        assert_runs(ctx.project, ctx.images["app_v2"]["digest"], v2["manifestHash"])


def test_hook_over_its_timeout_is_killed_with_its_process_group(ctx):
    v1 = ctx.planned()
    assert_ok(ctx.deploy(v1))
    before, v1_files = ar.project_containers(ctx.project), files_of(ctx.project_dir)
    pidfile = os.path.join(ctx.work, "child.pid")
    hooks = [
        {
            "name": "slow",
            "phase": "pre-deploy",
            "timeoutSeconds": 2,
            "command": "sleep 300 & echo $! > %s; sleep 300" % pidfile,
        }
    ]
    v2 = ctx.planned("app_v2", version="2.0.0", hooks=hooks)
    result = ctx.deploy(v2)
    assert result["failed"] and result["code"] == "hook_failed" and result["failurePhase"] == "pre_deploy_hooks"
    hook = result["hookResults"][0]
    assert hook["timedOut"] is True and hook["outcome"] == "failed"
    assert 2000 <= hook["durationMs"] < 10000
    child = int(open(pidfile).read())
    assert not os.path.exists("/proc/%d" % child) or "Z" in open("/proc/%d/stat" % child).read().split()[2], (
        "the hook's background child survived the timeout"
    )
    _assert_v1_untouched(ctx, v1, before, v1_files)


def test_hook_output_secret_is_absent_from_results_logs_and_evidence(ctx):
    secret = "S3CR3T-%s" % uuid.uuid4().hex
    secret_file = os.path.join(ctx.work, "planted-secret")
    with open(secret_file, "w") as handle:
        handle.write(secret)
    hooks = [
        {"name": "leaky-pre", "phase": "pre-deploy", "command": "cat %s; cat %s >&2" % (secret_file, secret_file)},
        {"name": "leaky-post", "phase": "post-deploy", "command": "echo token=$(cat %s)" % secret_file},
    ]
    planned = ctx.planned(hooks=hooks)
    result, output = ctx.deploy(planned, verbosity=3, raw=True)
    assert_ok(result)
    assert len(result["hookResults"]) == 2
    assert result["hookResults"][0]["stdout"]["length"] == len(secret)
    assert secret not in json.dumps(result)
    assert secret not in output, "the planted secret reached ansible -vvv output"
    for root, _dirs, names in os.walk(ctx.project_dir):
        for name in names:
            with open(os.path.join(root, name), "rb") as handle:
                assert secret.encode() not in handle.read(), "secret found in %s" % name


def test_wrong_host_fails_before_any_change(ctx):
    release = ar.release_input(
        ctx.project,
        {"web": ctx.images["app_v1"]["loopback_ref"]},
        ctx.work,
        target={
            "id": "tgt-far",
            "name": "far",
            "type": "ComposeHost",
            "endpoint": "ssh://root@192.0.2.44",
            "executionMode": "ssh",
        },
    )
    result = ctx.deploy(ar.plan(release, ctx.resolved))
    assert result["failed"] and result["code"] == "wrong_host" and result["failurePhase"] == "verify_target"
    assert result["targetEndpoint"] == "ssh://192.0.2.44"  # the planner drops URL userinfo
    assert not os.path.exists(ctx.project_dir)
    assert ar.project_containers(ctx.project) == {}


def test_payload_with_unknown_or_missing_key_fails_before_any_change(ctx):
    payload = dict(ctx.planned()["payloads"]["compose.up"])
    result = ar.ansible_module(ar.DEPLOY_MODULE, {"payload": dict(payload, projectName="x")})
    assert result["failed"] and result["code"] == "invalid_payload" and "projectName" in result["msg"]
    del payload["PullImages"]
    result = ar.ansible_module(ar.DEPLOY_MODULE, {"payload": payload})
    assert result["failed"] and result["code"] == "invalid_payload" and "PullImages" in result["msg"]
    assert not os.path.exists(ctx.project_dir)


def test_missing_docker_or_compose_is_a_failure_not_a_fallback(ctx, tmp_path):
    planned = ctx.planned()
    result = ctx.deploy(planned, args={"docker_cli": "/nonexistent/docker"})
    assert result["failed"] and result["code"] == "runtime_missing" and result["failurePhase"] == "preflight"
    # a host without the Compose v2 plugin: the real docker CLI in a private mount namespace where every
    # directory the CLI looks for plugins in is empty (so `docker info` lists none and `docker compose` is
    # an unknown command, as on such a host)
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    plugin_dirs = " ".join(PLUGIN_DIRS + (os.path.expanduser("~/.docker/cli-plugins"),))
    wrapper = tmp_path / "docker"
    wrapper.write_text(
        '#!/bin/sh\nexec unshare --mount sh -c \'for d in %s; do [ -d "$d" ] && mount --bind %s "$d"; '
        'done; exec docker "$@"\' sh "$@"\n' % (plugin_dirs, empty)
    )
    wrapper.chmod(0o755)
    listed = subprocess.run(
        [str(wrapper), "info", "--format", "{{json .ClientInfo.Plugins}}"], capture_output=True, text=True, check=False
    )
    assert (listed.returncode, listed.stdout.strip()) == (0, "[]"), listed.stderr
    result = ctx.deploy(planned, args={"docker_cli": str(wrapper)})
    assert result["failed"] and result["code"] == "compose_missing" and result["failurePhase"] == "preflight"
    assert not os.path.exists(os.path.join(ctx.project_dir, "stella.version.json"))
    assert ar.project_containers(ctx.project) == {}


def test_work_of_a_superseded_claim_is_refused_and_changes_nothing(ctx):
    """The target's fence: after a newer job's claim (generation 2) deployed v1, an older job's v2 apply
    and its rollback (generation 1) are refused with claim_superseded; containers and files unchanged."""
    v1 = ctx.planned()
    newer = {"jobId": "job-newer", "generation": 2}  # no projectKey: the controller asks no job store
    assert_ok(ctx.deploy(v1, args={"claim": newer}))
    before, v1_files = ar.project_containers(ctx.project), files_of(ctx.project_dir)
    older = {"jobId": "job-older", "generation": 1}
    v2 = ctx.planned("app_v2", version="2.0.0")
    for check in (True, False):
        refused = ctx.deploy(v2, args={"claim": older}, check=check)
        assert refused["failed"] and refused["code"] == "claim_superseded", refused.get("msg")
        assert "superseded on this project by job job-newer (generation 2)" in refused["msg"]
        assert refused["changed"] is False and refused["failurePhase"] == "preflight"
        _assert_v1_untouched(ctx, v1, before, v1_files)
    rollback = ar.ansible_module(
        ar.ROLLBACK_MODULE, {"task": "compose.rollback", "claim": older, "payload": v2["payloads"]["compose.rollback"]}
    )
    assert rollback["failed"] and rollback["code"] == "claim_superseded", rollback.get("msg")
    _assert_v1_untouched(ctx, v1, before, v1_files)
    with open(os.path.join(ctx.project_dir, ".stella-claim.json"), encoding="utf-8") as handle:
        kept = json.load(handle)  # the accepted claim at the top, as a file before stores had ids
    assert (kept["jobId"], kept["generation"], kept["stores"]) == (
        "job-newer",
        2,
        [{"storeId": None, "jobId": "job-newer", "generation": 2}],
    )
    # the newer job's own later work passes the fence
    assert_ok(ctx.deploy(v2, args={"claim": newer}))
    assert_runs(ctx.project, ctx.images["app_v2"]["digest"], v2["manifestHash"])
