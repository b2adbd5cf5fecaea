"""Role benchmark: the ``stellaops.runtime.deploy`` role and the ``stellaops.runtime.job`` playbook vs bare
Compose vs community.docker, side by side.

One run, one 5-service release (the lab's busybox httpd image from the lab registry, digest-pinned, each
service with a container healthcheck as in playbooks/demo.yml), N rounds (default 5). Every round runs,
in an order rotated from round to round so that machine noise hits all of them alike:

a) the ``stellaops.runtime.deploy`` role through ``ansible-playbook -i localhost, -c local`` (a small
   playbook, the release given as an extra-vars JSON file): a fresh deploy in a new work directory
   (project not running), then a no-op re-run on the running project (all contract checks, nothing
   may be recreated);
b) bare ``docker compose up -d --wait`` of the lock the role wrote (byte-identical in every round),
   fresh, then the same command again as the no-op;
c) community.docker ``docker_compose_v2`` (``state: present``, ``wait: true``) on that lock through
   ``ansible-playbook``, fresh, then again as the no-op. community.docker comes from the PyPI ``ansible``
   bundle installed in the benchmark's own venv (.build/bench-venv, created when missing); it is never
   a dependency of the collection;
d) the deployment job playbook ``stellaops.runtime.job`` through ``ansible-playbook -i <inventory>``, one
   target (this machine: ``localhost`` in the group ``stella_targets``, local connection), the same release
   as ``stella_release``, a job store under the temporary directory, no evidence directory: a fresh
   deploy in a new work directory (project not running), then the same command again as the no-op (a
   new job on the running project; nothing may be recreated);
e) ``ansible localhost -c local -m stellaops.runtime.stella_preflight`` (the role's preflight payload
   and gates) and ``ansible localhost -c local -m ansible.builtin.ping``, same interpreter.

Every command runs without the caller's ANSIBLE_* settings and with Python writing bytecode caches (as
by default; PYTHONDONTWRITEBYTECODE is removed). Only the collection's action plugin files get caches:
ansible-core's collection loader compiles plugin_utils and module_utils from source on every import.

All four deployments use the same Compose project name (the release's ``projectName``; the job's target
identity comes from the inventory host, not the release, but an explicit project name does not depend on
it). What is timed is the deploy command alone; the ``docker compose down -t 1`` that ends each a/b/c/d
cycle is timed separately (the same command for all four) and only reported. After each fresh deploy the
bench checks with the docker SDK that all five containers run healthy on the pinned image; after each
no-op that no container was recreated or restarted (same id, same StartedAt); a role or job run must exit
0. Any of these failing is an error (exit 1); a missed goal is not (the script prints PASS/MISS per goal
and exits 0).

The role's runs load bench/callback_plugins/stella_bench_timer.py, which records each task's wall time;
the median per task of the role's and the job's no-op (and fresh) runs is printed. The peer's playbook
loads the same callback so all pay the same.

Needs the lab (``make lab``: engine, Compose v2, registry.lab:5001) and the ``docker`` SDK in .venv.

Usage: .venv/bin/python bench/role_bench.py [--rounds N] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

try:
    import docker
except ImportError:  # pragma: no cover - message for a venv without the SDK
    sys.exit("role_bench: the docker SDK is missing: %s -m pip install docker" % sys.executable)
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
VENV_PYTHON = os.path.join(VENV_BIN, "python")
PEER_VENV = os.path.join(ROOT, ".build", "bench-venv")
PEER_BIN = os.path.join(PEER_VENV, "bin")
PEER_PYTHON = os.path.join(PEER_BIN, "python")
PEER_REQUIREMENT = "ansible<13"
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
ROLE_NAME = "stellaops.runtime.deploy"
JOB_PLAYBOOK = "stellaops.runtime.job"
CALLBACKS = os.path.join(ROOT, "bench", "callback_plugins")
LAB_JSON = os.path.join(ROOT, ".lab", "lab.json")
LOCK_FILE = "compose.stella.lock.yml"
SERVICES = 5
HEALTHCHECK = {
    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
    "healthcheck.interval": "2s",
    "healthcheck.retries": 10,
}
MIN_ENGINE = "20.10.0"
MIN_COMPOSE = "2.20.0"
DOWN_TIMEOUT = "1"
KINDS = ("role", "bare", "peer", "job")
LABELS = {
    "role": "a) stellaops.runtime.deploy role",
    "bare": "b) docker compose up -d --wait",
    "peer": "c) community.docker docker_compose_v2",
    "job": "d) stellaops.runtime.job playbook",
}
GOALS = (  # (label, numerator, denominator, goal)
    ("role fresh / bare compose fresh", ("role", "fresh"), ("bare", "fresh"), 1.35),
    ("role fresh / docker_compose_v2 fresh", ("role", "fresh"), ("peer", "fresh"), 1.0),
    ("role no-op / docker_compose_v2 no-op", ("role", "noop"), ("peer", "noop"), 0.8),
    ("preflight / ping", ("preflight", "run"), ("ping", "run"), 1.3),
    ("job fresh / bare compose fresh", ("job", "fresh"), ("bare", "fresh"), 1.5),
    ("job no-op / docker_compose_v2 no-op", ("job", "noop"), ("peer", "noop"), 1.0),
)

ROLE_PLAYBOOK = (
    """\
---
- name: Bench - deploy the release with stellaops.runtime.deploy
  hosts: all
  gather_facts: false
  roles:
    - role: %s
"""
    % ROLE_NAME
)

PEER_PLAYBOOK = (
    """\
---
- name: Bench - deploy the lock with community.docker.docker_compose_v2
  hosts: all
  gather_facts: false
  tasks:
    - name: Deploy the Compose project
      community.docker.docker_compose_v2:
        project_src: "{{ bench_project_src }}"
        project_name: "{{ bench_project }}"
        files:
          - %s
        state: present
        wait: true
        wait_timeout: 120
"""
    % LOCK_FILE
)


class BenchError(Exception):
    """The benchmark cannot produce a valid measurement (a failed run, a recreated container...)."""


def tail(text, lines=40):
    return "\n".join(text.rstrip().splitlines()[-lines:])


def median(values):
    return statistics.median(values) if values else float("nan")


# ------------------------------------------------------------------------------------------ environment


def base_env():
    """The caller's environment without its ANSIBLE_* settings, lab addresses never proxied, and Python
    writing bytecode caches as it does by default (the machines this project runs on set
    PYTHONDONTWRITEBYTECODE). Only the collection's action plugin files are cached that way; ansible-core's
    collection loader compiles plugin_utils and module_utils from source on every import."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("ANSIBLE_") and key != "PYTHONDONTWRITEBYTECODE"
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
    )
    return env


def role_env(timer_output=None):
    env = base_env()
    env["PATH"] = VENV_BIN + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_COLLECTIONS_PATH"] = COLLECTIONS
    if timer_output:
        env.update(
            ANSIBLE_CALLBACK_PLUGINS=CALLBACKS,
            ANSIBLE_CALLBACKS_ENABLED="stella_bench_timer",
            STELLA_BENCH_TIMER_OUTPUT=timer_output,
        )
    return env


def peer_env(timer_output=None):
    """The peer sees only its own venv's collections (the PyPI bundle), not this checkout."""
    env = base_env()
    env["PATH"] = PEER_BIN + os.pathsep + env.get("PATH", "")
    if timer_output:
        env.update(
            ANSIBLE_CALLBACK_PLUGINS=CALLBACKS,
            ANSIBLE_CALLBACKS_ENABLED="stella_bench_timer",
            STELLA_BENCH_TIMER_OUTPUT=timer_output,
        )
    return env


def ensure_peer_venv():
    """.build/bench-venv with the PyPI ``ansible`` bundle (community.docker), created when missing."""
    module = os.path.join("ansible_collections", "community", "docker", "plugins", "modules", "docker_compose_v2.py")
    probe = [
        PEER_PYTHON,
        "-c",
        "import ansible_collections, os, sys; "
        "sys.exit(0 if os.path.exists(os.path.join(os.path.dirname(ansible_collections.__path__[0]), %r)) "
        "else 1)" % module,
    ]
    if (
        os.path.exists(os.path.join(PEER_BIN, "ansible-playbook"))
        and subprocess.run(probe, capture_output=True, check=False).returncode == 0
    ):
        return
    print("role_bench: creating %s with pip install %r (once)" % (PEER_VENV, PEER_REQUIREMENT), file=sys.stderr)
    if not os.path.exists(PEER_PYTHON):
        subprocess.run([sys.executable, "-m", "venv", PEER_VENV], check=True)
    proc = subprocess.run(
        [PEER_PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check", PEER_REQUIREMENT],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        raise BenchError(
            "cannot install %r into %s:\n%s" % (PEER_REQUIREMENT, PEER_VENV, tail(proc.stdout + proc.stderr))
        )


def versions(client):
    found = {"docker SDK": docker.__version__}
    found["engine"] = client.version().get("Version", "?")
    proc = subprocess.run(["docker", "compose", "version", "--short"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchError("docker compose (v2 plugin) is not available: %s" % proc.stderr.strip())
    found["compose"] = proc.stdout.strip()
    script = (
        "import json, os, importlib.metadata as m\n"
        "from ansible.release import __version__ as core\n"
        "out = {'ansible-core': core}\n"
        "try:\n    out['ansible'] = m.version('ansible')\nexcept m.PackageNotFoundError:\n    pass\n"
        "try:\n    import ansible_collections\nexcept ImportError:\n    ansible_collections = None\n"
        "if ansible_collections is not None:\n"
        "    manifest = os.path.join(ansible_collections.__path__[0], 'community', 'docker', 'MANIFEST.json')\n"
        "    if os.path.exists(manifest):\n"
        "        with open(manifest) as handle:\n"
        "            out['community.docker'] = json.load(handle)['collection_info']['version']\n"
        "print(json.dumps(out))\n"
    )
    for name, python in (("role", VENV_PYTHON), ("peer", PEER_PYTHON)):
        proc = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
        found[name] = json.loads(proc.stdout) if proc.returncode == 0 else {"error": tail(proc.stderr, 3)}
    return found


# --------------------------------------------------------------------------------------- engine state


class Project:
    """The bench's Compose project as the engine sees it, read and cleaned up with the docker SDK."""

    def __init__(self, client, name, image):
        self.client, self.name, self.image = client, name, image
        self.filters = {"label": "com.docker.compose.project=%s" % name}

    def state(self):
        """``{service: {id, started, status, health, image}}``."""
        result = {}
        for container in self.client.containers.list(all=True, filters=self.filters):
            attrs = container.attrs
            service = attrs["Config"]["Labels"].get("com.docker.compose.service", container.name)
            result[service] = {
                "id": container.id,
                "started": attrs["State"].get("StartedAt"),
                "status": attrs["State"].get("Status"),
                "health": (attrs["State"].get("Health") or {}).get("Status"),
                "image": attrs["Config"].get("Image"),
            }
        return result

    def require_absent(self, what):
        if self.state():
            raise BenchError("%s: project %s still has containers" % (what, self.name))

    def require_healthy(self, what):
        state = self.state()
        expected = {"svc%d" % i for i in range(1, SERVICES + 1)}
        if set(state) != expected:
            raise BenchError("%s: services %s, expected %s" % (what, sorted(state), sorted(expected)))
        for service, info in sorted(state.items()):
            if info["status"] != "running" or info["health"] != "healthy" or info["image"] != self.image:
                raise BenchError(
                    "%s: %s is %s/%s on %s" % (what, service, info["status"], info["health"], info["image"])
                )
        return state

    def cleanup(self):
        for container in self.client.containers.list(all=True, filters=self.filters):
            container.remove(force=True)
        for network in self.client.networks.list(filters=self.filters):
            network.remove()


def require_unchanged(before, after, what):
    for service in sorted(before):
        old, new = before[service], after.get(service)
        if new is None or new["id"] != old["id"] or new["started"] != old["started"]:
            raise BenchError("%s recreated or restarted %s (%s -> %s)" % (what, service, old, new))


# ------------------------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, client, lab, rounds, keep):
        self.client, self.rounds, self.keep = client, rounds, keep
        app = lab["images"]["app_v1"]
        self.registry = lab["registries"]["shared"]["address"]
        self.image = "%s@%s" % (app["ref"], app["digest"])
        self.project = Project(client, "stella-bench-%s" % uuid.uuid4().hex[:8], self.image)
        self.tmp = tempfile.mkdtemp(prefix="stella-role-bench-")
        self.role_playbook = self._write("role.yml", ROLE_PLAYBOOK)
        self.peer_playbook = self._write("peer.yml", PEER_PLAYBOOK)
        self.shared_dir = os.path.join(self.tmp, "lock")  # the lock bare compose and the peer deploy
        os.makedirs(self.shared_dir)
        self.peer_vars = self._write(
            "peer-vars.json", json.dumps({"bench_project_src": self.shared_dir, "bench_project": self.project.name})
        )
        # The job: one target, this machine, as the inventory host ``localhost`` of ``stella_targets``;
        # one job store for the whole run (every run is a new job in it); no evidence directory.
        self.job_inventory = self._write(
            "job-inventory.json",
            json.dumps(
                {
                    "all": {
                        "children": {
                            "stella_targets": {
                                "hosts": {
                                    "localhost": {
                                        "ansible_connection": "local",
                                        "ansible_python_interpreter": VENV_PYTHON,
                                    }
                                }
                            }
                        }
                    }
                }
            ),
        )
        self.job_store = os.path.join(self.tmp, "jobs.sqlite3")
        self.reference_lock = None
        self.job_reference_lock = None
        self.samples = {kind: {"fresh": [], "noop": [], "down": []} for kind in KINDS}
        self.samples.update(preflight={"run": []}, ping={"run": []})
        self.timers = {
            "role": {"fresh": [], "noop": []},
            "peer": {"fresh": [], "noop": []},
            "job": {"fresh": [], "noop": []},
        }
        self.role_runs = 0
        self.job_runs = 0
        self.load = {"start": os.getloadavg(), "end": None}
        self.others = {"start": self.other_containers(), "end": None}

    def _write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def release(self, work_directory):
        components = []
        for i in range(1, SERVICES + 1):
            config = {"env.APP_ROLE": "svc%d" % i}
            config.update(HEALTHCHECK)
            components.append({"name": "svc%d" % i, "image": self.image, "config": config})
        return {
            "release": {"id": "rel-bench-1", "name": "stella-bench", "version": "1.0.0"},
            "tenant": "bench",
            "environment": "lab",
            "application": "bench",
            "strategy": "rolling",
            "projectName": self.project.name,
            "target": {
                "id": "this-machine",
                "name": "localhost",
                "type": "ComposeHost",
                "endpoint": "local",
                "executionMode": "local",
            },
            "workDirectory": work_directory,
            "components": components,
        }

    # ---- one command

    def run(self, argv, env, what):
        start = time.monotonic()
        proc = subprocess.run(argv, env=env, cwd=self.tmp, capture_output=True, text=True, timeout=900, check=False)
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            raise BenchError("%s failed (rc %d):\n%s" % (what, proc.returncode, tail(proc.stdout + "\n" + proc.stderr)))
        return elapsed

    def timed_playbook(self, argv, env_fn, what):
        timer = os.path.join(self.tmp, "timer.json")
        if os.path.exists(timer):
            os.unlink(timer)
        elapsed = self.run(argv, env_fn(timer), what)
        try:
            with open(timer, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError) as exc:
            raise BenchError("%s: the timing callback wrote nothing (%s)" % (what, exc))
        doc["wall_seconds"] = elapsed
        return elapsed, doc

    def role_deploy(self, work_directory, what):
        self.role_runs += 1
        extra = self._write(
            "role-vars-%d.json" % self.role_runs,
            json.dumps(
                {
                    "deploy_release": self.release(work_directory),
                    "deploy_min_engine_version": MIN_ENGINE,
                    "deploy_min_compose_version": MIN_COMPOSE,
                    "deploy_insecure_registries": [self.registry],
                },
                indent=2,
            ),
        )
        argv = [
            os.path.join(VENV_BIN, "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=%s" % VENV_PYTHON,
            "-e",
            "@" + extra,
            self.role_playbook,
        ]
        elapsed, doc = self.timed_playbook(argv, role_env, what)
        failed = [task["name"] for task in doc["tasks"] if task["status"] in ("failed", "unreachable")]
        if failed:
            raise BenchError("%s: tasks failed although ansible-playbook exited 0: %s" % (what, failed))
        return elapsed, doc

    def job_deploy(self, work_directory, what):
        """``ansible-playbook -i <inventory> stellaops.runtime.job``: the role's release as ``stella_release``
        (its ``target`` gives only the type; the identity is the inventory host's), the role's gates."""
        self.job_runs += 1
        extra = self._write(
            "job-vars-%d.json" % self.job_runs,
            json.dumps(
                {
                    "stella_release": self.release(work_directory),
                    "stella_job_store": self.job_store,
                    "stella_min_engine_version": MIN_ENGINE,
                    "stella_min_compose_version": MIN_COMPOSE,
                    "stella_insecure_registries": [self.registry],
                },
                indent=2,
            ),
        )
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.job_inventory, JOB_PLAYBOOK, "-e", "@" + extra]
        elapsed, doc = self.timed_playbook(argv, role_env, what)
        failed = [task["name"] for task in doc["tasks"] if task["status"] in ("failed", "unreachable")]
        if failed:
            raise BenchError("%s: tasks failed although ansible-playbook exited 0: %s" % (what, failed))
        return elapsed, doc

    def peer_deploy(self, what):
        argv = [
            os.path.join(PEER_BIN, "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=%s" % PEER_PYTHON,
            "-e",
            "@" + self.peer_vars,
            self.peer_playbook,
        ]
        return self.timed_playbook(argv, peer_env, what)

    def bare_up(self, what):
        argv = [
            "docker",
            "compose",
            "--project-name",
            self.project.name,
            "--project-directory",
            self.shared_dir,
            "-f",
            os.path.join(self.shared_dir, LOCK_FILE),
            "up",
            "-d",
            "--wait",
        ]
        return self.run(argv, base_env(), what), None

    def down(self, project_dir, what):
        argv = [
            "docker",
            "compose",
            "--project-name",
            self.project.name,
            "--project-directory",
            project_dir,
            "-f",
            os.path.join(project_dir, LOCK_FILE),
            "down",
            "--timeout",
            DOWN_TIMEOUT,
        ]
        elapsed = self.run(argv, base_env(), what)
        self.project.require_absent(what)
        return elapsed

    # ---- one a/b/c cycle: fresh deploy, no-op re-run, down

    def cycle(self, kind, label, record=True):
        self.project.require_absent("before %s" % label)
        if kind in ("role", "job"):
            # a new work directory for every fresh deploy: neither the project nor its directory exists
            work = os.path.join(self.tmp, "%s-work-%s" % (kind, label.replace(" ", "-")))
            project_dir = os.path.join(work, self.project.name)
            run_playbook = self.role_deploy if kind == "role" else self.job_deploy

            def deploy(what):
                return run_playbook(work, what)
        elif kind == "peer":
            project_dir = self.shared_dir
            deploy = self.peer_deploy
        else:
            project_dir = self.shared_dir
            deploy = self.bare_up
        fresh, fresh_doc = deploy("%s fresh deploy (%s)" % (kind, label))
        before = self.project.require_healthy("%s fresh deploy (%s)" % (kind, label))
        if kind == "role":
            self.check_role_lock(project_dir, label)
        elif kind == "job":
            self.check_job_lock(project_dir, label)
        noop, noop_doc = deploy("%s no-op re-run (%s)" % (kind, label))
        after = self.project.require_healthy("%s no-op re-run (%s)" % (kind, label))
        require_unchanged(before, after, "%s no-op re-run (%s)" % (kind, label))
        down = self.down(project_dir, "docker compose down after %s (%s)" % (kind, label))
        if record:
            self.samples[kind]["fresh"].append(fresh)
            self.samples[kind]["noop"].append(noop)
            self.samples[kind]["down"].append(down)
            if kind in self.timers:
                self.timers[kind]["fresh"].append(fresh_doc)
                self.timers[kind]["noop"].append(noop_doc)

    def check_role_lock(self, project_dir, label):
        try:
            with open(os.path.join(project_dir, LOCK_FILE), encoding="utf-8") as handle:
                lock = handle.read()
        except OSError as exc:
            raise BenchError("role run (%s) wrote no lock: %s" % (label, exc))
        if self.reference_lock is None:
            services = (yaml.safe_load(lock) or {}).get("services") or {}
            images = {name: spec.get("image") for name, spec in services.items()}
            if len(images) != SERVICES or set(images.values()) != {self.image}:
                raise BenchError(
                    "the role's lock does not pin the %d services to %s: %s" % (SERVICES, self.image, images)
                )
            self.reference_lock = lock
            with open(os.path.join(self.shared_dir, LOCK_FILE), "w", encoding="utf-8") as handle:
                handle.write(lock)
        elif lock != self.reference_lock:
            raise BenchError(
                "role run (%s) wrote a different lock than the one bare compose and the peer deploy" % label
            )

    def check_job_lock(self, project_dir, label):
        """The job's lock pins the five services to the image and is the same in every job run (it may
        differ from the role's: the job's target identity is the inventory host's)."""
        try:
            with open(os.path.join(project_dir, LOCK_FILE), encoding="utf-8") as handle:
                lock = handle.read()
        except OSError as exc:
            raise BenchError("job run (%s) wrote no lock in %s: %s" % (label, project_dir, exc))
        if self.job_reference_lock is None:
            services = (yaml.safe_load(lock) or {}).get("services") or {}
            images = {name: spec.get("image") for name, spec in services.items()}
            if len(images) != SERVICES or set(images.values()) != {self.image}:
                raise BenchError(
                    "the job's lock does not pin the %d services to %s: %s" % (SERVICES, self.image, images)
                )
            self.job_reference_lock = lock
        elif lock != self.job_reference_lock:
            raise BenchError("job run (%s) wrote a different lock than the job's warm-up run" % label)

    # ---- preflight vs ping

    def adhoc(self, module, args, what):
        argv = [
            os.path.join(VENV_BIN, "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=%s" % VENV_PYTHON,
            "-m",
            module,
        ]
        if args is not None:
            argv += ["-a", json.dumps(args)]
        return self.run(argv, role_env(), what)

    def preflight_args(self):
        work = os.path.join(self.tmp, "preflight-work")
        os.makedirs(work, exist_ok=True)
        return {
            "payload": {
                "WorkDirectory": work,
                "ImageReference": self.image,
                "MinimumFreeDiskBytes": 1073741824,
                "RegistryReachabilityMode": "http",
                "RequireCompose": True,
            },
            "target_type": "ComposeHost",
            "min_engine_version": MIN_ENGINE,
            "min_compose_version": MIN_COMPOSE,
            "insecure_registries": [self.registry],
        }

    def preflight_pair(self, index, label, record=True):
        args = self.preflight_args()
        pair = [("preflight", "stellaops.runtime.stella_preflight", args), ("ping", "ansible.builtin.ping", None)]
        if index % 2:
            pair.reverse()
        for name, module, module_args in pair:
            elapsed = self.adhoc(module, module_args, "%s (%s)" % (module, label))
            if record:
                self.samples[name]["run"].append(elapsed)

    # ---- the whole run

    def warm_up(self):
        """One unrecorded cycle of everything: fills caches, writes the reference lock."""
        for kind in KINDS:
            self.cycle(kind, "warm-up", record=False)
        self.preflight_pair(0, "warm-up", record=False)

    def measure(self, progress):
        for round_no in range(self.rounds):
            shift = round_no % len(KINDS)
            order = KINDS[shift:] + KINDS[:shift]
            for kind in order:
                self.cycle(kind, "round %d" % (round_no + 1))
            self.preflight_pair(round_no, "round %d" % (round_no + 1))
            progress("round %d/%d done (order %s)" % (round_no + 1, self.rounds, ", ".join(order)))

    def other_containers(self):
        """Names of the running containers that are not the bench's: each is CPU the runs compete with
        (five idle containers with a 2 s healthcheck kept the CPU pressure of this 2-core machine at 13 %)."""
        return sorted(
            c.name
            for c in self.client.containers.list()
            if c.labels.get("com.docker.compose.project") != self.project.name
        )

    def finish(self):
        self.load["end"] = os.getloadavg()
        self.others["end"] = self.other_containers()

    def close(self):
        try:
            self.project.cleanup()
        finally:
            if not self.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------- reporting


def task_breakdown(docs):
    """``[(name, action, median seconds, statuses, changed count)]`` in playbook order."""
    rows, order = {}, []
    for doc in docs:
        seen = {}
        for task in doc["tasks"]:
            key = task["name"].split(" : ", 1)[-1] if task["name"].startswith(ROLE_NAME + " : ") else task["name"]
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:  # the same name again in one run (another play): its own row
                key = "%s (%d)" % (key, seen[key])
            if key not in rows:
                rows[key] = {"action": task["action"], "seconds": [], "status": set(), "changed": 0}
                order.append(key)
            rows[key]["seconds"].append(task["seconds"])
            rows[key]["status"].add(task["status"])
            rows[key]["changed"] += 1 if task["changed"] else 0
    return [
        (key, rows[key]["action"], median(rows[key]["seconds"]), sorted(rows[key]["status"]), rows[key]["changed"])
        for key in order
    ]


def report(bench, found):
    s = bench.samples
    med = {kind: {metric: median(values) for metric, values in metrics.items()} for kind, metrics in s.items()}
    out = []
    add = out.append
    add(
        "role bench: %d services on %s, container healthchecks (interval %s, retries %d); project %s"
        % (
            SERVICES,
            bench.image,
            HEALTHCHECK["healthcheck.interval"],
            HEALTHCHECK["healthcheck.retries"],
            bench.project.name,
        )
    )
    add("%d rounds after one warm-up round; a/b/c/d order rotated each round; seconds, median (min-max)" % bench.rounds)
    add(
        "engine %s, compose %s, docker SDK %s; role: ansible-core %s (.venv); peer: ansible %s, ansible-core %s, "
        "community.docker %s (.build/bench-venv)"
        % (
            found["engine"],
            found["compose"],
            found["docker SDK"],
            found["role"].get("ansible-core", "?"),
            found["peer"].get("ansible", "?"),
            found["peer"].get("ansible-core", "?"),
            found["peer"].get("community.docker", "?"),
        )
    )
    loads = ["/".join("%.2f" % value for value in bench.load[when] or ()) for when in ("start", "end")]
    add(
        "machine: %d CPUs, load average (1/5/15 min) %s at the start, %s at the end; other work on the machine "
        "adds noise, so compare ratios within one run" % (os.cpu_count() or 0, loads[0], loads[1])
    )
    add(
        "other running containers: %s at the start, %s at the end"
        % tuple(
            "%d (%s)" % (len(names), ", ".join(names)) if names else "none"
            for names in (bench.others["start"], bench.others["end"] or [])
        )
    )
    add(
        "d) the job: %s, one target (localhost in stella_targets, local connection), the role's release as"
        % JOB_PLAYBOOK
    )
    add(
        "stella_release, job store %s, no evidence directory; every run is a new job"
        % os.path.basename(bench.job_store)
    )
    add("timed: the deploy command only (fresh = project not running; no-op = re-run on the running project);")
    add(
        "the 'docker compose down -t %s' that ends every cycle is the same command for all four and is shown apart."
        % DOWN_TIMEOUT
    )
    add("Python writes bytecode caches as by default (PYTHONDONTWRITEBYTECODE is removed from the environment of")
    add("every command): the collection's action plugin files are cached; its plugin_utils and module_utils are")
    add("compiled from source on every import by ansible-core's collection loader.")
    add("")

    def cell(values):
        if not values:
            return "%-19s" % "-"
        return "%-19s" % ("%.2f (%.2f-%.2f)" % (median(values), min(values), max(values)))

    add("%-40s %-19s %-19s %-19s %s" % ("", "fresh deploy", "no-op re-run", "down", "fresh+down"))
    for kind in KINDS:
        add(
            "%-40s %s %s %s %.2f"
            % (
                LABELS[kind],
                cell(s[kind]["fresh"]),
                cell(s[kind]["noop"]),
                cell(s[kind]["down"]),
                med[kind]["fresh"] + med[kind]["down"],
            )
        )
    add("%-40s %s" % ("e) stella_preflight (ansible ad-hoc)", cell(s["preflight"]["run"])))
    add("%-40s %s" % ("   ansible.builtin.ping (ansible ad-hoc)", cell(s["ping"]["run"])))
    add("")
    add("goals (ratios of medians; a miss is reported, not an error)")
    results = []
    for label, (num_kind, num_metric), (den_kind, den_metric), goal in GOALS:
        ratio = med[num_kind][num_metric] / med[den_kind][den_metric]
        verdict = "PASS" if ratio <= goal else "MISS"
        results.append({"goal": label, "ratio": round(ratio, 3), "max": goal, "verdict": verdict})
        add("  %-40s %5.2f   goal <= %.2f   %s" % (label, ratio, goal, verdict))
    add(
        "  %-40s %5.2f   (for reference)"
        % ("role no-op / bare compose no-op", med["role"]["noop"] / med["bare"]["noop"])
    )
    add(
        "  %-40s %5.2f   (for reference)"
        % (
            "role fresh+down / bare fresh+down",
            (med["role"]["fresh"] + med["role"]["down"]) / (med["bare"]["fresh"] + med["bare"]["down"]),
        )
    )
    add("  %-40s %5.2f   (for reference)" % ("job fresh / role fresh", med["job"]["fresh"] / med["role"]["fresh"]))
    add("  %-40s %5.2f   (for reference)" % ("job no-op / role no-op", med["job"]["noop"] / med["role"]["noop"]))
    add("")
    breakdowns = {"role": {}, "job": {}}
    for kind, run in (("role", "noop"), ("role", "fresh"), ("job", "noop"), ("job", "fresh")):
        docs = bench.timers[kind][run]
        rows = task_breakdown(docs)
        breakdowns[kind][run] = [
            {"task": name, "action": action, "median_seconds": round(sec, 4), "status": status, "changed_runs": changed}
            for name, action, sec, status, changed in rows
        ]
        title = "no-op re-run" if run == "noop" else "fresh deploy"
        add(
            "%s %s, per task (median of %d runs; a task lasts from its start to the next task's start)"
            % (ROLE_NAME if kind == "role" else JOB_PLAYBOOK, title, len(docs))
        )
        add("  %7s  %-14s %-9s %s" % ("seconds", "status", "changed", "task"))
        for name, _action, sec, status, changed in rows:
            add("  %7.3f  %-14s %-9s %s" % (sec, "/".join(status), "%d/%d" % (changed, len(docs)), name))
        tasks_sum = median([sum(t["seconds"] for t in doc["tasks"]) for doc in docs])
        wall = median([doc["wall_seconds"] for doc in docs])
        add("  %7.3f  sum of the tasks" % tasks_sum)
        add(
            "  %7.3f  outside the tasks (ansible-playbook start-up, parsing, exit), median"
            % median([doc["wall_seconds"] - sum(t["seconds"] for t in doc["tasks"]) for doc in docs])
        )
        add("  %7.3f  whole ansible-playbook run" % wall)
        peer_docs = bench.timers["peer"][run]
        if peer_docs:
            add(
                "  peer docker_compose_v2 %s for comparison: task %.3f, outside the task %.3f, whole run %.3f"
                % (
                    title,
                    median([sum(t["seconds"] for t in d["tasks"]) for d in peer_docs]),
                    median([d["wall_seconds"] - sum(t["seconds"] for t in d["tasks"]) for d in peer_docs]),
                    median([d["wall_seconds"] for d in peer_docs]),
                )
            )
        add("")
    return "\n".join(out).rstrip() + "\n", {
        "samples": s,
        "medians": med,
        "goals": results,
        "versions": found,
        "load_average": bench.load,
        "other_containers": bench.others,
        "role_tasks": breakdowns["role"],
        "job_tasks": breakdowns["job"],
        "image": bench.image,
        "rounds": bench.rounds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="measured rounds (default 9)")
    parser.add_argument("--json", metavar="FILE", help="also write samples, medians and verdicts as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (playbooks, vars, locks)")
    options = parser.parse_args()
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")

    def progress(message):
        print("role_bench: %s" % message, file=sys.stderr, flush=True)

    def stop(signum, _frame):
        raise BenchError("stopped by signal %d" % signum)

    signal.signal(signal.SIGTERM, stop)  # the project is removed on the way out, as after an error

    bench = None
    try:
        try:
            with open(LAB_JSON, encoding="utf-8") as handle:
                lab = json.load(handle)
        except OSError as exc:
            raise BenchError("no lab description at %s (run 'make lab'): %s" % (LAB_JSON, exc.strerror))
        if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "stellaops", "runtime")):
            raise BenchError("the collection is not linked under %s (run 'make collection')" % COLLECTIONS)
        ensure_peer_venv()
        client = docker.from_env()
        found = versions(client)
        bench = Bench(client, lab, options.rounds, options.keep)
        if bench.others["start"]:
            progress(
                "warning: other containers are running and take CPU from the runs: %s"
                % ", ".join(bench.others["start"])
            )
        progress("warm-up round (project %s, temp dir %s)" % (bench.project.name, bench.tmp))
        bench.warm_up()
        bench.measure(progress)
        bench.finish()
        text, data = report(bench, found)
    except BenchError as exc:
        print("role_bench: error: %s" % exc, file=sys.stderr)
        return 1
    except docker.errors.DockerException as exc:
        print("role_bench: error: docker engine: %s" % exc, file=sys.stderr)
        return 1
    finally:
        if bench is not None:
            bench.close()
    sys.stdout.write(text)
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
