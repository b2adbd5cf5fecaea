"""Fault-injection matrix (issue 9): every fault ends in a stable code, a failure phase, a known state.

Each test injects one fault into a real deployment and drives the collection only through its public
surfaces: the modules ``stella_compose_deploy``, ``stella_rollback``, ``stella_preflight``,
``stella_plan`` (through the role) and ``stella_probe`` (through the role) run by the real ``ansible`` /
``ansible-playbook`` CLI, on this machine (``-c local``) or on one Docker-in-Docker lab target over SSH
shared by this module. Each test asserts:

* the stable ``code`` and the failure phase (``failurePhase``, or the evidence's failure stage);
* what runs afterwards: the previous release's containers (digest, Stella labels, manifest hash), the
  new release, or nothing;
* that the committed artifact set of the project directory verifies (``verify_artifact_set``);
* that a planted secret (a random ``secretEnv`` value, a registry password, hook output) appears in no
  ansible output at ``-vvv``, no module result (hook results included), no evidence file and no file of
  the project directory other than ``.env.stella``.

``test_item*`` reproduce the numbered items of issue 9 (target-side and role-side); ``test_fault_*``
are the faults that already ended in their stable codes when the issue was filed. docs/faults.md says,
for each fault, what the operator sees and what state the target is left in.

The lab must be up (``make lab``); the tests fail (never skip) without it.
"""

from __future__ import annotations

import concurrent.futures
import difflib
import json
import os
import shlex
import shutil
import signal
import threading
import time
import uuid

import pytest

import ansible_run as ar
import faultkit as fk

GATES = fk.GATES
DISK_FULL_CODE = "disk_full"  # a full disk during the apply (docs/faults.md)
APPLY_PHASES = (
    "write_artifacts",
    "pre_deploy_hooks",
    "compose_pull",
    "compose_up",
    "inspect_services",
    "write_sticker",
    "post_deploy_hooks",
)
RUNTIME_CHECK_PHASES = ("preflight", "verify_target")  # the engine is asked before anything changes
PREFLIGHT_LIMIT = 45  # seconds stella_preflight may take against a daemon that never answers
DEPLOY_LIMIT = 60  # seconds stella_compose_deploy (command_timeout 10) may take against a daemon that never answers


@pytest.fixture
def ctx(lab):
    """A Compose project on this machine."""
    c = fk.FaultCtx(lab, prefix="fx")
    try:
        yield c
    finally:
        c.cleanup()


@pytest.fixture(scope="module")
def dind(target_factory):
    """One DinD target host for this module (faults that need their own engine or file systems)."""
    return target_factory("faults")


@pytest.fixture
def dctx(lab, dind):
    """A Compose project on the DinD target."""
    c = fk.FaultCtx(lab, host=dind, prefix="fxd")
    try:
        yield c
    finally:
        fk.wait_daemon(dind)
        c.cleanup()


# ------------------------------------------------------------------------------------------ helpers


def summary(result):
    return "code=%r failurePhase=%r msg=%r" % (
        result.get("code"),
        result.get("failurePhase"),
        (result.get("msg") or "")[:400],
    )


def assert_failed(result, code, phase):
    assert result["failed"], "reported success, expected %s in %s (%s)" % (code, phase, summary(result))
    assert result.get("code") == code, "expected code %s: %s" % (code, summary(result))
    assert result.get("failurePhase") == phase, "expected failurePhase %s: %s" % (phase, summary(result))


def assert_failed_before_change(result, code):
    """Failed with ``code`` in a phase before anything on the host changes (the runtime checks)."""
    assert result["failed"], "reported success, expected %s (%s)" % (code, summary(result))
    assert result.get("code") == code, "expected code %s: %s" % (code, summary(result))
    assert result.get("failurePhase") in RUNTIME_CHECK_PHASES, "expected failurePhase in %s: %s" % (
        RUNTIME_CHECK_PHASES,
        summary(result),
    )


def hash12(planned):
    return planned["manifestHash"].split(":", 1)[1][:12]


def assert_same_files(ctx, files, message):
    """The project's files (lock, sticker, apply manifest, .env.stella) are byte for byte ``files``."""
    now = ctx.committed()
    changed = sorted(n for n in files if files[n] != now[n])
    shown = "".join(
        difflib.unified_diff(
            (files[n] or b"").decode("utf-8", "replace").splitlines(True),
            (now[n] or b"").decode("utf-8", "replace").splitlines(True),
            n + " (before)",
            n + " (now)",
        )
        for n in changed
        if n != fk.ENV
    )  # never print .env.stella: it holds the secret
    assert not changed, "%s: %s differ\n%s" % (message, changed, shown)


def assert_untouched(ctx, planned, state, files, image_key="app_v1"):
    """The previous release still runs exactly as before and its committed set verifies."""
    assert ctx.state() == state, "the running containers changed"
    assert_same_files(ctx, files, "project files changed")
    ctx.assert_committed_verifies(planned["manifestHash"])
    ctx.assert_runs(planned, image_key)


def retain_without_replacing(ctx, running):
    """Setup: an apply of another release whose pre-deploy hook fails retains the running release as
    revision 1 (retention happens before the hooks) and leaves its containers running; returns the path."""
    failed = ctx.deploy(
        ctx.planned("app_v2", "2.0.0", hooks=[{"name": "stop", "phase": "pre-deploy", "command": "exit 3"}])
    )
    assert failed["failed"] and failed.get("code") == "hook_failed", "setup: %s" % summary(failed)
    path = failed.get("previousRevisionPath") or ""
    assert os.path.basename(path) == "000001-" + hash12(running), "setup: no revision retained (%r)" % path
    return path


def failing_hook(name, phase, policy, ctx, code=3):
    """A hook that prints the planted secret (redacted by default) and exits non-zero."""
    ctx.write_secret_file()
    path = shlex.quote(ctx.secret_file)
    return {
        "name": name,
        "phase": phase,
        "failurePolicy": policy,
        "command": "cat %s; cat %s >&2; exit %d" % (path, path, code),
    }


# ================================================================================== issue 9, items 1-10


def test_item01_rollback_restores_the_deployments_own_previous_revision(ctx, tmp_path):
    """Deploy A, B, A, then B' whose probe fails: B' retains nothing new (A is already revision 1), so
    its rollback baseline is revision 1 (A), while the newest revision directory is 2 (B). The role's
    rollback must restore A, the deployment's own previousRevisionPath."""
    role = fk.RoleRun(ctx, tmp_path)
    a = role.planned(role.release("app_v1", "1.0.0", probe=role.probe_config("/")))
    b = role.planned(role.release("app_v2", "2.0.0", probe=role.probe_config("/")))
    ctx.deploy_ok(a)
    rev_a = ctx.deploy_ok(b)["previousRevisionPath"]
    rev_b = ctx.deploy_ok(a)["previousRevisionPath"]
    assert os.path.basename(rev_a) == "000001-" + hash12(a)
    assert os.path.basename(rev_b) == "000002-" + hash12(b)

    b_again = role.release(
        "app_v2", "2.0.0", probe=role.probe_config("/no-such-page", attempts=1), hooks=[ctx.leak_hook()]
    )
    rc, results, output = role.play(b_again)
    assert rc != 0, output[-3000:]
    assert results["plan"]["manifestHash"] == role.planned(b_again)["manifestHash"]
    apply = results["apply"]
    assert not apply["failed"], summary(apply)
    assert apply["previousRevisionPath"] == rev_a, "the apply's baseline is not A's revision"
    assert results["probe"]["failed"] and results["probe"].get("code") == "health_probe_failed"
    rollback = results["rollback"]
    assert not rollback.get("failed"), summary(rollback)
    assert rollback["restoredRevisionPath"] == rev_a, (
        "rolled back to %s, not to the deployment's own previousRevisionPath %s"
        % (rollback["restoredRevisionPath"], rev_a)
    )
    assert rollback["rollbackRestored"] is True and rollback["failurePhase"] is None
    ctx.assert_runs(a, "app_v1")
    files = ctx.assert_committed_verifies(a["manifestHash"])
    assert files[fk.STICKER] == a["_files"][fk.STICKER]
    evidence = role.evidence(results)
    assert evidence["deployment.json"]["failure"]["stage"] == "verify"
    assert evidence["deployment.json"]["failure"]["code"] == "health_probe_failed"
    assert (evidence["job.json"]["status"], evidence["job.json"]["promotion"]) == ("RolledBack", "Failed")
    assert evidence["rollback-evidence.json"]["targets"][0]["rollbackDigest"] == ctx.images["app_v1"]["digest"]
    role.assert_secrets_nowhere()


def test_item02_rollback_of_a_superseded_deployment_is_refused(ctx, tmp_path):
    """Deployment X applies and releases the project lock; its probe is held while deployment Y applies
    (retaining X) and succeeds; then X's probe fails. X's rollback must be refused (Y is not the release X
    applied): code rollback_superseded in resolve_revision, rollbackRefusedReason in the evidence, Y
    left running untouched."""
    role = fk.RoleRun(ctx, tmp_path)
    gate = fk.ProbeGate()
    try:
        w = role.planned(role.release("app_v1", "1.0.0"))
        ctx.deploy_ok(w)
        x_release = role.release(
            "app_v2", "2.0.0", hooks=[ctx.leak_hook()], probe=role.probe_config(url=gate.url, attempts=1, timeout=120)
        )
        x = role.planned(x_release)
        run, proc = role.start(x_release)
        deadline = time.monotonic() + 180
        while not gate.hit.wait(0.5):
            assert proc.poll() is None, "deployment X ended before its probe: %s" % proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "deployment X never probed"
        y = role.planned(role.release("app_v1", "3.0.0"))
        applied_y = ctx.deploy_ok(y)
        assert os.path.basename(applied_y["previousRevisionPath"]).endswith("-" + hash12(x)), "Y did not retain X"
        y_state, y_files = ctx.state(), ctx.committed()
        gate.release()
        rc, results, output = role.finish(run, proc)
    finally:
        gate.close()
    assert rc != 0, output[-3000:]
    assert results["plan"]["manifestHash"] == x["manifestHash"]
    assert not results["apply"]["failed"], summary(results["apply"])
    assert results["probe"]["failed"] and results["probe"].get("code") == "health_probe_failed"
    rollback = results["rollback"]
    assert rollback is not None and not rollback.get("skipped"), "no rollback was attempted"
    assert_failed(rollback, "rollback_superseded", "resolve_revision")
    assert rollback.get("rollbackRestored") is False
    assert rollback.get("rollbackRefusedReason"), "the refusal gives no rollbackRefusedReason"
    assert ctx.state() == y_state, "X's rollback replaced Y's successful release"
    assert_same_files(ctx, y_files, "Y's committed files changed")
    ctx.assert_committed_verifies(y["manifestHash"])
    ctx.assert_runs(y, "app_v1")
    recovery = role.evidence(results)["job.json"]
    assert recovery["status"] != "RolledBack", recovery
    role.assert_secrets_nowhere()


def test_item03_dockerhost_crash_looping_container_fails_and_previous_is_restored(ctx):
    """DockerHost: v1 healthy, then an image whose command exits at once (restart unless-stopped: it
    crash-loops). Not a success: service_not_running, and the previous container runs again."""
    target = {"id": "tgt-dh", "name": "dockerhost", "type": "DockerHost", "endpoint": "local", "executionMode": "ssh"}
    name = ctx.project + "-web"

    def payload(image_key, version, hooks=None):
        release = ar.release_input(
            ctx.project, {"web": ctx.refs[image_key]}, ctx.work, target=target, version=version, hooks=hooks
        )
        return ar.plan(release, ctx.resolved)["payloads"]["docker.run"][0]

    def inspect():
        return json.loads(ar.docker("inspect", name))[0]

    try:
        v1 = payload("app_v1", "1.0.0")
        first = ctx.call(fk.DEPLOY, {"task": "docker.run", "payload": v1, "wait_timeout": 30})
        assert not first["failed"], summary(first)
        before = inspect()
        v2 = payload("tool", "2.0.0", hooks=[ctx.leak_hook()])
        result = ctx.call(fk.DEPLOY, {"task": "docker.run", "payload": v2, "wait_timeout": 15})
        assert result["failed"], "reported success for a container in state %r" % result.get("containerState")
        assert result.get("code") == "service_not_running", summary(result)
        assert result.get("failurePhase") == "inspect_container", summary(result)
        deadline = time.monotonic() + 30
        while True:
            after = inspect()
            if after["State"].get("Health", {}).get("Status") == "healthy" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        time.sleep(3)  # still up a little later: not crash-looping
        after = inspect()
        assert after["State"]["Running"] and not after["State"]["Restarting"], after["State"]
        assert after["State"]["Health"]["Status"] == "healthy"
        assert after["Config"]["Image"].endswith("@" + ctx.images["app_v1"]["digest"]), after["Config"]["Image"]
        assert after["Config"]["Labels"]["stella.manifest.hash"] == v1["ManifestHash"]
        assert {k: v for k, v in after["Config"]["Labels"].items() if k.startswith("stella.")} == {
            k: v for k, v in before["Config"]["Labels"].items() if k.startswith("stella.")
        }
        ctx.assert_secret_nowhere()
    finally:
        ids = ar.docker("ps", "-aq", "--filter", "name=" + ctx.project, check=False).split()
        if ids:
            ar.docker("rm", "-f", *ids, check=False)


def test_item04_role_deploys_a_release_with_secret_env(ctx, tmp_path):
    """The deploy role with secretEnv: the env artifact reaches the target (0600), the container gets the
    value, and the value appears nowhere else."""
    role = fk.RoleRun(ctx, tmp_path)
    release = role.release("app_v1", "1.0.0", probe=role.probe_config("/"), secret_env=True, hooks=[ctx.leak_hook()])
    planned = role.planned(release)
    rc, results, output = role.play(release)
    apply = results["apply"]
    assert apply is not None and not apply["failed"], summary(apply or {})
    assert rc == 0, output[-3000:]
    ctx.assert_runs(planned)
    tree = ctx.tree()
    assert tree["files"][fk.ENV] is not None, ".env.stella was not written"
    env_matches = tree["files"][fk.ENV] == planned["_files"][fk.ENV]
    assert env_matches, ".env.stella differs from the plan's env artifact"
    assert tree["modes"][fk.ENV] == 0o600
    ctx.assert_committed_verifies(planned["manifestHash"])
    [container] = ctx.inspect()
    has_value = "%s=%s" % (fk.SECRET_KEY, ctx.secret) in container["Config"]["Env"]
    assert has_value, "the container did not get the secretEnv value"
    assert role.evidence(results)["deployment.json"]["status"] == "succeeded"
    role.assert_secrets_nowhere()


def test_item05_env_artifact_restored_byte_for_byte_after_failing_pre_deploy_hook(ctx):
    """v1 with secret s1, then v2 with secret s2 and a failing pre-deploy hook: every project file,
    .env.stella included, is exactly v1's; s2 is nowhere."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    before, state = ctx.tree(), ctx.state()
    assert before["files"][fk.ENV] is not None and before["files"][fk.ENV] == v1["_files"][fk.ENV], "v1 env"
    s2 = fk.planted_secret("next")
    v2 = ctx.planned(
        "app_v2",
        "2.0.0",
        secret_env={fk.SECRET_KEY: s2},
        hooks=[{"name": "gate", "phase": "pre-deploy", "command": "exit 9"}],
    )
    result = ctx.deploy(v2)
    assert_failed(result, "hook_failed", "pre_deploy_hooks")
    assert result.get("lockRestored") is True
    after = ctx.tree()
    env_restored = after["files"][fk.ENV] == before["files"][fk.ENV]
    assert env_restored, ".env.stella keeps the failed release's secrets (not restored byte for byte)"
    changed = sorted(n for n in before["files"] if after["files"][n] != before["files"][n])
    assert not changed, "project files differ from before the failed apply: %s" % changed
    assert after["modes"][fk.ENV] == 0o600
    assert_untouched(ctx, v1, state, before["files"])
    ctx.assert_secret_nowhere()
    ctx.assert_secret_nowhere(secret=s2)


def test_item06_hook_output_masks_secret_values_even_with_redaction_none(ctx):
    """RedactionPolicy none keeps hook output, but values the collection knows are secret (secretEnv
    values from the env artifact) are masked as ******** in hookResults and at -vvv."""
    hooks = [
        {
            "name": "print-env",
            "phase": "pre-deploy",
            "redactionPolicy": "none",
            "command": '. ./.env.stella; echo "token=$%s"; echo "err=$%s" >&2' % (fk.SECRET_KEY, fk.SECRET_KEY),
        },
        {
            "name": "grep-env",
            "phase": "post-deploy",
            "redactionPolicy": "none",
            "command": "grep %s .env.stella" % fk.SECRET_KEY,
        },
    ]
    v1 = ctx.planned(hooks=hooks)
    result = ctx.deploy(v1)
    assert not result["failed"], summary(result)
    pre, post = result["hookResults"]
    assert pre["outcome"] == "succeeded" and post["outcome"] == "succeeded"
    seen = {"pre stdout": pre["stdout"], "pre stderr": pre["stderr"], "post stdout": post["stdout"]}
    shown = {k: v.replace(ctx.secret, "<THE SECRET>") for k, v in seen.items()}
    unmasked = sorted(k for k in seen if ctx.secret in seen[k] or "********" not in seen[k])
    assert not unmasked, "hook output not masked: %s" % shown
    assert pre["stdout"] == "token=********\n" and pre["stderr"] == "err=********\n", shown
    ctx.assert_runs(v1)
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_secret_nowhere()


def test_item07_hung_daemon_is_runtime_daemon_unavailable_within_a_bound(dctx, dind):
    """The target's dockerd stopped with SIGSTOP (its socket accepts, nothing answers): preflight and the
    apply end with runtime_daemon_unavailable within a bound and change nothing."""
    v1 = dctx.planned()
    dctx.deploy_ok(v1)
    state, files = dctx.state(), dctx.committed()
    v2 = dctx.planned("app_v2", "2.0.0", hooks=[dctx.leak_hook()])
    with fk.hung_daemon(dind):
        pre = dctx.call(
            fk.PREFLIGHT, dict(GATES, payload=v2["payloads"]["compose.preflight"], timeout=5), timeout=PREFLIGHT_LIMIT
        )
        assert pre["failed"], "preflight passed against a stopped daemon"
        assert "runtime_daemon_unavailable" in [f["code"] for f in pre["failures"]], pre["failures"]
        daemon = (pre.get("preflight") or {}).get("docker") or {}
        assert daemon.get("daemonStatus") == "unavailable", (
            "the preflight evidence does not record daemonStatus=unavailable: %s" % summary(pre)
        )
        applied = dctx.deploy(v2, args={"wait_timeout": 20, "command_timeout": 10}, timeout=DEPLOY_LIMIT)
        assert_failed_before_change(applied, "runtime_daemon_unavailable")
    fk.wait_daemon(dind)
    assert_untouched(dctx, v1, state, files)
    dctx.assert_secret_nowhere()


def test_item08_traversal_or_relative_work_directory_rejected_before_any_change(ctx):
    """'..' segments and relative work directories are rejected by every target-side module, in payloads
    and in options, before anything is created: invalid_payload in validate_payload (a relative path may
    keep its own code invalid_work_directory), invalid_request for stella_preflight (its bad-input code)."""
    planned = ctx.planned()
    env = planned["_files"][fk.ENV].decode()
    up = planned["payloads"]["compose.up"]
    sneaky = ctx.work + "/w/../elsewhere"
    elsewhere = os.path.join(ctx.work, "elsewhere")
    target_option = {
        "id": "tgt-local",
        "name": "controller",
        "type": "ComposeHost",
        "endpoint": "local",
        "executionMode": "ssh",
    }
    dh_target = dict(target_option, type="DockerHost")
    dh_payload = ar.plan(
        ar.release_input(ctx.project, {"web": ctx.refs["app_v1"]}, ctx.work, target=dh_target), ctx.resolved
    )["payloads"]["docker.run"][0]
    cases = [
        (
            "compose.up payload WorkDirectory with ..",
            fk.DEPLOY,
            {"payload": dict(up, WorkDirectory=sneaky), "env_artifact": env},
            "invalid_payload",
        ),
        (
            "compose.up work_directory option with ..",
            fk.DEPLOY,
            {"payload": up, "work_directory": sneaky, "env_artifact": env},
            "invalid_payload",
        ),
        (
            "compose.up payload relative WorkDirectory",
            fk.DEPLOY,
            {"payload": dict(up, WorkDirectory="relative/projects"), "env_artifact": env},
            ("invalid_payload", "invalid_work_directory"),
        ),
        (
            "compose.up snake_case options with ..",
            fk.DEPLOY,
            {
                "project_name": up["ProjectName"],
                "compose_lock": up["ComposeLock"],
                "version_sticker": up["VersionSticker"],
                "apply_manifest": up["ApplyManifest"],
                "target": target_option,
                "work_directory": sneaky,
                "env_artifact": env,
            },
            "invalid_payload",
        ),
        (
            "docker.run payload WorkDirectory with ..",
            fk.DEPLOY,
            {"task": "docker.run", "payload": dict(dh_payload, WorkDirectory=sneaky)},
            "invalid_payload",
        ),
        (
            "compose.rollback payload WorkDirectory with ..",
            fk.ROLLBACK,
            {"payload": {"ProjectName": ctx.project, "WorkDirectory": sneaky, "Target": ctx.target_context()}},
            "invalid_payload",
        ),
        (
            "stella_preflight work_directory with ..",
            fk.PREFLIGHT,
            dict(GATES, work_directory=sneaky, registry_reachability_mode="skip", minimum_free_disk_bytes=0),
            "invalid_request",
        ),
    ]
    wrong = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases)) as pool:
            results = list(pool.map(lambda case: ctx.call(case[1], case[2]), cases))
        for (label, module, _args, code), result in zip(cases, results):
            codes = code if isinstance(code, tuple) else (code,)
            phase_ok = module == fk.PREFLIGHT or result.get("failurePhase") == "validate_payload"
            if not (result["failed"] and result.get("code") in codes and phase_ok):
                wrong.append("%s: %s" % (label, summary(result)))
        assert not wrong, "accepted or misreported:\n  " + "\n  ".join(wrong)
        assert not os.path.exists(elsewhere), "something was created at the traversal target %s" % elsewhere
        assert not os.path.exists(ctx.project_dir)
        assert ar.project_containers(ctx.project) == {}
        ctx.assert_secret_nowhere()
    finally:
        ar.docker("rm", "-f", ctx.project + "-web", check=False)


def test_item09_hook_does_not_outlive_a_killed_apply_and_rerun_does_not_overlap(ctx):
    """A first deployment's pre-deploy hook is running when the module process is SIGKILLed. The hook must
    not outlive the apply, and the re-run of the same deployment must not start the hook while the first
    still runs; the re-run converges."""
    journal = os.path.join(ctx.work, "journal")
    pidfile = os.path.join(ctx.work, "hook.pid")
    killed = os.path.join(ctx.work, "module-killed")
    command = (
        'old=$(cut -d" " -f1 {p} 2>/dev/null); '
        'if [ -n "$old" ] && [ -d /proc/$old ] && ! grep -q "^State:[[:space:]]*Z" /proc/$old/status; '
        'then echo "overlap $old" >> {j}; fi; '
        'echo $$ $PPID > {p}; echo "start $$" >> {j}; '
        '[ -e {k} ] || sleep 120; echo "end $$" >> {j}'
    ).format(p=pidfile, j=journal, k=killed)
    v1 = ctx.planned(hooks=[{"name": "long", "phase": "pre-deploy", "timeoutSeconds": 600, "command": command}])
    proc = fk.start_ansible(fk.DEPLOY, ctx.deploy_args(v1))
    first_hook = None
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(pidfile) or not open(pidfile).read().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "the apply never reached its hook"
            time.sleep(0.2)
        first_hook, module_pid = [int(x) for x in open(pidfile).read().split()]
        assert "python" in open("/proc/%d/cmdline" % module_pid, "rb").read().decode(errors="replace")
        os.kill(module_pid, signal.SIGKILL)
        fk.reap(proc)
        open(killed, "w").close()
        rerun = ctx.deploy(v1)
        first_alive_after_rerun = fk.pid_alive(first_hook) or fk.group_alive(first_hook)
    finally:
        fk.reap(proc, timeout=5)
        if first_hook:
            fk.kill_group_of(first_hook)
    lines = open(journal).read().splitlines()
    assert not [line for line in lines if line.startswith("overlap")], (
        "the re-run started the hook while the killed apply's hook still ran: %s" % lines
    )
    assert not first_alive_after_rerun, "the killed apply's hook outlived it (and the re-run)"
    assert [line.split()[0] for line in lines].count("start") == 2, lines
    assert not rerun["failed"], summary(rerun)
    ctx.assert_runs(v1)
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_secret_nowhere()


def test_item10_full_disk_during_apply_is_a_stable_code_and_the_previous_state_runs(lab, dind, tmp_path):
    """The work directory is a 2 MiB tmpfs on the DinD target; a pre-deploy hook fills it after preflight.
    The apply fails with disk_full and a phase (no crash), and the role leaves v1 running with v1's
    committed artifact set."""
    work = "/srv/fx-full-%s" % uuid.uuid4().hex[:8]
    with fk.small_tmpfs(dind, work, "2m"):
        ctx = fk.FaultCtx(lab, host=dind, prefix="fxdisk", work=work)
        try:
            role = fk.RoleRun(ctx, tmp_path)
            small = {"minimumFreeDiskBytes": 65536}
            v1 = role.planned(role.release("app_v1", "1.0.0", preflight=small))
            ctx.deploy_ok(v1)
            files = ctx.committed()
            report = "/tmp/%s.fill" % ctx.project  # on the target's root file system, not the tmpfs
            filler = {
                "name": "fill-disk",
                "phase": "pre-deploy",
                # 64 KiB blocks, then 1 KiB blocks for what the first pass left (seen: 4 KiB under load)
                "command": "dd if=/dev/zero of=%s/fx-filler bs=64k 2>/dev/null; "
                "dd if=/dev/zero of=%s/fx-filler-tail bs=1k 2>/dev/null; "
                "df -k --output=avail %s | tail -1 > %s; exit 0" % (work, work, work, report),
            }
            v2_release = role.release("app_v2", "2.0.0", preflight=small, hooks=[ctx.leak_hook(), filler])
            rc, results, output = role.play(v2_release)
            free = ctx.run_on_host("cat %s; rm -f %s" % (report, report)).stdout.strip()
            assert free == "0", "the pre-deploy hook did not fill the disk (%r KiB free)" % free
            assert rc != 0, output[-3000:]
            preflight = role.preflight_outcome(results)
            assert preflight is not None and not preflight["failed"], "preflight: %s" % preflight
            apply = results["apply"]
            assert apply["failed"]
            assert apply.get("code") == DISK_FULL_CODE, summary(apply)
            assert apply.get("failurePhase") in APPLY_PHASES, summary(apply)
            ctx.assert_runs(v1, "app_v1")
            assert_same_files(ctx, files, "v1's committed files were not restored")
            ctx.assert_committed_verifies(v1["manifestHash"])
            deployment = role.evidence(results)["deployment.json"]
            assert deployment["failure"]["code"] == DISK_FULL_CODE
            assert deployment["failure"]["failurePhase"] == apply["failurePhase"]
            role.assert_secrets_nowhere()
        finally:
            ctx.cleanup()


# ================================================================================== issue 9, item 13


def test_item11_invalid_probe_configuration_fails_at_planning_before_the_target_is_touched(ctx, tmp_path):
    """healthProbe.type udp: the role's plan fails with health_probe_config_invalid naming the key; no
    task reaches the target, so no project directory, sticker or container exists afterwards."""
    role = fk.RoleRun(ctx, tmp_path)
    release = role.release("app_v1", "1.0.0", probe={"healthProbe.type": "udp"}, secret_env=True)
    rc, results, output = role.play(release)
    assert rc != 0, "the role passed with an invalid probe configuration"
    plan = results["plan"]
    assert plan["failed"] and plan.get("code") == "health_probe_config_invalid", plan
    assert "healthProbe.type" in plan["msg"], plan["msg"]
    assert results["apply"] is None, "the apply ran after a failed plan"
    assert ctx.state() == {}, "containers were started"
    assert not ctx.tree()["exists"], "the project directory was created"
    role.assert_secrets_nowhere()


def test_item12_check_mode_on_the_role_probes_nothing_and_passes_no_verdict(ctx, tmp_path):
    """--check on the role: for a new project nothing is created and the probe reports what it would
    probe (not_run, check_mode); for an update the running release is left alone and not probed."""
    role = fk.RoleRun(ctx, tmp_path)
    v1 = role.release("app_v1", "1.0.0", probe=role.probe_config("/"), secret_env=True)
    rc, results, output = role.play(v1, check=True)
    assert rc == 0, output[-3000:]
    assert results["apply"]["changed"] is True, "check mode did not report the change it would make"
    probe = results["probe"]
    assert (probe["failed"], probe["evidence"]["healthProbe.status"], probe["evidence"]["healthProbe.reason"]) == (
        False,
        "not_run",
        "check_mode",
    ), probe
    assert probe["evidence"]["healthProbe.web.endpoint"] == "http://127.0.0.1:%d/" % role.port, probe["evidence"]
    assert ctx.state() == {} and not ctx.tree()["exists"], "check mode changed the target"
    rc, results, output = role.play(v1)
    assert rc == 0, output[-3000:]
    state, files = ctx.state(), ctx.committed()
    v2 = role.release("app_v2", "2.0.0", probe=role.probe_config("/"), secret_env=True)
    rc, results, output = role.play(v2, check=True)
    assert rc == 0, output[-3000:]
    assert results["apply"]["changed"] is True
    assert results["probe"]["evidence"]["healthProbe.status"] == "not_run", results["probe"]
    assert_untouched(ctx, role.planned(v1), state, files)
    role.assert_secrets_nowhere()


def test_item13_implicit_rollback_never_follows_a_symlinked_revision_outside_revisions(ctx):
    """A revision-named symlink under revisions/ (the newest name) points at a valid copy of revision 1
    outside the project's revisions. The implicit latest-revision lookup must not follow it: either it
    does not count (the latest real revision is restored) or the rollback is refused
    (revision_path_rejected in resolve_revision, nothing changes). Never is the outside copy restored."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    rev1 = retain_without_replacing(ctx, v1)
    outside = os.path.join(ctx.work, "outside-revision")
    shutil.copytree(rev1, outside)
    os.symlink(outside, os.path.join(ctx.project_dir, "revisions", "000009-" + hash12(v1)))
    state, files = ctx.state(), ctx.committed()
    result = ctx.rollback()
    restored = result.get("restoredRevisionPath") or ""
    assert not os.path.realpath(restored).startswith(os.path.realpath(outside)), (
        "the rollback restored the revision outside revisions/: %s" % restored
    )
    if result["failed"]:
        assert_failed(result, "revision_path_rejected", "resolve_revision")
        assert result.get("rollbackRestored") is False
    else:
        assert restored == rev1, "restored %s, not the latest real revision %s" % (restored, rev1)
        assert result["rollbackRestored"] is True and result["failurePhase"] is None
    assert_untouched(ctx, v1, state, files)  # revision 1 is what runs: restoring it changes nothing
    ctx.assert_secret_nowhere()


def test_item13_setsid_hook_child_is_killed_at_timeout_and_its_output_kept(ctx):
    """A hook whose child calls setsid and the hook times out: the child does not survive the timeout kill
    and what the hook and its child printed is kept (RedactionPolicy none)."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state, files = ctx.state(), ctx.committed()
    pidfile = os.path.join(ctx.work, "escaped.pid")
    hook = {
        "name": "escape",
        "phase": "pre-deploy",
        "timeoutSeconds": 2,
        "redactionPolicy": "none",
        "command": "setsid sh -c 'echo child-says-hi; exec sleep 300' & echo $! > %s; echo parent-says-hi; "
        "sleep 300" % pidfile,
    }
    v2 = ctx.planned("app_v2", "2.0.0", hooks=[hook])
    child = None
    try:
        result = ctx.deploy(v2)
        child = int(open(pidfile).read())
        assert_failed(result, "hook_failed", "pre_deploy_hooks")
        entry = result["hookResults"][0]
        assert entry["timedOut"] is True and entry["outcome"] == "failed"
        assert not fk.pid_alive(child), "the hook's setsid child survived the timeout kill"
        assert "parent-says-hi" in entry["stdout"] and "child-says-hi" in entry["stdout"], (
            "hook output lost: %r" % entry["stdout"]
        )
        assert_untouched(ctx, v1, state, files)
        ctx.assert_secret_nowhere()
    finally:
        if child:
            fk.kill_group_of(child)


# ================================================================================== faults that already held


def test_fault_registry_down_during_plan(ctx, tmp_path):
    """The release's registry does not answer when the role plans: image_unresolved, nothing touches the
    target."""
    role = fk.RoleRun(ctx, tmp_path)
    port = fk.free_port()
    release = role.release("app_v1", "1.0.0", secret_env=True)
    release["components"][0]["image"] = "127.0.0.1:%d/stella/app:v1" % port
    rc, results, output = role.play(
        release, registry_credentials={"127.0.0.1:%d" % port: {"username": "fx", "password": role.registry_secret}}
    )
    assert rc != 0, output[-3000:]
    plan = results["plan"]
    assert_failed(plan, "image_unresolved", "resolve")
    assert results["apply"] is None, "the apply ran after a failed plan"
    assert not ctx.tree()["exists"], "planning failure created the project directory"
    assert ar.project_containers(ctx.project) == {}
    fk.assert_no_secret(ctx.secret, plan, where="plan result")
    fk.assert_no_secret(role.registry_secret, plan, where="plan result")
    role.assert_secrets_nowhere()


def test_fault_registry_down_during_pull(ctx):
    """v2's image lives on a registry that is down when the target pulls: image_pull_failed in
    compose_pull, the lock restored, v1 untouched."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state, files = ctx.state(), ctx.committed()
    release = ctx.release("app_v2", "2.0.0", hooks=[ctx.leak_hook()], secret_env={fk.SECRET_KEY: ctx.secret})
    down = "127.0.0.1:%d" % fk.free_port()  # nothing listens there: the registry is down
    release["components"][0]["image"] = "%s/stella/app:v2@%s" % (down, ctx.images["app_v2"]["digest"])
    result = ctx.deploy(ar.plan(release, {}))
    assert_failed(result, "image_pull_failed", "compose_pull")
    assert result.get("lockRestored") is True
    assert "\n" not in result["msg"]
    assert_untouched(ctx, v1, state, files)
    ctx.assert_secret_nowhere()


def test_fault_unknown_digest(ctx):
    """v2 pins a digest the registry does not have: image_pull_failed in compose_pull, v1 untouched."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state, files = ctx.state(), ctx.committed()
    release = ctx.release("app_v2", "9.0.0", hooks=[ctx.leak_hook()], secret_env={fk.SECRET_KEY: ctx.secret})
    release["components"][0]["image"] = "127.0.0.1:5000/stella/app:v9@sha256:" + "1" * 64
    result = ctx.deploy(ar.plan(release, {}))
    assert_failed(result, "image_pull_failed", "compose_pull")
    assert "manifest unknown" in result["msg"]
    assert result.get("lockRestored") is True
    assert_untouched(ctx, v1, state, files)
    ctx.assert_secret_nowhere()


def test_fault_exiting_container_then_rollback(ctx):
    """v1.1 adds a service whose container exits: service_not_running in compose_up, v1's sticker stays
    committed; the rollback to the baseline runs v1 again (the exited service removed)."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    files = ctx.committed()
    quits = ctx.planned("app_v1", "1.1.0", extra={"worker": ctx.refs["tool"]}, hooks=[ctx.leak_hook()])
    result = ctx.deploy(quits, args={"wait_timeout": 30})
    assert_failed(result, "service_not_running", "compose_up")
    assert "write_sticker" not in result["completedPhases"]
    assert ctx.committed()[fk.STICKER] == files[fk.STICKER]
    baseline = result["previousRevisionPath"]
    assert os.path.basename(baseline) == "000001-" + hash12(v1)
    rollback = ctx.rollback()
    assert not rollback["failed"], summary(rollback)
    assert rollback["restoredRevisionPath"] == baseline
    assert_same_files(ctx, files, "v1's committed files were not restored")
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_runs(v1)
    ctx.assert_secret_nowhere()


def test_fault_failing_healthcheck_then_rollback(ctx):
    """The new image's own healthcheck fails: service_unhealthy in compose_up; the rollback restores v1."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    files = ctx.committed()
    broken = ctx.planned("app_broken", "1.1.0-broken", hooks=[ctx.leak_hook()])
    result = ctx.deploy(broken, args={"wait_timeout": 20})
    assert_failed(result, "service_unhealthy", "compose_up")
    assert ctx.committed()[fk.STICKER] == files[fk.STICKER]
    rollback = ctx.rollback()
    assert not rollback["failed"], summary(rollback)
    assert rollback["restoredRevisionPath"] == result["previousRevisionPath"]
    assert_same_files(ctx, files, "v1's committed files were not restored")
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_runs(v1)
    ctx.assert_secret_nowhere()


def test_fault_failing_probe_rolls_back_through_the_role(ctx, tmp_path):
    """v2's containers are healthy but its post-deploy probe gets 404: health_probe_failed (stage verify),
    the role rolls back to v1."""
    role = fk.RoleRun(ctx, tmp_path)
    v1 = role.planned(role.release("app_v1", "1.0.0", probe=role.probe_config("/")))
    ctx.deploy_ok(v1)
    files = ctx.committed()
    rc, results, output = role.play(
        role.release("app_v2", "2.0.0", hooks=[ctx.leak_hook()], probe=role.probe_config("/no-such-page", attempts=1))
    )
    assert rc != 0, output[-3000:]
    assert "RolledBack" in output and "(auto-rollback restored the retained previous revision)" in output
    assert not results["apply"]["failed"]
    probe = results["probe"]
    assert probe["failed"] and probe.get("code") == "health_probe_failed"
    assert results["rollback"]["rollbackRestored"] is True
    evidence = role.evidence(results)
    assert evidence["deployment.json"]["failure"]["stage"] == "verify"
    assert (evidence["job.json"]["status"], evidence["job.json"]["promotion"]) == ("RolledBack", "Failed")
    assert_same_files(ctx, files, "v1's committed files were not restored")
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_runs(v1)
    role.assert_secrets_nowhere()


def test_fault_failing_hooks_under_non_blocking_policies(ctx):
    """ignore, continue and warn record a failing hook (pre- and post-deploy) and the release succeeds."""
    hooks = [
        failing_hook("%s-%s" % (policy, phase), phase, policy, ctx)
        for phase in ("pre-deploy", "post-deploy")
        for policy in ("ignore", "continue", "warn")
    ]
    v1 = ctx.planned(hooks=hooks)
    result = ctx.deploy(v1)
    assert not result["failed"], summary(result)
    assert result["failurePhase"] is None
    outcomes = [(h["name"], h["exitCode"], h["outcome"]) for h in result["hookResults"]]
    assert outcomes == [
        ("%s-%s" % (p, ph), 3, o)
        for ph in ("pre-deploy", "post-deploy")
        for p, o in (("ignore", "ignored"), ("continue", "continued"), ("warn", "warned"))
    ]
    assert all(
        h["stdout"]["redacted"] is True and h["stdout"]["length"] == len(ctx.secret) for h in result["hookResults"]
    )
    ctx.assert_runs(v1)
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_secret_nowhere()


def test_fault_failing_pre_deploy_hook_with_policy_fail(ctx):
    """FailurePolicy fail before the deploy: hook_failed in pre_deploy_hooks, v1 untouched."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state, files = ctx.state(), ctx.committed()
    v2 = ctx.planned("app_v2", "2.0.0", hooks=[failing_hook("gate", "pre-deploy", "fail", ctx)])
    result = ctx.deploy(v2)
    assert_failed(result, "hook_failed", "pre_deploy_hooks")
    assert result["hookResults"][0]["outcome"] == "failed"
    assert result.get("lockRestored") is True
    assert_untouched(ctx, v1, state, files)
    ctx.assert_secret_nowhere()


def test_fault_failing_post_deploy_hook_with_policy_fail(ctx):
    """FailurePolicy fail after the new release is up: hook_failed in post_deploy_hooks with the retained
    baseline; the rollback (what the role does next) runs the previous release again."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    files = ctx.committed()
    v2 = ctx.planned("app_v2", "2.0.0", hooks=[failing_hook("smoke", "post-deploy", "fail", ctx)])
    result = ctx.deploy(v2)
    assert_failed(result, "hook_failed", "post_deploy_hooks")
    assert result["hookResults"][0]["outcome"] == "failed"
    assert os.path.basename(result["previousRevisionPath"]) == "000001-" + hash12(v1)
    rollback = ctx.rollback(
        payload={
            "ProjectName": ctx.project,
            "WorkDirectory": ctx.work,
            "RevisionPath": result["previousRevisionPath"],
            "Target": ctx.target_context(),
        }
    )
    assert not rollback["failed"], summary(rollback)
    assert_same_files(ctx, files, "v1's committed files were not restored")
    ctx.assert_committed_verifies(v1["manifestHash"])
    ctx.assert_runs(v1)
    ctx.assert_secret_nowhere()


def test_fault_hook_timeout(ctx):
    """A pre-deploy hook over its TimeoutSeconds is killed: hook_failed, timedOut, v1 untouched."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state, files = ctx.state(), ctx.committed()
    ctx.write_secret_file()
    hook = {
        "name": "slow",
        "phase": "pre-deploy",
        "timeoutSeconds": 2,
        "command": "cat %s; sleep 300" % shlex.quote(ctx.secret_file),
    }
    result = ctx.deploy(ctx.planned("app_v2", "2.0.0", hooks=[hook]))
    assert_failed(result, "hook_failed", "pre_deploy_hooks")
    entry = result["hookResults"][0]
    assert entry["timedOut"] is True and 2000 <= entry["durationMs"] < 15000
    assert_untouched(ctx, v1, state, files)
    ctx.assert_secret_nowhere()


def test_fault_sigkill_mid_apply_then_rerun_converges(ctx):
    """Everything of an apply is SIGKILLed while its pre-deploy hook runs: v1 keeps running with its
    sticker; the re-run removes the killed writer's temporaries and converges on v2."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    state = ctx.state()
    v1_files = ctx.committed()
    pidfile = os.path.join(ctx.work, "hook.pid")
    hook = {
        "name": "hang",
        "phase": "pre-deploy",
        "timeoutSeconds": 600,
        "command": "echo $$ $PPID > %s; cat %s; sleep 600" % (pidfile, shlex.quote(ctx.secret_file)),
    }
    ctx.write_secret_file()
    v2_hanging = ctx.planned("app_v2", "2.0.0", hooks=[hook])
    proc = fk.start_ansible(fk.DEPLOY, ctx.deploy_args(v2_hanging))
    hook_pid = None
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(pidfile) or not open(pidfile).read().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "the apply never reached its hook"
            time.sleep(0.2)
        hook_pid, module_pid = [int(x) for x in open(pidfile).read().split()]
        os.kill(module_pid, signal.SIGKILL)
        fk.kill_group_of(hook_pid)
        fk.reap(proc)
    finally:
        fk.reap(proc, timeout=5)
        if hook_pid:
            fk.kill_group_of(hook_pid)
    assert ctx.state() == state, "v1's containers changed"
    staged = ctx.committed()
    assert staged[fk.STICKER] == v1_files[fk.STICKER] and staged[fk.MANIFEST] == v1_files[fk.MANIFEST]
    with open(os.path.join(ctx.project_dir, ".stella-tmp-killed"), "wb") as handle:
        handle.write(b"half a sti")
    v2 = ctx.planned("app_v2", "2.0.0")
    result = ctx.deploy(v2)
    assert not result["failed"], summary(result)
    assert ".stella-tmp-killed" in result.get("removedStaleTemps", [])
    assert not [n for n in ctx.tree()["listing"] if ".stella-tmp-" in n]
    ctx.assert_runs(v2, "app_v2")
    ctx.assert_committed_verifies(v2["manifestHash"])
    ctx.assert_secret_nowhere()


def test_fault_concurrent_deployments_of_one_project_serialize(ctx):
    """Two applies of one project at once: they serialize on the project lock (no interleaving of their
    hooks and compose up), and whichever ran last is what runs and what the committed set describes."""
    journal = os.path.join(ctx.work, "journal")
    ctx.write_secret_file()
    hook = {
        "name": "journal",
        "phase": "pre-deploy",
        "command": "cat %s; echo start $STELLA_MANIFEST_HASH >> %s; sleep 2; echo end $STELLA_MANIFEST_HASH >> %s"
        % (shlex.quote(ctx.secret_file), journal, journal),
    }
    post = {"name": "post", "phase": "post-deploy", "command": "echo post $STELLA_MANIFEST_HASH >> %s" % journal}
    plans = {"v1": ctx.planned(hooks=[hook, post]), "v2": ctx.planned("app_v2", "2.0.0", hooks=[hook, post])}
    results = {}

    def run(name):
        results[name] = ctx.deploy(plans[name])

    threads = [threading.Thread(target=run, args=(name,)) for name in ("v1", "v2")]
    for thread in threads:
        thread.start()
        time.sleep(0.3)
    for thread in threads:
        thread.join(300)
    for name in ("v1", "v2"):
        assert not results[name]["failed"], summary(results[name])
    lines = [line.split() for line in open(journal).read().splitlines()]
    assert [line[0] for line in lines] == ["start", "end", "post", "start", "end", "post"], lines
    assert lines[0][1] == lines[1][1] == lines[2][1] and lines[3][1] == lines[4][1] == lines[5][1]
    assert sorted(r["lockWaitMs"] for r in results.values())[1] >= 2000
    last_key = "v1" if lines[3][1] == plans["v1"]["manifestHash"] else "v2"
    last = plans[last_key]
    ctx.assert_runs(last, "app_v1" if last_key == "v1" else "app_v2")
    ctx.assert_committed_verifies(last["manifestHash"])
    ctx.assert_secret_nowhere()


def test_fault_tampered_revision(ctx):
    """The retained v1 revision's lock is edited on the target: the rollback fails with revision_tampered
    in validate_revision before any change; what ran keeps running."""
    v1 = ctx.planned()
    ctx.deploy_ok(v1)
    rev = retain_without_replacing(ctx, v1)
    state, files = ctx.state(), ctx.committed()
    lock_path = os.path.join(rev, fk.LOCK)
    text = open(lock_path).read()
    with open(lock_path, "w") as handle:
        handle.write(text.replace(ctx.images["app_v1"]["digest"], ctx.images["app_broken"]["digest"]))
    result = ctx.rollback()
    assert_failed(result, "revision_tampered", "validate_revision")
    assert result.get("rollbackRestored") is False
    assert_untouched(ctx, v1, state, files)
    ctx.assert_secret_nowhere()


def test_fault_missing_daemon_on_a_dind_target(dctx, dind):
    """The target's daemon socket is gone: preflight says runtime_daemon_unavailable, the apply fails in
    preflight before any change; v1 keeps running."""
    v1 = dctx.planned()
    dctx.deploy_ok(v1)
    state, files = dctx.state(), dctx.committed()
    v2 = dctx.planned("app_v2", "2.0.0", hooks=[dctx.leak_hook()])
    with fk.daemon_socket_moved(dind):
        pre = dctx.call(
            fk.PREFLIGHT, dict(GATES, payload=v2["payloads"]["compose.preflight"], timeout=5), timeout=PREFLIGHT_LIMIT
        )
        assert pre["failed"]
        assert "runtime_daemon_unavailable" in [f["code"] for f in pre["failures"]], pre["failures"]
        assert pre["preflight"]["docker"]["daemonStatus"] == "unavailable"
        applied = dctx.deploy(v2, timeout=DEPLOY_LIMIT)
        assert_failed_before_change(applied, "runtime_daemon_unavailable")
    fk.wait_daemon(dind)
    assert_untouched(dctx, v1, state, files)
    dctx.assert_secret_nowhere()


def test_fault_full_disk_at_preflight_on_a_small_tmpfs(lab, dind, tmp_path):
    """The work directory is a 2 MiB tmpfs, the release asks for the default 1 GiB free: the role stops at
    preflight with disk_space_low; nothing is applied and no rollback runs."""
    work = "/srv/fx-small-%s" % uuid.uuid4().hex[:8]
    with fk.small_tmpfs(dind, work, "2m"):
        ctx = fk.FaultCtx(lab, host=dind, prefix="fxpf", work=work)
        try:
            role = fk.RoleRun(ctx, tmp_path)
            rc, results, output = role.play(role.release("app_v1", "1.0.0", hooks=[ctx.leak_hook()]))
            assert rc != 0, output[-3000:]
            preflight = role.preflight_outcome(results)
            assert preflight is not None and preflight["failed"], "preflight: %s" % preflight
            assert [f["code"] for f in preflight["failures"]] == ["disk_space_low"], preflight["failures"]
            assert preflight["evidence"]["disk"]["sufficient"] is False
            apply = results["apply"]
            if apply is not None:  # the preflight ran inside the apply task: it failed there, first
                assert_failed(apply, "disk_space_low", "preflight")
                assert not apply.get("hookResults"), "a hook ran after a failed preflight"
            evidence = role.evidence(results)
            assert evidence["deployment.json"]["failure"]["stage"] == "preflight"
            assert evidence["job.json"]["status"] == "Failed"
            assert evidence["job.json"]["rollback"]["skipReason"] == "no_eligible_target", evidence["job.json"]
            assert not ctx.tree()["exists"], "preflight created the project directory"
            assert ar.project_containers(ctx.project, ctx.docker_argv) == {}
            role.assert_secrets_nowhere()
        finally:
            ctx.cleanup()
