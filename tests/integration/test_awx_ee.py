"""The AWX / Automation Platform job templates run the way AWX runs them: every job in a fresh container of
the collection's execution environment (``stellaops-runtime-ee:latest``, built by ``make ee``), started by
ansible-runner's container isolation with this machine's Docker as the runtime, from a private data
directory laid out as AWX lays it out: ``env/extravars`` with ``awx_job_id``, the survey answers and the
extra vars the credential types inject; ``env/envvars`` with the ``PGPASSWORD`` the "Stella job store"
credential injects; ``env/ssh_key``, the Machine credential's key, which runner hands to an ``ssh-agent``
inside the container; an executable ``inventory/hosts`` of two lab targets; the project in ``project/``.

Four container runs share nothing but the lab's PostgreSQL job store and the two targets: "Stella | Deploy"
of 1.0.0, "Stella | Deploy" of 2.0.0, "Stella | Roll back" of that job (found in the store; 1.0.0 is back
on both targets) and "Stella | Show job". Then, on this machine, with no evidence directory anywhere,
``stella show``, ``stella report`` and ``stella evidence`` read the job and its evidence from the store
alone. Three planted secrets (the store password, a registry password and a traffic token) are looked
for in every event, runner artifact, evidence document, the report and every row of the job store.

Fails (never skips) when the lab is not running or the image was not built: ``make lab ee`` first
(``make test`` builds both).
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
import psycopg
import pytest
import yaml

import ansible_run as ar
import labkit
import pgkit

EE_IMAGE = "stellaops-runtime-ee:latest"
PROJECT = os.path.join(ar.ROOT, "extensions", "awx", "project")
STELLA = [os.path.join(ar.VENV_BIN, "python"), os.path.join(ar.ROOT, "scripts", "stella.py")]
# What AWX writes as a job's inventory script; its interpreter is the execution environment's Python.
INVENTORY_SCRIPT = """#!/usr/bin/env python3
import json, sys
DATA = %(data)s
if len(sys.argv) > 1 and sys.argv[1] == "--host":
    print(json.dumps(DATA["_meta"]["hostvars"].get(sys.argv[2], {})))
else:
    print(json.dumps(DATA))
"""


@pytest.fixture(scope="module")
def ee_image():
    proc = subprocess.run(["docker", "image", "inspect", EE_IMAGE], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(
            "the execution environment %s is not built: run `make ee` (make test builds it)" % EE_IMAGE, pytrace=False
        )
    return EE_IMAGE


@pytest.fixture(scope="module")
def awx_targets(target_factory):
    return [target_factory("awx%d" % i) for i in (1, 2)]


class AwxJobs:
    """Jobs of one AWX installation: each run gets its own private data directory and container."""

    def __init__(self, lab, targets, store, tmp_path, secrets):
        self.lab, self.targets, self.store, self.tmp, self.secrets = lab, targets, store, tmp_path, secrets
        self.application = "awx-ee-%s" % uuid.uuid4().hex[:6]
        self.next_id = 7000 + int(uuid.uuid4().hex[:3], 16)
        self.runs = []

    def release(self, image_key, version):
        return {
            "release": {"id": "rel-" + version.replace(".", "-"), "name": "shop", "version": version},
            "tenant": "acme",
            "environment": "lab",
            "application": self.application,
            "strategy": "all-at-once",
            "target": {"type": "ComposeHost"},
            "components": [
                {
                    "name": "web",
                    "image": self.lab["images"][image_key]["ref"],
                    "config": {
                        "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                        "healthcheck.interval": "1s",
                        "healthcheck.retries": 15,
                    },
                }
            ],
        }

    def inventory(self):
        hostvars = {
            t["name"]: {
                "ansible_host": t["address"],
                "ansible_user": t.get("ssh_user", "root"),
                "ansible_ssh_common_args": " ".join(labkit.SSH_OPTIONS + ("-o", "LogLevel=ERROR")),
                "ansible_python_interpreter": "/usr/bin/python3",
            }
            for t in self.targets
        }
        return {
            "all": {"children": ["stella_targets"]},
            "stella_targets": {"hosts": sorted(hostvars)},
            "_meta": {"hostvars": hostvars},
        }

    def run(self, template, playbook, survey, release=None):
        """One job of ``template``: a new private data directory, one container; returns
        ``(awx job id, runner, events)``."""
        job_id = self.next_id
        self.next_id += 1
        private = str(self.tmp / ("awx-%d" % job_id))
        for name in ("env", "inventory"):
            os.makedirs(os.path.join(private, name), mode=0o700)
        shutil.copytree(PROJECT, os.path.join(private, "project"))
        if release is not None:
            with open(os.path.join(private, "project", "releases", "lab.yml"), "w", encoding="utf-8") as handle:
                yaml.safe_dump(release, handle)
        registry = self.lab["registries"]["shared"]["address"]
        extravars = dict(
            survey,
            **{
                # what AWX adds to every job
                "awx_job_id": job_id,
                "awx_job_launch_type": "manual",
                "awx_job_template_name": template,
                "awx_project_revision": "0123abc",
                "awx_user_name": "admin",
                "tower_job_id": job_id,
                # the credential types' extra vars: Stella job store, Stella registry, Stella webhook traffic controller
                "stella_job_store": self.store,
                "stella_registry_host": registry,
                "stella_registry_username": "deploy",
                "stella_registry_password": self.secrets["registry"],
                "stella_traffic_webhook_url": "http://127.0.0.1:9/shift",
                "stella_traffic_webhook_token": self.secrets["token"],
                # the job template's extra variables for this lab
                "stella_insecure_registries": [registry],
                "stella_min_engine_version": "20.10.0",
            },
        )
        files = {
            "env/extravars": yaml.safe_dump(extravars),
            # the Stella job store credential's env injector, and what AWX sets for every job
            "env/envvars": yaml.safe_dump(
                {
                    "PGPASSWORD": self.secrets["store"],
                    "JOB_ID": str(job_id),
                    "ANSIBLE_HOST_KEY_CHECKING": "False",
                    "ANSIBLE_RETRY_FILES_ENABLED": "False",
                    "ANSIBLE_NOCOLOR": "1",
                }
            ),
            "env/settings": yaml.safe_dump(
                {"job_timeout": 0, "idle_timeout": 0, "pexpect_timeout": 5, "suppress_ansible_output": True}
            ),
            "inventory/hosts": INVENTORY_SCRIPT % {"data": repr(self.inventory())},
        }
        with open(self.targets[0]["ssh_key"], encoding="utf-8") as handle:
            files["env/ssh_key"] = handle.read()  # the Machine credential
        for name, text in files.items():
            with open(os.path.join(private, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        os.chmod(os.path.join(private, "inventory", "hosts"), stat.S_IRWXU)
        gateway = self.lab["registries"]["shared"].get("gateway") or "172.17.0.1"
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=playbook,
            ident="job-%d" % job_id,
            quiet=True,
            process_isolation=True,
            process_isolation_executable="docker",
            container_image=EE_IMAGE,
            container_options=["--network=host", "--add-host=%s:%s" % (registry.split(":")[0], gateway)],
        )
        events = list(runner.events)
        self.runs.append(private)
        return job_id, runner, events

    def stella(self, *argv):
        env = dict(os.environ, PGPASSWORD=self.secrets["store"])
        env.pop("PGPASSFILE", None)
        return subprocess.run(
            STELLA + list(argv) + ["--store", self.store],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )

    def running(self, target, project):
        """The image references (digest-pinned) the running containers of ``project`` on ``target`` were
        created from."""
        out = labkit.ssh(
            target,
            "docker ps -q --filter label=com.docker.compose.project=%s | xargs -r docker inspect "
            "--format '{{.Config.Image}}'" % project,
        ).stdout
        return sorted(set(out.split()))

    def cleanup(self):
        script = (
            "for p in $(docker ps -a --format '{{.Label \"com.docker.compose.project\"}}' | sort -u "
            '| grep -F -- %s); do docker compose -p "$p" down -v -t 1 --remove-orphans; done' % self.application
        )
        for target in self.targets:
            labkit.ssh(target, script, check=False)


def outcome_of(events):
    stats = [e for e in events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1
    return stats[0]["event_data"]["artifact_data"]["stella_job_outcome"]


def test_the_templates_run_in_fresh_execution_environment_containers_sharing_only_the_store(
    lab, ee_image, awx_targets, tmp_path, pg_passfile
):  # pylint: disable=unused-argument
    secrets = {
        "store": pgkit.settings(lab)["password"],
        "registry": "reg-%s" % uuid.uuid4().hex,
        "token": "tok-%s" % uuid.uuid4().hex,
    }
    with pgkit.fresh_database(lab, prefix="awx") as store:
        jobs = AwxJobs(lab, awx_targets, store, tmp_path, secrets)
        survey = {
            "stella_release_file": "releases/lab.yml",
            "stella_strategy": "",
            "stella_batch_size": "",
            "stella_auto_rollback": "true",
        }
        try:
            first, runner, events = jobs.run("Stella | Deploy", "deploy.yml", survey, jobs.release("app_v1", "1.0.0"))
            assert (runner.status, runner.rc) == ("successful", 0), runner.stdout.read()[-4000:]
            assert outcome_of(events)["status"] == "Succeeded"

            second, runner, events = jobs.run("Stella | Deploy", "deploy.yml", survey, jobs.release("app_v2", "2.0.0"))
            assert (runner.status, runner.rc) == ("successful", 0), runner.stdout.read()[-4000:]
            outcome = outcome_of(events)
            deployment = "awx-%d" % second
            assert (outcome["deploymentId"], outcome["status"], outcome["evidence"]) == (deployment, "Succeeded", {})
            projects = {
                name: t["projectName"]
                for name, t in json.loads(jobs.stella("show", deployment, "--json").stdout)["job"]["targets"].items()
            }
            assert sorted(projects) == sorted(t["name"] for t in awx_targets)
            for target in awx_targets:
                refs = jobs.running(target, projects[target["name"]])
                assert len(refs) == 1 and refs[0].endswith("@" + lab["images"]["app_v2"]["digest"]), refs

            rollback, runner, events = jobs.run(
                "Stella | Roll back", "rollback.yml", {"stella_rollback_job_id": deployment}
            )
            assert (runner.status, runner.rc) == ("successful", 0), runner.stdout.read()[-4000:]

            shown, runner, events = jobs.run("Stella | Show job", "show_job.yml", {"stella_job_id": deployment})
            assert (runner.status, runner.rc) == ("successful", 0), runner.stdout.read()[-4000:]
            printed = "\n".join(e.get("stdout") or "" for e in events)
            assert deployment in printed and "RolledBack" in printed, printed[-3000:]

            # this machine, no evidence directory: the job, its report and its evidence from the store alone
            show = jobs.stella("show", deployment)
            assert show.returncode == 0 and "RolledBack" in show.stdout, show.stdout + show.stderr
            report_path = tmp_path / "report.html"
            report = jobs.stella("report", deployment, "--output", str(report_path))
            assert report.returncode == 0, report.stdout + report.stderr
            exported = tmp_path / "evidence"
            evidence = jobs.stella("evidence", deployment, "--output", str(exported))
            assert evidence.returncode == 0, evidence.stdout + evidence.stderr
            names = {os.path.relpath(os.path.join(d, n), exported) for d, _s, ns in os.walk(exported) for n in ns}
            targets = {t["name"] for t in awx_targets}
            assert {"jobs/%s/job.json" % deployment} <= names
            assert len([n for n in names if n.endswith("/deployment.json")]) == len(targets)
            page = report_path.read_text()
            for name in names:
                digest = "sha256:" + hashlib.sha256((exported / name).read_bytes()).hexdigest()
                assert name.endswith("report.html") or digest in page, name

            # what the rollback job restored: 1.0.0 on both targets, proven by the rollback's evidence
            record = json.loads(jobs.stella("show", deployment, "--json").stdout)["job"]
            assert record["status"] == "RolledBack", record["status"]
            for target in awx_targets:
                refs = jobs.running(target, projects[target["name"]])
                assert len(refs) == 1 and refs[0].endswith("@" + lab["images"]["app_v1"]["digest"]), refs
            assert [e["kind"] for e in record["events"]][-2:] == ["RollbackStarted", "RollbackCompleted"]
            assert record["recovery"]["status"] == "rolled_back"
            assert record["recovery"]["rollbackJobId"] == record["events"][-1]["rollbackJobId"]

            # no planted secret anywhere: events, runner artifacts, evidence, report, every row of the store
            # ansible-runner's own record of the container it started (``command``, ``env.list``) holds the
            # environment AWX injected, PGPASSWORD included: runner's input, not the job's output
            everything, runner_inputs = json.dumps(events) + page, ""
            for private in jobs.runs:
                for directory, _dirs, files in os.walk(os.path.join(private, "artifacts")):
                    for name in files:
                        with open(os.path.join(directory, name), "rb") as handle:
                            text = handle.read().decode("utf-8", "replace")
                        if name in ("command", "env.list"):
                            runner_inputs += text
                        else:
                            everything += text
            assert secrets["store"] in runner_inputs  # the check below sees what it looks for
            assert secrets["registry"] not in runner_inputs and secrets["token"] not in runner_inputs
            for name in names:
                everything += (exported / name).read_text()
            with psycopg.connect(store, password=secrets["store"]) as db:
                for (table,) in db.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
                ).fetchall():
                    everything += json.dumps(db.execute('SELECT * FROM "%s"' % table).fetchall(), default=str)
            for what, secret in secrets.items():
                assert secret not in everything, what
        finally:
            jobs.cleanup()
