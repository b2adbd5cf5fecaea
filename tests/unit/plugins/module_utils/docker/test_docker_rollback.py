"""docker/rollback.py: the DockerHost baseline ``docker.run`` retained, restored by table-driven Docker
scripts: the retained containers are checked against the revision before anything changes, a
newer release is never replaced, and a failed restore puts everything back."""

from __future__ import annotations

import os

import pytest

import scripted as sc
from test_docker_run import Host, read, write_committed

from ansible_collections.stellaops.runtime.plugins.module_utils.docker import rollback as rb
from ansible_collections.stellaops.runtime.plugins.module_utils.docker import revision as drv
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError


class Retained(Host):
    """v2 runs; v1's container was retained by the deployment of v2."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        self.directory = write_committed(self, self.plan)
        self.previous = self.name + "-stella-previous"
        self.old_container = self.old()
        self.old_container["Name"] = "/" + self.previous
        self.new_container = self.container("new")
        self.revision = drv.write_revision(
            self.directory,
            self.plan["projectName"],
            self.old_plan["sticker"].encode(),
            {self.name: self.old_container["Id"]},
        )
        self.payload = self.plan["payloads"]["docker.rollback"]

    def rollback(self, runner, payload=None):
        manager = rb.DockerRollback(
            sc.engine(runner), runner, wait_timeout=0, settle=0.25, sleep=self.clock.sleep, clock=self.clock
        )
        return manager.run(rb.parse_request(payload or self.payload))

    def restored(self):
        entry = dict(self.old_container)
        entry["Name"] = "/" + self.name
        return entry

    def validate(self):
        return [self.ps([self.old_container], self.previous), sc.inspect([self.old_container])]

    def swap(self):
        new, old = self.new_container["Id"], self.old_container["Id"]
        return [
            self.ps([self.new_container]),
            sc.inspect([self.new_container]),
            sc.Step(["docker", "stop", "--time", "10", new], 0, new + "\n"),
            sc.Step(["docker", "rename", new, self.name + "-stella-rolled-back"]),
            sc.Step(["docker", "rename", old, self.name]),
            sc.Step(["docker", "start", old]),
        ]


@pytest.fixture
def site(tmp_path):
    return Retained(tmp_path)


def test_the_planner_names_every_container_of_the_deployment(site):
    assert site.payload["Names"] == [p["Name"] for p in site.plan["payloads"]["docker.run"]]
    assert site.payload["ManifestHash"] == site.plan["manifestHash"]


def test_the_retained_release_is_restored_and_the_rolled_back_container_removed(site):
    restored = site.restored()
    steps = (
        site.validate()
        + site.swap()
        + [site.ps([restored]), sc.inspect([restored])]
        + [sc.Step(["docker", "rm", "--force", site.new_container["Id"]])]
    )
    runner = sc.ScriptedRunner(steps)
    result = site.rollback(runner)
    runner.assert_done()
    evidence = result["evidence"]
    assert result["changed"] is True and evidence["rollbackRestored"] is True
    assert evidence["restoredManifestHash"] == site.old_plan["manifestHash"]
    assert read(os.path.join(site.directory, "stella.version.json")) == site.old_plan["sticker"]
    assert not os.path.exists(site.revision)
    assert [p["phase"] for p in evidence["deploymentPhases"]] == [
        "rollback-pre",
        "rollback-deploy",
        "rollback-verify",
        "rollback-post",
    ]
    assert evidence["services"][0]["containerId"] == site.old_container["Id"]
    assert evidence["rolledBackContainerIds"] == [site.new_container["Id"]]


def test_without_a_retained_revision_nothing_is_touched(tmp_path):
    site = Host(tmp_path)
    runner = sc.ScriptedRunner()
    manager = rb.DockerRollback(sc.engine(runner), runner)
    with pytest.raises(StellaError) as err:
        manager.run(rb.parse_request(site.plan["payloads"]["docker.rollback"]))
    assert err.value.code == "no_revision" and err.value.phase == "resolve_revision" and runner.calls == []


def test_a_retained_container_that_is_not_the_recorded_one_is_refused(site):
    other = dict(site.old_container, Id=sc.container_id("someone-else"))
    runner = sc.ScriptedRunner([site.ps([other], site.previous), sc.inspect([other])])
    with pytest.raises(StellaError) as err:
        site.rollback(runner)
    runner.assert_done()
    assert err.value.code == "revision_tampered" and err.value.phase == "validate_revision"
    assert read(os.path.join(site.directory, "stella.version.json")) == site.plan["sticker"]


def test_a_newer_release_is_left_running(site):
    newer = site.site.plan("3.0.0")
    write_committed(site, newer)
    runner = sc.ScriptedRunner()
    with pytest.raises(StellaError) as err:
        site.rollback(runner)
    assert err.value.code == "rollback_superseded" and runner.calls == []
    assert "rollbackRefusedReason" in err.value.evidence


def test_a_tampered_sticker_fails_validation(site):
    with open(os.path.join(site.revision, "stella.version.json"), "a", encoding="utf-8") as handle:
        handle.write(" ")
    runner = sc.ScriptedRunner()
    with pytest.raises(StellaError) as err:
        site.rollback(runner)
    assert err.value.code == "revision_tampered" and runner.calls == []


def test_a_restored_container_that_fails_puts_everything_back(site):
    broken = site.restored()
    broken["State"] = dict(broken["State"], Running=False, Status="exited", ExitCode=1)
    broken["State"].pop("Health", None)
    new, old = site.new_container["Id"], site.old_container["Id"]
    steps = (
        site.validate()
        + site.swap()
        + [site.ps([broken]), sc.inspect([broken])]
        + [
            site.ps([broken]),
            sc.inspect([broken]),
            sc.Step(["docker", "stop", "--time", "10", old], 0, old + "\n"),
            sc.Step(["docker", "rename", old, site.previous]),
            sc.Step(["docker", "rename", new, site.name]),
            sc.Step(["docker", "start", new]),
        ]
    )
    runner = sc.ScriptedRunner(steps)
    with pytest.raises(StellaError) as err:
        site.rollback(runner)
    runner.assert_done()
    assert err.value.code == "service_not_running" and err.value.phase == "inspect_container"
    assert err.value.evidence["containersPutBack"] == [new]
    assert read(os.path.join(site.directory, "stella.version.json")) == site.plan["sticker"]
    assert os.path.isdir(site.revision)
