"""docker/run.py: docker.run requests from the real planner, the pure container checks, and DockerRun driven
by table-driven Docker scripts (pull first, crash loops put the previous container back)."""

from __future__ import annotations

import os

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.docker import container as dc
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import revision as drv
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import run as dr
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import request as dreq
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import container_summary
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

D1 = sc.DIGEST


def planned(work="/srv/stella"):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "prod",
        "application": "shop",
        "strategy": "rolling",
        "workDirectory": work,
        "target": dict(sc.TARGET, type="DockerHost"),
        "components": [
            {"name": "web", "image": "127.0.0.1:5000/stella/app:v1", "config": {"env.MODE": "x"}, "ports": ["8080"]}
        ],
        "hooks": [{"name": "h", "phase": "pre-deploy", "command": "true"}],
    }
    return _plan.plan_release(release, {"127.0.0.1:5000/stella/app:v1": D1})


def summary(**kw):
    base = {
        "id": "c1",
        "name": "p-web-1",
        "state": "running",
        "running": True,
        "restarting": False,
        "restartCount": 0,
        "health": "healthy",
        "imageId": "sha256:img",
        "labels": {},
        "startedAt": "t0",
        "exitCode": 0,
    }
    base.update(kw)
    return base


def test_docker_run_payload_from_the_real_planner():
    plan = planned()
    payload = plan["payloads"]["docker.run"][0]
    request = dreq.parse_request(payload)
    assert request["image"].endswith("@" + D1) and request["pull_image"] is True
    assert request["project_directory"] == plan["projectDirectory"]
    assert request["manifest_hash"] == plan["manifestHash"] and request["hooks"][0]["Name"] == "h"
    argv = dreq.container_run_argv(request)
    assert argv[:4] == ["--name", payload["Name"], "--restart", "unless-stopped"]
    assert "--label" in argv and "stella.target.id=tgt-01" in argv and "MODE=x" in argv
    assert "stella.container.name=%s" % payload["Name"] in argv
    assert argv[-1] == request["image"]
    labels = dict(request["labels"], **{"stella.container.name": request["name"]})
    running = summary(imageId="sha256:img", labels=labels)
    assert dc.container_gaps(running, request, "sha256:img", health=None) == []
    assert dc.container_gaps(running, request, "sha256:other", health=None)
    assert dc.container_gaps(dict(running, running=False), request, "sha256:img", health=None)
    assert dc.container_gaps(dict(running, restarting=True), request, "sha256:img", health=None)
    bad = dict(payload, Image="127.0.0.1:5000/stella/app:v1")
    with pytest.raises(StellaError) as err:
        dreq.parse_request(bad)
    assert err.value.code == "invalid_payload" and "pinned by digest" in err.value.reason
    with pytest.raises(StellaError) as err:
        dreq.parse_request(dict(payload, Labels={"a": 1}))
    assert err.value.code == "invalid_payload" and "Labels" in err.value.reason


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"Name": "-bad name"}, "not a valid container name"),
        ({"Variables": {"projectDirectory": "relative"}}, "absolute path"),
        ({"Variables": {"projectDirectory": "/srv/../etc"}}, "absolute path"),
        ({"Ports": "8080"}, "Ports must be a list"),
        ({"Environment": {"A": 1}}, "Environment must be an object of strings"),
    ],
    ids=["name", "relative-dir", "dotdot-dir", "ports", "environment"],
)
def test_docker_run_payload_rejections(change, needle):
    payload = dict(planned()["payloads"]["docker.run"][0], **change)
    with pytest.raises(StellaError) as err:
        dreq.parse_request(payload)
    assert needle in err.value.reason and err.value.phase == "validate_payload"


def test_env_file_and_ports_in_argv():
    request = dreq.parse_request(
        dict(planned()["payloads"]["docker.run"][0], EnvFile="/srv/p/.env.stella", Ports=[8080, "9090:90"])
    )
    argv = dreq.container_run_argv(request, name="other")
    assert argv[:2] == ["--name", "other"]
    assert argv[argv.index("--env-file") + 1] == "/srv/p/.env.stella"
    assert [argv[i + 1] for i, word in enumerate(argv) if word == "--publish"] == ["8080", "9090:90"]


@pytest.mark.parametrize(
    "change,codes",
    [
        ({}, []),
        ({"running": False, "state": "exited", "exitCode": 3}, ["service_not_running"]),
        ({"restarting": True}, ["service_not_running"]),
        ({"restartCount": 2}, ["service_not_running"]),
        ({"health": "unhealthy"}, ["service_unhealthy"]),
        ({"imageId": "sha256:other"}, ["digest_mismatch"]),
        ({"labels": {"stella.slot": "green"}}, ["label_mismatch"]),
    ],
    ids=["ok", "exited", "restarting", "restart-count", "unhealthy", "digest", "label"],
)
def test_verify_container(change, codes):
    request = {"labels": {"stella.slot": "active"}}
    container = summary(**dict({"labels": {"stella.slot": "active"}}, **change))
    assert [code for code, _reason in dc.verify_container(container, request, "sha256:img")] == codes


def test_verify_container_over_captured_inspect_output():
    exited = container_summary(sc.fixture_json("inspect_container_exited.json")[0])
    problems = dc.verify_container(exited, {"labels": {}}, exited["imageId"])
    assert [p[0] for p in problems] == ["service_not_running"] and "exit code 3" in problems[0][1]


# --------------------------------------------------------------------------- DockerRun, scripted


class Clock:
    """A monotonic clock that only moves when the manager sleeps."""

    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class Host:
    """One docker.run container of a DockerHost target under ``work``."""

    def __init__(self, tmp_path):
        self.site = sc.Site(tmp_path / "work", target_type="DockerHost")
        self.old_plan = self.site.plan("1.0.0")
        self.plan = self.site.plan("2.0.0")
        self.payload = self.plan["payloads"]["docker.run"][0]
        self.request = dreq.parse_request(self.payload)
        self.name = self.request["name"]
        self.clock = Clock()

    def container(self, seed, labels=None, base="web", **state):
        if labels is None:
            labels = dict(self.request["labels"], **{"stella.container.name": self.name})
        return sc.container_entry(
            base, id=sc.container_id(seed), name=self.name, labels=labels, image_id=sc.IMAGE_ID, **state
        )

    def old(self):
        labels = dict(self.old_plan["payloads"]["docker.run"][0]["Labels"], **{"stella.container.name": self.name})
        return self.container("old", labels=labels)

    def run(self, runner, request=None, **kw):
        kw.setdefault("health_timeout", 0)
        kw.setdefault("settle", 0.25)
        manager = dr.DockerRun(sc.engine(runner), runner, sleep=self.clock.sleep, clock=self.clock, **kw)
        return manager.run(request or dreq.parse_deployment([self.payload]))

    def check(self, runner):
        """The payload in check mode."""
        manager = dr.DockerRun(sc.engine(runner), runner, health_timeout=0, sleep=self.clock.sleep, clock=self.clock)
        return manager.run(dreq.parse_deployment([self.payload]), check_mode=True)

    def ps(self, entries, name=None):
        return sc.ps_name(name or self.name, entries)

    def pull(self):
        return [
            sc.image_absent(),
            sc.Step(["docker", "pull", "--quiet", sc.PINNED], 0, sc.PINNED + "\n"),
            sc.image_present(),
        ]

    def replace(self, old, new):
        """Set the previous container aside and start the new one."""
        aside = self.name + "-stella-replaced"
        return [
            self.ps([], aside),
            sc.Step(["docker", "stop", "--time", "10", old["Id"]], 0, old["Id"] + "\n"),
            sc.Step(["docker", "rename", old["Id"], aside]),
            sc.Step(["docker", "run", "--detach", sc.REST], 0, new["Id"] + "\n"),
        ]

    def watch(self, new, times):
        steps = []
        for _round in range(times):
            steps += [self.ps([new]), sc.inspect([new])]
        return steps


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def test_container_gaps_name_every_difference():
    request = {"name": "shop-web", "labels": {"stella.slot": "active"}}
    labels = {"stella.slot": "active", "stella.container.name": "shop-web"}
    ok = summary(name="shop-web", labels=labels)
    assert dc.container_gaps(ok, request, "sha256:img") == []
    assert dc.container_gaps(dict(ok, health="none"), request, "sha256:img") == []
    assert dc.container_gaps(None, request, "sha256:img") == ["container shop-web does not exist"]
    assert dc.container_gaps(dict(ok, health="starting"), request, "sha256:img") == [
        "container shop-web health is starting"
    ]
    assert dc.container_gaps(dict(ok, health="starting"), request, "sha256:img", health=None) == []
    assert dc.container_gaps(dict(ok, health="unhealthy"), request, "sha256:img", health=None) == []
    assert (
        dc.container_gaps(dict(ok, health="starting"), request, "sha256:img", health=("healthy", "none", "starting"))
        == []
    )
    assert dc.container_gaps(dict(ok, health="unhealthy"), request, "sha256:img") == [
        "container shop-web health is unhealthy"
    ]
    assert dc.container_gaps(
        dict(ok, running=False, state="exited", exitCode=1, labels={"stella.slot": "green"}), request, "sha256:other"
    ) == [
        "container shop-web runs sha256:img, not sha256:other",
        "container shop-web label stella.container.name is None, expected 'shop-web'",
        "container shop-web label stella.slot is 'green', expected 'active'",
        "container shop-web is exited (exit code 1)",
    ]
    assert dc.container_gaps(
        dict(ok, restarting=True, state="restarting", health="unhealthy"), request, "sha256:img"
    ) == ["container shop-web is restarting (exit code 0)"]


def test_a_container_of_the_request_still_starting_is_waited_for_not_replaced(host):
    starting, healthy = host.container("current", health="starting"), host.container("current")
    runner = sc.ScriptedRunner(
        [
            sc.docker_version(),
            sc.image_present(),
            host.ps([starting]),
            sc.inspect([starting]),
            host.ps([starting]),
            sc.inspect([starting]),
            host.ps([healthy]),
            sc.inspect([healthy]),
        ]
    )
    result = host.run(runner, health_timeout=30)
    runner.assert_done()
    assert "run" not in runner.docker_verbs() and "stop" not in runner.docker_verbs()
    assert result["changed"] is False and "appliedBecause" not in result["evidence"]
    assert result["evidence"]["health"] == "healthy" and result["evidence"]["containerId"] == healthy["Id"]
    assert result["evidence"]["completedPhases"] == ["pull_image", "inspect_container"]
    assert host.clock.sleeps == [0.25]
    # the wait is in the evidence and in the verification's duration (the clock moved 0.25 s while waiting)
    assert result["evidence"]["startingWaitMs"] == {host.name: 250}
    assert result["evidence"]["phaseDurationsMs"]["inspect_container"] >= 250


def test_a_container_still_starting_that_turns_unhealthy_is_replaced_and_says_why(host):
    starting, unhealthy = host.container("current", health="starting"), host.container("current", health="unhealthy")
    new = host.container("new")
    steps = (
        [
            sc.docker_version(),
            sc.image_present(),
            host.ps([starting]),
            sc.inspect([starting]),
            host.ps([unhealthy]),
            sc.inspect([unhealthy]),
        ]
        + host.replace(unhealthy, new)
        + host.watch(new, 1)
        + [sc.Step(["docker", "rm", "--force", unhealthy["Id"]])]
    )
    runner = sc.ScriptedRunner(steps)
    result = host.run(runner, health_timeout=30)
    runner.assert_done()
    assert result["changed"] is True and result["evidence"]["containerId"] == new["Id"]
    assert result["evidence"]["appliedBecause"] == ["container %s health is unhealthy" % host.name]
    assert result["evidence"]["startingWaitMs"] == {host.name: 0}


def test_replacing_another_release_says_why_and_check_mode_says_the_same(host):
    old = host.old()
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_present(), host.ps([old]), sc.inspect([old])])
    checked = host.check(runner)
    runner.assert_done()
    reasons = checked["evidence"]["wouldApplyBecause"]
    assert checked["changed"] is True and checked["evidence"]["wouldReplaceContainers"] == [host.name]
    assert reasons and all(r.startswith("container %s label stella." % host.name) for r in reasons), reasons
    new = host.container("new")
    runner = sc.ScriptedRunner(
        [sc.docker_version(), sc.image_present(), host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 1)
        + [sc.Step(["docker", "rm", "--force", old["Id"]])]
    )
    assert host.run(runner)["evidence"]["appliedBecause"] == reasons
    runner.assert_done()


def test_check_mode_counts_an_unhealthy_container_as_replaced(host):
    unhealthy = host.container("current", health="unhealthy")
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_present(), host.ps([unhealthy]), sc.inspect([unhealthy])])
    checked = host.check(runner)
    runner.assert_done()
    assert checked["changed"] is True and checked["evidence"]["wouldReplaceContainers"] == [host.name]
    assert checked["evidence"]["wouldApplyBecause"] == ["container %s health is unhealthy" % host.name]


def test_check_mode_counts_a_container_still_starting_as_running_its_request(host):
    starting = host.container("current", health="starting")
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_present(), host.ps([starting]), sc.inspect([starting])])
    checked = host.check(runner)
    runner.assert_done()
    assert checked["changed"] is False and checked["evidence"]["wouldReplaceContainers"] == []
    assert "wouldApplyBecause" not in checked["evidence"]


@pytest.mark.parametrize(
    "state",
    [
        {"restarting": True, "restart_count": 4, "health": None},
        {"restart_count": 3, "health": None},
    ],
    ids=["restarting", "restarted"],
)
def test_crash_loop_puts_the_previous_container_back(host, state):
    old = host.old()
    new = host.container("new", **state)
    steps = (
        [sc.docker_version()]
        + host.pull()
        + [host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 2)
        + [
            host.ps([new]),
            sc.inspect([new]),
            sc.Step(["docker", "rm", "--force", new["Id"]]),
            sc.Step(["docker", "rename", old["Id"], host.name]),
            sc.Step(["docker", "start", old["Id"]]),
        ]
    )
    runner = sc.ScriptedRunner(steps)
    with pytest.raises(StellaError) as err:
        host.run(runner)
    runner.assert_done()
    verbs = runner.docker_verbs()
    assert verbs.index("pull") < verbs.index("ps") and "rm" not in verbs[: verbs.index("pull")]
    assert err.value.code == "service_not_running" and err.value.phase == "inspect_container"
    evidence = err.value.evidence
    assert evidence["failurePhase"] == "inspect_container" and evidence["changed"] is True
    assert evidence["previousContainerRestored"] == old["Id"] and evidence["replacedContainerId"] == old["Id"]
    assert evidence["containerId"] == new["Id"] and evidence["restartCount"] == state["restart_count"]
    assert evidence["pulled"] is True and evidence["imageId"] == sc.IMAGE_ID
    assert runner.calls[-2:] == [["docker", "rename", old["Id"], host.name], ["docker", "start", old["Id"]]]


def test_verified_container_replaces_the_previous_one(host):
    old = host.old()
    new = host.container("new")
    steps = (
        [sc.docker_version(), sc.image_present(), host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 1)
        + [sc.Step(["docker", "rm", "--force", old["Id"]])]
    )
    runner = sc.ScriptedRunner(steps)
    result = host.run(runner)
    runner.assert_done()
    assert result["changed"] is True and result["evidence"]["failurePhase"] is None
    assert result["evidence"]["health"] == "healthy" and result["evidence"]["containerId"] == new["Id"]
    assert result["evidence"]["completedPhases"] == [
        "pull_image",
        "write_artifacts",
        "pre_deploy_hooks",
        "prepare_container",
        "inspect_container",
        "post_deploy_hooks",
    ]
    assert "pulled" not in result["evidence"]
    assert runner.limit_of("stop") == 10 + 60
    run_argv = next(argv for argv in runner.calls if argv[1] == "run")
    assert run_argv[2:] == ["--detach"] + dreq.container_run_argv(host.request)


def test_container_already_running_the_request_is_a_no_op(host):
    current = host.container("current")
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_present(), host.ps([current]), sc.inspect([current])])
    result = host.run(runner)
    runner.assert_done()
    assert result["changed"] is False and result["evidence"]["hookResults"] == []
    assert result["evidence"]["completedPhases"] == ["pull_image", "inspect_container"]


def test_first_container_failing_verification_is_removed(host):
    new = host.container("new", base="exited", running=False, status="exited")
    steps = (
        [sc.docker_version(), sc.image_present(), host.ps([])]
        + [sc.Step(["docker", "run", "--detach", sc.REST], 0, new["Id"] + "\n")]
        + host.watch(new, 1)
        + [host.ps([new]), sc.inspect([new]), sc.Step(["docker", "rm", "--force", new["Id"]])]
    )
    runner = sc.ScriptedRunner(steps)
    with pytest.raises(StellaError) as err:
        host.run(runner)
    runner.assert_done()
    assert err.value.code == "service_not_running" and "previousContainerRestored" not in err.value.evidence


def test_pull_disabled_and_image_missing_fails_before_any_container_call(host):
    request = dreq.parse_deployment([dict(host.payload, PullImage=False)])
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_absent()])
    with pytest.raises(StellaError) as err:
        host.run(runner, request)
    runner.assert_done()
    assert err.value.code == "image_missing" and err.value.phase == "pull_image"


def test_hung_daemon(host):
    runner = sc.ScriptedRunner([sc.docker_version(rc=124)])
    with pytest.raises(StellaError) as err:
        host.run(runner)
    runner.assert_done()
    assert err.value.code == "runtime_daemon_unavailable" and err.value.phase == "preflight"
    assert not os.path.exists(host.site.work)


def test_missing_stella_labels_are_refused_before_docker(host):
    request = dreq.parse_deployment([dict(host.payload, Labels={"stella.slot": "active"})])
    runner = sc.ScriptedRunner()
    with pytest.raises(StellaError) as err:
        host.run(runner, request)
    assert err.value.code == "label_missing" and err.value.phase == "validate_payload"
    assert runner.calls == []


# --------------------------------------------------------------------------- a release with its sticker


def write_committed(host, plan):
    """The sticker of ``plan`` committed in the project directory (an earlier deployment)."""
    directory = host.request["project_directory"]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "stella.version.json"), "w", encoding="utf-8") as handle:
        handle.write(plan["sticker"])
    return directory


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def test_a_replaced_release_is_retained_as_the_previous_revision(host):
    directory = write_committed(host, host.old_plan)
    old, new = host.old(), host.container("new")
    previous = host.name + "-stella-previous"
    steps = (
        [sc.docker_version(), sc.image_present(), host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 1)
        + [host.ps([], previous), sc.Step(["docker", "rename", old["Id"], previous])]
    )
    runner = sc.ScriptedRunner(steps)
    result = host.run(runner, dreq.parse_deployment([host.payload], version_sticker=host.plan["sticker"]))
    runner.assert_done()
    evidence = result["evidence"]
    assert result["changed"] is True and "rm" not in runner.docker_verbs()
    assert read(os.path.join(directory, "stella.version.json")) == host.plan["sticker"]
    assert evidence["previousRevisionPath"] == os.path.join(directory, "previous")
    assert read(os.path.join(directory, "previous", "stella.version.json")) == host.old_plan["sticker"]
    record, _sticker = drv.load_revision(evidence["previousRevisionPath"])
    assert record["containers"] == {host.name: old["Id"]} and record["manifestHash"] == host.old_plan["manifestHash"]
    assert evidence["retainedContainerIds"] == [old["Id"]]
    assert evidence["services"][0]["service"] == "web" and evidence["services"][0]["imageDigest"] == D1
    assert "write_sticker" in evidence["completedPhases"]


def test_a_failing_post_deploy_hook_puts_the_containers_and_the_sticker_back(host):
    hooks = [{"name": "check", "phase": "post-deploy", "command": "exit 3"}]
    plan = host.site.plan("2.0.0", hooks=hooks)
    payload = plan["payloads"]["docker.run"][0]
    directory = write_committed(host, host.old_plan)
    old, new = host.old(), host.container("new", labels=dict(payload["Labels"], **{"stella.container.name": host.name}))
    steps = (
        [sc.docker_version(), sc.image_present(), host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 1)
        + [
            host.ps([new]),
            sc.inspect([new]),
            sc.Step(["docker", "rm", "--force", new["Id"]]),
            sc.Step(["docker", "rename", old["Id"], host.name]),
            sc.Step(["docker", "start", old["Id"]]),
        ]
    )
    runner = sc.ScriptedRunner(steps)
    with pytest.raises(StellaError) as err:
        host.run(runner, dreq.parse_deployment([payload], version_sticker=plan["sticker"]))
    runner.assert_done()
    assert err.value.phase == "post_deploy_hooks" and err.value.evidence["previousContainerRestored"] == old["Id"]
    assert err.value.evidence["stickerRestored"] is True
    assert read(os.path.join(directory, "stella.version.json")) == host.old_plan["sticker"]
    assert not os.path.exists(os.path.join(directory, "previous"))


def test_a_later_job_of_the_same_release_keeps_the_committed_sticker(host):
    directory = write_committed(host, host.plan)
    later = host.site.plan("2.0.0", job_id="job-later")
    assert later["manifestHash"] == host.plan["manifestHash"] and later["sticker"] != host.plan["sticker"]
    current = host.container("current")
    runner = sc.ScriptedRunner([sc.docker_version(), sc.image_present(), host.ps([current]), sc.inspect([current])])
    result = host.run(runner, dreq.parse_deployment(later["payloads"]["docker.run"], version_sticker=later["sticker"]))
    runner.assert_done()
    assert result["changed"] is False
    assert read(os.path.join(directory, "stella.version.json")) == host.plan["sticker"]
    assert result["evidence"]["appliedByJobId"] == host.plan["jobId"] != later["jobId"]


@pytest.mark.parametrize(
    "change,needle",
    [
        (lambda p: [p, p], "the same container twice"),
        (lambda p: [p, dict(p, Name="other", ManifestHash="sha256:" + "9" * 64)], "differ in manifest_hash"),
        (lambda p: [], "at least one payload"),
    ],
)
def test_deployment_rejections(host, change, needle):
    with pytest.raises(StellaError) as err:
        dreq.parse_deployment(change(host.payload))
    assert err.value.code == "invalid_payload" and needle in err.value.reason


def test_a_sticker_of_another_release_is_refused(host):
    with pytest.raises(StellaError) as err:
        dreq.parse_deployment([host.payload], version_sticker=host.old_plan["sticker"])
    assert err.value.code == "invalid_payload" and "manifestHash" in err.value.reason


@pytest.mark.parametrize(
    "config,argv",
    [
        ({}, []),
        (
            {
                "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                "healthcheck.interval": "1s",
                "healthcheck.retries": 15,
                "healthcheck.start_period": "5s",
            },
            [
                "--health-cmd",
                "wget -q -O- http://127.0.0.1:8080/",
                "--health-interval",
                "1s",
                "--health-start-period",
                "5s",
                "--health-retries",
                "15",
            ],
        ),
        ({"healthcheck.test": ["CMD", "curl", "-f", "http://x/a b"]}, ["--health-cmd", "curl -f 'http://x/a b'"]),
        ({"healthcheck.test": ["CMD-SHELL", "exit 0"]}, ["--health-cmd", "exit 0"]),
        ({"healthcheck.disable": True, "healthcheck.test": "x"}, ["--no-healthcheck"]),
        ({"env.MODE": "x"}, []),
    ],
    ids=["none", "shell", "cmd-list", "cmd-shell-list", "disable", "other-keys"],
)
def test_health_flags_from_the_components_healthcheck_keys(config, argv):
    assert dreq.health_argv(config) == argv


def test_the_planned_healthcheck_reaches_docker_run(host):
    payload = dict(host.payload, Config={"healthcheck.test": "true", "healthcheck.interval": "2s"})
    argv = dreq.container_run_argv(dreq.parse_request(payload))
    assert argv[-5:] == ["--health-cmd", "true", "--health-interval", "2s", payload["Image"]]


# --------------------------------------------------------------------------- the preflight inside the run

# Docker commands that change something on the host.
CHANGING_VERBS = (
    "pull",
    "run",
    "stop",
    "start",
    "rm",
    "create",
    "rename",
    "container create",
    "container rm",
    "image pull",
)


def preflight_options(host, **payload):
    """The ``preflight`` option of a DockerHost run: no registry or platform check over the network (no
    ImageReference, reachability ``skip``), the captured 20.10 engine accepted, 1 byte of disk asked."""
    body = {"WorkDirectory": host.site.work, "MinimumFreeDiskBytes": 1, "RegistryReachabilityMode": "skip"}
    body.update(payload)
    return {"payload": body, "target_type": "DockerHost", "min_engine_version": "20.10.0"}


def test_preflight_passes_then_the_run_deploys_and_asks_the_runtime_nothing_again(host, monkeypatch):
    pings = sc.offline_preflight(monkeypatch)
    old, new = host.old(), host.container("new")
    steps = (
        sc.preflight_runtime()
        + [sc.image_present(), host.ps([old]), sc.inspect([old])]
        + host.replace(old, new)
        + host.watch(new, 1)
        + [sc.Step(["docker", "rm", "--force", old["Id"]])]
    )
    runner = sc.ScriptedRunner(steps)
    result = host.run(runner, preflight=preflight_options(host))

    runner.assert_done()
    verbs = runner.docker_verbs()
    assert verbs.count("version") == 1 and verbs.count("info") == 1 and "compose version" not in verbs
    assert sorted(verbs[:2]) == ["info", "version"] and verbs[2] == "image inspect"
    assert pings == ["/var/run/docker.sock"]
    evidence = result["evidence"]
    assert result["changed"] is True and evidence["failurePhase"] is None
    assert evidence["preflightFailures"] == []
    preflight = evidence["preflight"]
    assert preflight["status"] == "passed" and preflight["gates"]["targetType"] == "DockerHost"
    assert preflight["gates"]["requireCompose"] is False
    checks = {check["name"]: check["status"] for check in preflight["checks"]}
    assert {checks[name] for name in ("registry", "platform", "compose", "compose_version")} == {"skipped"}
    assert {checks[name] for name in ("runtime", "daemon", "engine_version", "workdir", "disk")} == {"passed"}
    assert preflight["docker"]["serverVersion"] == "20.10.24+dfsg1" == evidence["dockerVersion"]
    assert evidence["completedPhases"] == [
        "preflight",
        "pull_image",
        "write_artifacts",
        "pre_deploy_hooks",
        "prepare_container",
        "inspect_container",
        "post_deploy_hooks",
    ]
    assert evidence["deploymentPhases"][0] == dict(
        evidence["deploymentPhases"][0], phase="preflight", status="succeeded"
    )
    assert evidence["containerId"] == new["Id"] and evidence["health"] == "healthy"


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "existing"])
@pytest.mark.parametrize(
    "options,code",
    [
        ({"min_engine_version": "99.0.0"}, "runtime_version_too_old"),
        ({"payload": {"MinimumFreeDiskBytes": 2**62}}, "disk_space_low"),
        ({"payload": {"RequireCompose": True}, "min_compose_version": "99.0.0"}, "runtime_version_too_old"),
    ],
    ids=["engine-too-old", "disk", "compose-too-old"],
)
def test_failed_preflight_fails_before_any_docker_change(host, monkeypatch, options, code, existing):
    sticker = None
    if existing:
        write_committed(host, host.old_plan)
        sticker = host.plan["sticker"]
        before = sc.snapshot(host.site.work)
    sc.offline_preflight(monkeypatch)
    preflight = preflight_options(host, **options.get("payload", {}))
    preflight.update({k: v for k, v in options.items() if k != "payload"})
    # Only the preflight's two runtime questions are answered: any pull, ps, stop, run, rm or rename fails.
    runner = sc.ScriptedRunner(sc.preflight_runtime())
    with pytest.raises(StellaError) as err:
        host.run(runner, dreq.parse_deployment([host.payload], version_sticker=sticker), preflight=preflight)

    runner.assert_done()
    verbs = runner.docker_verbs()
    assert sorted(verbs) == ["info", "version"]
    assert not set(verbs) & set(CHANGING_VERBS)
    assert err.value.code == code and err.value.phase == "preflight"
    evidence = err.value.evidence
    assert evidence["failurePhase"] == "preflight" and evidence["changed"] is False
    assert evidence["preflight"]["status"] == "failed" and evidence["preflight"]["gates"]["targetType"] == "DockerHost"
    assert [f["code"] for f in evidence["preflightFailures"]] == [code]
    assert evidence["failures"] == evidence["preflightFailures"]
    assert evidence["completedPhases"] == [] and "pulled" not in evidence and "imageId" not in evidence
    assert [(p["phase"], p["status"]) for p in evidence["deploymentPhases"]] == [("preflight", "failed")]
    if existing:
        assert sc.snapshot(host.site.work) == before
    else:
        assert not os.path.exists(host.site.work)


def test_failed_preflight_in_check_mode_fails_the_same_way(host, monkeypatch):
    sc.offline_preflight(monkeypatch)
    runner = sc.ScriptedRunner(sc.preflight_runtime())
    manager = dr.DockerRun(
        sc.engine(runner), runner, preflight=dict(preflight_options(host), min_engine_version="99.0.0")
    )
    with pytest.raises(StellaError) as err:
        manager.run(dreq.parse_deployment([host.payload]), check_mode=True)
    runner.assert_done()
    assert err.value.code == "runtime_version_too_old" and err.value.evidence["failurePhase"] == "preflight"
    assert sorted(runner.docker_verbs()) == ["info", "version"]
