"""Concurrent deploys to one project serialize on the project flock; a SIGKILLed deploy converges on re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

import ansible_run as ar
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import verify_artifact_set


@pytest.fixture
def ctx():
    c = ar.DeployCtx(ar.load_lab_json(), prefix="conc")
    try:
        yield c
    finally:
        c.cleanup()


def test_two_concurrent_deploys_to_one_project_serialize(ctx):
    journal = os.path.join(ctx.work, "journal")
    hook = {
        "name": "journal",
        "phase": "pre-deploy",
        "failurePolicy": "fail",
        "command": "echo start $STELLA_MANIFEST_HASH $(date +%%s.%%N) >> %s; sleep 2; "
        "echo end $STELLA_MANIFEST_HASH $(date +%%s.%%N) >> %s" % (journal, journal),
    }
    post = {"name": "post", "phase": "post-deploy", "command": "echo post $(date +%%s.%%N) >> %s; sleep 1" % journal}
    v1 = ctx.planned(hooks=[hook, post])
    v2 = ctx.planned("app_v2", version="2.0.0", hooks=[hook, post])
    results = {}

    def run(name, planned):
        results[name] = ctx.deploy(planned)

    threads = [threading.Thread(target=run, args=("v1", v1)), threading.Thread(target=run, args=("v2", v2))]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(300)
    assert not results["v1"]["failed"], results["v1"].get("msg")
    assert not results["v2"]["failed"], results["v2"].get("msg")
    lines = [line.split() for line in open(journal).read().splitlines()]
    # each apply's pre hook, its compose up and its post hook run inside one lock: no interleaving
    kinds = [line[0] for line in lines]
    assert kinds == ["start", "end", "post", "start", "end", "post"], lines
    waited = sorted(r["lockWaitMs"] for r in results.values())
    assert waited[1] >= 2000, "the second deploy did not wait for the first one's lock: %s" % waited
    # whichever ran last is what runs now, and the files describe it
    last = v1 if lines[3][1] == v1["manifestHash"] else v2
    files = ctx.files()
    assert files["stella.version.json"] == last["_files"]["stella.version.json"]
    labels = ctx.inspect()[0]["Config"]["Labels"]
    assert labels["stella.manifest.hash"] == last["manifestHash"]


def test_deploy_sigkilled_midway_then_rerun_converges(ctx):
    v1 = ctx.planned()
    assert not ctx.deploy(v1)["failed"]
    marker = os.path.join(ctx.work, "hook-started")
    pidfile = os.path.join(ctx.work, "hook.pid")
    hook = {
        "name": "hang",
        "phase": "pre-deploy",
        "timeoutSeconds": 600,
        "command": "echo $$ $PPID > %s; touch %s; sleep 600" % (pidfile, marker),
    }
    v2 = ctx.planned("app_v2", version="2.0.0", hooks=[hook])
    args = {"payload": v2["payloads"]["compose.up"]}
    with open(os.path.join(ctx.work, "inv.ini"), "w") as inv:
        inv.write(ar.inventory_text(None))
    proc = subprocess.Popen(
        [os.path.join(ar.VENV_BIN, "ansible"), "all", "-i", inv.name, "-m", ar.DEPLOY_MODULE, "-a", json.dumps(args)],
        env=ar.ansible_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while not os.path.exists(marker):
            assert time.time() < deadline and proc.poll() is None, "the deploy never reached its pre-deploy hook"
            time.sleep(0.2)
        # the lock is staged, the sticker is not: SIGKILL the module process (the hook's parent) mid-apply
        hook_pid, module_pid = [int(x) for x in open(pidfile).read().split()]
        assert "python" in open("/proc/%d/cmdline" % module_pid, "rb").read().decode(errors="replace")
        os.kill(module_pid, signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if os.path.exists(pidfile):
            try:
                os.killpg(int(open(pidfile).read().split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    staged = ctx.files()
    assert staged["compose.stella.lock.yml"] == v2["_files"]["compose.stella.lock.yml"]
    assert staged["stella.version.json"] == v1["_files"]["stella.version.json"], "sticker written before apply"
    # what a writer killed inside atomic_write / retain_revision leaves behind
    open(os.path.join(ctx.project_dir, ".stella-tmp-killed"), "wb").write(b"half a sti")
    os.makedirs(os.path.join(ctx.project_dir, "revisions", ".stella-tmp-rev-killed"))

    v2_plain = ctx.planned("app_v2", version="2.0.0")
    result = ctx.deploy(v2_plain)
    assert not result["failed"], result.get("msg")
    # the killed writer's half-written files, and the previous lock it had set aside before staging
    assert sorted(result["removedStaleTemps"]) == [
        ".stella-tmp-killed",
        ".stella-tmp-prev-compose.stella.lock.yml",
        "revisions/.stella-tmp-rev-killed",
    ]
    for root, dirs, names in os.walk(ctx.project_dir):
        assert not [n for n in dirs + names if n.startswith(".stella-tmp-")], root
    files = ctx.files()
    assert files["stella.version.json"] == v2_plain["_files"]["stella.version.json"]
    assert not verify_artifact_set(
        files["apply-manifest.json"],
        {
            "compose.stella.lock.yml": files["compose.stella.lock.yml"],
            "stella.version.json": files["stella.version.json"],
        },
        ctx.project,
        v2_plain["manifestHash"],
    )
    revisions = sorted(os.listdir(os.path.join(ctx.project_dir, "revisions")))
    assert revisions == ["000001-" + v1["manifestHash"].split(":")[1][:12]]
    labels = ctx.inspect()[0]["Config"]["Labels"]
    assert labels["stella.manifest.hash"] == v2_plain["manifestHash"]
    assert ctx.deploy(v2_plain)["changed"] is False
