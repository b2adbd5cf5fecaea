"""agent/teardown.py: stop or remove a deployed project, driven by scripted Docker answers; idempotent."""

from __future__ import annotations

import os

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import teardown as td
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

PROJECT = "acme-prod-vm-01-shop"
C1, C2 = sc.container_id("web"), sc.container_id("previous")


def listing(running=(), every=(), networks=()):
    def ps(label, ids, status=False):
        extra = ["--filter", "status=running"] if status else []
        return sc.Step(
            ["docker", "ps", "--all", "--quiet", "--no-trunc", "--filter", "label=%s=%s" % (label, PROJECT)] + extra,
            0,
            "".join(i + "\n" for i in ids),
        )

    return [
        ps("com.docker.compose.project", every),
        ps("stella.project", every[1:]),
        ps("com.docker.compose.project", running, True),
        ps("stella.project", (), True),
        sc.Step(
            [
                "docker",
                "network",
                "ls",
                "--quiet",
                "--no-trunc",
                "--filter",
                "label=com.docker.compose.project=%s" % PROJECT,
            ],
            0,
            "".join(n + "\n" for n in networks),
        ),
    ]


def run(tmp_path, runner, state="absent", check=False):
    request = td.parse_request({"project_name": PROJECT, "work_directory": str(tmp_path), "state": state})
    return td.Teardown(sc.engine(runner), runner).run(request, check_mode=check)


def test_absent_removes_containers_networks_and_the_directory(tmp_path):
    (tmp_path / PROJECT).mkdir()
    (tmp_path / PROJECT / "stella.version.json").write_text("{}")
    runner = sc.ScriptedRunner(
        listing(running=[C1], every=[C1, C2], networks=["n1"])
        + [sc.Step(["docker", "rm", "--force", "--volumes", C1, C2]), sc.Step(["docker", "network", "rm", "n1"])]
    )
    result = run(tmp_path, runner)
    runner.assert_done()
    assert result["changed"] is True and not os.path.exists(tmp_path / PROJECT)
    assert result["evidence"]["removedContainers"] == sorted([C1, C2]) and result["evidence"]["directoryRemoved"]


def test_absent_again_changes_nothing(tmp_path):
    runner = sc.ScriptedRunner(listing())
    result = run(tmp_path, runner)
    runner.assert_done()
    assert result["changed"] is False and result["evidence"]["removedContainers"] == []


def test_check_mode_lists_and_touches_nothing(tmp_path):
    (tmp_path / PROJECT).mkdir()
    runner = sc.ScriptedRunner(listing(every=[C1]))
    result = run(tmp_path, runner, check=True)
    runner.assert_done()
    assert result["changed"] is True and os.path.isdir(tmp_path / PROJECT)
    assert result["evidence"]["checkMode"] is True and result["evidence"]["removedContainers"] == [C1]


def test_stopped_stops_running_containers_and_keeps_everything(tmp_path):
    (tmp_path / PROJECT).mkdir()
    runner = sc.ScriptedRunner(listing(running=[C1], every=[C1]) + [sc.Step(["docker", "stop", "--time", "10", C1])])
    result = run(tmp_path, runner, state="stopped")
    runner.assert_done()
    assert result["changed"] is True and os.path.isdir(tmp_path / PROJECT)
    assert result["evidence"]["stoppedContainers"] == [C1]


@pytest.mark.parametrize(
    "options",
    [
        {"project_name": "Bad Name", "state": "absent"},
        {"project_name": PROJECT, "state": "paused"},
        {"project_name": PROJECT, "state": "absent", "work_directory": "relative/dir"},
    ],
)
def test_bad_input_is_refused(options):
    with pytest.raises(StellaError) as err:
        td.parse_request(options)
    assert err.value.code == "invalid_payload"
