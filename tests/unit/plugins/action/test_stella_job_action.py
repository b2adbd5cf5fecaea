"""stella_job through the real ansible-playbook: in check mode the read steps run and record nothing, the
job's steps make a preview that opens no store, and the operator rollback's steps are refused with their
stable code before the store is touched; a claim lease too short to be renewed is refused; the retention
of revisions is a job option, and a negative one is refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from ansible_collections.stellaops.runtime.plugins.action import stella_job as stella_job_action
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import steps as _job_steps
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
T0 = "2026-03-01T10:00:00.000000Z"
GONE_HERE = {"pid": 2**22 + 11, "startTicks": 1}  # a run of this controller whose process is gone
RELEASE = {
    "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
    "tenant": "t",
    "environment": "lab",
    "application": "shop",
    "strategy": "rolling",
    "target": {"type": "ComposeHost"},
    "components": [{"name": "web", "image": "registry.invalid/shop/web:1"}],
}


def playbook(tmp_path, tasks, *extra):
    path = tmp_path / "play.yml"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_STDOUT_CALLBACK="json_results",
        ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "tests", "callback_plugins"),
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "local-tmp"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
    )
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run(
        [
            os.path.join(BIN, "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + PYTHON,
            str(path),
            *extra,
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr
    return proc, [task["hosts"]["localhost"] for task in json.loads(proc.stdout)["plays"][0]["tasks"]]


def stored_job(tmp_path):
    """A store with job-1, Running, owned by a run of this controller that is gone."""
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}}
    owner = dict(GONE_HERE, host=os.uname().nodename)
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a"]],
            targets=targets,
            options={},
            now=T0,
            owner=owner,
        )
    )
    store.update("job-1", lambda r: _job.start(r, T0))
    store.close()
    return location


def test_show_in_check_mode_reads_the_job_as_it_is_and_records_nothing(tmp_path):
    location = stored_job(tmp_path)
    show = {"stellaops.runtime.stella_job": {"step": "show", "store": location, "job_id": "job-1"}}
    proc, results = playbook(tmp_path, [show], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert results[0]["job"]["status"] == "Running" and results[0]["job"]["revision"] == 2
    store = _job_store.open_store(location)
    try:
        assert store.get("job-1")["status"] == "Running" and len(store.history("job-1")) == 2
    finally:
        store.close()
    # the same step without check mode records the gone run's job interrupted
    proc, results = playbook(tmp_path, [show])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (results[0]["job"]["status"], results[0]["job"]["code"]) == ("Failed", "job_interrupted")


def test_health_runs_in_check_mode(tmp_path):
    location = stored_job(tmp_path)
    health = {"stellaops.runtime.stella_job": {"step": "health", "store": location, "targets": ["localhost"]}}
    proc, results = playbook(tmp_path, [health], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(h["targetId"], h["status"]) for h in results[0]["health"]] == [("localhost", "unknown")]


PINNED = dict(RELEASE, components=[{"name": "web", "image": "registry.invalid/shop/web:1@sha256:" + "a" * 64}])


def test_the_job_steps_make_a_preview_in_check_mode_and_open_no_store(tmp_path):
    location = str(tmp_path / "never" / "jobs.sqlite3")

    def step(name, **args):
        return {"stellaops.runtime.stella_job": dict(args, step=name, store=location, job_id="job-p")}

    tasks = [
        dict(step("start", release=PINNED, targets=["localhost"], keep_revisions=4), register="started"),
        step("target", target="localhost", result={"changed": True, "wouldChangeFiles": ["stella.version.json"]}),
        step("traffic", targets=["localhost"]),
        step("gate", targets=["localhost"]),
        step("finish"),
        step("traffic_rollback"),
        step("close", started="{{ started }}"),
        dict(step("rollback_start"), ignore_errors=True),
        dict(step("rollback_target", target="localhost"), ignore_errors=True),
    ]
    proc, results = playbook(tmp_path, tasks, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # errors ignored
    started, target, traffic, gate, finish, back, closed, rollback, rollback_target = results
    assert (started["checkMode"], started["status"], started["proceed"], started["jobId"]) == (
        True,
        "Preview",
        True,
        "job-p",
    )
    assert started["targetOrder"] == ["localhost"] and started["options"]["keepRevisions"] == 4
    assert started["plans"]["localhost"]["payloads"]["compose.up"]["ProjectName"]
    assert all(r["checkMode"] is True and r["changed"] is False for r in (target, traffic, gate, finish, back))
    assert gate["proceed"] is True and finish["rollbackOrder"] == [] and traffic["skipped"] is True
    # the target step's preview is a fact of its target, which close reads (no register name)
    assert target["ansible_facts"] == {"stella_job_preview": target["preview"]}
    assert target["preview"]["summary"] == "would deploy (stella.version.json would change)"
    assert (closed["status"], closed["succeeded"], closed["reason"]) == ("Preview", True, None)
    assert closed["preview"]["localhost"]["outcome"] == "would_deploy"
    assert closed["text"].startswith("job job-p (check mode: a preview, nothing was recorded or changed)")
    # the rollback's start reads the store (there is none: reported, not created); its target step records nothing
    assert (rollback["failed"], rollback["code"]) == (True, "job_store_missing"), rollback
    assert (rollback_target["checkMode"], rollback_target["changed"]) == (True, False)
    assert not os.path.exists(os.path.dirname(location))


def test_every_step_is_either_read_or_previewed_in_check_mode():
    """A step added without a check-mode answer would be refused (job_check_mode_unsupported), never run
    for real."""
    assert stella_job_action.ARGUMENT_SPEC["step"]["choices"] == list(_job_steps.STEPS)
    assert {name: step.check_mode for name, step in _job_steps.STEPS.items()} == {
        "start": "preview",
        "target": "preview",
        "traffic": "preview",
        "gate": "preview",
        "finish": "preview",
        "rollback_start": "read",
        "rollback_target": "preview",
        "traffic_rollback": "preview",
        "close": "preview",
        "show": "read",
        "health": "read",
        "drift": "read",
    }
    assert all(step.name == name for name, step in _job_steps.STEPS.items())


def test_a_step_is_refused_before_the_store_is_opened_when_an_option_it_needs_is_missing(tmp_path):
    location = str(tmp_path / "jobs.sqlite3")
    for name, step in _job_steps.STEPS.items():
        for missing in step.needs:
            args = {"step": name, "store": location, "job_id": "job-1", "target": "a", "release": RELEASE}
            args[missing] = None
            try:
                JobRunner({}, False).run(args)
            except StellaError as exc:
                assert (exc.code, exc.reason) == ("job_invalid", "step %s needs %s" % (name, missing))
            else:
                raise AssertionError("step %s ran without %s" % (name, missing))
    assert not os.path.exists(location)


def test_the_operator_rollback_in_check_mode_makes_the_rollback_job_and_stores_nothing(tmp_path):
    location = stored_job(tmp_path)  # job-1: target a retained no revision; its run is gone

    def rollback_start(**args):
        return {
            "stellaops.runtime.stella_job": dict(args, step="rollback_start", store=location, job_id="job-1"),
            "register": "stella_job_finish",
            "ignore_errors": True,
        }

    close = {
        "stellaops.runtime.stella_job": {
            "step": "close",
            "store": location,
            "started": "{{ stella_job_finish }}",
            "job_id": "{{ stella_job_finish.jobId }}",
        },
        "ignore_errors": True,
    }
    proc, (none_eligible,) = playbook(tmp_path, [rollback_start()], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (none_eligible["failed"], none_eligible["code"]) == (True, "rollback_no_eligible_target")
    proc, (started, closed) = playbook(tmp_path, [rollback_start(revision_paths={"a": "/srv/rev/1"}), close], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (started["kind"], started["status"], started["checkMode"], started["sourceJobId"]) == (
        "rollback",
        "Preview",
        True,
        "job-1",
    )
    assert started["jobId"].startswith("job-1-rollback-") and started["rollbackOrder"] == ["a"]
    assert started["rollbackTargets"]["a"]["revisionPath"] == "/srv/rev/1"
    # the job-1 run that holds the project is gone: a real run would take the project over
    assert "failed" not in started
    assert (closed["status"], closed["succeeded"], closed["preview"]["a"]["outcome"]) == ("Preview", False, "not_run")
    assert closed["text"].startswith("rollback job %s of job job-1 (check mode: a preview" % started["jobId"])
    store = _job_store.open_store(location)
    try:  # nothing stored: no rollback job, job-1 not recorded interrupted
        assert [r["jobId"] for r in store.list()] == ["job-1"] and store.get("job-1")["status"] == "Running"
    finally:
        store.close()


def test_close_in_check_mode_refuses_a_job_this_run_did_not_preview(tmp_path):
    close = {
        "stellaops.runtime.stella_job": {"step": "close", "job_id": "job-9", "store": str(tmp_path / "jobs.sqlite3")},
        "ignore_errors": True,
    }
    proc, results = playbook(tmp_path, [close], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (results[0]["failed"], results[0]["code"]) == (True, "job_not_found")
    assert not os.path.exists(tmp_path / "jobs.sqlite3")


def test_a_claim_lease_shorter_than_three_seconds_is_refused(tmp_path):
    location = str(tmp_path / "jobs.sqlite3")
    start = {"step": "start", "store": location, "release": RELEASE, "targets": ["localhost"]}
    tasks = [
        {"stellaops.runtime.stella_job": dict(start, claim_lease=lease), "ignore_errors": True} for lease in (-1, 1, 2)
    ]
    proc, results = playbook(tmp_path, tasks)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # errors ignored
    for lease, result in zip((-1, 1, 2), results):
        assert (result["failed"], result["code"]) == (True, "job_invalid"), result
        assert result["msg"] == "claim_lease must be 0 (no lease) or at least 3 seconds, not %d" % lease
    store = _job_store.open_store(location)
    try:
        assert store.list() == []
    finally:
        store.close()


def test_keep_revisions_is_a_job_option_and_a_negative_one_is_refused(tmp_path):
    location = str(tmp_path / "jobs.sqlite3")
    start = {"step": "start", "store": location, "release": PINNED, "targets": ["localhost"]}
    tasks = [
        {"stellaops.runtime.stella_job": dict(start, keep_revisions=-1), "ignore_errors": True},
        {"stellaops.runtime.stella_job": dict(start, keep_revisions=3)},
    ]
    proc, results = playbook(tmp_path, tasks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (results[0]["failed"], results[0]["code"]) == (True, "job_invalid"), results[0]
    assert results[0]["msg"] == "keep_revisions must be 0 (keep every retained revision) or more, not -1"
    assert results[1]["options"]["keepRevisions"] == 3
    store = _job_store.open_store(location)
    try:
        [record] = [store.get(job_id) for job_id in [results[1]["jobId"]]]
        assert record["options"]["keepRevisions"] == 3 and len(store.list()) == 1
    finally:
        store.close()


def test_show_in_check_mode_creates_no_store(tmp_path):
    location = str(tmp_path / "none" / "jobs.sqlite3")
    show = {
        "stellaops.runtime.stella_job": {"step": "show", "store": location, "job_id": "job-1"},
        "ignore_errors": True,
    }
    proc, results = playbook(tmp_path, [show], "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # errors ignored
    assert (results[0]["failed"], results[0]["code"]) == (True, "job_store_missing")
    assert results[0]["msg"] == "no job store at %s (check mode creates none)" % location
    assert not os.path.exists(os.path.dirname(location))


def test_a_string_boolean_in_the_strategy_config_is_refused_before_anything_is_recorded(tmp_path):
    """``"false"`` would read as on (``bool("false")``): the job is refused at planning, nothing recorded."""
    location = str(tmp_path / "jobs.sqlite3")
    tasks = [
        {
            "stellaops.runtime.stella_job": {
                "step": "start",
                "store": location,
                "targets": ["localhost"],
                "release": dict(PINNED, strategyConfig={key: "false"}),
            },
            "ignore_errors": True,
        }
        for key in ("autoRollbackOnFailure", "rollbackOnFailure", "waitForHealthCheck", "requireTrafficAdapter")
    ]
    proc, results = playbook(tmp_path, tasks)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # errors ignored
    for key, result in zip(
        ("autoRollbackOnFailure", "rollbackOnFailure", "waitForHealthCheck", "requireTrafficAdapter"), results
    ):
        assert (result["failed"], result["code"]) == (True, "release_invalid"), result
        assert "strategyConfig.%s" % key in result["msg"] and "boolean" in result["msg"], result["msg"]
    store = _job_store.open_store(location)
    try:
        assert store.list() == []
    finally:
        store.close()


@pytest.mark.parametrize(
    "strategy, config, reason",
    [
        ("canary", {"trafficSteps": [50, 10]}, "trafficSteps must not decrease"),
        ("a-b", {"trafficWeights": {"control": 30, "treatment": 30}}, "trafficWeights must add up to 100"),
        ("canary", {"trafficSteps": ["ten"]}, "must be a number from 0 to 100"),
        (
            "blue-green",
            {
                "trafficAdapter": "webhook",
                "trafficAdapterOptions": {"shiftUrl": "https://router:s3cret-Planted@router.example/shift"},
            },
            "trafficAdapterOptions.shiftUrl carries",
        ),
        (
            "blue-green",
            {
                "trafficAdapter": "webhook",
                "trafficAdapterOptions": {"shiftUrl": "https://router.example/shift", "password": "s3cret-Planted"},
            },
            "trafficAdapterOptions.password",
        ),
    ],
)
def test_bad_traffic_weights_fail_the_plan_before_anything_is_stored(tmp_path, strategy, config, reason):
    """The weights of every batch are computed at planning: a bad one never reaches a running job's
    traffic step (where it would abort the playbook with the job Running)."""
    release = dict(
        RELEASE,
        strategy=strategy,
        strategyConfig=config,
        components=[{"name": "web", "image": "registry.invalid/shop/web@sha256:" + "a" * 64}],
    )
    location = str(tmp_path / "jobs.sqlite3")
    start = {
        "stellaops.runtime.stella_job": {
            "step": "start",
            "store": location,
            "release": release,
            "targets": ["localhost"],
        },
        "ignore_errors": True,
    }
    _proc, [result] = playbook(tmp_path, [start])
    assert result["failed"] is True and result["code"] == "traffic_config_invalid", result
    assert reason in result["msg"] and "s3cret-Planted" not in json.dumps(result)
    store = _job_store.open_store(location)
    try:
        assert store.list() == []
    finally:
        store.close()


def test_targets_sharing_an_explicit_project_name_get_their_own_deployment_evidence(tmp_path):
    """A release that names one ``projectName`` for every target: each target's ``deployment.json`` is
    its own file (``<projectName>/<jobId>/<target>/``), and the SHA-256 the job record keeps for it is
    the one of that file (all targets once wrote one path, the last one's document winning)."""
    location, evidence = str(tmp_path / "jobs.sqlite3"), str(tmp_path / "evidence")
    release = dict(PINNED, projectName="shop-shared")
    targets = ["tgt-a", "ops@tgt-b"]
    tasks = [
        {
            "stellaops.runtime.stella_job": {
                "step": "start",
                "store": location,
                "release": release,
                "targets": targets,
            },
            "register": "started",
        }
    ]
    tasks += [
        {
            "stellaops.runtime.stella_job": {
                "step": "target",
                "store": location,
                "job_id": "{{ started.jobId }}",
                "target": name,
                "plan": "{{ started.plans['%s'] }}" % name,
                "evidence_dir": evidence,
                "result": {"changed": True, "deploymentPhases": [{"name": "prepare", "status": "succeeded"}]},
            }
        }
        for name in targets
    ]
    proc, results = playbook(tmp_path, tasks, "-i", ",".join(targets) + ",")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = results[0]["jobId"]
    paths = {}
    for name, result in zip(targets, results[1:]):
        written = result["target"]["evidence"]["deployment.json"]
        with open(written["path"], "rb") as handle:
            content = handle.read()
        assert hashlib.sha256(content).hexdigest() == written["sha256"].split(":")[-1], name
        assert json.loads(content)["target"]["targetId"] == name
        paths[name] = written["path"]
    assert paths["tgt-a"] == os.path.join(evidence, "shop-shared", job_id, "tgt-a", "deployment.json")
    assert len(set(paths.values())) == 2 and all(
        os.path.dirname(os.path.dirname(path)) == os.path.join(evidence, "shop-shared", job_id)
        for path in paths.values()
    )


def test_loading_the_action_loads_the_postgresql_driver_once_for_every_worker():
    """The strategy imports the action in the controller's main process before it forks a task's workers:
    the driver loaded with it is shared by every target's worker instead of being imported in each."""
    code = (
        "import sys; from ansible_collections.stellaops.runtime.plugins.action import stella_job; "
        "print('psycopg' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    loaded = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert loaded.stdout.strip() == "True"
