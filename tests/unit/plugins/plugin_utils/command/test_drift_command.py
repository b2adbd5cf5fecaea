"""Drift on a real SQLite store fed by the job's own steps: the ``drift`` step (run/drift.py) records a drifted
target ``degraded`` with code ``runtime_drift`` (shown by ``stella health``), records nothing in check mode,
gives an in-sync target back the status its job gave; and ``stella verify --live`` (command/drift.py): its
arguments, its lines and exit statuses, with the playbook run replaced by a scripted runner."""

from __future__ import annotations

import json

import pytest

from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import drift as _drift_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

T0 = "2026-01-01T00:00:00.000000Z"
WEB = "sha256:" + "a" * 64
OTHER = "sha256:" + "c" * 64
LOCK, STICKER = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def step(location, name, check_mode=False, **given):
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, **given)
    return JobRunner({}, check_mode).run(args)


def deployed(tmp_path, targets=("a",)):
    """A store where job-1 deployed project ``shop`` (service ``web``) to ``targets`` and succeeded."""
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[list(targets)],
            targets={
                n: {"targetId": "id-" + n, "targetName": n, "targetType": "ComposeHost", "projectName": "shop"}
                for n in targets
            },
            options={},
            now=T0,
        )
    )
    store.update("job-1", lambda r: _job.start(r, T0))
    store.close()
    for name in targets:
        apply = {
            "changed": True,
            "projectName": "shop",
            "composeLockHash": LOCK,
            "versionStickerHash": STICKER,
            "services": [{"service": "web", "containerName": "shop-web-1", "state": "running", "imageDigest": WEB}],
        }
        plan = {
            "jobId": "job-1",
            "projectName": "shop",
            "target": {"id": "id-" + name, "type": "ComposeHost"},
            "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
            "components": [{"name": "web", "image": "reg/shop/web@" + WEB, "digest": WEB}],
        }
        step(location, "target", job_id="job-1", target=name, result=apply, probe={"passed": True}, plan=plan)
    step(location, "finish", job_id="job-1")
    step(location, "close", job_id="job-1")
    return location


def seen(digest=WEB, running=True, lock=LOCK, extra=()):
    containers = [
        {
            "name": "shop-web-1",
            "component": "web",
            "state": "running" if running else "exited",
            "running": running,
            "imageId": "sha256:" + "f" * 64,
            "imageDigest": WEB,
            "repoDigests": ["reg/shop/web@" + digest],
            "retained": False,
            "labels": {"stella.project": "shop"},
        }
    ]
    containers += list(extra)
    files = {"compose.stella.lock.yml": lock, "stella.version.json": STICKER, "apply-manifest.json": None}
    return {
        "changed": False,
        "workDirectory": "/var/lib/stella/projects",
        "projects": {"shop": {"projectName": "shop", "files": files, "containers": containers}},
    }


def health(location, capsys, *argv):
    rc = _command.main(["stella", "health", "--store", location] + list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_job_recorded_the_target_and_a_target_in_sync_stays_healthy(tmp_path):
    location = deployed(tmp_path)
    store = _job_store.open_store(location)
    try:
        assert store.last_succeeded("shop", "a")["jobId"] == "job-1"
        assert store.last_succeeded("shop", "b") is None and store.last_succeeded("cart", "a") is None
    finally:
        store.close()
    out = step(location, "drift", observed={"a": seen()})
    assert out["lines"] == ["in_sync a project shop"] and out["drifted"] == []
    assert step(location, "health")["health"][0]["status"] == "healthy"


def test_a_stopped_container_degrades_the_target_with_runtime_drift_shown_by_stella_health(tmp_path, capsys):
    location = deployed(tmp_path)
    out = step(location, "drift", observed={"a": seen(running=False)})
    assert out["drifted"] == ["a"] and out["lines"] == ["drifted a project shop: stopped web"]
    assert out["verdicts"][0]["differences"] == [
        {"kind": "stopped", "service": "web", "recorded": "running", "observed": "exited"}
    ]
    rc, text, err = health(location, capsys)
    assert (rc, err) == (0, "")
    row = text.splitlines()[1]
    assert row.split()[:4] == ["id-a", "a", "degraded", "job-1"]
    assert row.endswith("runtime_drift: project shop drifted from job job-1: stopped web")
    rc, text, _err = health(location, capsys, "--json", "--check")
    entry = json.loads(text)["health"][0]
    assert rc == 3 and (entry["status"], entry["code"]) == ("degraded", "runtime_drift")


def test_check_mode_compares_and_records_nothing(tmp_path):
    location = deployed(tmp_path)
    out = step(location, "drift", check_mode=True, observed={"a": seen(digest=OTHER)})
    assert out["recorded"] is False and out["drifted"] == ["a"]
    assert out["lines"] == [
        "drifted a project shop: digest of web sha256:cccccccccccc.. != recorded sha256:aaaaaaaaaaaa.."
    ]
    assert step(location, "health")["health"][0]["status"] == "healthy"


def test_in_sync_again_gives_back_the_status_the_job_gave(tmp_path):
    location = deployed(tmp_path)
    step(location, "drift", observed={"a": seen(lock=OTHER)})
    drifted = step(location, "health")["health"][0]
    assert (drifted["status"], drifted["code"]) == ("degraded", "runtime_drift")
    assert drifted["reason"] == (
        "project shop drifted from job job-1: lock sha256:cccccccccccc.. != recorded sha256:111111111111.."
    )
    out = step(location, "drift", observed={"a": seen()})
    assert out["inSync"] == ["id-a"]
    back = step(location, "health")["health"][0]
    assert (back["status"], back["code"], back["jobId"]) == ("healthy", None, "job-1")


def test_a_status_a_job_set_is_not_replaced_by_in_sync(tmp_path):
    location = deployed(tmp_path)
    store = _job_store.open_store(location)
    try:
        store.record_drift(
            [],
            [
                {
                    "targetId": "id-a",
                    "targetName": "a",
                    "status": "unknown",
                    "reason": "x",
                    "code": None,
                    "jobId": "job-1",
                    "at": T0,
                }
            ],
        )
        assert store.health(["id-a"])[0]["status"] == "healthy"  # not a drift: left as the job set it
    finally:
        store.close()


def test_an_unknown_project_or_an_unreachable_target_is_unknown_and_changes_no_health(tmp_path):
    location = deployed(tmp_path)
    other = seen()
    other["projects"]["cart"] = dict(other["projects"].pop("shop"), projectName="cart")
    out = step(
        location,
        "drift",
        observed={"a": other, "b": {"unreachable": True, "msg": "ssh: connect to host b: refused\nmore"}},
    )
    assert out["lines"] == [
        "unknown a project cart: no successful job recorded for project cart",
        "unknown b: unreachable: ssh: connect to host b: refused",
    ]
    assert out["drifted"] == [] and out["health"] == []
    assert step(location, "health")["health"][0]["status"] == "healthy"


def test_drift_needs_observed(tmp_path):
    location = deployed(tmp_path)
    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step="drift", store=location)
    with pytest.raises(Exception) as caught:
        JobRunner({}, False).run(args)
    assert getattr(caught.value, "code", None) == "job_invalid"


# ------------------------------------------------------------------------------ stella verify --live


class Scripted:
    """Stands in for the playbook run: feeds the events a run would, records what it was given."""

    def __init__(self, result=None, rc=0, failure=None):
        self.result, self.rc, self.failure = result, rc, failure
        self.calls = []

    def __call__(self, inventory, extravars, events):
        self.calls.append((inventory, extravars))
        if self.failure:
            events({"event": "runner_on_failed", "event_data": {"task": "Inspect", "res": self.failure}})
        if self.result is not None:
            events(
                {
                    "event": "runner_on_ok",
                    "event_data": {"task_action": "stellaops.runtime.stella_job", "res": self.result},
                }
            )
        return self.rc, "successful" if self.rc == 0 else "failed"


def live(tmp_path, argv, runner, capsys):
    rc = _drift_cli.live(argv, runner=runner)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text("all:\n  children:\n    stella_targets:\n      hosts: {a: {}}\n")
    return str(path)


def test_live_prints_one_line_per_target_and_exits_3_on_drift(tmp_path, inventory, capsys):
    location = deployed(tmp_path)
    result = step(location, "drift", check_mode=True, observed={"a": seen(running=False)})
    runner = Scripted(json.loads(json.dumps(result)))
    rc, out, err = live(tmp_path, ["--live", "shop", "--inventory", inventory, "--store", location], runner, capsys)
    assert (rc, out, err) == (3, "drifted a project shop: stopped web\n", "")
    assert runner.calls == [
        (inventory, {"stella_job_store": location, "stella_verify_fail_on_drift": False, "stella_projects": ["shop"]})
    ]
    rc, out, _err = live(tmp_path, ["-i", inventory, "--store", location, "--json"], runner, capsys)
    shown = json.loads(out)
    assert rc == 3 and shown["drifted"] == ["a"] and shown["verdicts"][0]["differences"][0]["kind"] == "stopped"
    assert "stella_projects" not in runner.calls[-1][1]


def test_live_exits_0_when_in_sync(tmp_path, inventory, capsys):
    location = deployed(tmp_path)
    result = step(location, "drift", check_mode=True, observed={"a": seen()})
    rc, out, _err = live(tmp_path, ["-i", inventory, "--store", location], Scripted(result), capsys)
    assert (rc, out) == (0, "in_sync a project shop\n")


def test_live_argument_errors(tmp_path, inventory, capsys):
    location = deployed(tmp_path)
    runner = Scripted()
    rc, _out, err = live(tmp_path, ["--store", location], runner, capsys)
    assert rc == 2 and "--inventory" in err
    rc, _out, err = live(tmp_path, ["-i", str(tmp_path / "none.yml"), "--store", location], runner, capsys)
    assert rc == 2 and "no inventory at" in err
    rc, _out, err = live(tmp_path, ["-i", inventory, "--store", str(tmp_path / "absent.sqlite3")], runner, capsys)
    assert rc == 1 and err.startswith("stella verify: job_store_missing: no job store at ")
    assert runner.calls == [] and not (tmp_path / "absent.sqlite3").exists()
    rc, out, _err = live(tmp_path, ["--help"], runner, capsys)
    assert rc == 0 and "--inventory INV" in out and "required" in out


def test_live_fails_with_one_line_when_the_playbook_fails(tmp_path, inventory, capsys):
    location = deployed(tmp_path)
    failure = {"msg": "cannot read the job store x\nsecond line", "code": "job_store_failed"}
    rc, out, err = live(tmp_path, ["-i", inventory, "--store", location], Scripted(rc=2, failure=failure), capsys)
    assert (rc, out) == (1, "")
    assert err.startswith("stella verify: job_store_failed: stellaops.runtime.verify: cannot read the job store x")
    assert len(err.strip().splitlines()) == 1
    rc, _out, err = live(tmp_path, ["-i", inventory, "--store", location], Scripted(rc=4), capsys)
    assert rc == 1 and "without verdicts" in err
