"""The ``stella`` Compose provider end to end with the real Docker Compose of the lab (v2.40.3): a compose
file with a ``stella`` provider service and a dependent container. ``docker compose up`` deploys the service
through the collection (the deployment job, its record and its evidence), the dependent receives the
``setenv`` values, a second ``up`` recreates nothing, ``down`` removes everything, and an error ends with
Compose showing the provider's one-line error.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
import yaml

import ansible_run as ar
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store


@pytest.fixture(scope="module")
def provider_bin(tmp_path_factory):
    """``stella install`` into a temporary bin directory (and a plugin directory Docker never reads)."""
    base = tmp_path_factory.mktemp("provider")
    proc = subprocess.run(
        [
            os.path.join(ar.VENV_BIN, "python"),
            os.path.join(ar.ROOT, "scripts", "stella.py"),
            "install",
            "--bin-dir",
            str(base / "bin"),
            "--plugin-dir",
            str(base / "plugins"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert os.access(base / "bin" / "stella", os.X_OK) and os.access(base / "plugins" / "docker-stella", os.X_OK)
    return str(base / "bin")


class ComposeProject:
    def __init__(self, tmp_path, provider_bin, lab, image_key="app_v1", image=None, second=False):
        self.dir = tmp_path / "project"
        self.dir.mkdir()
        self.name = "prov%s" % uuid.uuid4().hex[:8]
        self.port, self.api_port = free_port(), free_port()
        self.state = tmp_path / "state"
        self.work = tmp_path / "work"
        self.env = dict(os.environ, PATH=provider_bin + os.pathsep + os.environ["PATH"])
        options = {
            "image": image or lab["images"][image_key]["loopback_ref"],
            "ports": "%d:8080" % self.port,
            "version": "1.0.0",
            "insecure_registries": "127.0.0.1:5000",
            "min_engine_version": "20.10.0",
            "state_directory": str(self.state),
            "work_directory": str(self.work),
        }
        services = {"web": {"provider": {"type": "stella", "options": options}}}
        if second:  # an unrelated provider service: Compose runs both providers at once
            services["api"] = {
                "provider": {
                    "type": "stella",
                    "options": dict(
                        options,
                        image=lab["images"]["app_v2"]["loopback_ref"],
                        ports="%d:8080" % self.api_port,
                        version="2.0.0",
                        keep_revisions="3",
                    ),
                }
            }
        services["app"] = {
            "image": lab["images"]["tool"]["loopback_ref"],
            "command": ["sleep", "3600"],
            "depends_on": sorted(set(services)),
            "environment": {"KEEP": "1"},
            "init": True,
        }
        document = {"services": services}
        (self.dir / "compose.yaml").write_text(yaml.safe_dump(document, sort_keys=False))

    def compose(self, *args, timeout=600):
        # -f always: `docker compose -p NAME down` without -f never calls the provider (Compose 2.40.3)
        return subprocess.run(
            ["docker", "compose", "-f", "compose.yaml", "-p", self.name] + list(args),
            cwd=self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def jobs(self, service="web"):
        path = self.state / self.name / service / "jobs.sqlite3"
        if not path.exists():
            return []
        store = open_store(str(path))
        try:
            return list(reversed(store.list(limit=100)))
        finally:
            store.close()

    def inspect(self, name):
        proc = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=False)
        return json.loads(proc.stdout)[0] if proc.returncode == 0 else None

    def deployed(self, record):
        project = record["targets"]["localhost"]["projectName"]
        out = subprocess.run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % project],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return project, [self.inspect(i) for i in out]


def overlap(a, b):
    return a["startedAt"] < b["completedAt"] and b["startedAt"] < a["completedAt"]


def test_compose_up_deploys_through_the_collection_and_down_removes_everything(lab, provider_bin, tmp_path):
    cp = ComposeProject(tmp_path, provider_bin, lab, second=True)
    try:
        first = cp.compose("up", "-d")
        assert first.returncode == 0, first.stdout + first.stderr
        jobs, api_jobs = cp.jobs(), cp.jobs("api")
        assert [j["status"] for j in jobs] == ["Succeeded"] and [j["status"] for j in api_jobs] == ["Succeeded"]
        # the option reaches the job (api's), its default otherwise (web's)
        assert (jobs[0]["options"]["keepRevisions"], api_jobs[0]["options"]["keepRevisions"]) == (10, 3)
        assert overlap(jobs[0], api_jobs[0]), "Compose ran the two providers one after the other"
        record = jobs[0]
        project, containers = cp.deployed(record)
        assert len(containers) == 1 and containers[0]["State"]["Running"]
        assert containers[0]["Config"]["Image"].endswith(lab["images"]["app_v1"]["digest"])
        api_project, api_containers = cp.deployed(api_jobs[0])
        assert api_project != project and len(api_containers) == 1
        assert api_containers[0]["Config"]["Image"].endswith(lab["images"]["app_v2"]["digest"])
        evidence = cp.state / cp.name / "web" / "evidence" / "jobs" / record["jobId"] / "job.json"
        assert json.loads(evidence.read_text())["status"] == "Succeeded"
        app = cp.inspect("%s-app-1" % cp.name)
        env = dict(item.split("=", 1) for item in app["Config"]["Env"])
        assert env["WEB_URL"] == "http://localhost:%d/" % cp.port and env["WEB_PORT"] == str(cp.port)
        assert env["WEB_DIGEST"] == lab["images"]["app_v1"]["digest"]
        assert (env["WEB_PROJECT"], env["WEB_SLOT"], env["WEB_HOST"]) == (project, "active", "localhost")
        assert env["KEEP"] == "1"
        assert env["API_URL"] == "http://localhost:%d/" % cp.api_port and env["API_PROJECT"] == api_project

        # ---- a second up: a new job that changes nothing; the dependent is not recreated
        again = cp.compose("up", "-d")
        assert again.returncode == 0, again.stdout + again.stderr
        jobs = cp.jobs()
        assert [j["status"] for j in jobs] == ["Succeeded", "Succeeded"]
        assert jobs[1]["targets"]["localhost"]["appliedByJobId"] == record["jobId"]
        _project, after = cp.deployed(jobs[1])
        assert [(c["Id"], c["State"]["StartedAt"]) for c in after] == [
            (c["Id"], c["State"]["StartedAt"]) for c in containers
        ]
        app_again = cp.inspect("%s-app-1" % cp.name)
        assert (app_again["Id"], app_again["State"]["StartedAt"]) == (app["Id"], app["State"]["StartedAt"])
        assert [(c["Id"], c["State"]["StartedAt"]) for c in cp.deployed(cp.jobs("api")[1])[1]] == [
            (c["Id"], c["State"]["StartedAt"]) for c in api_containers
        ]

        # ---- down: the deployed project, its directory and the dependent are gone
        down = cp.compose("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert cp.deployed(record)[1] == [] and cp.deployed(api_jobs[0])[1] == []
        assert not (cp.work / project).exists()
        assert cp.inspect("%s-app-1" % cp.name) is None
        # down again: nothing there, still fine
        assert cp.compose("down").returncode == 0
    finally:
        cp.compose("down")


def test_an_error_ends_with_the_providers_one_line_error(lab, provider_bin, tmp_path):
    missing = lab["images"]["app_v1"]["loopback_ref"].rsplit(":", 1)[0] + ":no-such-tag"
    cp = ComposeProject(tmp_path, provider_bin, lab, image=missing)
    try:
        failed = cp.compose("up", "-d")
        assert failed.returncode != 0
        output = failed.stdout + failed.stderr
        assert "no-such-tag" in output, output
        assert cp.inspect("%s-app-1" % cp.name) is None or not cp.inspect("%s-app-1" % cp.name)["State"]["Running"]
    finally:
        cp.compose("down")


def test_the_provider_speaks_only_json_lines(provider_bin):
    env = dict(os.environ, PATH=provider_bin + os.pathsep + os.environ["PATH"])
    proc = subprocess.run(
        ["stella", "compose", "--project-name=p", "up", "--colour=blue", "web"],
        env=env,
        capture_output=True,
        check=False,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 1
    assert lines[-1]["type"] == "error" and "'image'" in lines[-1]["message"]
    assert [line["type"] for line in lines] == ["debug", "error"]
    metadata = subprocess.run(["stella", "compose", "metadata"], env=env, capture_output=True, check=True, timeout=60)
    assert set(json.loads(metadata.stdout)) == {"description", "up", "down", "stop", "pull"}


# ---- an image pull loaded from the local daemon (the `local` verdict, a build-only image)


def built_image(lab, tmp_path):
    """A local-only image (in no registry, no RepoDigests): the lab's app with a label of its own."""
    subprocess.run(
        ["docker", "pull", "--quiet", lab["images"]["app_v1"]["loopback_ref"]],
        check=True,
        capture_output=True,
        timeout=300,
    )
    context = tmp_path / "build"
    context.mkdir()
    base = lab["images"]["app_v1"]["loopback_ref"]
    (context / "Dockerfile").write_text("FROM %s\nLABEL stella.test=%s\n" % (base, uuid.uuid4().hex))
    tag = "stella-local-%s/web:dev" % uuid.uuid4().hex[:8]
    subprocess.run(
        ["docker", "build", "--quiet", "--tag", tag, str(context)],
        check=True,
        capture_output=True,
        timeout=300,
        env=dict(os.environ, DOCKER_BUILDKIT="0"),
    )
    image_id = json.loads(
        subprocess.run(["docker", "image", "inspect", tag], check=True, capture_output=True, text=True).stdout
    )[0]["Id"]
    return tag, image_id


def provider_pull(cp, image, image_id):
    """``stella compose pull --source=local`` as a Compose with the pull hook runs it during ``up`` (2.40.3 has
    no pull hook): the image's ``docker save`` tar answered to ``get-image`` as a chunked stream."""
    tar = subprocess.run(["docker", "save", image], check=True, capture_output=True, timeout=300).stdout
    subprocess.run(["docker", "rmi", image], check=True, capture_output=True)  # only the stream brings it back
    proc = subprocess.Popen(
        [
            "stella",
            "compose",
            "--project-name=%s" % cp.name,
            "pull",
            "--image=%s" % image,
            "--source=local",
            "--policy=missing",
            "--digest=%s" % image_id,
            "--state_directory=%s" % cp.state,
            "web",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(cp.env, COMPOSE_PROVIDER_MESSAGES="error,info,debug,get-image"),
    )
    seen = []
    for raw in proc.stdout:
        seen.append(json.loads(raw))
        if seen[-1]["type"] == "get-image":
            proc.stdin.write(b'{"type": "image-stream", "encoding": "chunked", "media-type": "application/x-tar"}\n')
            for start in range(0, len(tar), 65536):
                block = tar[start : start + 65536]
                proc.stdin.write(b"%x\r\n" % len(block) + block + b"\r\n")
            proc.stdin.write(b"0\r\n")
            proc.stdin.flush()
    assert proc.wait(timeout=300) == 0, seen
    return seen


def test_compose_up_deploys_the_image_pull_loaded_pinned_by_its_id(lab, provider_bin, tmp_path):
    image, image_id = built_image(lab, tmp_path)
    cp = ComposeProject(tmp_path, provider_bin, lab, image=image)
    try:
        seen = provider_pull(cp, image, image_id)
        assert [line["type"] for line in seen] == ["get-image", "info"] and image_id in seen[-1]["message"], seen
        first = cp.compose("up", "-d")
        assert first.returncode == 0, first.stdout + first.stderr
        record = cp.jobs()[-1]
        assert record["status"] == "Succeeded"
        # the pin is the image id pull recorded, and the record says where it came from: no registry was asked
        assert record["resolution"] == {
            image: {
                "reference": image,
                "image": image_id,
                "digest": image_id,
                "imageId": image_id,
                "resolved": False,
                "source": "local",
            }
        }
        evidence = cp.state / cp.name / "web" / "evidence" / "jobs" / record["jobId"] / "job.json"
        assert json.loads(evidence.read_text())["resolution"][image]["source"] == "local"
        _project, containers = cp.deployed(record)
        assert [(c["Config"]["Image"], c["Image"]) for c in containers] == [(image_id, image_id)]
        assert record["targets"]["localhost"]["currentDigest"] == image_id
        app = cp.inspect("%s-app-1" % cp.name)
        assert dict(item.split("=", 1) for item in app["Config"]["Env"])["WEB_DIGEST"] == image_id

        # the engine no longer holds it: up fails before deploying anything, and says what to run
        assert cp.compose("down").returncode == 0
        subprocess.run(["docker", "rmi", image], check=True, capture_output=True)
        failed = cp.compose("up", "-d")
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0 and "local_image_missing" in output and "docker compose pull" in output, output
        assert len(cp.jobs()) == 1
    finally:
        cp.compose("down")
        subprocess.run(["docker", "rmi", image], capture_output=True, check=False)


def test_a_python_without_the_providers_packages_is_named_with_the_pip_line(lab, provider_bin, tmp_path):
    """The launcher's Python lost ansible-runner (here: a real virtual environment without any package): the
    real Compose shows the provider's one line naming the missing modules and the command to run."""
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    with open(os.path.join(provider_bin, "stella"), encoding="utf-8") as handle:
        text = handle.read()
    (bindir / "stella").write_text("#!%s\n" % (venv / "bin" / "python") + text.split("\n", 1)[1])
    (bindir / "stella").chmod(0o755)
    cp = ComposeProject(tmp_path, str(bindir), lab)
    try:
        failed = cp.compose("up", "-d")
        output = failed.stdout + failed.stderr
        assert failed.returncode != 0 and cp.jobs() == []
        python = str(venv / "bin" / "python")
        assert (
            "provider_dependency_missing: stella compose up needs the Python modules ansible, ansible_runner, "
            "requests, which %s cannot import: run %s -m pip install ansible-core ansible-runner requests"
            % (python, python)
        ) in output, output
    finally:
        cp.env["PATH"] = provider_bin + os.pathsep + os.environ["PATH"]  # a provider that can run down
        cp.compose("down")
