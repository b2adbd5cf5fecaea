"""The deploy job template run the way AWX / Automation Platform runs it: a private data directory laid out
as AWX lays it out (``env/extravars`` with ``awx_job_id``, ``awx_job_template_name``, the survey answers and
the extra vars the credential types inject; ``env/passwords``, ``env/envvars``, ``env/settings``; an
executable ``inventory/hosts``; the project checkout in ``project/``), run through ansible-runner's Python
API. The job deploys a real release to this machine's engine.

Checked: the runner status and events, the ``set_stats`` artifact the job publishes for workflows
(``stella_job_outcome``: the deployment id ``awx-<awx_job_id>``, status, evidence paths and digests, rolled
back or not), the job record in the store, and that no secret of the extra vars or the passwords file
appears in any artifact, event, evidence file or the job store.

Then the "Stella | Drift check" template (``drift_check.yml``, as its hourly schedule starts it) runs in a
private data directory of its own against the target the deploy job left: in sync it ends green; with the
project's lock edited by hand it records the target ``degraded`` (code ``runtime_drift``) and then fails,
as a scheduled job shows red in AWX.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import uuid

import ansible_runner
import yaml

import ansible_run as ar

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store

PROJECT = os.path.join(ar.ROOT, "extensions", "awx", "project")
PYTHON = os.path.join(ar.VENV_BIN, "python")

INVENTORY_SCRIPT = """#!%(python)s
# Written the way AWX writes a job's inventory: an executable that answers --list and --host.
import json, sys
DATA = %(data)s
if len(sys.argv) > 1 and sys.argv[1] == "--host":
    print(json.dumps(DATA["_meta"]["hostvars"].get(sys.argv[2], {})))
else:
    print(json.dumps(DATA))
"""


def awx_private_data_dir(base, job_id, extravars, secret_password):
    """``base`` laid out as AWX lays out a job's private data directory."""
    for name in ("env", "inventory"):
        os.makedirs(os.path.join(base, name), mode=0o700)
    shutil.copytree(PROJECT, os.path.join(base, "project"))
    with open(os.path.join(base, "env", "extravars"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(extravars, handle, default_flow_style=False)
    with open(os.path.join(base, "env", "passwords"), "w", encoding="utf-8") as handle:
        yaml.safe_dump({r"^SSH [pP]assword:\s*?$": secret_password}, handle)
    with open(os.path.join(base, "env", "envvars"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(
            {
                "JOB_ID": str(job_id),
                "INVENTORY_ID": "7",
                "PROJECT_REVISION": "0123abc",
                "AWX_HOST": "https://awx.example.com",
                "ANSIBLE_COLLECTIONS_PATH": ar.COLLECTIONS,
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_HOST_KEY_CHECKING": "False",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": ar.VENV_BIN + os.pathsep + os.environ["PATH"],
            },
            handle,
        )
    with open(os.path.join(base, "env", "settings"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(
            {
                "job_timeout": 0,
                "idle_timeout": 0,
                "pexpect_timeout": 5,
                "suppress_ansible_output": True,
                "suppress_output_file": False,
            },
            handle,
        )
    data = {
        "all": {"children": ["stella_targets"]},
        "stella_targets": {"hosts": ["localhost"]},
        "_meta": {"hostvars": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON}}},
    }
    hosts = os.path.join(base, "inventory", "hosts")
    with open(hosts, "w", encoding="utf-8") as handle:
        handle.write(INVENTORY_SCRIPT % {"python": PYTHON, "data": repr(data)})
    os.chmod(hosts, stat.S_IRWXU)


def release_document(lab, work):
    return {
        "release": {"id": "rel-awx-1-0-0", "name": "awx-web", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "lab",
        "application": "awx-%s" % uuid.uuid4().hex[:6],
        "strategy": "all-at-once",
        "target": {"type": "ComposeHost"},
        "workDirectory": work,
        "components": [
            {
                "name": "web",
                "image": lab["images"]["app_v1"]["loopback_ref"],
                "config": {
                    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                    "healthcheck.interval": "2s",
                    "healthcheck.retries": "10",
                },
            }
        ],
    }


def _health(store):
    opened = open_store(store)
    try:
        return {entry["targetId"]: entry for entry in opened.health()}
    finally:
        opened.close()


def sha256_file(path):
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


def files_under(*roots):
    for root in roots:
        for directory, _dirs, names in os.walk(root):
            for name in names:
                yield os.path.join(directory, name)


def run_drift_check(base, job_id, store, work, ssh_secret):
    """The "Stella | Drift check" template's playbook in a fresh private data directory, as its schedule
    starts it (the template's extra vars, the job store credential's extra var, a scheduled launch)."""
    extravars = {
        "awx_job_id": job_id,
        "awx_job_launch_type": "scheduled",
        "awx_job_template_name": "Stella | Drift check",
        "awx_schedule_id": 3,
        "awx_schedule_name": "Stella | Drift check, hourly",
        "awx_inventory_name": "Stella targets",
        "tower_job_id": job_id,
        # the template's extra vars (extensions/awx/stellaops-runtime.awx.template.json)
        "stella_verify_fail_on_drift": True,
        # the "Stella job store" credential; the work directory is the release's, a host variable in AWX
        "stella_job_store": store,
        "stella_work_directory": work,
    }
    awx_private_data_dir(base, job_id, extravars, ssh_secret)
    runner = ansible_runner.run(private_data_dir=base, playbook="drift_check.yml", ident="job-%d" % job_id, quiet=True)
    events = list(runner.events)
    lines = [
        line
        for e in events
        if e["event"] == "runner_on_ok" and e["event_data"].get("task") == "One line per target and project"
        for line in e["event_data"]["res"]["msg"]
    ]
    failed = [e["event_data"]["res"].get("msg", "") for e in events if e["event"] == "runner_on_failed"]
    return runner, lines, failed


def test_the_deploy_job_template_runs_as_awx_runs_it_and_publishes_its_outcome(lab, tmp_path):
    job_id = 4200 + int(uuid.uuid4().hex[:3], 16)
    registry_secret, token_secret, ssh_secret = (
        "reg-%s" % uuid.uuid4().hex,
        "tok-%s" % uuid.uuid4().hex,
        "ssh-%s" % uuid.uuid4().hex,
    )
    work, store, evidence = str(tmp_path / "work"), str(tmp_path / "jobs.sqlite3"), str(tmp_path / "evidence")
    private = str(tmp_path / "awx")
    extravars = {
        # what AWX adds to every job
        "awx_job_id": job_id,
        "awx_job_launch_type": "workflow",
        "awx_job_template_id": 12,
        "awx_job_template_name": "Stella | Deploy",
        "awx_project_revision": "0123abc",
        "awx_user_name": "admin",
        "awx_inventory_name": "Stella targets",
        "tower_job_id": job_id,
        "tower_job_template_name": "Stella | Deploy",
        # the survey
        "stella_release_file": "releases/lab.yml",
        "stella_strategy": "rolling",
        "stella_batch_size": 1,
        "stella_auto_rollback": "true",
        # the credential types' injectors (extensions/awx/stellaops-runtime.awx.template.json)
        "stella_registry_host": lab["registries"]["plain"]["address"],
        "stella_registry_username": "deploy",
        "stella_registry_password": registry_secret,
        "stella_traffic_webhook_url": "http://127.0.0.1:9/shift",
        "stella_traffic_webhook_token": token_secret,
        # the lab's gates, store and evidence (job template extra variables)
        "stella_insecure_registries": [lab["registries"]["plain"]["address"]],
        "stella_min_engine_version": "20.10.0",
        "stella_job_store": store,
        "stella_evidence_dir": evidence,
    }
    awx_private_data_dir(private, job_id, extravars, ssh_secret)
    with open(os.path.join(private, "project", "releases", "lab.yml"), "w", encoding="utf-8") as handle:
        yaml.safe_dump(release_document(lab, work), handle)

    runner = ansible_runner.run(private_data_dir=private, playbook="deploy.yml", ident="job-%d" % job_id, quiet=True)
    events = list(runner.events)
    project_name = None
    try:
        assert (runner.status, runner.rc) == ("successful", 0), runner.stdout.read()[-3000:]
        stats = [e for e in events if e["event"] == "playbook_on_stats"]
        assert len(stats) == 1
        outcome = stats[0]["event_data"]["artifact_data"]["stella_job_outcome"]
        assert outcome["deploymentId"] == "awx-%d" % job_id and outcome["jobIdSource"] == "awx_job_id"
        assert (outcome["status"], outcome["succeeded"], outcome["rolledBack"]) == ("Succeeded", True, False)
        assert outcome["targets"] == ["localhost"]
        assert outcome["evidence"], outcome
        for entry in outcome["evidence"].values():
            assert entry["path"].startswith(evidence) and sha256_file(entry["path"]) == entry["sha256"]
        # the nine phases ran as tasks, each reported in the job's events
        ok_tasks = {e["event_data"].get("task") for e in events if e["event"] == "runner_on_ok"}
        assert any("preflight" in (task or "").lower() for task in ok_tasks), sorted(map(str, ok_tasks))

        opened = open_store(store)
        try:
            record = opened.get("awx-%d" % job_id)
        finally:
            opened.close()
        assert record["status"] == "Succeeded" and record["jobIdSource"] == "awx_job_id"
        assert record["strategy"] == "rolling"  # the survey's strategy over the release's all-at-once
        target = record["targets"]["localhost"]
        project_name = target["projectName"]
        assert target["status"] == "Succeeded" and target["currentDigest"] == lab["images"]["app_v1"]["digest"]
        assert outcome["evidenceDigest"].startswith("sha256:")

        # no secret of the extra vars or the passwords file anywhere but the inputs AWX wrote
        everything = json.dumps(events)
        for path in files_under(os.path.join(private, "artifacts"), evidence, work):
            with open(path, "rb") as handle:
                everything += handle.read().decode("utf-8", "replace")
        with open(store, "rb") as handle:
            everything += handle.read().decode("utf-8", "replace")
        for secret in (registry_secret, token_secret, ssh_secret):
            assert secret not in everything

        # ---- "Stella | Drift check", as its schedule starts it, against the target this job deployed
        target_id = target["targetId"]
        runner, lines, failed = run_drift_check(str(tmp_path / "drift-1"), job_id + 1, store, work, ssh_secret)
        assert (runner.status, runner.rc, failed) == ("successful", 0, []), runner.stdout.read()[-3000:]
        # this machine's engine also runs other tests' projects, which this store never recorded: unknown
        ours = [line for line in lines if line.startswith("in_sync localhost project %s" % project_name)]
        assert ours == ["in_sync localhost project %s" % project_name], lines
        assert all(line.startswith("unknown ") for line in lines if line not in ours), lines
        health = _health(store)
        assert (health[target_id]["status"], health[target_id]["jobId"]) == ("healthy", "awx-%d" % job_id)

        lock = os.path.join(work, project_name, "compose.stella.lock.yml")
        with open(lock, "a", encoding="utf-8") as handle:
            handle.write("# edited by hand\n")
        runner, lines, failed = run_drift_check(str(tmp_path / "drift-2"), job_id + 2, store, work, ssh_secret)
        # recorded first, then red: the job fails on the drift, with the code the target's health carries
        assert (runner.status, runner.rc) == ("failed", 2), runner.stdout.read()[-3000:]
        (line,) = [line for line in lines if not line.startswith("unknown ")]
        assert line.startswith("drifted localhost project %s: lock sha256:" % project_name), line
        assert len(failed) == 1 and failed[0].startswith("runtime_drift: localhost no longer run"), failed
        health = _health(store)[target_id]
        assert (health["status"], health["code"]) == ("degraded", "runtime_drift"), health
        assert "drifted from job awx-%d" % job_id in health["reason"], health
        with open(store, "rb") as handle:
            assert ssh_secret.encode() not in handle.read()
    finally:
        if project_name is None:
            opened = open_store(store) if os.path.exists(store) else None
            if opened is not None:
                try:
                    found = opened.get("awx-%d" % job_id) or {}
                    project_name = ((found.get("targets") or {}).get("localhost") or {}).get("projectName")
                finally:
                    opened.close()
        if project_name:
            lock = os.path.join(work, project_name, "compose.stella.lock.yml")
            subprocess.run(
                ["docker", "compose", "-p", project_name, "-f", lock, "down", "-t", "1"],
                capture_output=True,
                check=False,
                timeout=120,
            )
