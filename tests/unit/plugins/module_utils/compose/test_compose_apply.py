"""compose/apply.py: compose.up requests from the real planner, artifact checks, and ComposeApply driven by
table-driven Docker scripts (converged no-op, fresh apply, restore after failure, baseline retention,
hook and disk failures, a daemon that does not answer)."""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import threading

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import apply as ca
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import request as creq
from ansible_collections.stellaops.runtime.plugins.module_utils.host import files as _fsutil
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import listed_env_hash
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WORK_DIRECTORY
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

D1 = sc.DIGEST
TARGET = sc.TARGET
STICKER, MANIFEST, ENV = "stella.version.json", "apply-manifest.json", ".env.stella"


def planned(secret_env=None, target_type="ComposeHost", endpoint="local", work="/srv/stella"):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "prod",
        "application": "shop",
        "strategy": "rolling",
        "target": dict(TARGET, type=target_type, endpoint=endpoint),
        "components": [
            {"name": "web", "image": "127.0.0.1:5000/stella/app:v1", "config": {"env.MODE": "x"}, "ports": ["8080"]}
        ],
        "hooks": [{"name": "h", "phase": "pre-deploy", "command": "true"}],
    }
    if work is not None:
        release["workDirectory"] = work
    if secret_env:
        release["secretEnv"] = secret_env
    return _plan.plan_release(release, {"127.0.0.1:5000/stella/app:v1": D1})


# --------------------------------------------------------------------------- requests and artifacts


def test_compose_payload_from_the_real_planner_normalizes():
    plan = planned()
    request = creq.parse_request(plan["payloads"]["compose.up"])
    assert request["project_name"] == plan["projectName"]
    assert request["target"] == TARGET
    assert request["pull_images"] is True and request["backup_existing"] is True
    assert request["hooks"][0]["Name"] == "h" and request["work_directory"] == "/srv/stella"
    files, sticker = creq.check_artifacts(request)
    assert sticker["manifestHash"] == plan["manifestHash"]
    assert files[MANIFEST].decode() == plan["applyManifest"]
    assert files[sc.LOCK].decode() == plan["lock"]


@pytest.mark.parametrize(
    "mutate,needle",
    [
        (lambda p: p.update(Extra=1), "unknown key(s) Extra"),
        (lambda p: p.pop("PullImages"), "lacks required PullImages"),
        (lambda p: p.pop("Target"), "lacks required Target"),
        (lambda p: p.update(projectName="x"), "unknown key(s) projectName"),
        (lambda p: p.update(PullImages="yes"), "PullImages must be a boolean"),
        (lambda p: p["Target"].pop("Endpoint"), "Target.Endpoint"),
        (lambda p: p["Target"].update(Region="eu"), "Region"),
        (lambda p: p.update(Hooks=[{"Name": "x"}]), "Hooks[0]"),
        (lambda p: p.update(Variables=[]), "Variables"),
    ],
    ids=["unknown", "missing", "no-target", "wrong-case", "type", "target-field", "target-extra", "hook", "vars"],
)
def test_compose_payload_rejections(mutate, needle):
    payload = copy.deepcopy(planned()["payloads"]["compose.up"])
    mutate(payload)
    with pytest.raises(StellaError) as err:
        creq.parse_request(payload)
    assert needle in err.value.reason and err.value.phase == "validate_payload"


def test_work_directory_required_somewhere():
    """Without ``WorkDirectory`` the request falls back to the default, which the sticker's recorded work
    directory refuses; the option supplies it."""
    payload = copy.deepcopy(planned()["payloads"]["compose.up"])
    del payload["WorkDirectory"]
    request = creq.parse_request(payload)
    assert request["work_directory"] == DEFAULT_WORK_DIRECTORY
    with pytest.raises(StellaError) as err:
        creq.check_artifacts(request)
    assert err.value.code == "artifact_hash_mismatch" and "workDirectory" in err.value.reason
    request = creq.parse_request(payload, {"work_directory": "/srv/stella"})
    assert request["work_directory"] == "/srv/stella"
    creq.check_artifacts(request)
    assert creq.parse_request(payload, {"work_directory": "/x"})["work_directory"] == "/x"


def test_options_request():
    plan = planned(work=None)
    request = creq.parse_request(
        None,
        {
            "project_name": plan["projectName"],
            "compose_lock": plan["lock"],
            "version_sticker": plan["sticker"],
            "target": TARGET,
            "pull_images": None,
            "backup_existing": False,
            "hooks": None,
        },
    )
    assert request["pull_images"] is True and request["backup_existing"] is False
    assert request["work_directory"] == DEFAULT_WORK_DIRECTORY
    creq.check_artifacts(request)
    with pytest.raises(StellaError) as err:
        creq.parse_request(None, {"project_name": "p"})
    assert err.value.code == "invalid_payload"


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("compose_lock", lambda plan: plan["lock"].replace("x", "y"), "composeHash"),
        (
            "version_sticker",
            lambda plan: plan["sticker"].replace(plan["manifestHash"], "sha256:" + "0" * 64),
            "manifestHash",
        ),
        ("apply_manifest", lambda plan: plan["applyManifest"].replace('"sha256:', '"sha256:0', 1), "hash"),
        ("manifest_hash", lambda plan: "sha256:" + "1" * 64, "ManifestHash"),
        ("project_name", lambda plan: "other", "projectName"),
        ("target", lambda plan: dict(TARGET, id="tgt-02"), "differs from the sticker"),
        ("version_sticker", lambda plan: "not json", "not JSON"),
    ],
    ids=["lock-edited", "sticker-hash", "manifest-edited", "manifest-hash", "project", "target", "sticker-json"],
)
def test_check_artifacts_rejects_inconsistent_sets(field, value, needle):
    plan = planned()
    request = creq.parse_request(plan["payloads"]["compose.up"])
    request[field] = value(plan)
    with pytest.raises(StellaError) as err:
        creq.check_artifacts(request)
    assert needle in err.value.reason


def test_check_artifacts_with_env_artifact():
    plan = planned(secret_env={"DB_PASSWORD": "hunter2"})
    request = creq.parse_request(plan["payloads"]["compose.up"])
    env = plan["_files"][ENV]
    files, _sticker = creq.check_artifacts(request, env)
    assert listed_env_hash(files[MANIFEST]) == sha256_bytes(env)
    creq.check_artifacts(request, None)  # may already be on the target: checked at apply time
    with pytest.raises(StellaError):
        creq.check_artifacts(request, b"DB_PASSWORD=other\n")


def test_lock_diff():
    assert ca.lock_diff(None, "x", "/p") == {"before": "", "after": "x", "before_header": "/p", "after_header": "/p"}


@pytest.mark.parametrize(
    "stderr,code",
    [
        (sc.fixture("compose_up_unhealthy.stderr"), "service_unhealthy"),
        (sc.fixture("compose_up_exited.stderr"), "service_not_running"),
        (sc.fixture("compose_pull_unknown_digest.stderr"), "image_pull_failed"),
        ("something else entirely", "compose_up_failed"),
    ],
    ids=["unhealthy", "exited", "manifest-unknown", "other"],
)
def test_up_failure_code_from_captured_compose_errors(stderr, code):
    assert ca.up_failure_code(stderr, "compose_up_failed") == code


def test_engine_refuses_wrong_host_before_touching_docker(tmp_path):
    plan = planned(endpoint="ssh://192.0.2.9", work=str(tmp_path))
    payload = copy.deepcopy(plan["payloads"]["compose.up"])
    calls = []

    def run(argv, environ_update=None):  # pylint: disable=unused-argument
        calls.append(argv)
        return (0, json.dumps([{"addr_info": [{"local": "127.0.0.1"}]}]), "") if argv[0] == "ip" else (1, "", "")

    request = creq.parse_request(payload)
    with pytest.raises(StellaError) as err:
        ca.ComposeApply(sc.engine(run), run).run(request)
    assert err.value.code == "wrong_host" and err.value.evidence["failurePhase"] == "verify_target"
    assert not any("docker" in argv for argv in calls)
    assert not os.listdir(str(tmp_path))


# --------------------------------------------------------------------------- ComposeApply, scripted


def apply(site, plan, runner, env=True, **kw):
    """Run ComposeApply for ``plan``'s compose.up payload (with its env artifact unless ``env=False``)."""
    request = creq.parse_request(plan["payloads"]["compose.up"])
    manager = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan) if env else None, **kw)
    return manager.run(request)


def deploy(site, plan, before, after):
    """A successful apply that changes the project; returns its result."""
    runner = sc.ScriptedRunner(site.apply_steps(plan, before, after))
    result = apply(site, plan, runner)
    runner.assert_done()
    return result


# The lock the planner rendered is read directly: no ``docker compose config`` in any of these.
# An apply over a running project: the early look (containers, images) beside the runtime questions, then
# ``up`` and the verification look.
EARLY_VERBS = ("ps", "inspect", "image inspect")
APPLY_VERBS = ["early", "compose up", "ps", "inspect"]


@pytest.fixture
def site(tmp_path):
    return sc.Site(tmp_path / "work")


def early(site, plan, running, images=None):
    """The first steps of an apply of ``plan``: the runtime questions and the early look at the project's
    ``running`` containers and the lock's images (``images``: present), in any order."""
    return [
        sc.Unordered(
            list(sc.runtime()[0].pending)
            + sc.containers(site.project(plan), running)
            + (images if images is not None else [sc.image_present()])
        )
    ]


def test_converged_project_is_a_no_op(site):
    """Same artifacts, every service verified: no compose up, no hook, no file written, changed=false."""
    running = [site.container(site.plan(secret="s1"), "a1")]
    deploy(site, site.plan(secret="s1"), [], running)
    plan = site.plan(secret="s1", hooks=[{"name": "never", "phase": "pre-deploy", "command": "exit 3"}])
    assert plan["_files"] == site.plan(secret="s1")["_files"]  # hooks are not part of the artifacts
    directory = site.directory(plan)
    before = {name: os.stat(os.path.join(directory, name)) for name in os.listdir(directory)}
    content = sc.snapshot(directory)

    # The committed lock is the one asked for: the project's containers and the one image question
    # are asked while the engine answers the runtime questions, each once. The committed lock is read
    # from disk, so Compose is never asked to render it; never up, pull, run or rm.
    runner = sc.ScriptedRunner(sc.runtime_and_look(site.project(plan), running), keyed=[sc.image_present()])
    result = apply(site, plan, runner)

    runner.assert_done()
    verbs = runner.docker_verbs()
    assert sorted(verbs) == ["image inspect", "info", "inspect", "ps", "version"]
    assert verbs.index("ps") < verbs.index("inspect")
    assert "compose config" not in runner.verbs()
    assert "compose up" not in runner.verbs() and "compose pull" not in runner.verbs()
    assert result["changed"] is False and result["warnings"] == []
    evidence = result["evidence"]
    assert evidence["hookResults"] == [] and evidence["failurePhase"] is None
    assert evidence["completedPhases"] == ["inspect_services"]
    assert {p["phase"]: p["status"] for p in evidence["deploymentPhases"]} == {
        "prepare": "skipped",
        "pre-deploy": "skipped",
        "deploy": "skipped",
        "verify": "succeeded",
        "promote": "skipped",
        "post-deploy": "skipped",
    }
    assert evidence["serviceCount"] == 1 and evidence["services"][0]["imageDigest"] == D1
    assert sc.snapshot(directory) == content
    after = {name: os.stat(os.path.join(directory, name)) for name in os.listdir(directory)}
    assert {n: (s.st_ino, s.st_mtime_ns) for n, s in after.items()} == {
        n: (s.st_ino, s.st_mtime_ns) for n, s in before.items()
    }


@pytest.mark.parametrize(
    "early_state,because",
    [
        ({"health": "starting"}, "container of service web: {name} health is starting"),
        ({"restarting": True}, "container of service web: {name} is restarting (exit code 0)"),
    ],
    ids=["health-starting", "restarting"],
)
def test_same_release_not_verified_at_first_look_is_applied_and_changes_nothing_when_up_touches_nothing(
    site, early_state, because
):
    """The committed set is the one asked for, but the first look finds the container not ready: the apply
    runs (``compose up``, inspection), says why, and reports ``changed: false`` when ``up`` left the same
    container running and no file differs; the committed files are not rewritten."""
    plan = site.plan(secret="s1")
    running = [site.container(plan, "a1")]
    deploy(site, plan, [], running)
    directory = site.directory(plan)
    before = {name: os.stat(os.path.join(directory, name)) for name in os.listdir(directory)}
    content = sc.snapshot(directory)
    not_ready = [site.container(plan, "a1", **early_state)]

    runner = sc.ScriptedRunner(site.apply_steps(plan, not_ready, running))
    result = apply(site, plan, runner)

    runner.assert_done()
    assert "compose up" in runner.verbs()
    evidence = result["evidence"]
    assert result["changed"] is False and evidence["failurePhase"] is None
    assert evidence["appliedBecause"] == [because.format(name=site.project(plan) + "-web-1")]
    assert "compose_up" in evidence["completedPhases"]
    assert sc.snapshot(directory) == content
    after = {name: os.stat(os.path.join(directory, name)) for name in os.listdir(directory)}
    assert {n: (s.st_ino, s.st_mtime_ns) for n, s in after.items()} == {
        n: (s.st_ino, s.st_mtime_ns) for n, s in before.items()
    }


def test_same_release_whose_container_up_replaced_is_a_change(site):
    """Same committed set, the first look finds the container exited, ``up`` starts another one: changed."""
    plan = site.plan(secret="s1")
    deploy(site, plan, [], [site.container(plan, "a1")])
    runner = sc.ScriptedRunner(
        site.apply_steps(plan, [site.container(plan, "a1", base="exited")], [site.container(plan, "a2")])
    )
    result = apply(site, plan, runner)
    runner.assert_done()
    assert result["changed"] is True
    assert result["evidence"]["appliedBecause"][0].startswith("container of service web:")


def test_a_likely_no_op_looks_at_the_containers_while_the_engine_answers(site):
    """The committed lock is the one asked for: the containers are asked before ``docker version`` has
    answered (the script holds that answer back until ``ps`` came, so asking in turn would fail)."""
    running = [site.container(site.plan(secret="s1"), "a1")]
    deploy(site, site.plan(secret="s1"), [], running)
    plan = site.plan(secret="s1")
    ps_seen = threading.Event()
    waited = {}

    def hold_version(_argv):
        waited["ps first"] = ps_seen.wait(5)

    version = sc.Step(sc.docker_version().pattern, 0, sc.fixture("docker_version_20.10.json"), action=hold_version)
    ps_step, inspect_step = sc.containers(site.project(plan), running)
    ps_step.action = lambda _argv: ps_seen.set()
    runner = sc.ScriptedRunner(
        [sc.Unordered([version, sc.docker_info(), ps_step, inspect_step])], keyed=[sc.image_present()]
    )
    result = apply(site, plan, runner)

    runner.assert_done()
    assert waited == {"ps first": True}
    assert result["changed"] is False and result["evidence"]["completedPhases"] == ["inspect_services"]


@pytest.mark.parametrize(
    "options,code",
    [
        ({"min_engine_version": "99.0.0"}, "runtime_version_too_old"),
        ({"payload": {"MinimumFreeDiskBytes": 2**62}}, "disk_space_low"),
    ],
    ids=["engine-too-old", "disk"],
)
def test_failed_preflight_of_a_likely_no_op_changes_nothing_and_lets_the_project_go(site, monkeypatch, options, code):
    """The early look holds the project lock while the preflight runs: a failed preflight still changes
    nothing, and the lock is free again when the task ends."""
    running = [site.container(site.plan(secret="s1"), "a1")]
    deploy(site, site.plan(secret="s1"), [], running)
    before = sc.snapshot(site.work)
    sc.offline_preflight(monkeypatch)
    plan = site.plan(secret="s1")
    preflight = preflight_options(site, **options.get("payload", {}))
    preflight.update({k: v for k, v in options.items() if k != "payload"})
    runner = sc.ScriptedRunner(
        sc.runtime_and_look(site.project(plan), running, sc.preflight_runtime()), keyed=[sc.image_present()]
    )
    with pytest.raises(StellaError) as err:
        apply(site, plan, runner, preflight=preflight)

    assert err.value.code == code and err.value.phase == "preflight"
    assert err.value.evidence["changed"] is False
    assert "compose up" not in runner.verbs()
    assert sc.snapshot(site.work) == before
    fd = os.open(os.path.join(site.directory(plan), ".stella.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while still held
    finally:
        os.close(fd)


def test_a_later_job_finding_the_same_release_keeps_the_committed_sticker(site):
    """Job B plans the release job A applied: only the job keys of the sticker differ. B verifies, changes
    nothing, keeps A's sticker and apply manifest, and says which job applied it; check mode agrees."""
    first = site.plan(secret="s1", job_id="job-a")
    running = [site.container(first, "a1")]
    deploy(site, first, [], running)
    directory = site.directory(first)
    content = sc.snapshot(directory)
    later = site.plan(secret="s1", job_id="job-b")
    assert later["_files"][sc.LOCK] == first["_files"][sc.LOCK] and later["manifestHash"] == first["manifestHash"]
    assert later["_files"]["stella.version.json"] != first["_files"]["stella.version.json"]
    for check_mode in (True, False):
        # check mode looks only after the runtime answered; a real run looks while it answers
        look = (
            sc.runtime() + sc.containers(site.project(later), running)
            if check_mode
            else sc.runtime_and_look(site.project(later), running)
        )
        runner = sc.ScriptedRunner(look, keyed=[sc.image_present()])
        request = creq.parse_request(later["payloads"]["compose.up"])
        manager = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(later))
        result = manager.run(request, check_mode=check_mode)
        assert "compose up" not in runner.verbs()
        assert result["changed"] is False, check_mode
        evidence = result["evidence"]
        assert (evidence["appliedByJobId"], evidence["versionStickerHash"]) == ("job-a", first["versionStickerHash"]), (
            check_mode
        )
        assert evidence["artifactHashes"]["apply-manifest.json"] == first["applyManifestHash"]
        assert sc.snapshot(directory) == content
    # A different release is still a change.
    other = site.plan(version="2.0.0", secret="s1", job_id="job-b")
    runner = sc.ScriptedRunner(sc.runtime() + sc.containers(site.project(other), running), keyed=[sc.image_present()])
    request = creq.parse_request(other["payloads"]["compose.up"])
    result = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(other)).run(request, check_mode=True)
    assert result["changed"] is True


def test_fresh_apply_stages_the_lock_and_commits_the_sticker_only_after_inspection(site):
    plan = site.plan(secret="s1")
    directory = site.directory(plan)
    seen = {}

    def look(moment):
        def action(_argv):
            seen[moment] = {
                name: _fsutil.read_bytes(os.path.join(directory, name)) for name in (sc.LOCK, STICKER, MANIFEST, ENV)
            }

        return action

    after = [site.container(plan, "a1")]
    steps = site.apply_steps(plan, [], after, up=site.up_step(plan, action=look("up")))
    next(step for step in steps[0].pending if sc.verb(step.pattern) == "image inspect").action = look("early")
    steps[-1].action = look("inspect")  # the verification inspect
    runner = sc.ScriptedRunner(steps)
    result = apply(site, plan, runner)

    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), "ps", "image inspect") == ["early", "compose up", "ps", "inspect"]
    assert "compose config" not in runner.verbs()
    files = plan["_files"]
    assert set(seen["early"].values()) == {None}  # the early look reads while nothing is written yet
    for moment in ("up", "inspect"):
        assert seen[moment][sc.LOCK] == files[sc.LOCK], moment
        assert seen[moment][ENV] == files[ENV], moment
        assert seen[moment][STICKER] is None and seen[moment][MANIFEST] is None, moment
    assert sc.snapshot(directory, skip=(".stella.lock",)) == {
        sc.LOCK: (files[sc.LOCK], 0o644),
        STICKER: (files[STICKER], 0o644),
        MANIFEST: (files[MANIFEST], 0o644),
        ENV: (files[ENV], 0o600),
    }
    evidence = result["evidence"]
    assert result["changed"] is True and evidence["failurePhase"] is None
    assert evidence["completedPhases"] == [
        "write_artifacts",
        "pre_deploy_hooks",
        "compose_pull",
        "compose_up",
        "inspect_services",
        "write_sticker",
        "post_deploy_hooks",
    ]
    assert "previousRevisionPath" not in evidence and not os.path.exists(os.path.join(directory, "revisions"))
    assert evidence["pulledServices"] == [] and evidence["imageIds"] == {"web": sc.IMAGE_ID}
    assert evidence["dockerVersion"] == "20.10.24+dfsg1" and evidence["composeVersion"] == "2.40.3"
    assert evidence["manifestHash"] == plan["manifestHash"]
    assert runner.limit_of("version") == 60 and runner.limit_of("compose up") == 120 + 60


def test_an_early_look_without_the_lock_is_asked_again_when_a_job_committed_meanwhile(site):
    """The project did not exist at the early look (no lock to take); another job committed a lock before
    this one got the project lock: the containers and images are asked again under the lock."""
    plan = site.plan()
    directory = site.directory(plan)

    def another_job_commits(_argv):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, sc.LOCK), "w", encoding="utf-8") as handle:
            handle.write("services: {}\n")

    steps = early(site, plan, [], [sc.image_present()])
    # at `docker version`, which the apply asks on its own thread before it takes the project lock: the
    # early look (on other threads) may already have answered, or not; either way it was asked unlocked
    next(step for step in steps[0].pending if sc.verb(step.pattern) == "version").action = another_job_commits
    again = sc.Unordered(sc.containers(site.project(plan), []) + [sc.image_present()])
    after = [site.container(plan, "a1")]
    runner = sc.ScriptedRunner(steps + [again, site.up_step(plan)] + sc.containers(site.project(plan), after))
    result = apply(site, plan, runner)
    runner.assert_done()
    verbs = sc.early_once(runner.docker_verbs(), "ps", "image inspect")
    assert sorted(verbs[1:3]) == ["image inspect", "ps"] and verbs[3:] == ["compose up", "ps", "inspect"]
    assert result["changed"] is True


def test_images_are_asked_again_after_a_pre_deploy_hook(site):
    """A pre-deploy hook runs after the early look and may pull or remove images: the pull step then asks
    the engine again instead of trusting what the early look found."""
    plan = site.plan(hooks=[{"name": "warm", "phase": "pre-deploy", "command": "true"}])
    after = [site.container(plan, "a1")]
    steps = early(site, plan, [], [sc.image_present()]) + [sc.image_present(), site.up_step(plan)]
    runner = sc.ScriptedRunner(steps + sc.containers(site.project(plan), after))
    result = apply(site, plan, runner)
    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), "ps", "image inspect") == [
        "early",
        "image inspect",
        "compose up",
        "ps",
        "inspect",
    ]
    assert result["evidence"]["hookResults"][0]["outcome"] == "succeeded"


def test_missing_image_is_pulled_before_compose_up(site):
    plan = site.plan()
    after = [site.container(plan, "a1")]
    runner = sc.ScriptedRunner(
        site.apply_steps(
            plan,
            [],
            after,
            image=[sc.image_absent(), sc.image_absent(), site.pull_step(plan, "web"), sc.image_present()],
        )
    )
    result = apply(site, plan, runner)
    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), "ps", "image inspect", "image inspect") == [
        "early",
        "compose pull",
        "image inspect",
        "compose up",
        "ps",
        "inspect",
    ]
    assert result["evidence"]["pulledServices"] == ["web"]


def test_pull_disabled_and_image_missing_fails_before_compose_up(site):
    plan = site.plan()
    payload = dict(plan["payloads"]["compose.up"], PullImages=False)
    runner = sc.ScriptedRunner(early(site, plan, [], [sc.image_absent(), sc.image_absent()]))
    with pytest.raises(StellaError) as err:
        ca.ComposeApply(sc.engine(runner), runner).run(creq.parse_request(payload))
    runner.assert_done()
    assert "compose config" not in runner.verbs() and "compose up" not in runner.verbs()
    assert err.value.code == "image_missing" and err.value.phase == "compose_pull"
    assert err.value.evidence["filesRestored"] == [sc.LOCK]
    assert not os.path.exists(os.path.join(site.directory(plan), sc.LOCK))


def test_failed_compose_up_restores_every_file(site):
    """The new container turns unhealthy while the apply waits for it after ``up -d``: lock, sticker,
    manifest and .env.stella are put back byte for byte; the retained revision of the running release
    stays as the baseline."""
    plan_a = site.plan("1.0.0", secret="s1")
    running = [site.container(plan_a, "a1")]
    deploy(site, plan_a, [], running)
    directory = site.directory(plan_a)
    before = sc.snapshot(directory, skip=("revisions",))

    plan_b = site.plan("2.0.0", secret="s2")
    assert site.env(plan_b) != site.env(plan_a)
    broken = [site.container(plan_b, "b1", base="bad")]
    runner = sc.ScriptedRunner(site.apply_steps(plan_b, running, broken))
    with pytest.raises(StellaError) as err:
        apply(site, plan_b, runner)

    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), *EARLY_VERBS) == APPLY_VERBS
    assert err.value.code == "service_unhealthy" and err.value.phase == "compose_up"
    assert err.value.reason == "container %s is unhealthy" % broken[0]["Name"].lstrip("/")
    evidence = err.value.evidence
    assert evidence["failurePhase"] == "compose_up" and evidence["changed"] is True
    assert evidence["filesRestored"] == [ENV, sc.LOCK] and evidence["lockRestored"] is True
    assert evidence["services"][0]["health"] == "unhealthy"
    assert sc.snapshot(directory, skip=("revisions",)) == before
    revisions = os.listdir(os.path.join(directory, "revisions"))
    assert len(revisions) == 1 and evidence["previousRevisionPath"].endswith(revisions[0])
    assert _fsutil.read_bytes(os.path.join(evidence["previousRevisionPath"], STICKER)) == plan_a["_files"][STICKER]
    assert {p["phase"]: p["status"] for p in evidence["deploymentPhases"]}["deploy"] == "failed"


def test_failed_verification_after_up_restores_every_file(site):
    """compose up succeeds but the container runs another image: digest_mismatch in inspect_services."""
    plan_a = site.plan("1.0.0", secret="s1")
    running = [site.container(plan_a, "a1")]
    deploy(site, plan_a, [], running)
    directory = site.directory(plan_a)
    before = sc.snapshot(directory, skip=("revisions",))
    plan_b = site.plan("2.0.0", secret="s2")
    wrong = [site.container(plan_b, "b1", image_id="sha256:" + "e" * 64)]
    runner = sc.ScriptedRunner(site.apply_steps(plan_b, running, wrong))
    with pytest.raises(StellaError) as err:
        apply(site, plan_b, runner)
    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), *EARLY_VERBS) == APPLY_VERBS
    assert err.value.code == "digest_mismatch" and err.value.phase == "inspect_services"
    assert sc.snapshot(directory, skip=("revisions",)) == before


def test_baseline_retention_is_deduplicated(site):
    """A, B, A, then B again: B's baseline is A's revision (reused), not the newest revision (B's)."""
    plan_a, plan_b = site.plan("1.0.0"), site.plan("2.0.0")
    revisions = os.path.join(site.directory(plan_a), "revisions")
    generations = [[]]
    results = []
    for index, plan in enumerate([plan_a, plan_b, plan_a, plan_b]):
        generations.append([site.container(plan, "gen-%d" % index)])
        results.append(deploy(site, plan, generations[-2], generations[-1]))
    paths = [result["evidence"].get("previousRevisionPath") for result in results]
    assert paths[0] is None
    names = sorted(os.listdir(revisions))
    assert len(names) == 2  # A's and B's, each retained once
    rev_a, rev_b = (os.path.join(revisions, name) for name in names)
    assert _fsutil.read_bytes(os.path.join(rev_a, STICKER)) == plan_a["_files"][STICKER]
    assert _fsutil.read_bytes(os.path.join(rev_b, STICKER)) == plan_b["_files"][STICKER]
    assert paths[1:] == [rev_a, rev_b, rev_a]
    assert paths[3] != os.path.join(revisions, names[-1])


@pytest.mark.parametrize("keep, kept", [(2, ["2.0.0", "3.0.0"]), (0, ["1.0.0", "2.0.0", "3.0.0"])])
def test_keep_revisions_prunes_the_oldest_retained_revisions(site, keep, kept):
    """Four releases in turn retain three baselines; ``keep_revisions`` keeps the newest of them (0: all)."""
    plans = [site.plan(version) for version in ("1.0.0", "2.0.0", "3.0.0", "4.0.0")]
    revisions = os.path.join(site.directory(plans[0]), "revisions")
    generations = [[]]
    for index, plan in enumerate(plans):
        generations.append([site.container(plan, "gen-%d" % index)])
        runner = sc.ScriptedRunner(site.apply_steps(plan, generations[-2], generations[-1]))
        result = apply(site, plan, runner, keep_revisions=keep)
        runner.assert_done()
        assert result["changed"] is True
    stickers = [
        json.loads(_fsutil.read_bytes(os.path.join(revisions, name, STICKER))) for name in sorted(os.listdir(revisions))
    ]
    assert [sticker["release"]["version"] for sticker in stickers] == kept
    assert result["evidence"]["previousRevisionPath"] == os.path.join(revisions, sorted(os.listdir(revisions))[-1])


def test_a_negative_keep_revisions_is_refused_before_anything_runs():
    with pytest.raises(StellaError) as err:
        creq.parse_request(None, {"keep_revisions": -1})
    assert err.value.code == "invalid_payload" and err.value.phase == "validate_payload"
    assert "keep_revisions" in err.value.reason


def test_blocking_pre_deploy_hook_restores_env_file(site):
    plan_a = site.plan("1.0.0", secret="s1")
    running = [site.container(plan_a, "a1")]
    deploy(site, plan_a, [], running)
    directory = site.directory(plan_a)
    before = sc.snapshot(directory, skip=("revisions",))
    plan_b = site.plan("2.0.0", secret="s2", hooks=[{"name": "migrate", "phase": "pre-deploy", "command": "exit 3"}])
    runner = sc.ScriptedRunner(early(site, plan_b, running))
    with pytest.raises(StellaError) as err:
        apply(site, plan_b, runner)
    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), *EARLY_VERBS) == ["early"]
    assert err.value.code == "hook_failed" and err.value.phase == "pre_deploy_hooks"
    evidence = err.value.evidence
    assert evidence["hookResults"][0]["exitCode"] == 3 and evidence["hookResults"][0]["outcome"] == "failed"
    assert evidence["filesRestored"] == [ENV, sc.LOCK] and evidence["changed"] is False
    assert sc.snapshot(directory, skip=("revisions",)) == before
    assert before[ENV] == (plan_a["_files"][ENV], 0o600)


@pytest.mark.parametrize("nth,restored", [(1, [sc.LOCK]), (2, [ENV, sc.LOCK])], ids=["lock-write", "env-write"])
def test_disk_full_while_writing_artifacts(site, monkeypatch, nth, restored):
    plan_a = site.plan("1.0.0", secret="s1")
    running = [site.container(plan_a, "a1")]
    deploy(site, plan_a, [], running)
    directory = site.directory(plan_a)
    before = sc.snapshot(directory, skip=("revisions",))
    plan_b = site.plan("2.0.0", secret="s2")

    real = _fsutil.atomic_write
    calls = []

    def atomic_write(path, data, mode=0o644):
        calls.append(path)
        if len(calls) == nth:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real(path, data, mode=mode)

    monkeypatch.setattr(_fsutil, "atomic_write", atomic_write)
    runner = sc.ScriptedRunner(early(site, plan_b, running))
    with pytest.raises(StellaError) as err:
        apply(site, plan_b, runner)
    runner.assert_done()
    assert err.value.code == "disk_full" and err.value.phase == "write_artifacts"
    assert err.value.evidence["failurePhase"] == "write_artifacts"
    assert err.value.evidence["filesRestored"] == restored
    assert "compose config" not in runner.verbs()
    after = sc.snapshot(directory, skip=("revisions",))
    assert {k: v for k, v in after.items() if not k.startswith(".stella-tmp-")} == before
    assert sorted(k for k in after if k.startswith(".stella-tmp-")) == [], "restore left copies aside"


def test_hung_daemon_fails_before_anything_changes(site):
    plan = site.plan()
    # the daemon answers nothing: neither the preflight's questions nor the early look's
    hung = [sc.Step(step.pattern, 124, "") for step in sc.containers(site.project(plan), []) + [sc.image_present()]]
    runner = sc.ScriptedRunner([sc.Unordered([sc.docker_version(rc=124), sc.docker_info()] + hung)])
    with pytest.raises(StellaError) as err:
        apply(site, plan, runner)
    runner.assert_done()
    assert err.value.code == "runtime_daemon_unavailable" and err.value.phase == "preflight"
    assert runner.limit_of("version") == 60
    assert not os.path.exists(site.work)


def test_hung_compose_up_restores_files(site):
    plan_a = site.plan("1.0.0")
    running = [site.container(plan_a, "a1")]
    deploy(site, plan_a, [], running)
    directory = site.directory(plan_a)
    before = sc.snapshot(directory, skip=("revisions",))
    plan_b = site.plan("2.0.0")
    runner = sc.ScriptedRunner(site.apply_steps(plan_b, running, running, up=site.up_step(plan_b, rc=124)))
    with pytest.raises(StellaError) as err:
        apply(site, plan_b, runner)
    runner.assert_done()
    assert err.value.code == "runtime_daemon_unavailable" and err.value.phase == "compose_up"
    assert sc.snapshot(directory, skip=("revisions",)) == before


def test_check_mode_runs_nothing_and_writes_nothing(site):
    plan = site.plan(secret="s1")
    runner = sc.ScriptedRunner(sc.runtime() + sc.containers(site.project(plan), []))
    request = creq.parse_request(plan["payloads"]["compose.up"])
    result = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan)).run(
        request, check_mode=True, diff=True
    )
    runner.assert_done()
    assert result["changed"] is True and result["evidence"]["checkMode"] is True
    assert result["evidence"]["wouldChangeFiles"] == sorted([sc.LOCK, STICKER, MANIFEST])
    assert result["evidence"]["wouldApplyBecause"] == ["nothing is committed in the project"]
    assert result["diff"]["after"] == plan["lock"] and result["diff"]["before"] == ""
    assert not os.path.exists(site.work)


def test_check_mode_says_why_the_same_release_would_be_applied(site):
    """Check mode over the committed release whose container is still starting: it would apply (changed),
    no file would change, and it says why; a verified one would not apply and says nothing."""
    plan = site.plan(secret="s1")
    deploy(site, plan, [], [site.container(plan, "a1")])
    request = creq.parse_request(plan["payloads"]["compose.up"])
    for state, changed in (({"health": "starting"}, True), ({}, False)):
        runner = sc.ScriptedRunner(
            sc.runtime() + sc.containers(site.project(plan), [site.container(plan, "a1", **state)]),
            keyed=[sc.image_present()],
        )
        result = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan)).run(request, check_mode=True)
        evidence = result["evidence"]
        assert result["changed"] is changed and evidence["wouldChangeFiles"] == []
        if changed:
            assert evidence["wouldApplyBecause"] == [
                "container of service web: %s-web-1 health is starting" % site.project(plan)
            ]
        else:
            assert "wouldApplyBecause" not in evidence


# --------------------------------------------------------------------------- a lock the reader declines


def dollar_plan(site, version="1.0.0"):
    """A planned release whose lock carries a ``$`` (escaped ``$$`` for Compose) in a label value, which
    ``read_lock_services`` declines to read."""
    release = site.release(version, secret="s1")
    release["release"]["name"] = "shop $HOME"
    plan = _plan.plan_release(release, {sc.IMAGE: D1})
    assert 'stella.release.name: "shop $$HOME"' in plan["lock"]
    return plan


def test_lock_the_reader_declines_is_rendered_by_compose_config_once(site):
    """The one case Compose renders the lock: asked once, in write_artifacts, with the staged lock (and
    env artifact) already in place and no sticker yet; its images drive the image questions and the
    verification after a failed ``up`` reuses it."""
    plan = dollar_plan(site)
    directory = site.directory(plan)
    seen = {}

    def at_config(_argv):
        seen.update({name: _fsutil.read_bytes(os.path.join(directory, name)) for name in (sc.LOCK, ENV, STICKER)})

    broken = [site.container(plan, "b1", base="bad")]
    up = site.up_step(plan, rc=1, err=sc.fixture("compose_up_unhealthy.stderr"))
    steps = site.apply_steps(plan, [], broken, up=up, config=True)
    next(
        step for step in steps if isinstance(step, sc.Step) and sc.verb(step.pattern) == "compose config"
    ).action = at_config
    runner = sc.ScriptedRunner(steps)
    with pytest.raises(StellaError) as err:
        apply(site, plan, runner)

    runner.assert_done()
    assert sc.early_once(runner.docker_verbs(), "ps") == [
        "early",
        "compose config",
        "image inspect",
        "compose up",
        "ps",
        "inspect",
    ]
    assert seen == {sc.LOCK: plan["_files"][sc.LOCK], ENV: plan["_files"][ENV], STICKER: None}
    assert err.value.code == "service_unhealthy" and err.value.phase == "compose_up"
    evidence = err.value.evidence
    assert evidence["services"][0]["image"] == sc.PINNED and evidence["services"][0]["health"] == "unhealthy"
    assert evidence["filesRestored"] == [ENV, sc.LOCK]
    assert not [name for name in os.listdir(directory) if name != ".stella.lock"]


class EscapedLabelExpected(Exception):
    """The apply expected the ``$$``-escaped text ``docker compose config`` prints as the label value."""


def test_lock_the_reader_declines_verifies_the_labels_docker_sets(site):
    """Compose sets ``stella.release.name`` to ``shop $HOME`` (``$$`` interpolated) on the container, as a
    real ``docker compose create`` of such a lock shows; the apply must accept exactly that."""
    plan = dollar_plan(site)
    labels = {key: value.replace("$$", "$") for key, value in site.container(plan, "a1")["Config"]["Labels"].items()}
    assert labels["stella.release.name"] == "shop $HOME"
    running = [site.container(plan, "a1", labels=labels)]
    runner = sc.ScriptedRunner(site.apply_steps(plan, [], running, config=True))
    try:
        result = apply(site, plan, runner)
    except StellaError as exc:
        if exc.code == "label_mismatch" and "expected 'shop $$HOME'" in exc.reason:
            raise EscapedLabelExpected(exc.reason) from exc
        raise
    runner.assert_done()
    assert result["evidence"]["services"][0]["labels"]["stella.release.name"] == "shop $HOME"


# --------------------------------------------------------------------------- the preflight inside the apply


def preflight_options(site, **payload):
    """stella_preflight options for the apply: no registry or platform check over the network (no
    ImageReference, reachability ``skip``), the captured 20.10 engine accepted, 1 byte of disk asked."""
    body = {"WorkDirectory": site.work, "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"}
    body.update(payload)
    return {"payload": body, "min_engine_version": "20.10.0"}


def test_preflight_passes_then_the_apply_asks_the_runtime_nothing_again(site, monkeypatch):
    pings = sc.offline_preflight(monkeypatch)
    plan = site.plan(secret="s1")
    after = [site.container(plan, "a1")]
    runner = sc.ScriptedRunner(site.apply_steps(plan, [], after, first=sc.preflight_runtime()))
    result = apply(site, plan, runner, preflight=preflight_options(site))

    runner.assert_done()
    verbs = runner.docker_verbs()
    # ``docker info`` answers both the Compose plugin's version and the registry configuration.
    assert verbs.count("version") == 1 and verbs.count("info") == 1 and "compose version" not in verbs
    assert sc.early_once(verbs, "ps", "image inspect") == ["early", "compose up", "ps", "inspect"]
    assert "compose config" not in runner.verbs()
    assert pings == ["/var/run/docker.sock"]
    evidence = result["evidence"]
    assert result["changed"] is True and evidence["failurePhase"] is None
    assert evidence["preflightFailures"] == []
    preflight = evidence["preflight"]
    assert preflight["status"] == "passed"
    assert preflight["docker"]["serverVersion"] == "20.10.24+dfsg1" and preflight["compose"]["version"] == "2.40.3"
    checks = {check["name"]: check["status"] for check in preflight["checks"]}
    assert checks["registry"] == "skipped" and checks["platform"] == "skipped"
    assert {
        checks[name]
        for name in ("runtime", "daemon", "engine_version", "compose", "compose_version", "workdir", "disk")
    } == {"passed"}
    assert preflight["workDirectory"]["path"] == site.work
    assert evidence["dockerVersion"] == "20.10.24+dfsg1" and evidence["composeVersion"] == "2.40.3"
    assert evidence["completedPhases"][:2] == ["preflight", "write_artifacts"]
    assert evidence["deploymentPhases"][0]["phase"] == "preflight"
    assert evidence["deploymentPhases"][0]["status"] == "succeeded"


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "existing"])
@pytest.mark.parametrize(
    "options,code",
    [
        ({"min_engine_version": "99.0.0"}, "runtime_version_too_old"),
        ({"payload": {"MinimumFreeDiskBytes": 2**62}}, "disk_space_low"),
    ],
    ids=["engine-too-old", "disk"],
)
def test_failed_preflight_fails_before_anything_on_the_host_changes(site, monkeypatch, options, code, existing):
    if existing:
        plan_a = site.plan("1.0.0", secret="s1")
        deploy(site, plan_a, [], [site.container(plan_a, "a1")])
        before = sc.snapshot(site.work)
    sc.offline_preflight(monkeypatch)
    plan = site.plan("2.0.0", secret="s2")
    preflight = preflight_options(site, **options.get("payload", {}))
    preflight.update({k: v for k, v in options.items() if k != "payload"})
    # The early look (the project's containers, the lock's images) reads while the preflight runs.
    running = [site.container(plan_a, "a1")] if existing else []
    runner = sc.ScriptedRunner(
        [
            sc.Unordered(
                list(sc.preflight_runtime()[0].pending)
                + sc.containers(site.project(plan), running)
                + [sc.image_present()]
            )
        ]
    )
    with pytest.raises(StellaError) as err:
        apply(site, plan, runner, preflight=preflight)

    runner.assert_done()
    assert sorted(runner.docker_verbs()) == sorted(
        ["info", "version", "ps", "image inspect"] + (["inspect"] if existing else [])
    )
    assert err.value.code == code and err.value.phase == "preflight"
    evidence = err.value.evidence
    assert evidence["failurePhase"] == "preflight" and evidence["changed"] is False
    assert evidence["preflight"]["status"] == "failed"
    assert [f["code"] for f in evidence["preflightFailures"]] == [code]
    assert evidence["failures"] == evidence["preflightFailures"]
    assert evidence["completedPhases"] == []
    assert [(p["phase"], p["status"]) for p in evidence["deploymentPhases"]] == [("preflight", "failed")]
    if existing:
        assert sc.snapshot(site.work) == before
    else:
        assert not os.path.exists(site.work)
