"""Helpers for deployment-job tests over a fleet of lab targets (``playbooks/job.yml``).

- :class:`FleetJob`: one test's application on a fleet (so its own Compose project per target), its own
  job store and evidence directory under the test's tmp dir. ``release(...)`` builds a release input,
  ``run(release)`` runs ``stellaops.runtime.job`` through the real ``ansible-playbook`` (default stdout
  callback, so the PLAY RECAP is what an operator sees), ``start(release)`` runs it in its own session
  (for SIGKILL), ``job(id)`` / ``jobs()`` read the persisted records, ``state(host)`` reads a target's
  containers (``docker inspect``) and sticker bytes over SSH, ``cleanup()`` removes every project of the
  application from every target.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
import uuid

import ansible_run as ar
import labkit

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store

PLAYBOOK = "stellaops.runtime.job"
ROLLBACK_PLAYBOOK = "stellaops.runtime.rollback"
WORK_DIRECTORY = "/var/lib/stella/projects"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
PHASES = ["preflight", "prepare", "pre-deploy", "deploy", "verify", "promote", "post-deploy", "evidence", "cleanup"]
ROLLBACK_PHASES = ["rollback-pre", "rollback-deploy", "rollback-verify", "rollback-post"]


def parallel(function, items):
    """``[function(item) ...]`` run concurrently (one SSH round trip per target at a time)."""
    items = list(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        return list(pool.map(function, items))


class Run:
    """One finished ``ansible-playbook`` run: rc, recap ``{host: (ok, changed, unreachable, failed)}``,
    output, the ids of the jobs it created and the wall-clock seconds."""

    def __init__(self, rc, recap, output, job_ids, seconds):
        self.rc, self.recap, self.output, self.job_ids, self.seconds = rc, recap, output, job_ids, seconds

    @property
    def job_id(self):
        assert len(self.job_ids) == 1, "expected one new job, got %s\n%s" % (self.job_ids, self.output[-4000:])
        return self.job_ids[0]


class Shown:
    def __init__(self, rc, output):
        self.rc, self.output = rc, output


class FleetJob:
    """One application deployed by deployment jobs over ``fleet`` (lab target dicts, in batch order)."""

    # The job store of new instances when none is given: a test module may point it at another backend
    # (test_job_fleet runs every scenario on SQLite and on PostgreSQL).
    default_store = None

    def __init__(self, lab, fleet, tmp_path, name, port, store=None):
        self.lab, self.fleet, self.tmp = lab, list(fleet), tmp_path
        self.application = "%s-%s" % (name, uuid.uuid4().hex[:6])
        self.port = port
        self.store_path = store or self.default_store or str(tmp_path / "jobs.sqlite3")
        self.evidence_dir = str(tmp_path / "evidence")
        self.refs = {k: v["ref"] for k, v in lab["images"].items()}
        self.digests = {k: v["digest"] for k, v in lab["images"].items()}
        self.insecure = [lab["registries"]["shared"]["address"]]
        self.names = [t["name"] for t in self.fleet]
        self.by_name = {t["name"]: t for t in self.fleet}
        self.runs = 0

    # ------------------------------------------------------------------ inputs
    def release(
        self,
        image_key="app_v1",
        version="1.0.0",
        strategy="rolling",
        strategy_config=None,
        hooks=None,
        probe=None,
        target_type="ComposeHost",
        port=None,
    ):
        """A one-service (``web``) release of this test's application for every target of the fleet."""
        port = port or self.port
        config = {
            "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
            "healthcheck.interval": "1s",
            "healthcheck.retries": 15,
            "healthProbe.type": "http",
            "healthProbe.port": port,
            "healthProbe.attempts": 5,
            "healthProbe.intervalSeconds": 1,
            "healthProbe.timeoutSeconds": 3,
        }
        config.update(probe or {})
        release = {
            "release": {"id": "rel-" + version.replace(".", "-"), "name": "shop", "version": version},
            "tenant": "acme",
            "environment": "lab",
            "application": self.application,
            "strategy": strategy,
            "strategyConfig": dict(strategy_config if strategy_config is not None else {"batchSize": 2}),
            "target": {"type": target_type},
            "components": [
                {"name": "web", "image": self.refs[image_key], "ports": ["%d:8080" % port], "config": config}
            ],
        }
        if hooks:
            release["hooks"] = list(hooks)
        return release

    def inventory(self, overrides=None):
        """The JSON inventory (group ``stella_targets``, fleet order); ``overrides``: ``{host: {var: value}}``."""
        hosts = {}
        for target in self.fleet:
            hosts[target["name"]] = {
                "ansible_host": target["address"],
                "ansible_user": target.get("ssh_user", "root"),
                "ansible_ssh_private_key_file": target["ssh_key"],
                "ansible_ssh_common_args": " ".join(labkit.SSH_OPTIONS + ("-o", "LogLevel=ERROR")),
                "ansible_python_interpreter": "/usr/bin/python3",
            }
            hosts[target["name"]].update((overrides or {}).get(target["name"]) or {})
        return {"all": {"children": {"stella_targets": {"hosts": hosts}}}}

    def _argv(
        self, release, overrides, extra, verbose=False, controller=None, check=False, playbook=PLAYBOOK, env=None
    ):
        self.runs += 1
        run = self.tmp / ("run%d" % self.runs)
        run.mkdir()
        variables = {
            "stella_job_store": self.store_path,
            "stella_evidence_dir": self.evidence_dir,
            "stella_insecure_registries": self.insecure,
        }
        variables.update({"stella_release": release} if release is not None else {})
        variables.update(extra or {})
        (run / "vars.json").write_text(json.dumps(variables, indent=1))
        (run / "inventory.json").write_text(json.dumps(self.inventory(overrides), indent=1))
        argv = (
            [
                os.path.join(ar.VENV_BIN, "ansible-playbook"),
                "-i",
                str(run / "inventory.json"),
                playbook,
                "-e",
                "@" + str(run / "vars.json"),
            ]
            + (["-vvv"] if verbose else [])
            + (["--check"] if check else [])
        )
        if controller:
            # another controller host: the same machine under another host name (a private UTS namespace)
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', controller] + argv
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS,
            ANSIBLE_STDOUT_CALLBACK="default",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_HOST_KEY_CHECKING="False",
            **(env or {}),
        )
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
        return argv, env, run

    def run(
        self,
        release,
        overrides=None,
        extra=None,
        timeout=420,
        verbose=False,
        controller=None,
        check=False,
        playbook=PLAYBOOK,
        env=None,
    ):
        """Run the job playbook (or ``playbook``) to its end (as the controller host ``controller``, when
        given; in check mode with ``check``; ``env`` added to its environment); returns a :class:`Run`."""
        before = set(self.job_ids())
        argv, env, run = self._argv(release, overrides, extra, verbose, controller, check, playbook, env)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ar.ROOT,
            start_new_session=True,
        )
        try:
            output = proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0]
            raise AssertionError("ansible-playbook did not end within %d s:\n%s" % (timeout, output[-4000:]))
        seconds = time.monotonic() - start
        (run / "output.txt").write_text(output)
        recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(output)}
        assert recap, "ansible-playbook printed no PLAY RECAP (rc=%d):\n%s" % (proc.returncode, output[-4000:])
        new = [j for j in self.job_ids() if j not in before]
        return Run(proc.returncode, recap, output, new, seconds)

    def rollback(self, job_id, check=False, extra=None):
        """The operator rollback (``stellaops.runtime.rollback``) of ``job_id``; returns a :class:`Run`."""
        return self.run(None, extra=dict(extra or {}, stella_job_id=job_id), check=check, playbook=ROLLBACK_PLAYBOOK)

    def show(self, job_id, timeout=120):
        """``stellaops.runtime.job_show`` for ``job_id`` against this test's store: ``(rc, output)``."""
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS,
            ANSIBLE_STDOUT_CALLBACK="default",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
        )
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
        argv = [
            os.path.join(ar.VENV_BIN, "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "stellaops.runtime.job_show",
            "-e",
            "stella_job_id=" + job_id,
            "-e",
            "stella_job_store=" + self.store_path,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ar.ROOT, timeout=timeout, check=False)
        return Shown(proc.returncode, proc.stdout + proc.stderr)

    def health(self, targets=(), timeout=120):
        """``stella_job step=health`` through ``ansible`` (as an operator asks): ``{targetId: status}``."""
        env = dict(
            os.environ, ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1"
        )
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
        args = json.dumps({"step": "health", "store": self.store_path, "targets": list(targets)})
        argv = [
            os.path.join(ar.VENV_BIN, "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "stellaops.runtime.stella_job",
            "-a",
            args,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ar.ROOT, timeout=timeout, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert proc.stdout.startswith("localhost | SUCCESS => {"), proc.stdout[-3000:]
        result = json.loads(proc.stdout[proc.stdout.index("{") :])
        return {entry["targetId"]: entry["status"] for entry in result["health"]}

    def start(self, release, overrides=None, extra=None):
        """Start the job playbook in its own session (process group) and return the Popen."""
        argv, env, run = self._argv(release, overrides, extra)
        handle = open(run / "output.txt", "w", encoding="utf-8")  # pylint: disable=consider-using-with
        proc = subprocess.Popen(
            argv, stdout=handle, stderr=subprocess.STDOUT, text=True, env=env, cwd=ar.ROOT, start_new_session=True
        )
        handle.close()
        proc.output_path = run / "output.txt"
        return proc

    # ------------------------------------------------------------------ the job store
    def _store(self):
        return open_store(self.store_path)

    def job_ids(self):
        """Every job id in the store, oldest first."""
        if "://" not in self.store_path and not os.path.exists(self.store_path):
            return []
        store = self._store()
        try:
            return [r["jobId"] for r in reversed(store.list(limit=1000))]
        finally:
            store.close()

    def job(self, job_id):
        store = self._store()
        try:
            record = store.get(job_id)
        finally:
            store.close()
        assert record is not None, "job %s is not in %s" % (job_id, self.store_path)
        return record

    def statuses(self, job_id):
        """The job's persisted status changes, in order (consecutive repeats collapsed)."""
        store = self._store()
        try:
            history = [h["status"] for h in store.history(job_id)]
        finally:
            store.close()
        return [s for i, s in enumerate(history) if i == 0 or history[i - 1] != s]

    # ------------------------------------------------------------------ target state
    def project(self, record, name):
        return record["targets"][name]["projectName"]

    def state(self, name, project, label="com.docker.compose.project"):
        """``{"containers": [docker inspect of the project's containers], "sticker": bytes or None}``
        (``label``: the label naming the project; ``stella.project`` for DockerHost containers)."""
        target = self.by_name[name]
        sticker = os.path.join(WORK_DIRECTORY, project, "stella.version.json")
        script = (
            "ids=$(docker ps -aq --no-trunc --filter label=%s=%s); "
            "if [ -n \"$ids\" ]; then docker inspect $ids; else echo '[]'; fi; echo '@@STICKER@@'; "
            "if [ -f %s ]; then echo present; base64 -w0 %s; else echo absent; fi"
            % (label, shlex.quote(project), shlex.quote(sticker), shlex.quote(sticker))
        )
        out = labkit.ssh(target, script, timeout=120).stdout
        containers, rest = out.split("@@STICKER@@\n", 1)
        flag, _sep, data = rest.partition("\n")
        return {
            "containers": json.loads(containers),
            "sticker": base64.b64decode(data.strip()) if flag.strip() == "present" else None,
        }

    def states(self, record, label="com.docker.compose.project"):
        """``{host: state(host, its project in record)}`` for every target, read concurrently."""
        names = list(record["targetOrder"])
        return dict(zip(names, parallel(lambda n: self.state(n, self.project(record, n), label), names)))

    def project_dir_exists(self, name, project):
        proc = labkit.ssh(
            self.by_name[name], "test -e %s" % shlex.quote(os.path.join(WORK_DIRECTORY, project)), check=False
        )
        return proc.returncode == 0

    def cleanup(self):
        """Remove every Compose project and project directory of this application from every target."""

        def down(target):
            script = (
                "for p in $(docker ps -a --format '{{.Label \"com.docker.compose.project\"}}' | sort -u "
                '| grep -F -- %(app)s); do docker compose -p "$p" down -v -t 1 --remove-orphans; done; '
                "ids=$(docker ps -aq --filter label=stella.application=%(app)s); "
                'if [ -n "$ids" ]; then docker rm -f $ids; fi; '
                "rm -rf %(work)s/*%(app)s*" % {"app": shlex.quote(self.application), "work": WORK_DIRECTORY}
            )
            subprocess.run(labkit.ssh_argv(target, script), capture_output=True, check=False, timeout=300)

        parallel(down, self.fleet)


def container_facts(container):
    """What a deployment decides about one container: image digest, stella.* labels, id, StartedAt."""
    labels = container["Config"]["Labels"]
    return {
        "id": container["Id"],
        "startedAt": container["State"]["StartedAt"],
        "ref": container["Config"]["Image"],
        "running": container["State"]["Running"],
        "health": (container["State"].get("Health") or {}).get("Status"),
        "stella": {k: v for k, v in labels.items() if k.startswith("stella.")},
    }


def web(state):
    """The facts of the single ``web`` container of a target's project (fails when there is not exactly one)."""
    containers = state["containers"]
    assert len(containers) == 1, "expected one container, got %d" % len(containers)
    return container_facts(containers[0])


def evidence_files(paths):
    """``{path: bytes}`` of every file under the given files/directories (recursively)."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                for name in files:
                    full = os.path.join(root, name)
                    with open(full, "rb") as handle:
                        found[full] = handle.read()
        elif os.path.isfile(path):
            with open(path, "rb") as handle:
                found[path] = handle.read()
    return found


def wait_for(predicate, timeout, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("%s not reached within %d s" % (what, timeout))


class ProjectionWatcher:
    """Reads the ``deployments`` projection of the newest job from its own connection while a job runs
    (as a monitoring UI would), every 0.1 s. Each snapshot: ``(projection, job_json_existed)``, the
    second read after the first, so a terminal projection seen before its evidence would show."""

    def __init__(self, fj, known):
        self.fj, self.known, self.snapshots = fj, set(known), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def _watch(self):
        store = open_store(self.fj.store_path)
        try:
            while not self._stop.wait(0.1):
                fresh = [r["jobId"] for r in store.list(limit=5) if r["jobId"] not in self.known]
                if not fresh:
                    continue
                projection = store.projection(fresh[0])
                evidence = os.path.exists(os.path.join(self.fj.evidence_dir, "jobs", fresh[0], "job.json"))
                if projection is not None and (not self.snapshots or self.snapshots[-1][0] != projection):
                    self.snapshots.append((projection, evidence))
        finally:
            store.close()
