"""Run a stellaops.runtime module through the real ``ansible`` CLI and return its parsed result.

Localhost runs with ``-c local`` and the venv's Python; a lab target (a dict from
``labkit.start_target``) is reached over SSH exactly as production hosts are.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
CALLBACKS = os.path.join(ROOT, "tests", "callback_plugins")


def inventory_text(host=None):
    """An INI inventory with one host: ``localhost`` (local connection) or a lab target over SSH."""
    if host is None:
        return "localhost ansible_connection=local ansible_python_interpreter=%s\n" % os.path.join(VENV_BIN, "python")
    return (
        "%(name)s ansible_host=%(address)s ansible_user=%(user)s ansible_ssh_private_key_file=%(key)s "
        "ansible_python_interpreter=/usr/bin/python3 "
        "ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes'\n"
        % {
            "name": host["name"],
            "address": host["address"],
            "user": host.get("ssh_user", "root"),
            "key": host["ssh_key"],
        }
    )


def ansible_env(extra=None):
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_STDOUT_CALLBACK="json_results",
        ANSIBLE_CALLBACK_PLUGINS=CALLBACKS,
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
    )
    if extra:
        env.update(extra)
    return env


def _parse_json_callback(stdout):
    start = stdout.rfind("\n{\n")
    start = 0 if stdout.startswith("{\n") and start < 0 else start + 1
    return json.loads(stdout[start:])


def ansible_module(module, args, host=None, env=None, verbosity=0, raw=False, check=False, diff=False, timeout=600):
    """Run ``module`` with ``args`` on ``host`` (localhost when None).

    Returns the module result (with ``failed`` always set); with ``raw=True`` returns
    ``(result, stdout + stderr)`` so tests can search everything Ansible printed.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as inv:
        inv.write(inventory_text(host))
    argv = [os.path.join(VENV_BIN, "ansible"), "all", "-i", inv.name, "-m", module, "-a", json.dumps(args)]
    if verbosity:
        argv.append("-" + "v" * verbosity)
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    run_env = ansible_env()
    if env:
        run_env.update(env)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=timeout, cwd=ROOT, check=False)
    finally:
        os.unlink(inv.name)
    try:
        doc = _parse_json_callback(proc.stdout)
    except ValueError:
        raise AssertionError(
            "ansible printed no JSON result (rc=%d):\n%s\n%s"
            % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        )
    hosts = doc["plays"][0]["tasks"][0]["hosts"]
    result = next(iter(hosts.values()))
    result.setdefault("failed", False)
    if raw:
        return result, proc.stdout + proc.stderr
    return result


# --------------------------------------------------------------------------- deploy/rollback test support

LAB_JSON = os.path.join(ROOT, ".lab", "lab.json")
DEPLOY_MODULE = "stellaops.runtime.stella_compose_deploy"
ROLLBACK_MODULE = "stellaops.runtime.stella_rollback"


def load_lab_json():
    """The lab description written by ``lab/lab.sh up``; fails (never skips) when the lab is absent."""
    import labkit

    return labkit.load_lab()


def release_input(
    project,
    images,
    work_directory,
    target=None,
    hooks=None,
    version="1.0.0",
    config=None,
    pull_images=None,
    secret_env=None,
):
    """A release input for the real planner: one component per ``images`` entry (name -> ref)."""
    components = []
    for name in sorted(images):
        component = {"name": name, "image": images[name]}
        if config and config.get(name):
            component["config"] = dict(config[name])
        components.append(component)
    release = {
        "release": {"id": "rel-" + version.replace(".", "-"), "name": "app", "version": version},
        "tenant": "lab",
        "environment": "test",
        "application": "app",
        "strategy": "rolling",
        "projectName": project,
        "target": target
        or {
            "id": "tgt-local",
            "name": "controller",
            "type": "ComposeHost",
            "endpoint": "local",
            "executionMode": "ssh",
        },
        "workDirectory": work_directory,
        "components": components,
    }
    if hooks:
        release["hooks"] = list(hooks)
    if pull_images is not None:
        release["pullImages"] = pull_images
    if secret_env:
        release["secretEnv"] = dict(secret_env)
    return release


def plan(release, resolved):
    """The real planner's output (``plan_release`` of release/plan.py) for ``release``."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

    return _plan.plan_release(release, resolved)


def docker(*argv, check=True):
    proc = subprocess.run(["docker"] + list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError("docker %s failed: %s" % (" ".join(argv), proc.stderr))
    return proc.stdout


def project_containers(project, docker_argv=("docker",)):
    """``{service: (container id, StartedAt)}`` of a Compose project, read with the docker CLI."""
    out = subprocess.run(
        list(docker_argv) + ["ps", "-aq", "--no-trunc", "--filter", "label=com.docker.compose.project=%s" % project],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not out:
        return {}
    data = json.loads(
        subprocess.run(list(docker_argv) + ["inspect"] + out, capture_output=True, text=True, check=True).stdout
    )
    return {c["Config"]["Labels"]["com.docker.compose.service"]: (c["Id"], c["State"]["StartedAt"]) for c in data}


def compose_down(project, docker_argv=("docker",)):
    """``docker compose -p PROJECT down`` (containers and networks), for cleanup in ``finally`` blocks."""
    subprocess.run(
        list(docker_argv) + ["compose", "-p", project, "down", "-t", "1", "--remove-orphans"],
        capture_output=True,
        check=False,
    )


class DeployCtx:
    """One test's Compose project on localhost (``host=None``) or on a lab target reached over SSH.

    ``planned(image_key, ...)`` plans a one-service (``web``) release with the real planner;
    ``deploy(planned)`` / ``rollback(...)`` run the modules through ``ansible``; ``containers()`` and
    ``files()`` read the target's state; ``cleanup()`` runs ``docker compose down`` and removes files.
    """

    def __init__(self, lab, host=None, prefix="it"):
        import uuid

        self.lab, self.host = lab, host
        self.project = "%s-%s" % (prefix, uuid.uuid4().hex[:10])
        self.images = lab["images"]
        if host is None:
            self.work = tempfile.mkdtemp(prefix="stella-it-")
            self.resolved = {v["loopback_ref"]: v["digest"] for v in self.images.values() if "loopback_ref" in v}
            self.refs = {k: v["loopback_ref"] for k, v in self.images.items() if "loopback_ref" in v}
            self.target = None
            self.docker_argv = ("docker",)
        else:
            import labkit

            self.work = "/var/lib/stella-it"
            self.resolved = {v["ref"]: v["digest"] for v in self.images.values()}
            self.refs = {k: v["ref"] for k, v in self.images.items()}
            self.target = {
                "id": "tgt-" + host["name"],
                "name": host["name"],
                "type": "ComposeHost",
                "endpoint": "ssh://root@%s" % host["address"],
                "executionMode": "ssh",
            }
            self.docker_argv = tuple(labkit.ssh_argv(host)) + ("docker",)
        self.project_dir = os.path.join(self.work, self.project)

    def release(self, image_key="app_v1", version="1.0.0", hooks=None, extra=None, **kw):
        comps = {"web": self.refs[image_key]}
        comps.update(extra or {})
        return release_input(self.project, comps, self.work, target=self.target, hooks=hooks, version=version, **kw)

    def planned(self, image_key="app_v1", version="1.0.0", hooks=None, extra=None, **kw):
        return plan(self.release(image_key, version, hooks, extra, **kw), self.resolved)

    def deploy(self, planned_release, args=None, **kw):
        call = {"payload": planned_release["payloads"]["compose.up"]}
        call.update(args or {})
        return ansible_module(DEPLOY_MODULE, call, host=self.host, **kw)

    def rollback(self, args=None, payload=None, **kw):
        call = dict(args or {})
        if "project_name" not in call:
            call["payload"] = payload or {
                "ProjectName": self.project,
                "WorkDirectory": self.work,
                "Target": self.target_context(),
            }
        return ansible_module(ROLLBACK_MODULE, call, host=self.host, **kw)

    def target_context(self):
        target = self.target or {
            "id": "tgt-local",
            "name": "controller",
            "type": "ComposeHost",
            "endpoint": "local",
            "executionMode": "ssh",
        }
        return {
            "Id": target["id"],
            "Name": target["name"],
            "Type": target["type"],
            "Endpoint": target["endpoint"].replace("root@", ""),
            "ExecutionMode": target["executionMode"],
        }

    def sh(self, command):
        """Run a shell command line on the host under test; return stdout."""
        if self.host is None:
            argv = ["sh", "-c", command]
        else:
            import labkit

            argv = labkit.ssh_argv(self.host, command)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if proc.returncode != 0:
            raise AssertionError("%s failed: %s" % (command, proc.stderr))
        return proc.stdout

    def containers(self):
        return project_containers(self.project, self.docker_argv)

    def inspect(self):
        ids = [pair[0] for pair in self.containers().values()]
        if not ids:
            return []
        return json.loads(
            subprocess.run(
                list(self.docker_argv) + ["inspect"] + ids, capture_output=True, text=True, check=True
            ).stdout
        )

    def files(self):
        """The three committed files (bytes or None) of the project directory."""
        script = (
            "import json,os,sys\nd=sys.argv[1]\nout={}\nfor n in ('compose.stella.lock.yml',"
            "'stella.version.json','apply-manifest.json'):\n p=os.path.join(d,n)\n"
            " out[n]=open(p).read() if os.path.exists(p) else None\nprint(json.dumps(out))"
        )
        if self.host is None:
            argv = [os.path.join(VENV_BIN, "python"), "-c", script, self.project_dir]
        else:
            import shlex
            import labkit

            argv = labkit.ssh_argv(self.host, "python3 -c %s %s" % (shlex.quote(script), self.project_dir))
        out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        return {k: (v.encode() if v is not None else None) for k, v in out.items()}

    def cleanup(self):
        compose_down(self.project, self.docker_argv)
        if self.host is None:
            import shutil

            shutil.rmtree(self.work, ignore_errors=True)
        else:
            self.sh("rm -rf %s" % self.project_dir)


def run_playbook(playbook_text, extra_vars, host=None, timeout=600):
    """Run a playbook (hosts: ``targets``) on localhost or a lab target; return ``(rc, json callback doc)``."""
    with tempfile.TemporaryDirectory(prefix="stella-pb-") as tmp:
        book = os.path.join(tmp, "playbook.yml")
        with open(book, "w", encoding="utf-8") as handle:
            handle.write(playbook_text)
        inv = os.path.join(tmp, "inventory.ini")
        with open(inv, "w", encoding="utf-8") as handle:
            handle.write("[targets]\n" + inventory_text(host))
        varfile = os.path.join(tmp, "vars.json")
        with open(varfile, "w", encoding="utf-8") as handle:
            json.dump(extra_vars, handle)
        proc = subprocess.run(
            [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inv, book, "-e", "@" + varfile],
            capture_output=True,
            text=True,
            env=ansible_env(),
            timeout=timeout,
            cwd=ROOT,
            check=False,
        )
    try:
        doc = _parse_json_callback(proc.stdout)
    except ValueError:
        raise AssertionError(
            "ansible-playbook printed no JSON (rc=%d):\n%s\n%s"
            % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        )
    return proc.returncode, doc


def task_results(doc):
    """``{task name: result of the single host}`` from a json-callback document."""
    out = {}
    for play in doc["plays"]:
        for task in play["tasks"]:
            out[task["task"]["name"]] = next(iter(task["hosts"].values()))
    return out
