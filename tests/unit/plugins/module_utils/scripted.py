"""Table-driven ``run_command`` scripts for the target-side managers, built from captured Docker output.

:class:`ScriptedRunner` stands in for ``AnsibleModule.run_command``: it drops the ``timeout --kill-after 5
N`` wrapper :class:`DockerCli` puts around every call (remembering ``N``), matches the argv against an
ordered script (each step is consumed once, in order) and a keyed table (answered any number of times,
in any order), and fails the test on any other command. The answers come from the real outputs captured
in ``tests/unit/fixtures/docker`` (``docker version``, ``docker info`` with the CLI's plugins and the
registry configuration, ``compose version``, ``docker inspect``, ``docker image inspect``, ``compose up``
errors), rewritten only where a test needs other ids, labels or states.

:class:`Site` plans real releases (``plan_release`` of release/plan.py, no network) for one project under a
temporary work directory, gives their ``docker compose config`` output (the real Compose binary of the
venv, as the planning tests use it) and the container entries Docker would report for them.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import os
import sys
import threading

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures")
DOCKER_FIXTURES = os.path.join(FIXTURES, "docker")
if FIXTURES not in sys.path:
    sys.path.insert(0, FIXTURES)

from planning_support import compose_config  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import preflight_step as _preflight_step  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import preflight as _preflight  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import preflight_observer as _preflight_observer  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan  # noqa: E402

IMAGE = "127.0.0.1:5000/stella/app:v1"
DIGEST = "sha256:b9a6e9632066c93f491df171b17ea45ae2caeba315e7305441a9822cf67e9c79"
PINNED = IMAGE + "@" + DIGEST
IMAGE_ID = "sha256:7218dc4fe39ef42fdfe814e36bafc820d390c9350bf427b54c016987041ee0e7"
TARGET = {"id": "tgt-01", "name": "vm-01", "type": "ComposeHost", "endpoint": "local", "executionMode": "agent"}
LOCK = "compose.stella.lock.yml"

ANY = "<any one word>"
REST = "<any remaining words>"


def fixture(name):
    with open(os.path.join(DOCKER_FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def fixture_json(name):
    return json.loads(fixture(name))


def fake_which(name):
    return "/usr/bin/" + name


def engine(runner, timeout=60):
    """The task's engine client over ``runner`` (``docker`` and ``timeout`` always found)."""
    return DockerCli(runner, timeout=timeout, which=fake_which)


def strip_timeout(argv):
    """``(argv without the timeout(1) wrapper, its limit or None)``."""
    if len(argv) > 4 and os.path.basename(argv[0]) == "timeout" and argv[1] == "--kill-after":
        return list(argv[4:]), int(argv[3])
    return list(argv), None


def verb(argv):
    """A short name of a command: ``version``, ``compose up``, ``image inspect``, ``ps``, ``rm``..."""
    if not argv or argv[0] != "docker":
        return argv[0] if argv else ""
    words = argv[1:]
    if words[0] == "compose":
        index = 1
        while index < len(words) and words[index] in ("--project-name", "--project-directory", "-f"):
            index += 2
        return "compose " + (words[index] if index < len(words) else "")
    if words[0] in ("image", "container") and len(words) > 1:
        return words[0] + " " + words[1]
    return words[0]


class Step:
    """One expected command and Docker's answer. ``pattern`` words are literal, :data:`ANY` (one word)
    or a final :data:`REST`; ``action(argv)`` runs when the step matches (to look at the disk at that
    moment) and may return an answer of its own."""

    def __init__(self, pattern, rc=0, out="", err="", action=None):
        self.pattern = list(pattern)
        self.answer = (rc, out, err)
        self.action = action

    def matches(self, argv):
        for index, word in enumerate(self.pattern):
            if word == REST:
                return True
            if index >= len(argv) or (word != ANY and word != argv[index]):
                return False
        return len(argv) == len(self.pattern)

    def respond(self, argv):
        if self.action is not None:
            answer = self.action(argv)
            if answer is not None:
                return answer
        return self.answer

    def __repr__(self):
        return "Step(%s)" % " ".join(self.pattern)


class Unordered:
    """Steps the code under test may ask in any order (it asks them concurrently), each once."""

    def __init__(self, steps):
        self.pending = list(steps)

    def take(self, argv):
        for step in self.pending:
            if step.matches(argv):
                self.pending.remove(step)
                return step
        return None

    def __repr__(self):
        return "Unordered(%r)" % (self.pending,)


class ScriptedRunner:
    """``run_command`` double: ordered steps first, then keyed answers, anything else fails the test.

    An ordered step may be an :class:`Unordered` group. Calls may come from several threads."""

    def __init__(self, steps=(), keyed=()):
        self.steps = list(steps)
        self.keyed = list(keyed)
        self.position = 0
        self.calls = []
        self.limits = []
        self.lock = threading.Lock()
        self.unexpected = []

    def _ordered(self, inner):
        if self.position >= len(self.steps):
            return None
        current = self.steps[self.position]
        if isinstance(current, Unordered):
            step = current.take(inner)
            if step is not None and not current.pending:
                self.position += 1
            return step
        if current.matches(inner):
            self.position += 1
            return current
        return None

    def __call__(self, argv, environ_update=None):  # pylint: disable=unused-argument
        assert isinstance(argv, list), "commands must be argv lists, got %r" % (argv,)
        inner, limit = strip_timeout(argv)
        with self.lock:
            self.calls.append(inner)
            self.limits.append(limit)
            step = self._ordered(inner)
        if step is not None:
            return step.respond(inner)
        for step in self.keyed:
            if step.matches(inner):
                return step.respond(inner)
        expected = self.steps[self.position] if self.position < len(self.steps) else "nothing more"
        self.unexpected.append(inner)  # seen by assert_done also when a thread's failure is never looked at
        pytest.fail(
            "unexpected command %s (expected %r); commands so far: %s" % (" ".join(inner), expected, self.verbs()[:-1]),
            pytrace=False,
        )
        return None  # not reached

    def verbs(self):
        return [verb(argv) for argv in self.calls]

    def docker_verbs(self):
        return [verb(argv) for argv in self.calls if argv and argv[0] == "docker"]

    def limit_of(self, name):
        """The timeout(1) limit of the first command called ``name``."""
        return next(limit for argv, limit in zip(self.calls, self.limits) if verb(argv) == name)

    def assert_done(self):
        assert not self.unexpected, "unexpected commands: %s" % [" ".join(argv) for argv in self.unexpected]
        assert self.position == len(self.steps), "script steps never called: %r" % (self.steps[self.position :],)


# --------------------------------------------------------------------------- Docker answers


def docker_version(rc=0):
    return Step(["docker", "version", "--format", "{{json .}}"], rc, fixture("docker_version_20.10.json"))


def compose_version():
    """``docker compose version`` (asked only when ``docker info`` lists no CLI plugins)."""
    return Step(["docker", "compose", "version", "--format", "json"], 0, fixture("compose_version.json"))


def docker_info(text=None, rc=0):
    """``docker info --format '{{json .}}'`` (captured: Engine 20.10, the Compose 2.40.3 plugin among the
    CLI's plugins, one insecure registry)."""
    return Step(["docker", "info", "--format", "{{json .}}"], rc, fixture("docker_info.json") if text is None else text)


def info_without(plugins=None):
    """The captured ``docker info`` with the CLI's plugin list replaced (``None``: a CLI that lists none)."""
    info = fixture_json("docker_info.json")
    info["ClientInfo"]["Plugins"] = plugins
    return docker_info(json.dumps(info))


def runtime():
    """The two runtime questions every task asks once, concurrently: the engine's versions and ``docker
    info`` (the Compose plugin's version among the CLI's plugins)."""
    return [Unordered([docker_version(), docker_info()])]


def preflight_runtime():
    """What the preflight asks the engine, concurrently and each once: the same two questions; ``docker
    info`` also answers the registry configuration. The apply after it asks neither again."""
    return runtime()


RUNTIME_VERBS = ("version", "info")


def runtime_once(verbs):
    """``verbs`` with the two runtime questions, asked concurrently (so in either order), as the one entry
    ``runtime``; fails unless each was asked exactly once and next to the other."""
    where = [index for index, name in enumerate(verbs) if name in RUNTIME_VERBS]
    assert sorted(verbs[index] for index in where) == sorted(RUNTIME_VERBS), verbs
    assert where[1] == where[0] + 1, verbs
    return verbs[: where[0]] + ["runtime"] + verbs[where[1] + 1 :]


def early_once(verbs, *early):
    """``verbs`` with what an apply asks first, concurrently (so in any order): the two runtime questions
    and ``early`` (the early look: ``ps``, ``inspect``, ``image inspect``), as the one entry ``early``;
    fails unless they come first, each as often as listed."""
    head = sorted(RUNTIME_VERBS + early)
    assert sorted(verbs[: len(head)]) == head, verbs
    return ["early"] + verbs[len(head) :]


def compose_argv(project_dir, project, *tail):
    return [
        "docker",
        "compose",
        "--project-name",
        project,
        "--project-directory",
        project_dir,
        "-f",
        os.path.join(project_dir, LOCK),
    ] + list(tail)


def ps_project(project, entries):
    return Step(
        ["docker", "ps", "--all", "--quiet", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % project],
        0,
        "".join(e["Id"] + "\n" for e in entries),
    )


def ps_name(name, entries):
    return Step(
        ["docker", "ps", "--all", "--quiet", "--no-trunc", "--filter", "name=^/%s$" % name],
        0,
        "".join(e["Id"] + "\n" for e in entries),
    )


def inspect(entries):
    return Step(
        ["docker", "inspect", "--type", "container"] + sorted(e["Id"] for e in entries),
        0,
        json.dumps(sorted(entries, key=lambda e: e["Id"]), indent=4),
    )


def containers(project, entries):
    """What ``ComposeProject.containers`` asks: ``ps`` then, when there is any, ``inspect``."""
    return [ps_project(project, entries)] + ([inspect(entries)] if entries else [])


def readiness_looks(project, looks):
    """What the wait after ``up -d`` asks for ``looks`` (one list of entries per look): the project's
    containers, then the ones the last look found by id, listed anew while a look finds none."""
    steps, last = [], []
    for entries in looks:
        steps += [inspect(entries)] if last else containers(project, entries)
        last = entries
    return steps


def runtime_and_look(project, entries, runtime_steps=None):
    """A run whose committed lock is the one asked for looks at the project's containers while the
    engine answers the runtime questions: one group, any order (``ps`` still comes before ``inspect``,
    in the thread that asks both)."""
    return [Unordered(list((runtime_steps or runtime())[0].pending) + containers(project, entries))]


def image_present(ref=PINNED):
    return Step(["docker", "image", "inspect", ref], 0, fixture("image_inspect_app_v1.json"))


def image_absent(ref=PINNED):
    return Step(["docker", "image", "inspect", ref], 1, "[]\n", "Error: No such image: %s\n" % ref)


# --------------------------------------------------------------------------- the preflight inside a task


def preflight_which(name):
    """The host's binaries as the preflight looks them up: the Docker CLI, no standalone docker-compose."""
    return None if name == "docker-compose" else "/usr/bin/" + name


class NoRegistry:
    """Stands in for ``RegistryClient`` (engine/registry_client.py) in the preflight: any registry question fails the test."""

    def __init__(self, username=None, password=None, insecure_registries=(), timeout=None):
        # pylint: disable=unused-argument
        self.insecure_registries = tuple(insecure_registries or ())

    def ping(self, registry, mode="http"):
        pytest.fail("the preflight asked registry %s (%s) over the network" % (registry, mode), pytrace=False)

    def platforms(self, image):
        pytest.fail("the preflight asked the registry for the platforms of %s" % (image,), pytrace=False)


def offline_preflight(monkeypatch):
    """Keep the preflight that runs inside an apply on this test's script: ``docker`` is found (the engine
    client's binary, not the test host's), the daemon's default socket answers its ping (no socket is
    opened), and no registry is contacted. Returns the list of pinged socket paths."""
    pings = []

    def ping(path, timeout):  # pylint: disable=unused-argument
        pings.append(path)
        return True, "ok"

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(_preflight_observer, "_ping_unix_socket", ping)
    monkeypatch.setattr(_preflight, "RegistryClient", NoRegistry)
    monkeypatch.setattr(
        _preflight_step, "preflight_with", functools.partial(_preflight.preflight_with, get_bin_path=preflight_which)
    )
    return pings


# --------------------------------------------------------------------------- container entries


def container_entry(base="web", **state):
    """A captured ``docker inspect`` entry (``web``: running healthy; ``bad``: running unhealthy;
    ``exited``: exit code 3) with ``id``, ``name``, ``labels``, ``image_id``, ``started``, ``health``
    (``None`` drops the healthcheck), ``restarting``, ``restart_count``, ``running``, ``status`` replaced."""
    if base == "exited":
        entry = copy.deepcopy(fixture_json("inspect_container_exited.json")[0])
    else:
        entries = fixture_json("inspect_containers_healthy_unhealthy.json")
        entry = copy.deepcopy(next(e for e in entries if e["Config"]["Labels"]["com.docker.compose.service"] == base))
    if "id" in state:
        entry["Id"] = state["id"]
    if "name" in state:
        entry["Name"] = "/" + state["name"]
    if "labels" in state:
        entry["Config"]["Labels"] = dict(state["labels"])
    if "image_id" in state:
        entry["Image"] = state["image_id"]
    if "started" in state:
        entry["State"]["StartedAt"] = state["started"]
    if "health" in state:
        if state["health"] is None:
            entry["State"].pop("Health", None)
        else:
            entry["State"]["Health"]["Status"] = state["health"]
    if "restarting" in state:
        entry["State"]["Restarting"] = state["restarting"]
        if state["restarting"]:
            entry["State"]["Status"] = "restarting"
    if "restart_count" in state:
        entry["RestartCount"] = state["restart_count"]
    if "running" in state:
        entry["State"]["Running"] = state["running"]
    if "status" in state:
        entry["State"]["Status"] = state["status"]
    return entry


def container_id(seed):
    return hashlib.sha256(seed.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- a project on a test host


def snapshot(directory, skip=()):
    """``{relative path: (bytes, mode)}`` of every file under ``directory`` (``skip``: top-level names)."""
    out = {}
    for root, dirs, files in os.walk(directory):
        rel_root = os.path.relpath(root, directory)
        if rel_root == ".":
            dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if rel_root == "." and name in skip:
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                out[os.path.normpath(os.path.join(rel_root, name))] = (handle.read(), os.stat(path).st_mode & 0o777)
    return out


class Site:
    """One project of a release on this (``local``) host, under ``work``."""

    def __init__(self, work, target_type="ComposeHost"):
        self.work = str(work)
        self.target_type = target_type
        self._configs = {}

    def release(self, version="1.0.0", secret=None, hooks=None, mode="x", job_id=None):
        release = {
            "release": {"id": "rel-" + version, "name": "shop", "version": version},
            "tenant": "acme",
            "environment": "prod",
            "application": "shop",
            "strategy": "rolling",
            "workDirectory": self.work,
            "target": dict(TARGET, type=self.target_type),
            "components": [{"name": "web", "image": IMAGE, "config": {"env.MODE": mode}, "ports": ["8080"]}],
        }
        if secret is not None:
            release["secretEnv"] = {"DB_PASSWORD": secret}
        if hooks:
            release["hooks"] = hooks
        if job_id:
            release["jobId"] = job_id
        return release

    def plan(self, version="1.0.0", secret=None, hooks=None, mode="x", job_id=None):
        return _plan.plan_release(self.release(version, secret, hooks, mode, job_id), {IMAGE: DIGEST})

    @staticmethod
    def project(plan):
        return plan["projectName"]

    @staticmethod
    def directory(plan):
        return plan["projectDirectory"]

    @staticmethod
    def env(plan):
        return plan["_files"].get(".env.stella")

    def config(self, plan):
        """``docker compose config --format json`` of the plan's lock, from the real Compose binary."""
        lock = plan["_files"][LOCK]
        if lock not in self._configs:
            files = {LOCK: lock}
            if self.env(plan) is not None:
                files[".env.stella"] = self.env(plan)
            self._configs[lock] = compose_config(files)
        return self._configs[lock]

    def config_step(self, plan, action=None):
        return Step(
            compose_argv(self.directory(plan), self.project(plan), "config", "--format", "json"),
            0,
            json.dumps(self.config(plan)),
            action=action,
        )

    def up_step(self, plan, rc=0, err="", wait_timeout=120, action=None):
        """``up -d`` (the managers wait for the containers themselves; ``wait_timeout`` is the bound the
        step expects on top of the command timeout)."""
        del wait_timeout
        return Step(
            compose_argv(self.directory(plan), self.project(plan), "up", "-d", "--remove-orphans", "--pull", "never"),
            rc,
            "",
            err,
            action=action,
        )

    def pull_step(self, plan, *services):
        return Step(
            compose_argv(self.directory(plan), self.project(plan), "pull", "--quiet", *services),
            0,
            "",
            "".join(" %s Pulled\n" % s for s in services),
        )

    def container(self, plan, seed, base="web", **state):
        """The entry Docker reports for the plan's ``web`` container (labels as Compose sets them)."""
        labels = {
            "com.docker.compose.project": self.project(plan),
            "com.docker.compose.service": "web",
            "com.docker.compose.container-number": "1",
            "com.docker.compose.oneoff": "False",
            "com.docker.compose.version": "2.40.3",
        }
        labels.update(self.config(plan)["services"]["web"]["labels"])
        state.setdefault("labels", labels)
        state.setdefault("image_id", IMAGE_ID)
        state.setdefault("started", "2026-11-30T04:08:%02d.0Z" % (int(container_id(seed)[:4], 16) % 60))
        return container_entry(base, id=container_id(seed), name=self.project(plan) + "-web-1", **state)

    def apply_steps(self, plan, before, after, up=None, image=None, config=False, first=None):
        """The commands of an apply that changes the project: the runtime questions (or ``first``
        instead), asked while the project's containers and the lock's images are looked at (one
        unordered group), then ``up`` and the verification look. ``image`` are the image questions:
        those before the first other command belong to that early look. A lock the planner rendered is
        read directly; with ``config=True`` (a lock the reader declines) the images are asked only after
        ``docker compose config`` rendered it. After a pre-deploy hook the images are asked again."""
        image = list(image) if image is not None else [image_present()]
        early = [] if config else list(itertools.takewhile(lambda step: verb(step.pattern) == "image inspect", image))
        head = runtime() if first is None else list(first)
        steps = [Unordered(list(head[0].pending) + containers(self.project(plan), before) + early)] + head[1:]
        steps += [self.config_step(plan)] if config else []
        hooked = any(hook["Phase"] == "pre-deploy" for hook in plan["payloads"]["compose.up"].get("Hooks") or [])
        steps += image if early and hooked else image[len(early) :]
        steps += [up or self.up_step(plan)] + containers(self.project(plan), after)
        return steps
