"""compose/project.py: the pure verification of what runs against the lock, and ComposeProject's engine
questions (images, pulls, converge check) over scripted Docker output."""

from __future__ import annotations

import json
import os

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import project as cp
from ansible_collections.stellaops.runtime.plugins.module_utils.agent import verification
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import revisions as _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import container_summary
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

D1 = sc.DIGEST
TARGET = sc.TARGET

CONFIG = {
    "services": {
        "web": {
            "image": "r.lab/app:v1@" + D1,
            "labels": {
                "stella.manifest.hash": "sha256:m",
                "stella.target.id": "tgt-01",
                "stella.target.name": "vm-01",
                "stella.target.type": "ComposeHost",
                "stella.target.endpoint": "local",
                "stella.execution.mode": "agent",
                "stella.slot": "active",
            },
        }
    }
}


def container(**kw):
    base = {
        "id": "c1",
        "name": "p-web-1",
        "state": "running",
        "running": True,
        "restarting": False,
        "health": "healthy",
        "imageId": "sha256:img",
        "labels": dict(CONFIG["services"]["web"]["labels"]),
        "service": "web",
        "startedAt": "t0",
        "ipAddress": "10.0.0.2",
        "exitCode": 0,
    }
    base.update(kw)
    return base


def verify(containers):
    return cp.verify_services(
        cp.service_images(CONFIG), cp.service_labels(CONFIG), containers, {"web": "sha256:img"}, TARGET, "sha256:m"
    )


def test_verify_services_accepts_a_converged_project():
    services, problems = verify([container()])
    assert problems == []
    assert services[0]["imageDigest"] == D1 and services[0]["labels"]["stella.slot"] == "active"


@pytest.mark.parametrize(
    "change,code",
    [
        ({"running": False, "state": "exited", "exitCode": 3}, "service_not_running"),
        ({"health": "unhealthy"}, "service_unhealthy"),
        ({"health": "starting"}, "service_unhealthy"),
        ({"imageId": "sha256:other"}, "digest_mismatch"),
        ({"labels": dict(CONFIG["services"]["web"]["labels"], **{"stella.target.id": "x"})}, "label_mismatch"),
        ({"service": "ghost"}, "service_not_running"),
        ({"restarting": True}, "service_not_running"),
    ],
    ids=["exited", "unhealthy", "starting", "digest", "label", "missing", "restarting"],
)
def test_verify_services_problems(change, code):
    _services, problems = verify([container(**change)])
    assert problems and problems[0][0] == code
    with pytest.raises(StellaError) as err:
        verification.raise_problems(problems, "inspect_services")
    assert err.value.code == code and err.value.phase == "inspect_services"
    assert err.value.evidence["problems"] == [p[1] for p in problems]


def test_verify_services_flags_unexpected_and_required_labels():
    _s, problems = verify([container(), container(id="c2", service="extra")])
    assert "service_unexpected" in [p[0] for p in problems]
    bare = {"services": {"web": {"image": "r.lab/app:v1@" + D1, "labels": {}}}}
    _s, problems = cp.verify_services(
        cp.service_images(bare), cp.service_labels(bare), [container()], {"web": "sha256:img"}, TARGET, "sha256:m"
    )
    assert any("lacks required label stella.manifest.hash" in p[1] for p in problems)


def test_verify_services_over_captured_inspect_output():
    """The captured healthy/unhealthy pair, checked against a lock naming both services."""
    entries = sc.fixture_json("inspect_containers_healthy_unhealthy.json")
    containers = [container_summary(e) for e in entries]
    labels = {"stella.manifest.hash": "sha256:0000", "stella.target.id": "t-1"}
    config = {
        "services": {
            name: {"image": "127.0.0.1:5000/stella/app:%s@%s" % (tag, D1), "labels": labels}
            for name, tag in (("web", "v1"), ("bad", "broken"))
        }
    }
    ids = {"web": sc.IMAGE_ID, "bad": entries[1]["Image"]}
    services, problems = cp.verify_services(
        cp.service_images(config), cp.service_labels(config), containers, ids, dict(TARGET, id="t-1"), "sha256:0000"
    )
    assert {s["service"]: s["health"] for s in services} == {"web": "healthy", "bad": "unhealthy"}
    codes = {p[0] for p in problems}
    assert "service_unhealthy" in codes and "label_mismatch" in codes


def test_raise_problems_counts_the_rest():
    with pytest.raises(StellaError) as err:
        verification.raise_problems([("a", "first"), ("b", "second"), ("c", "third")], "inspect_services")
    assert err.value.code == "a" and err.value.reason == "first (and 2 more problem(s))"
    verification.raise_problems([], "inspect_services")


def test_service_labels_list_form_and_check_pinned():
    assert cp.service_labels({"services": {"a": {"labels": ["x=1", "y"]}}}) == {"a": {"x": "1", "y": ""}}
    cp.check_pinned({"web": "r.lab/app:v1@" + D1}, "write_artifacts")
    with pytest.raises(StellaError) as err:
        cp.check_pinned({"web": "r.lab/app:v1"}, "write_artifacts")
    assert err.value.code == "image_not_pinned" and err.value.phase == "write_artifacts"


def test_fingerprint_and_stella_labels():
    assert cp.container_fingerprint([container(id="b"), container(id="a")]) == [("a", "t0"), ("b", "t0")]
    assert verification.stella_labels({"stella.x": "1", "other": "2", "com.docker.compose.service": "web"}) == {
        "com.docker.compose.service": "web",
        "stella.x": "1",
    }


# --------------------------------------------------------------------------- ComposeProject over a script


@pytest.fixture
def project(tmp_path):
    site = sc.Site(tmp_path)
    plan = site.plan()
    layout = _revisions.Layout(site.work, plan["projectName"])
    return site, plan, layout


def test_ensure_images_present_asks_once(project):
    _site, _plan, layout = project
    runner = sc.ScriptedRunner([sc.image_present()])
    ids, pulled = cp.ComposeProject(sc.engine(runner), layout).ensure_images({"web": sc.PINNED}, True, "compose_pull")
    runner.assert_done()
    assert (ids, pulled) == ({"web": sc.IMAGE_ID}, [])


def test_ensure_images_pull_disabled(project):
    _site, _plan, layout = project
    runner = sc.ScriptedRunner([sc.image_absent(), sc.image_absent()])
    with pytest.raises(StellaError) as err:
        cp.ComposeProject(sc.engine(runner), layout).ensure_images({"web": sc.PINNED}, False, "compose_pull")
    runner.assert_done()
    assert err.value.code == "image_missing" and err.value.phase == "compose_pull"


def test_ensure_images_still_absent_after_pull(project):
    site, plan, layout = project
    runner = sc.ScriptedRunner([sc.image_absent(), sc.image_absent(), site.pull_step(plan, "web"), sc.image_absent()])
    with pytest.raises(StellaError) as err:
        cp.ComposeProject(sc.engine(runner), layout).ensure_images({"web": sc.PINNED}, True, "compose_pull")
    runner.assert_done()
    assert err.value.code == "image_pull_failed"
    assert runner.limit_of("compose pull") == cp.PULL_TIMEOUT


def test_ensure_images_refuses_an_image_without_the_pinned_digest(project):
    _site, _plan, layout = project
    other = "127.0.0.1:5000/stella/app:v1@sha256:" + "1" * 64
    runner = sc.ScriptedRunner([sc.image_present(other)])
    with pytest.raises(StellaError) as err:
        cp.ComposeProject(sc.engine(runner), layout).ensure_images({"web": other}, True, "compose_pull")
    assert err.value.code == "digest_mismatch" and err.value.phase == "compose_pull"


def test_converged_needs_containers_and_treats_engine_errors_as_not_converged(project):
    site, plan, layout = project
    runner = sc.ScriptedRunner()
    assert cp.ComposeProject(sc.engine(runner), layout).converged([], TARGET, plan["manifestHash"]) is None
    assert runner.calls == []
    running = [container_summary(site.container(plan, "a1"))]
    failing = sc.Step(sc.compose_argv(layout.project_dir, layout.project_name, sc.REST), 1, "", "boom")
    runner = sc.ScriptedRunner(keyed=[failing, sc.Step(["docker", "image", "inspect", sc.REST], 1, "", "boom")])
    assert cp.ComposeProject(sc.engine(runner), layout).converged(running, TARGET, plan["manifestHash"]) is None
    runner = sc.ScriptedRunner(keyed=[site.config_step(plan), sc.image_present()])
    services = cp.ComposeProject(sc.engine(runner), layout).converged(running, TARGET, plan["manifestHash"])
    assert services and services[0]["imageDigest"] == D1
    # With the committed lock's bytes the lock is read directly: only the image is asked about.
    runner = sc.ScriptedRunner(keyed=[sc.image_present()])
    services = cp.ComposeProject(sc.engine(runner), layout).converged(
        running, TARGET, plan["manifestHash"], lock_bytes=plan["_files"][sc.LOCK]
    )
    assert services and services[0]["imageDigest"] == D1
    assert runner.docker_verbs() == ["image inspect"]


def test_expected_reads_a_planner_lock_without_compose(project):
    site, plan, layout = project
    runner = sc.ScriptedRunner()
    images, labels = cp.ComposeProject(sc.engine(runner), layout).expected(plan["_files"][sc.LOCK], "write_artifacts")
    assert runner.calls == []
    config = site.config(plan)
    assert (images, labels) == (cp.service_images(config), cp.service_labels(config))
    assert images == {"web": sc.PINNED}


def test_expected_asks_compose_when_the_reader_declines(project):
    """A ``$`` in a label (``$$`` in the lock) or no lock bytes at all: ``docker compose config``, once."""
    site, _planned, layout = project
    release = site.release()
    release["release"]["name"] = "shop $HOME"
    plan = _plan.plan_release(release, {sc.IMAGE: D1})
    assert cp.read_lock_services(plan["_files"][sc.LOCK]) is None
    for lock_bytes in (plan["_files"][sc.LOCK], None):
        runner = sc.ScriptedRunner([site.config_step(plan)])
        images, labels = cp.ComposeProject(sc.engine(runner), layout).expected(lock_bytes, "restore_lock")
        runner.assert_done()
        assert runner.docker_verbs() == ["compose config"]
        assert images == {"web": sc.PINNED} and labels == cp.service_labels(site.config(plan))
    failing = sc.Step(sc.compose_argv(layout.project_dir, layout.project_name, sc.REST), 1, "", "yaml: bad")
    with pytest.raises(StellaError) as err:
        cp.ComposeProject(sc.engine(sc.ScriptedRunner([failing])), layout).expected(None, "restore_lock")
    assert err.value.code == "lock_invalid" and err.value.phase == "restore_lock"


def test_config_without_json_is_lock_invalid(project):
    _site, _plan, layout = project
    runner = sc.ScriptedRunner(
        [sc.Step(sc.compose_argv(layout.project_dir, layout.project_name, "config", "--format", "json"), 0, "not json")]
    )
    with pytest.raises(StellaError) as err:
        cp.ComposeProject(sc.engine(runner), layout).config("write_artifacts")
    assert err.value.code == "lock_invalid" and err.value.phase == "write_artifacts"


def test_up_argv_and_bound(project):
    site, plan, layout = project
    healthy = [site.container(plan, "w1")]
    runner = sc.ScriptedRunner([site.up_step(plan, wait_timeout=30)] + sc.containers(layout.project_name, healthy))
    started = cp.ComposeProject(sc.engine(runner), layout, wait_timeout=30).up()
    runner.assert_done()
    assert runner.limit_of("compose up") == 30 + 60
    assert json.dumps(runner.calls[0]).count(os.path.join(layout.project_dir, sc.LOCK)) == 1
    assert [c["id"] for c in started] == [sc.container_id("w1")]


class Clock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


def waiting_project(site, plan, layout, looks, wait_timeout=30):
    """A ComposeProject whose ``up`` sees ``looks`` (one list of containers per look) in turn."""
    runner = sc.ScriptedRunner(
        [site.up_step(plan, wait_timeout=wait_timeout)] + sc.readiness_looks(layout.project_name, looks)
    )
    clock = Clock()
    return (
        cp.ComposeProject(sc.engine(runner), layout, wait_timeout=wait_timeout, clock=clock, sleep=clock.sleep),
        runner,
        clock,
    )


def test_up_waits_until_starting_containers_are_healthy(project):
    site, plan, layout = project
    looks = [
        [],
        [site.container(plan, "w1", health="starting")],
        [site.container(plan, "w1", health="starting")],
        [site.container(plan, "w1")],
    ]
    proj, runner, clock = waiting_project(site, plan, layout, looks)
    started = proj.up()
    runner.assert_done()
    assert started[0]["health"] == "healthy"
    assert clock.sleeps == [cp.READY_POLL_SECONDS] * 3


def test_up_looks_again_by_id_and_lists_anew_when_a_container_went_away(project):
    site, plan, layout = project
    starting = [site.container(plan, "w1", health="starting")]
    replaced = [site.container(plan, "w2")]
    gone = sc.Step(
        ["docker", "inspect", "--type", "container", sc.container_id("w1")],
        1,
        "[]\n",
        "Error: No such container: %s\n" % sc.container_id("w1"),
    )
    runner = sc.ScriptedRunner(
        [site.up_step(plan)]
        + sc.containers(layout.project_name, starting)
        + [gone]
        + sc.containers(layout.project_name, replaced)
    )
    clock = Clock()
    started = cp.ComposeProject(sc.engine(runner), layout, clock=clock, sleep=clock.sleep).up()
    runner.assert_done()
    assert [c["id"] for c in started] == [sc.container_id("w2")]
    assert [" ".join(c[1:3]) for c in runner.calls] == [
        "compose --project-name",
        "ps --all",
        "inspect --type",
        "inspect --type",
        "ps --all",
        "inspect --type",
    ]


@pytest.mark.parametrize(
    "state,code,reason",
    [
        ({"health": "unhealthy"}, "service_unhealthy", "is unhealthy"),
        ({"running": False, "status": "exited"}, "service_not_running", "exited ("),
    ],
    ids=["unhealthy", "exited"],
)
def test_up_fails_on_the_first_look_that_settles_it(project, state, code, reason):
    site, plan, layout = project
    looks = [[site.container(plan, "w1", health="starting")], [site.container(plan, "w1", **state)]]
    proj, runner, _clock = waiting_project(site, plan, layout, looks)
    with pytest.raises(cp.ServicesNotReady) as err:
        proj.up()
    runner.assert_done()
    assert err.value.code == code and reason in err.value.reason and err.value.phase == "compose_up"
    assert [c["id"] for c in err.value.containers] == [sc.container_id("w1")]


def test_up_gives_up_after_wait_timeout_and_slows_down_after_the_first_seconds(project):
    site, plan, layout = project
    starting = [site.container(plan, "w1", health="starting")]
    # 10 s at 0.1 s, then 0.5 s steps up to 12 s: 100 + 4 sleeps, 106 looks
    looks = [starting] * 106
    proj, runner, clock = waiting_project(site, plan, layout, looks, wait_timeout=12)
    with pytest.raises(cp.ServicesNotReady) as err:
        proj.up()
    runner.assert_done()
    assert err.value.code == "service_unhealthy" and "still starting after 12s" in err.value.reason
    assert clock.sleeps.count(cp.READY_POLL_SECONDS) >= 99 and cp.READY_SLOW_SECONDS in clock.sleeps
    assert clock.now == pytest.approx(12, abs=0.01)


@pytest.mark.parametrize(
    "containers,status,code",
    [
        ([], "waiting", None),
        ([container()], "ready", None),
        ([container(health="none")], "ready", None),
        ([container(health="none", state="created", running=False)], "waiting", None),
        ([container(health="none", state="restarting", restarting=True)], "waiting", None),
        ([container(health="starting")], "waiting", None),
        ([container(), container(id="c2", name="p-web-2", health="starting")], "waiting", None),
        (
            [container(health="starting"), container(id="c2", name="p-web-2", health="unhealthy")],
            "failed",
            "service_unhealthy",
        ),
        ([container(state="exited", running=False, exitCode=3)], "failed", "service_not_running"),
        ([container(state="dead", running=False, health="none")], "failed", "service_not_running"),
    ],
    ids=[
        "none-yet",
        "healthy",
        "no-healthcheck-running",
        "created",
        "restarting",
        "starting",
        "one-starting",
        "one-unhealthy",
        "exited",
        "dead",
    ],
)
def test_readiness_follows_compose_up_wait(containers, status, code):
    got, problems = cp.readiness(containers)
    assert got == status
    assert (problems[0][0] if problems else None) == code
