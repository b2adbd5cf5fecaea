"""Scale benchmark: the ``stellaops.runtime.job`` playbook over 10, 50 and 100 thin lab targets.

Starts the thin targets once, for the largest size (``lab/lab.sh thin up N --prefix P``: SSH hosts that
share the lab's engine through its socket, docs/lab.md), and uses the first N of them for each smaller
size. For each job store (SQLite, then the lab's PostgreSQL), each strategy (``all-at-once``, then
``rolling`` with ``strategyConfig.batchSize: "10%"``) and each size N (ascending) it runs:

a) a fresh deployment: ``ansible-playbook -i <inventory of N targets> stellaops.runtime.job -e @vars.json``
   with a new application name, so every target gets a new project (one service, the lab's busybox httpd
   image from the lab registry, digest-pinned, with a container healthcheck, no published port);
   ``target.type`` ComposeHost when the lab's engine has room for a Compose network per target (the lab's
   address pools hold 256, Engine 20.10's built-in ones about 30: docs/lab.md), else DockerHost
   (``--target-type``);
b) at the smallest and the largest size, a no-op re-run: the same command with the same release again
   (a new job; every target must report ``changed=0`` in the PLAY RECAP);
c) at the largest size, after its no-op re-run, a no-op re-run over the first N of its targets for each
   smaller no-op size N: the same release, so the same machine (the largest deployment's containers and
   their healthchecks running) under a job of N targets;

then removes that application's projects (containers and networks by project label, project directories).
Default forks (no ``-f``; ``--forks`` to choose), the default stdout callback.

Measured per run, from this process: wall time; the controller's CPU seconds (``getrusage(RUSAGE_CHILDREN)``
deltas: this process reaps ``ansible-playbook``, which reaps its forks; this process makes itself a child
subreaper, so the SSH ControlMaster processes that outlive the run are reparented to it, closed after the
run and reaped, their CPU counted too); bytes written to the job store (the store's meter: every
transaction that writes appends its byte count to the file ``STELLA_JOB_STORE_METER`` names; a fresh file
per run); for PostgreSQL also the delta of ``pg_stat_wal.wal_bytes`` (cluster-wide); the peak of the summed
PSS and RSS of ``ansible-playbook`` and its descendants (``/proc/PID/smaps_rollup``, sampled every 0.1 s),
and apart from it the PSS of the SSH masters.

The container healthcheck's interval is 10 s (``--health-interval``): every thin target's container runs on the
lab's one engine, and 100 healthchecks every 2 s would need more than this 2-core machine. ``host%`` in the report
is the whole machine's CPU busy during each run.

Before each run the bench waits until the machine has settled: at most ``--settle-busy`` % busy (default 50,
one core of two) over two 1-s windows in a row, for at most ``--settle-limit`` s (default 30). A run's tail
(its SSH masters closing, the targets' sessions ending, the store's last writes) is then not billed to the
run after it; each sample records the wait and the last window's busy %.

Goals per store and strategy (PASS/MISS, not errors): CPU seconds per target at the largest size ÷ at the
smallest (fresh) <= 1.25; job-store bytes per target, the same ratio, <= 1.25; peak PSS at the largest
size < 400 MiB; no-op wall time per target at the largest size ÷ at the smallest <= 1.0, both on the same
machine (c: the largest deployment in place). Every target's containers run on this machine, so a no-op
over the smallest size right after its own deployment (b) runs beside a tenth of the healthchecks and
would compare the engine's load, not the job's cost per target; that ratio is shown too, not as a goal.

Errors (exit 1): a run that does not exit 0, a job not ``Succeeded`` with every target ``Succeeded``, a fresh
run where some target changed nothing, a no-op where some target changed something. Projects and thin
targets are removed at the end, also after an error or SIGTERM (``--keep`` keeps the targets).

Usage: .venv/bin/python bench/scale_bench.py [--sizes 10,50,100] [--stores sqlite,postgresql]
       [--strategies all-at-once,rolling] [--target-type auto|ComposeHost|DockerHost] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import glob
import json
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
LAB = os.path.join(ROOT, "lab", "lab.sh")
LAB_JSON = os.path.join(ROOT, ".lab", "lab.json")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
sys.path.insert(0, COLLECTIONS)

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine_cpu  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = "stellaops.runtime.job"
WORK_DIRECTORY = "/var/lib/stella/projects"
SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
# One small service per target, with a container healthcheck. Every thin target's container runs on the lab's one
# engine, where one healthcheck (an exec in the container) costs about 47 ms of CPU on this machine: 100 containers
# checked every 2 s would need 2.3 cores of this 2-core machine's two, so the default interval is 10 s (about half a
# core at 100 targets; the engine's first check, which a deployment waits for, comes one interval after the start).
HEALTHCHECK = {"healthcheck.test": "wget -q -O- http://127.0.0.1:8080/", "healthcheck.retries": 15}
# The thin targets drive the lab's own engine (Engine 20.10 on these machines), below the contract's default
# gate (24.0.0): the bench sets the gate as role_bench.py does.
MIN_ENGINE = "20.10.0"
GOAL_CPU, GOAL_BYTES, GOAL_MEMORY_MIB, GOAL_NOOP = 1.25, 1.25, 400.0, 1.0
PR_SET_CHILD_SUBREAPER = 36
MIB = 1024.0 * 1024.0


class BenchError(Exception):
    """A check failed: exit 1 (after cleanup)."""


def log(message):
    print("[scale_bench %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def applied_because(deployments):
    """``{target: appliedBecause}`` of the targets whose deployment evidence says the apply ran, and why
    (``deployments``: ``{target: deployment.json}``). After a no-op re-run, such an apply found the
    running release not verified at its first look, and still changed nothing."""
    return {
        name: document["appliedBecause"] for name, document in deployments.items() if document.get("appliedBecause")
    }


def tail(text, limit=4000):
    return text if len(text) <= limit else "...\n" + text[-limit:]


def csv(text, cast=str):
    return [cast(item.strip()) for item in text.split(",") if item.strip()]


# ------------------------------------------------------------------------------------------ targets


def thin_available():
    """``lab/lab.sh thin up`` exists (its usage header names it)."""
    with open(LAB, encoding="utf-8") as handle:
        header = handle.read(8000)
    return "thin up" in header


def start_targets(count, prefix):
    """``count`` lab targets as the dicts ``lab.sh`` prints (name, container, address, ssh_user, ssh_key...):
    thin targets (``lab.sh thin up N --prefix P``), or, on a lab without them, Debian 13 Docker-in-Docker
    targets (``lab.sh target up P<i> --image trixie``; for small sizes only, while developing)."""
    if thin_available():
        log("starting %d thin targets (lab/lab.sh thin up %d --prefix %s)" % (count, count, prefix))
        proc = subprocess.run(
            [LAB, "thin", "up", str(count), "--prefix", prefix],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300 + 10 * count,
            check=False,
        )
        if proc.returncode != 0:
            raise BenchError("lab/lab.sh thin up %d failed (rc %d):\n%s" % (count, proc.returncode, tail(proc.stderr)))
        targets = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
        if len(targets) != count:
            raise BenchError("lab/lab.sh thin up %d printed %d targets" % (count, len(targets)))
        return targets
    log("lab/lab.sh has no 'thin up': starting %d Docker-in-Docker targets instead (fine for small sizes only)" % count)
    names = ["%s%d" % (prefix, i) for i in range(1, count + 1)]

    def one(name):
        proc = subprocess.run(
            [LAB, "target", "up", name, "--image", "trixie"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            raise BenchError("lab/lab.sh target up %s failed:\n%s" % (name, tail(proc.stderr)))
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]), kind="dind")

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(one, names))


def stop_targets(targets, prefix):
    if thin_available() and any(t.get("kind") == "thin" for t in targets):
        subprocess.run(
            [LAB, "thin", "down", "--prefix", prefix], capture_output=True, cwd=ROOT, timeout=600, check=False
        )
    for target in targets:
        if target.get("kind") != "thin":
            subprocess.run(
                [LAB, "target", "down", target["name"]], capture_output=True, cwd=ROOT, timeout=120, check=False
            )


def inventory(targets, path):
    hosts = {
        t["name"]: {
            "ansible_host": t["address"],
            "ansible_user": t.get("ssh_user", "root"),
            "ansible_ssh_private_key_file": t["ssh_key"],
            "ansible_ssh_common_args": SSH_ARGS,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        for t in targets
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"all": {"children": {"stella_targets": {"hosts": hosts}}}}, handle)


def remove_projects(targets, projects):
    """Remove each target's project (``{target name: project}``): its containers (Compose's project label, or
    ``stella.project`` for DockerHost) and networks by project label, through the target's own ``docker``
    CLI (``docker exec``; a thin target's CLI drives the lab's engine), and its project directory."""

    def one(target):
        project = projects.get(target["name"])
        if not project:
            return
        script = (
            "ids=$( (docker ps -aq --filter label=com.docker.compose.project=%(p)s; "
            "docker ps -aq --filter label=stella.project=%(p)s) | sort -u); "
            '[ -z "$ids" ] || docker rm -f -v $ids >/dev/null; '
            "nets=$(docker network ls -q --filter label=com.docker.compose.project=%(p)s); "
            '[ -z "$nets" ] || docker network rm $nets >/dev/null; rm -rf %(dir)s'
            % {"p": shlex.quote(project), "dir": shlex.quote(os.path.join(WORK_DIRECTORY, project))}
        )
        subprocess.run(
            ["docker", "exec", target["container"], "sh", "-c", script], capture_output=True, timeout=300, check=False
        )

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, targets))


def sweep_engine(applications):
    """Whatever is left on the lab's own engine (thin targets' containers) of the bench's applications."""
    for application in applications:
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=stella.application=" + application],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", "-v"] + ids, capture_output=True, timeout=300, check=False)
    listing = subprocess.run(
        [
            "docker",
            "network",
            "ls",
            "--filter",
            "label=com.docker.compose.project",
            "--format",
            '{{.ID}} {{.Label "com.docker.compose.project"}}',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    nets = [
        line.split()[0]
        for line in listing.splitlines()
        if len(line.split()) == 2 and any(app in line.split()[1] for app in applications)
    ]
    if nets:
        subprocess.run(["docker", "network", "rm"] + nets, capture_output=True, timeout=300, check=False)


def network_room():
    """About how many more bridge networks the lab's engine can create from its default address pools:
    ``default-address-pools`` of /etc/docker/daemon.json, else the engine's built-in ones (172.17-31.0.0/16
    in /16s, 192.168.0.0/16 in /20s), less the pool the default bridge sits in, less the user-defined bridge
    networks that exist. ``None`` when unknown. Every ComposeHost project on a thin target creates one."""
    try:
        with open("/etc/docker/daemon.json", encoding="utf-8") as handle:
            pools = json.load(handle).get("default-address-pools")
    except (OSError, ValueError):
        pools = None
    try:
        if pools:
            capacity = sum(2 ** (int(p["size"]) - int(p["base"].split("/")[1])) for p in pools)
        else:
            capacity = 15 + 16 - 1  # 172.17..31 /16 (the default bridge takes 172.17) and 192.168.0.0/16 in /20s
        listing = subprocess.run(
            ["docker", "network", "ls", "-q", "--filter", "driver=bridge"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
    except (KeyError, ValueError, IndexError, OSError, subprocess.SubprocessError):
        return None
    return capacity - max(0, len(listing) - 1)


# ------------------------------------------------------------------------------------------ job stores


class Store:
    """One job store for the whole bench per backend, created (schema and all) before any measured run."""

    def __init__(self, kind, lab, work):
        self.kind, self.lab, self.work = kind, lab, work
        self.database = None
        self.wal_error = None
        if kind == "sqlite":
            self.location = os.path.join(work, "jobs.sqlite3")
        elif kind == "postgresql":
            pg = lab["postgres"]
            password_file = pg["password_file"]
            if not os.path.isabs(password_file):
                password_file = os.path.join(lab.get("root", ROOT), password_file)
            with open(password_file, encoding="utf-8") as handle:
                password = handle.read().strip()
            pgpass = os.path.join(work, "pgpass")
            with open(os.open(pgpass, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
                handle.write("%s:%d:*:%s:%s\n" % (pg["host"], pg["port"], pg["user"], password))
            os.environ["PGPASSFILE"] = pgpass  # this process, and ansible-playbook's forks through its environment
            self.admin = "postgresql://%s@%s:%d/%s" % (pg["user"], pg["host"], pg["port"], pg["database"])
            self.database = "scale_bench_%s" % uuid.uuid4().hex[:10]
            self._admin('CREATE DATABASE "%s"' % self.database)
            self.location = "postgresql://%s@%s:%d/%s" % (pg["user"], pg["host"], pg["port"], self.database)
        else:
            raise BenchError("unknown store %r (sqlite, postgresql)" % kind)
        _job_store.open_store(self.location).close()

    def _admin(self, statement):
        import psycopg  # pylint: disable=import-outside-toplevel

        with psycopg.connect(self.admin, autocommit=True) as db:
            cursor = db.execute(statement)
            return cursor.fetchall() if cursor.description else None

    def wal_bytes(self):
        """``pg_stat_wal.wal_bytes`` (the whole cluster's WAL), ``None`` on SQLite or when unavailable."""
        if self.kind != "postgresql":
            return None
        try:
            return int(self._admin("SELECT wal_bytes FROM pg_stat_wal")[0][0])
        except Exception as exc:  # pylint: disable=broad-except
            self.wal_error = str(exc).splitlines()[0]
            return None

    def newest(self):
        store = _job_store.open_store(self.location)
        try:
            jobs = store.list(limit=1)
            return jobs[0] if jobs else None
        finally:
            store.close()

    def deployments(self, record, names):
        """``{target: deployment.json}`` of ``names`` in job ``record``, read from the job store (the bench
        gives the job no evidence directory, so the store is where the documents are)."""
        store = _job_store.open_store(self.location)
        try:
            found = {}
            for name in names:
                entry = ((record["targets"].get(name) or {}).get("evidence") or {}).get("deployment.json") or {}
                data = store.document(record["jobId"], entry["document"]) if entry.get("document") else None
                if data is None:
                    raise BenchError("job %s: the store has no deployment.json of %s" % (record["jobId"], name))
                found[name] = json.loads(data)
            return found
        finally:
            store.close()

    def drop(self):
        if self.database:
            with contextlib.suppress(Exception):
                self._admin('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % self.database)
            self.database = None


# ------------------------------------------------------------------------------------------ processes

MASTERS_SECONDS = 2.0  # how often the sampler looks at the SSH masters (their count and PSS)


def make_subreaper():
    """Orphans of our descendants (SSH ControlMaster processes that detach) become our children."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def proc_children(pid):
    """Child pids of ``pid`` from ``/proc/PID/task/*/children`` (cheap: no scan of every process)."""
    found = []
    for path in glob.glob("/proc/%d/task/*/children" % pid):
        with contextlib.suppress(OSError):
            with open(path, encoding="ascii") as handle:
                found.extend(int(p) for p in handle.read().split())
    return found


def memory(pid):
    """``(rss, pss)`` bytes of one process from ``/proc/PID/smaps_rollup`` (``(0, 0)`` when it is gone)."""
    rss = pss = 0
    try:
        with open("/proc/%d/smaps_rollup" % pid, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return rss, pss


def zombie(pid):
    """Whether ``pid`` has exited and waits to be reaped (or is gone). The ``ssh`` that started a master
    exits once its command ended; reparented to this process, it waits here until the run's end."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def own_cpu_seconds(pid):
    """The user + system CPU seconds ``pid`` used itself (not its reaped children), ``None`` once it is gone."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            return machine_cpu.stat_seconds(handle.read(), children=False)[1]
    except (OSError, ValueError, IndexError):
        return None


class Sampler(threading.Thread):
    """Every ``interval`` s: the summed RSS and PSS of ``root`` and all its descendants, and the summed PSS of
    this process's other children (the SSH masters reparented to it); keeps the peaks, and the last reading
    of ``root``'s own CPU seconds (``ansible-playbook``'s main process: its scheduling, not its forks)."""

    def __init__(self, root, known, interval):
        super().__init__(daemon=True)
        self.root, self.known, self.interval = root, set(known), interval
        self.peak_rss = self.peak_pss = self.peak_masters_pss = 0
        self.peak_processes = self.peak_masters = self.samples = 0
        self.masters_every = max(1, int(round(MASTERS_SECONDS / interval)))
        self.cpu = 0.0
        self.root_cpu = None
        self._halt = threading.Event()

    def run(self):
        start = time.thread_time()
        me = os.getpid()
        while True:
            tree, todo = [], [self.root]
            while todo:
                pid = todo.pop()
                tree.append(pid)
                todo.extend(proc_children(pid))
            rss = pss = 0
            for pid in tree:
                one = memory(pid)
                rss, pss = rss + one[0], pss + one[1]
            if self.samples % self.masters_every == 0:
                # the masters sit idle between the job's tasks: every MASTERS_SECONDS is enough, and a
                # look at a hundred of them every sample would take the job's CPU on a small machine
                masters = [p for p in proc_children(me) if p != self.root and p not in self.known and not zombie(p)]
                masters_pss = sum(memory(p)[1] for p in masters)
                self.peak_masters_pss = max(self.peak_masters_pss, masters_pss)
                self.peak_masters = max(self.peak_masters, len(masters))
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_processes = max(self.peak_processes, len(tree))
            self.samples += 1
            self.root_cpu = own_cpu_seconds(self.root) or self.root_cpu
            if self._halt.wait(self.interval):
                break
        self.cpu = time.thread_time() - start

    def stop(self):
        self._halt.set()
        self.join(30)


def reap_orphans(known, grace=5.0):
    """End and reap this process's children that appeared during a run (not in ``known``): the SSH masters
    at once (SIGTERM), anything else after ``grace`` s. Their CPU then counts in RUSAGE_CHILDREN. Returns
    how many SSH masters there were."""
    me = psutil.Process()
    orphans = [p for p in me.children() if p.pid not in known]
    masters = 0
    for proc in orphans:
        with contextlib.suppress(psutil.Error):
            # ssh daemonizes its master with a double fork: the intermediate process is a zombie here
            if proc.name() == "ssh" and proc.status() != psutil.STATUS_ZOMBIE:
                masters += 1
                proc.terminate()
    deadline = time.monotonic() + grace
    for proc in orphans:
        with contextlib.suppress(psutil.Error):
            proc.wait(max(0.1, deadline - time.monotonic()))
            continue
        with contextlib.suppress(psutil.Error):
            proc.terminate()
            proc.wait(5)
            continue
        with contextlib.suppress(psutil.Error):
            proc.kill()
            proc.wait(5)
    for proc in orphans:  # psutil's wait reaps; make sure nothing is left a zombie
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(proc.pid, os.WNOHANG)
    return masters


def cpu_seconds(usage):
    return usage.ru_utime + usage.ru_stime


def host_cpu():
    """``(busy, total)`` CPU seconds of the whole machine so far, all cores (``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(x) for x in handle.readline().split()[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
    return busy / tick, sum(fields) / tick


def settle(limit, busy_max, window=1.0, windows=2, clock=time.monotonic, sleep=time.sleep, read=host_cpu):
    """Wait until the whole machine's CPU busy share, over ``windows`` windows of ``window`` s in a row, is
    at most ``busy_max`` (0..1), or ``limit`` s have passed: the work a run left behind (masters closing,
    sshd sessions ending, the store's writes) is not billed to the next. ``(seconds waited, last share)``."""
    start = clock()
    quiet = 0
    before = read()
    while True:
        sleep(window)
        after = read()
        share = (after[0] - before[0]) / max(1e-9, after[1] - before[1])
        before = after
        quiet = quiet + 1 if share <= busy_max else 0
        if quiet >= windows or clock() - start >= limit:
            return round(clock() - start, 1), round(share, 3)


# ------------------------------------------------------------------------------------------ the bench


class Bench:
    def __init__(self, args, lab, work):
        self.args, self.lab, self.work = args, lab, work
        app = lab["images"]["app_v1"]
        self.image = app["ref"] if "@sha256:" in app["ref"] else "%s@%s" % (app["ref"], app["digest"])
        self.registry = lab["registries"]["shared"]["address"]
        self.samples = []
        self.applications = []
        self.current = None
        self.deployed = {}  # the projects of the application now deployed: {target name: project}
        self.targets = []
        self.runs = 0
        self.seen_jobs = set()
        self.meter_seen = False
        self.target_type = "ComposeHost"

    # ---- inputs

    def release(self, application, strategy):
        config = {"strategy": strategy}
        if strategy == "rolling":
            config["batchSize"] = self.args.batch_size
        return {
            "release": {"id": "rel-scale-1", "name": "scale", "version": "1.0.0"},
            "tenant": "bench",
            "environment": "lab",
            "application": application,
            "strategy": strategy,
            "strategyConfig": config,
            "target": {"type": self.target_type},
            "components": [
                {
                    "name": "web",
                    "image": self.image,
                    "config": dict(HEALTHCHECK, **{"healthcheck.interval": self.args.health_interval}),
                }
            ],
        }

    def env(self, meter, control_dir):
        """The caller's environment without its ANSIBLE_* settings (as role_bench.py), lab addresses not
        proxied, the default stdout callback, this bench's own SSH control socket directory, the meter."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("ANSIBLE_") and key not in ("PYTHONDONTWRITEBYTECODE", "STELLA_JOB_STORE_METER")
        }
        no_proxy = "127.0.0.1,localhost,registry.lab,172.17.0.1"
        if env.get("NO_PROXY"):
            no_proxy += "," + env["NO_PROXY"]
        env.update(
            NO_PROXY=no_proxy,
            no_proxy=no_proxy,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_DEPRECATION_WARNINGS="0",
            ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
            ANSIBLE_STDOUT_CALLBACK="default",
            ANSIBLE_HOST_KEY_CHECKING="False",
            ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir,
            STELLA_JOB_STORE_METER=meter,
            PATH=VENV_BIN + os.pathsep + env.get("PATH", ""),
        )
        if self.args.control_persist:
            env["ANSIBLE_SSH_ARGS"] = "-C -o ControlMaster=auto -o ControlPersist=%s" % self.args.control_persist
        return env

    # ---- one run

    def run(self, store, strategy, targets, application, kind):
        self.runs += 1
        label = "%s %s N=%d %s" % (store.kind, strategy, len(targets), kind)
        run_dir = os.path.join(self.work, "run%03d" % self.runs)
        os.makedirs(run_dir)
        inventory(targets, os.path.join(run_dir, "inventory.json"))
        variables = {
            "stella_release": self.release(application, strategy),
            "stella_job_store": store.location,
            "stella_insecure_registries": [self.registry],
            "stella_min_engine_version": MIN_ENGINE,
        }
        with open(os.path.join(run_dir, "vars.json"), "w", encoding="utf-8") as handle:
            json.dump(variables, handle, indent=1)
        meter = os.path.join(run_dir, "meter.txt")
        control_dir = os.path.join(run_dir, "cp")
        os.makedirs(control_dir)
        argv = [
            os.path.join(VENV_BIN, "ansible-playbook"),
            "-i",
            os.path.join(run_dir, "inventory.json"),
            PLAYBOOK,
            "-e",
            "@" + os.path.join(run_dir, "vars.json"),
        ] + (["--forks", str(self.args.forks)] if self.args.forks else [])
        output_path = os.path.join(run_dir, "output.txt")
        log("%s: ansible-playbook over %d targets (application %s)" % (label, len(targets), application))
        settled, settled_share = settle(self.args.settle_limit, self.args.settle_busy / 100.0)
        known = {p.pid for p in psutil.Process().children()}
        wal_before = store.wal_bytes()
        usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        host_before = host_cpu()
        machine_before = machine_cpu.snapshot()
        with open(output_path, "w", encoding="utf-8") as output:
            start = time.monotonic()
            env = self.env(meter, control_dir)
            self.current = subprocess.Popen(  # pylint: disable=consider-using-with
                argv, stdout=output, stderr=subprocess.STDOUT, cwd=run_dir, env=env, start_new_session=True
            )
            sampler = Sampler(self.current.pid, known, self.args.sample_interval)
            sampler.start()
            try:
                rc = self.current.wait(timeout=self.args.timeout)
            except subprocess.TimeoutExpired:
                rc = None
            wall = time.monotonic() - start
            host_after = host_cpu()
            machine = machine_cpu.delta(machine_before, machine_cpu.snapshot())
            sampler.stop()
            if rc is None:
                self.abort_current()
                raise BenchError(
                    "%s: ansible-playbook did not end within %d s (output: %s)"
                    % (label, self.args.timeout, output_path)
                )
            self.current = None
        masters = reap_orphans(known)
        usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wal_after = store.wal_bytes()
        with open(output_path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        recap = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in RECAP.finditer(text)}
        names = [t["name"] for t in targets]
        if rc != 0:
            raise BenchError("%s: ansible-playbook exited %d (output: %s):\n%s" % (label, rc, output_path, tail(text)))
        missing = [n for n in names if n not in recap]
        if missing:
            raise BenchError("%s: no PLAY RECAP line for %s:\n%s" % (label, ", ".join(missing[:10]), tail(text)))
        if kind == "noop":
            changed = sorted(n for n in names if recap[n][1] != 0)
            if changed:
                raise BenchError(
                    "%s: the no-op re-run changed %d targets (%s; output: %s)"
                    % (
                        label,
                        len(changed),
                        ", ".join("%s changed=%d" % (n, recap[n][1]) for n in changed[:10]),
                        output_path,
                    )
                )
        else:
            unchanged = sorted(n for n in names if recap[n][1] == 0)
            if unchanged:
                raise BenchError(
                    "%s: the fresh deployment changed nothing on %s (output: %s)"
                    % (label, ", ".join(unchanged[:10]), output_path)
                )
        record = store.newest()
        if record is None or record["jobId"] in self.seen_jobs:
            raise BenchError("%s: the run left no new job in %s" % (label, store.kind))
        self.seen_jobs.add(record["jobId"])
        if (record.get("release") or {}).get("id") != "rel-scale-1" or not all(
            application in (record["targets"].get(n) or {}).get("projectName", "") for n in names
        ):
            raise BenchError("%s: the newest job %s is not this run's" % (label, record["jobId"]))
        not_ok = {n: (record["targets"].get(n) or {}).get("status") for n in names}
        not_ok = {n: s for n, s in not_ok.items() if s != "Succeeded"}
        if record["status"] != "Succeeded" or not_ok or len(record["targets"]) != len(names):
            raise BenchError(
                "%s: job %s is %s (%s), targets not Succeeded: %s"
                % (
                    label,
                    record["jobId"],
                    record["status"],
                    record.get("reason"),
                    ", ".join("%s %s" % item for item in sorted(not_ok.items())[:10]) or "none",
                )
            )
        self.deployed.update({n: record["targets"][n]["projectName"] for n in names})
        reapplied = applied_because(store.deployments(record, names))
        if kind != "noop":
            # every fresh apply says why it ran: proof that the no-op's reading of the same field works
            silent = sorted(set(names) - set(reapplied))
            if silent:
                raise BenchError(
                    "%s: the deployment evidence of %s does not say why the apply ran (appliedBecause)"
                    % (label, ", ".join(silent[:10]))
                )
            reapplied = {}
        for name, because in sorted(reapplied.items())[:10]:
            log("%s: %s applied again, changing nothing: %s" % (label, name, "; ".join(because)))
        store_bytes = None
        if os.path.exists(meter):
            self.meter_seen = True
            with open(meter, encoding="ascii") as handle:
                store_bytes = sum(int(line) for line in handle if line.strip())
        cpu = cpu_seconds(usage_after) - cpu_seconds(usage_before)
        n = len(targets)
        sample = {
            "store": store.kind,
            "strategy": strategy,
            "targets": n,
            "run": kind,
            "application": application,
            "deployed": len(self.deployed),
            "jobId": record["jobId"],
            "batches": len(record.get("batches") or []),
            "rc": rc,
            "wall_seconds": round(wall, 3),
            "wall_per_target": round(wall / n, 4),
            "cpu_seconds": round(cpu, 3),
            "cpu_user": round(usage_after.ru_utime - usage_before.ru_utime, 3),
            "cpu_system": round(usage_after.ru_stime - usage_before.ru_stime, 3),
            "cpu_per_target": round(cpu / n, 4),
            "store_bytes": store_bytes,
            "store_bytes_per_target": None if store_bytes is None else round(store_bytes / n, 1),
            "wal_bytes": None if wal_before is None or wal_after is None else wal_after - wal_before,
            "peak_pss_mib": round(sampler.peak_pss / MIB, 1),
            "peak_rss_mib": round(sampler.peak_rss / MIB, 1),
            "peak_processes": sampler.peak_processes,
            "ssh_masters": masters,
            "applied_again": len(reapplied),
            "applied_again_because": reapplied,
            "peak_ssh_masters": sampler.peak_masters,
            "peak_ssh_masters_pss_mib": round(sampler.peak_masters_pss / MIB, 1),
            "sampler_samples": sampler.samples,
            "sampler_cpu_seconds": round(sampler.cpu, 3),
            "main_cpu_seconds": None if sampler.root_cpu is None else round(sampler.root_cpu, 2),
            "main_cpu_per_target": None if sampler.root_cpu is None else round(sampler.root_cpu / n, 4),
            "host_cpu_seconds": round(host_after[0] - host_before[0], 1),
            "host_busy_pct": round(
                100.0 * (host_after[0] - host_before[0]) / max(1e-9, host_after[1] - host_before[1]), 1
            ),
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "settle_seconds": settled,
            "settle_busy_pct": round(100.0 * settled_share, 1),
        }
        for part in ("thin", "apps", "engine"):  # the targets' side of the machine (bench/machine_cpu.py)
            sample["%s_cpu_seconds" % part] = None if machine[part] is None else round(machine[part], 2)
            sample["%s_cpu_per_target" % part] = None if machine[part] is None else round(machine[part] / n, 4)
        self.samples.append(sample)
        log(
            "%s: %.1f s wall, %.1f CPU s (%.3f per target), store %s B, peak PSS %.0f MiB (RSS %.0f MiB), "
            "%d ssh masters, job %s"
            % (
                label,
                wall,
                cpu,
                cpu / n,
                "n/a" if store_bytes is None else store_bytes,
                sample["peak_pss_mib"],
                sample["peak_rss_mib"],
                masters,
                record["jobId"],
            )
        )
        return sample

    def abort_current(self):
        proc, self.current = self.current, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(20)
        reap_orphans(set(), grace=2.0)

    def clean(self, targets):
        if self.deployed:
            remove_projects(targets, self.deployed)
            self.deployed = {}

    # ---- the whole bench

    def measure(self, stores):
        sizes = sorted(set(self.args.sizes))
        noop_sizes = sorted(set(self.args.noop_sizes if self.args.noop_sizes is not None else [sizes[0], sizes[-1]]))
        for store in stores:
            for strategy in self.args.strategies:
                for n in sizes:
                    self.size(
                        store,
                        strategy,
                        n,
                        self.args.noop_runs if n in noop_sizes else 0,
                        [m for m in noop_sizes if m < n] if n == sizes[-1] else [],
                    )

    def size(self, store, strategy, n, noop_runs, smaller):
        """A fresh deployment over the first ``n`` targets, ``noop_runs`` no-op re-runs, then as many no-op
        re-runs over the first ``m`` of them for each ``m`` in ``smaller`` (the same machine: ``n`` deployed
        containers and their healthchecks), the projects removed."""
        subset = self.targets[:n]
        application = "s%s" % uuid.uuid4().hex[:7]
        self.applications.append(application)
        try:
            self.run(store, strategy, subset, application, "fresh")
            for _round in range(noop_runs):
                self.run(store, strategy, subset, application, "noop")
                for m in smaller:
                    self.run(store, strategy, self.targets[:m], application, "noop")
        finally:
            self.clean(subset)

    def cleanup(self):
        self.abort_current()
        if self.targets:
            self.clean(self.targets)
            if any(t.get("kind") == "thin" for t in self.targets):
                sweep_engine(self.applications)


# ------------------------------------------------------------------------------------------ the report


def ratio(over, under):
    return None if over is None or under in (None, 0) else over / under


def fmt(value, spec="%.2f", none="n/a"):
    return none if value is None else spec % value


def goals(samples, sizes):
    """The four goals per (store, strategy), from the smallest and the largest size."""
    small, large = min(sizes), max(sizes)
    results = []
    keys = []
    for s in samples:
        if (s["store"], s["strategy"]) not in keys:
            keys.append((s["store"], s["strategy"]))

    def pick(store, strategy, n, run, deployed=None):
        return [
            s
            for s in samples
            if (s["store"], s["strategy"], s["targets"], s["run"]) == (store, strategy, n, run)
            and deployed in (None, s.get("deployed", s["targets"]))
        ]

    def middle(chosen, key):
        values = [s[key] for s in chosen]
        return None if not values or None in values else statistics.median(values)

    for store, strategy in keys:
        fs, fl = pick(store, strategy, small, "fresh"), pick(store, strategy, large, "fresh")
        # The no-op goal compares runs on the same machine: the smallest size's no-op re-run over the first
        # targets of the largest size's deployment (the same containers and healthchecks running), when the
        # bench made one; the no-op on a machine holding only the smallest deployment is reported apart.
        nl = pick(store, strategy, large, "noop", large)
        ns = pick(store, strategy, small, "noop", large) or pick(store, strategy, small, "noop", small)
        nq = pick(store, strategy, small, "noop", small)
        quiet = ratio(middle(nl, "wall_per_target"), middle(nq, "wall_per_target"))
        cpu_parts = (middle(fl, "cpu_per_target"), middle(fs, "cpu_per_target"))
        data_parts = (middle(fl, "store_bytes_per_target"), middle(fs, "store_bytes_per_target"))
        noop_parts = (middle(nl, "wall_per_target"), middle(ns, "wall_per_target"))
        cpu, data, noop = ratio(*cpu_parts), ratio(*data_parts), ratio(*noop_parts)
        peaks = [s["peak_pss_mib"] for s in fl + nl]
        peak = max(peaks) if peaks else None
        for name, value, parts, goal, ok, text in (
            (
                "cpu_per_target_ratio",
                cpu,
                cpu_parts,
                GOAL_CPU,
                cpu is not None and cpu <= GOAL_CPU,
                "CPU s per target, N=%d / N=%d (fresh)" % (large, small),
            ),
            (
                "store_bytes_per_target_ratio",
                data,
                data_parts,
                GOAL_BYTES,
                data is not None and data <= GOAL_BYTES,
                "job-store bytes per target, N=%d / N=%d (fresh)" % (large, small),
            ),
            (
                "peak_pss_mib",
                peak,
                None,
                GOAL_MEMORY_MIB,
                peak is not None and peak < GOAL_MEMORY_MIB,
                "peak controller PSS at N=%d, MiB" % large,
            ),
            (
                "noop_wall_per_target_ratio",
                noop,
                noop_parts,
                GOAL_NOOP,
                noop is not None and noop <= GOAL_NOOP,
                "no-op wall per target, N=%d / N=%d, %d targets deployed"
                % (large, small, ns[0].get("deployed", small) if ns else small)
                + (" (medians of %d and %d)" % (len(nl), len(ns)) if len(nl) > 1 or len(ns) > 1 else ""),
            ),
        ):
            results.append(
                {
                    "store": store,
                    "strategy": strategy,
                    "goal": name,
                    "text": text,
                    "value": value,
                    "parts": None if value is None else parts,
                    "limit": goal,
                    "verdict": "n/a" if value is None else ("PASS" if ok else "MISS"),
                }
            )
        if small != large and nq and nq != ns:
            results.append(
                {
                    "store": store,
                    "strategy": strategy,
                    "goal": "noop_wall_per_target_ratio_quiet",
                    "text": "no-op wall per target, N=%d / N=%d, %d targets deployed" % (large, small, small),
                    "value": quiet,
                    "limit": None,
                    "verdict": "(shown, not a goal)",
                }
            )
    return results


def report(samples, verdicts, meta):
    lines = []
    add = lines.append
    add(
        "scale bench: %s targets (%s), sizes %s, %s releases of one service per target (%s), %s"
        % (
            meta["target_kind"],
            meta["targets_started"],
            ",".join(str(n) for n in meta["sizes"]),
            meta.get("target_type", "?"),
            meta["image"],
            "%d forks" % meta["forks"] if meta.get("forks") else "default forks",
        )
    )
    add("load average at start %s, at end %s" % (meta["load_start"], meta["load_end"]))
    add("")
    header = "%-10s %-11s %4s %-5s %4s %5s %8s %7s %7s %11s %8s %11s %8s %8s %7s %5s %6s %6s %6s %6s" % (
        "store",
        "strategy",
        "N",
        "run",
        "dep",
        "batch",
        "wall s",
        "wall/t",
        "CPU s",
        "CPU s/tgt",
        "store B",
        "store B/tgt",
        "WAL B",
        "PSS MiB",
        "RSS MiB",
        "host%",
        "main/t",
        "thin/t",
        "apps/t",
        "eng/t",
    )
    add(header)
    add("-" * len(header))
    for s in samples:
        add(
            "%-10s %-11s %4d %-5s %4d %5d %8.2f %7.3f %7.1f %11.3f %8s %11s %8s %8.1f %7.1f %5.0f %6s %6s %6s %6s"
            % (
                s["store"],
                s["strategy"],
                s["targets"],
                s["run"],
                s.get("deployed", s["targets"]),
                s["batches"],
                s["wall_seconds"],
                s["wall_per_target"],
                s["cpu_seconds"],
                s["cpu_per_target"],
                fmt(s["store_bytes"], "%d"),
                fmt(s["store_bytes_per_target"], "%.0f"),
                fmt(s["wal_bytes"], "%d"),
                s["peak_pss_mib"],
                s["peak_rss_mib"],
                s["host_busy_pct"],
                fmt(s.get("main_cpu_per_target"), "%.3f"),
                fmt(s.get("thin_cpu_per_target"), "%.3f"),
                fmt(s.get("apps_cpu_per_target"), "%.3f"),
                fmt(s.get("engine_cpu_per_target"), "%.3f"),
            )
        )
    add("")
    add(
        "dep: targets holding the measured application's deployment during the run (their containers "
        "healthchecked on this machine)"
    )
    add(
        "CPU: ansible-playbook, its forks and the SSH masters (those left at its end closed and reaped after each run);"
    )
    add(
        "host%%: the whole machine's CPU busy during the run (every core; the engine and targets included); "
        "healthcheck interval %s; SSH ControlPersist %s" % (meta["health_interval"], meta["control_persist"])
    )
    add("main/t: CPU s per target of ansible-playbook's main process alone (its scheduling; part of CPU s)")
    if "settle" in meta:
        waits = [s["settle_seconds"] for s in samples if "settle_seconds" in s]
        limit = meta["settle"]["limit_seconds"]
        add(
            "before each run: waited until the machine was at most %.0f%% busy for 2 s (at most %.0f s): %s to %s s; "
            "%d runs started at the limit"
            % (
                meta["settle"]["busy_pct"],
                limit,
                fmt(min(waits) if waits else None, "%.1f"),
                fmt(max(waits) if waits else None, "%.1f"),
                sum(1 for w in waits if w >= limit),
            )
        )
    add(
        "thin/t, apps/t, eng/t: CPU s per target of the thin targets' containers (sshd, modules, docker CLI), the "
        "deployed containers (healthchecks included) and the engine (dockerd, containerd, shims, runc)"
    )
    add(
        "PSS/RSS: peak of the sum over ansible-playbook and its descendants, every %.2f s; SSH masters apart:"
        % meta["sample_interval"]
    )
    for s in samples:
        if s["ssh_masters"] or s["peak_ssh_masters_pss_mib"]:
            add(
                "  %s %s N=%d %s: peak PSS of the masters %.1f MiB%s, %d left at the end"
                % (
                    s["store"],
                    s["strategy"],
                    s["targets"],
                    s["run"],
                    s["peak_ssh_masters_pss_mib"],
                    " (at most %d at once)" % s["peak_ssh_masters"] if "peak_ssh_masters" in s else "",
                    s["ssh_masters"],
                )
            )
    again = [s for s in samples if s.get("applied_again")]
    add(
        "no-op runs whose targets applied again (the first look did not verify the running release; "
        "changed=0 still): %s"
        % (
            ", ".join("%s %s N=%d: %d" % (s["store"], s["strategy"], s["targets"], s["applied_again"]) for s in again)
            or "none"
        )
    )
    if not meta["meter_seen"]:
        add("store B: n/a, the job store wrote no meter file (STELLA_JOB_STORE_METER had no effect)")
    if any(s["store"] == "postgresql" for s in samples):
        add(
            "WAL B: delta of pg_stat_wal.wal_bytes, the whole PostgreSQL cluster (others' writes included)%s"
            % ("" if not meta.get("wal_error") else "; n/a: " + meta["wal_error"])
        )
    add("")
    add("goals:")
    for v in verdicts:
        limit = "-" if v["limit"] is None else (("< %.0f" if v["goal"] == "peak_pss_mib" else "<= %.2f") % v["limit"])
        # three decimals: a ratio of 1.002 is a miss of a limit of 1.00, and must not print as 1.00
        add(
            "  %-10s %-11s %-80s %8s  (%s)  %s%s"
            % (
                v["store"],
                v["strategy"],
                v["text"],
                fmt(v["value"], "%.1f" if v["goal"] == "peak_pss_mib" else "%.3f"),
                limit,
                v["verdict"],
                "  [%s / %s]" % tuple(fmt(p, "%.0f" if p is not None and p >= 100 else "%.3f") for p in v["parts"])
                if v.get("parts")
                else "",
            )
        )
    return "\n".join(lines)


def target_type(args, largest):
    """``--target-type``; ``auto``: ComposeHost when the lab's engine can hold a Compose network for each of
    ``largest`` thin targets at once (docs/lab.md: 256 with the lab's pools, about 30 with Engine 20.10's
    built-in ones), else
    DockerHost (``docker.run`` on the default bridge: no network per project)."""
    if args.target_type != "auto":
        return args.target_type
    if not thin_available():
        return "ComposeHost"  # Docker-in-Docker targets: an engine, so address pools, of their own
    room = network_room()
    if room is not None and room < largest + 2:
        log(
            "the lab's engine has room for about %d more bridge networks, fewer than %d ComposeHost projects "
            "(one network each) on thin targets: the release is DockerHost (--target-type to choose)" % (room, largest)
        )
        return "DockerHost"
    return "ComposeHost"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", type=lambda t: csv(t, int), default=[10, 50, 100])
    parser.add_argument(
        "--noop-sizes",
        type=lambda t: csv(t, int),
        default=None,
        help="sizes with a no-op re-run (default: the smallest and the largest)",
    )
    parser.add_argument("--stores", type=csv, default=["sqlite", "postgresql"])
    parser.add_argument(
        "--noop-runs", type=int, default=1, help="no-op re-runs at each of those sizes (the goal takes their median)"
    )
    parser.add_argument("--strategies", type=csv, default=["all-at-once", "rolling"])
    parser.add_argument(
        "--target-type",
        choices=["auto", "ComposeHost", "DockerHost"],
        default="auto",
        help="the release's target.type (auto: ComposeHost when the engine has a network for each "
        "target, else DockerHost)",
    )
    parser.add_argument(
        "--health-interval",
        default="10s",
        help="the container healthcheck's interval (default 10s: every target's container runs on "
        "the lab's one engine)",
    )
    parser.add_argument(
        "--control-persist",
        default=None,
        help="the SSH masters' ControlPersist (ANSIBLE_SSH_ARGS '-C -o ControlMaster=auto -o "
        "ControlPersist=VALUE', which the job keeps as the operator's choice); default: none "
        "given, so the job keeps its masters for its length (30m) and closes them at its end",
    )
    parser.add_argument(
        "--forks",
        type=int,
        default=None,
        help="ansible-playbook --forks (default: none given, Ansible's 5; the memory goal is for that)",
    )
    parser.add_argument("--batch-size", default="10%", help="strategyConfig.batchSize of the rolling runs")
    parser.add_argument("--prefix", default="scalebench", help="name prefix of the thin targets")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per ansible-playbook run")
    parser.add_argument("--sample-interval", type=float, default=0.1)
    parser.add_argument(
        "--settle-busy",
        type=float,
        default=50.0,
        help="before each run, wait until the machine's CPU busy %% stays at most this over two "
        "1-s windows in a row (default 50: one core of two; the healthchecks of the deployed "
        "containers keep some of it busy)",
    )
    parser.add_argument(
        "--settle-limit",
        type=float,
        default=30.0,
        help="seconds at most that wait lasts (the run then starts, its wait and busy %% recorded)",
    )
    parser.add_argument("--json", help="write every sample and verdict to this file")
    parser.add_argument("--keep", action="store_true", help="keep the targets running")
    args = parser.parse_args()
    for strategy in args.strategies:
        if strategy not in ("all-at-once", "rolling"):
            parser.error("--strategies: all-at-once, rolling")
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes: positive integers")
    if not os.path.isfile(LAB_JSON):
        sys.exit("scale_bench: the lab is not set up (%s is missing): run `make lab` first" % LAB_JSON)
    with open(LAB_JSON, encoding="utf-8") as handle:
        lab = json.load(handle)

    def stop(signum, _frame):
        raise BenchError("stopped by signal %d" % signum)

    signal.signal(signal.SIGTERM, stop)
    if not make_subreaper():
        log("could not become a child subreaper: SSH masters that outlive a run are not counted")
    work = tempfile.mkdtemp(prefix="stella-scale-bench-")
    bench = Bench(args, lab, work)
    meta = {
        "sizes": sorted(set(args.sizes)),
        "image": bench.image,
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "sample_interval": args.sample_interval,
        "batch_size": args.batch_size,
        "settle": {"busy_pct": args.settle_busy, "limit_seconds": args.settle_limit},
        "health_interval": args.health_interval,
        "control_persist": (args.control_persist + " (ANSIBLE_SSH_ARGS)")
        if args.control_persist
        else "30m, the job's own (Ansible's ssh_args left unset), closed at the job's end",
        "forks": args.forks,
    }
    stores, error = [], None
    try:
        bench.target_type = target_type(args, max(args.sizes))
        meta["target_type"] = bench.target_type
        bench.targets = start_targets(max(args.sizes), args.prefix)
        meta["target_kind"] = bench.targets[0].get("kind", "dind")
        meta["targets_started"] = len(bench.targets)
        for kind in args.stores:
            stores.append(Store(kind, lab, work))
        bench.measure(stores)
    except (BenchError, KeyboardInterrupt) as exc:
        error = str(exc) or exc.__class__.__name__
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup runs to its end
        log("cleaning up")
        try:
            bench.cleanup()
        finally:
            for store in stores:
                store.drop()
            if bench.targets and not args.keep:
                log("removing the targets")
                stop_targets(bench.targets, args.prefix)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    meta.update(
        load_end=[round(x, 2) for x in os.getloadavg()],
        meter_seen=bench.meter_seen,
        wal_error=next((s.wal_error for s in stores if s.wal_error), None),
    )
    meta.setdefault("target_kind", "none")
    meta.setdefault("targets_started", 0)
    verdicts = goals(bench.samples, meta["sizes"]) if bench.samples else []
    if bench.samples:
        print(report(bench.samples, verdicts, meta), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"meta": meta, "samples": bench.samples, "goals": verdicts, "error": error}, handle, indent=1)
    if error:
        print("scale_bench: ERROR: %s" % error, file=sys.stderr)
        print("scale_bench: work directory kept: %s" % work, file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
