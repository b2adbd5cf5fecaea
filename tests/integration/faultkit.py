"""Helpers for the fault-injection matrix (``test_faults.py``).

Everything here drives the collection only through its public surfaces: the modules through the real
``ansible`` CLI, the ``stellaops.runtime.deploy`` role through ``ansible-playbook``, on this machine
(``-c local``) or on a Docker-in-Docker lab target over SSH. Faults are injected from outside: a
closed registry port, a stopped (``SIGSTOP``) or unreachable nested ``dockerd``, a small tmpfs, a
``SIGKILL`` of the module process, files changed on the target.

- :func:`run_ansible` runs one module at ``-vvv`` with a wall-clock limit (the whole process group is
  killed when it is exceeded, so a hung module fails the test instead of hanging it).
- :class:`FaultCtx` is one Compose project on one host, with a planted secret (``secretEnv`` value and a
  secret file that hooks print) and checks for the committed artifact set and for leaks.
- :class:`RoleRun` runs the deploy role at ``-vvv`` and reads the evidence it wrote on the controller.
- :func:`hung_daemon`, :func:`daemon_socket_moved`, :func:`small_tmpfs` inject faults into a DinD target.
- :class:`ProbeGate` is an HTTP endpoint on loopback that holds a probe until the test releases it.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import ansible_run as ar
import labkit
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import verify_artifact_set

LOCK = "compose.stella.lock.yml"
STICKER = "stella.version.json"
MANIFEST = "apply-manifest.json"
ENV = ".env.stella"
PROJECT_FILES = (LOCK, STICKER, MANIFEST, ENV)
SECRET_KEY = "FX_SECRET"
DEPLOY = ar.DEPLOY_MODULE
ROLLBACK = ar.ROLLBACK_MODULE
PREFLIGHT = "stellaops.runtime.stella_preflight"
PLAN = "stellaops.runtime.stella_plan"
GATES = {"min_engine_version": "20.10.0"}  # the lab's engine is Debian's 20.10 (docs/preflight.md)
# The app image's own healthcheck, polled every second (healthy sooner than the image's 2 s interval).
FAST_HEALTHCHECK = {
    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
    "healthcheck.interval": "1s",
    "healthcheck.retries": 15,
}


class AnsibleHung(AssertionError):
    """An ansible run did not return within its wall-clock limit."""


def planted_secret(tag="secret"):
    """A unique random string that must never appear outside ``.env.stella`` and the container."""
    return "fx-%s-%s" % (tag, uuid.uuid4().hex)


# --------------------------------------------------------------------------------------------- ansible


def _communicate(proc, timeout, what):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AnsibleHung(
            "%s did not return within %d s (killed); last output:\n%s" % (what, timeout, (out + err)[-3000:])
        )
    return out, err


def run_ansible(module, args, host=None, verbosity=3, check=False, timeout=240, env=None):
    """Run ``module`` with ``args`` through ``ansible`` on ``host`` (localhost when None).

    Returns ``(result, output, seconds)``: the module result (``failed`` always set), everything
    ansible printed (stdout + stderr at ``-v`` * verbosity) and the wall-clock time.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as inv:
        inv.write(ar.inventory_text(host))
    argv = [os.path.join(ar.VENV_BIN, "ansible"), "all", "-i", inv.name, "-m", module, "-a", json.dumps(args)]
    if verbosity:
        argv.append("-" + "v" * verbosity)
    if check:
        argv.append("--check")
    run_env = ar.ansible_env(dict({"ANSIBLE_PIPELINING": "1"} if host is not None else {}, **(env or {})))
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=run_env,
            cwd=ar.ROOT,
            start_new_session=True,
        )
        out, err = _communicate(proc, timeout, "ansible -m %s" % module)
    finally:
        os.unlink(inv.name)
    seconds = time.monotonic() - start
    try:
        doc = ar._parse_json_callback(out)  # pylint: disable=protected-access
    except ValueError:
        raise AssertionError(
            "ansible printed no JSON result (rc=%d):\n%s\n%s" % (proc.returncode, out[-3000:], err[-3000:])
        )
    result = next(iter(doc["plays"][0]["tasks"][0]["hosts"].values()))
    result.setdefault("failed", False)
    return result, out + err, seconds


def start_ansible(module, args, host=None):
    """Start ``ansible -m module`` in its own session (for SIGKILL tests); returns the Popen."""
    handle, path = tempfile.mkstemp(suffix=".ini")
    with os.fdopen(handle, "w") as inv:
        inv.write(ar.inventory_text(host))
    argv = [os.path.join(ar.VENV_BIN, "ansible"), "all", "-i", path, "-m", module, "-a", json.dumps(args)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ar.ansible_env(),
        cwd=ar.ROOT,
        start_new_session=True,
    )
    proc.inventory_path = path
    return proc


def reap(proc, timeout=60):
    """Wait for a process started by :func:`start_ansible`; kill its group if it does not end."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    with contextlib.suppress(FileNotFoundError, AttributeError):
        os.unlink(proc.inventory_path)


def pid_alive(pid):
    """True when ``pid`` exists on this machine and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def group_alive(pgid):
    """Pids of live (non-zombie) processes in process group ``pgid`` on this machine."""
    alive = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(name))
    return alive


def kill_group_of(pid):
    """SIGKILL the process group led by ``pid`` (test cleanup of a hook that survived)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------------------------- checks


def assert_no_secret(secret, *texts, where=""):
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            text = json.dumps(text, sort_keys=True, default=str)
        assert secret not in text, "the planted secret leaked (%s #%d): ...%s..." % (
            where or "output",
            index,
            _around(text, secret),
        )


def _around(text, needle, width=200):
    at = text.find(needle)
    return text[max(0, at - width) : at + len(needle) + width]


def verify_committed(files, project, manifest_hash):
    """Problems of the committed artifact set (``verify_artifact_set`` over the project files)."""
    if files.get(MANIFEST) is None:
        return ["%s is missing" % MANIFEST]
    return verify_artifact_set(
        files[MANIFEST],
        {LOCK: files.get(LOCK), STICKER: files.get(STICKER), ENV: files.get(ENV)},
        project,
        manifest_hash,
    )


_READ_TREE = r"""
import base64, json, os, sys
root, names, secret = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
files = {}
for name in names:
    path = os.path.join(root, name)
    files[name] = base64.b64encode(open(path, "rb").read()).decode() if os.path.isfile(path) else None
leaks, listing, modes = [], [], {}
for base, dirs, found in os.walk(root):
    for name in sorted(dirs + found):
        path = os.path.join(base, name)
        rel = os.path.relpath(path, root)
        listing.append(rel + ("/" if os.path.isdir(path) and not os.path.islink(path) else ""))
        if os.path.isfile(path) and not os.path.islink(path):
            modes[rel] = os.stat(path).st_mode & 0o777
            if name != ".env.stella" and secret.encode() in open(path, "rb").read():
                leaks.append(rel)
print(json.dumps({"files": files, "leaks": leaks, "listing": sorted(listing), "modes": modes,
                  "exists": os.path.isdir(root)}))
"""


# --------------------------------------------------------------------------------------------- a project


class FaultCtx(ar.DeployCtx):
    """One Compose project on localhost (``host=None``) or a lab target, with a planted secret.

    Every module run goes through :meth:`call` (``-vvv``), which keeps the output and the result for
    :meth:`assert_secret_nowhere`. The release carries ``secretEnv`` ``{FX_SECRET: secret}`` (and the
    module gets the plan's ``.env.stella`` as ``env_artifact``) unless ``secret_env=False``; the
    secret is also in a file beside the project directory that :meth:`leak_hook` hooks print.
    """

    def __init__(self, lab, host=None, prefix="fx", work=None):
        super().__init__(lab, host=host, prefix=prefix)
        if work:
            if host is None:
                shutil.rmtree(self.work, ignore_errors=True)
            self.work = work
            self.project_dir = os.path.join(work, self.project)
        self.secret = planted_secret()
        self.secret_file = self.project_dir + ".fx-secret"
        self.outputs = []
        self.results = []
        self._secret_written = False

    # ---------------------------------------------------------------- host access
    def run_on_host(self, command, stdin=None, check=True, timeout=120):
        argv = ["sh", "-c", command] if self.host is None else labkit.ssh_argv(self.host, command)
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed (rc=%d): %s" % (command, proc.returncode, proc.stderr))
        return proc

    def write_secret_file(self):
        if not self._secret_written:
            path = shlex.quote(self.secret_file)
            self.run_on_host(
                "mkdir -p %s && umask 077 && cat > %s" % (shlex.quote(os.path.dirname(self.secret_file)), path),
                stdin=self.secret,
            )
            self._secret_written = True

    def leak_hook(self, name="leak", phase="pre-deploy", **extra):
        """A hook that prints the planted secret (from the secret file) on stdout and stderr."""
        self.write_secret_file()
        path = shlex.quote(self.secret_file)
        hook = {"name": name, "phase": phase, "command": "cat %s; echo; cat %s >&2" % (path, path)}
        hook.update(extra)
        return hook

    # ---------------------------------------------------------------- planning and module runs
    def planned(self, image_key="app_v1", version="1.0.0", hooks=None, extra=None, secret_env=True, **kw):
        if image_key != "app_broken" and "config" not in kw:
            kw["config"] = {"web": dict(FAST_HEALTHCHECK)}
        if secret_env is True:
            kw["secret_env"] = {SECRET_KEY: self.secret}
        elif secret_env:
            kw["secret_env"] = dict(secret_env)
        return super().planned(image_key, version, hooks, extra, **kw)

    def call(self, module, args, timeout=240, check=False):
        result, output, seconds = run_ansible(module, args, host=self.host, timeout=timeout, check=check)
        self.outputs.append(output)
        self.results.append(result)
        result["_seconds"] = seconds
        return result

    def deploy_args(self, planned, args=None, env_artifact=True):
        call = {"payload": planned["payloads"]["compose.up"]}
        env = planned["_files"].get(ENV)
        if env_artifact and env is not None:
            call["env_artifact"] = env.decode("utf-8")
        call.update(args or {})
        return call

    def deploy(self, planned_release, args=None, env_artifact=True, timeout=240, **_kw):
        return self.call(DEPLOY, self.deploy_args(planned_release, args, env_artifact), timeout=timeout)

    def deploy_ok(self, planned, args=None):
        result = self.deploy(planned, args)
        assert not result["failed"], "setup deploy failed: %s (%s, phase %s)" % (
            result.get("msg"),
            result.get("code"),
            result.get("failurePhase"),
        )
        return result

    def rollback(self, args=None, payload=None, timeout=240, **_kw):
        call = dict(args or {})
        if "project_name" not in call:
            call["payload"] = payload or {
                "ProjectName": self.project,
                "WorkDirectory": self.work,
                "Target": self.target_context(),
            }
        return self.call(ROLLBACK, call, timeout=timeout)

    # ---------------------------------------------------------------- target state
    def tree(self, secret=None):
        """``{files: {name: bytes|None}, leaks: [...], listing: [...], modes: {...}, exists}`` of the project
        directory; ``leaks`` are the files other than ``.env.stella`` that contain ``secret``."""
        argv_script = [_READ_TREE, self.project_dir, ",".join(PROJECT_FILES), secret or self.secret]
        if self.host is None:
            argv = [os.path.join(ar.VENV_BIN, "python"), "-c"] + argv_script
        else:
            argv = labkit.ssh_argv(self.host, "python3 -c %s" % " ".join(shlex.quote(a) for a in argv_script))
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        data = json.loads(proc.stdout)
        data["files"] = {k: (base64.b64decode(v) if v is not None else None) for k, v in data["files"].items()}
        return data

    def committed(self):
        return self.tree()["files"]

    def assert_committed_verifies(self, manifest_hash):
        files = self.committed()
        problems = verify_committed(files, self.project, manifest_hash)
        assert not problems, "the committed artifact set does not verify: %s" % problems
        return files

    def state(self):
        """``{service: (container id, StartedAt, image, stella labels)}`` of the project's containers."""
        out = {}
        for container in self.inspect():
            labels = container["Config"]["Labels"]
            out[labels["com.docker.compose.service"]] = (
                container["Id"],
                container["State"]["StartedAt"],
                container["Config"]["Image"],
                {k: v for k, v in sorted(labels.items()) if k.startswith("stella.")},
            )
        return out

    def assert_runs(self, planned, image_key="app_v1", services=("web",)):
        """Exactly ``services`` run, healthy, on the pinned digest, labelled with the plan's manifest hash."""
        digest = self.images[image_key]["digest"]
        containers = self.inspect()
        assert sorted(c["Config"]["Labels"]["com.docker.compose.service"] for c in containers) == sorted(services), (
            "project containers: %s" % [(c["Name"], c["State"]["Status"]) for c in containers]
        )
        for container in containers:
            state = container["State"]
            assert state["Running"] and not state["Restarting"], "%s is %s" % (container["Name"], state["Status"])
            assert state.get("Health", {}).get("Status") == "healthy", "%s health %s" % (
                container["Name"],
                state.get("Health"),
            )
            assert container["Config"]["Image"].endswith("@" + digest), container["Config"]["Image"]
            labels = container["Config"]["Labels"]
            assert labels["stella.manifest.hash"] == planned["manifestHash"], "runs manifest %s, expected %s" % (
                labels["stella.manifest.hash"],
                planned["manifestHash"],
            )
            assert labels["stella.image.digest"] == digest
            assert labels["stella.release.version"] == planned["release"]["version"]

    def assert_secret_nowhere(self, *extra, secret=None):
        """The secret is in no ansible output (-vvv), no module result (hook results included) and no
        file of the project directory (sticker, lock, apply manifest, revisions) other than ``.env.stella``."""
        secret = secret or self.secret
        assert_no_secret(secret, *self.outputs, where="ansible -vvv output")
        assert_no_secret(secret, *self.results, where="module result")
        assert_no_secret(secret, *extra, where="evidence")
        leaks = self.tree(secret)["leaks"]
        assert not leaks, "the planted secret is in target files %s" % leaks

    def cleanup(self):
        super().cleanup()
        if self.host is not None:
            self.run_on_host("rm -f %s" % shlex.quote(self.secret_file), check=False)


# --------------------------------------------------------------------------------------------- the role

PLAYBOOK = """---
- name: Fault matrix, the stellaops.runtime.deploy role
  hosts: all
  gather_facts: false
  tasks:
    - name: Deploy through the role
      block:
        - name: Run the deploy role
          ansible.builtin.include_role:
            name: stellaops.runtime.deploy
          vars:
            deploy_release: "{{ release }}"
            deploy_evidence_dir: "{{ evidence_dir }}"
            deploy_insecure_registries: "{{ insecure_registries }}"
            deploy_registry_credentials: "{{ registry_credentials }}"
            deploy_min_engine_version: "20.10.0"
            deploy_wait_timeout: "{{ wait_timeout }}"
            deploy_job_store: "{{ job_store }}"
      always:
        - name: Keep the role's registered results for the test
          ansible.builtin.copy:
            dest: "{{ results_file }}"
            mode: "0600"
            content: "{{ {'plan': (deploy_job.plans | default({}))[inventory_hostname] | default(deploy_job | default(none)),
                          'job': deploy_job_closed.job | default(none),
                          'apply': deploy_apply_result | default(none), 'probe': deploy_probe_result | default(none),
                          'rollback': deploy_restore_result | default(none)} | to_nice_json }}"
          delegate_to: localhost
          check_mode: false  # the test reads it after --check runs too
          no_log: true
"""


class RoleRun:
    """Runs the deploy role (``-vvv``) for one project of a :class:`FaultCtx` and reads its evidence.
    ``results["plan"]`` is the target's plan of the role's one-target job, or the job start's failure
    when planning failed.

    The release has the same shape as the context's module-level releases, plus published ports and
    probe configuration when asked, so a release planned by the test with the real planner and the
    one the role plans are byte-identical (same manifest hash).
    """

    def __init__(self, ctx, tmp_path):
        self.ctx = ctx
        self.tmp = tmp_path
        self.evidence_dir = str(tmp_path / "evidence")
        self.runs = 0
        self.registry_secret = planted_secret("registry")
        if ctx.host is None:
            self.insecure = []
            self.port = free_port()
            self.publish = "127.0.0.1:%d:8080" % self.port
        else:
            self.insecure = [ctx.lab["registries"]["shared"]["address"]]
            self.port = 20000 + int(uuid.uuid4().hex[:4], 16) % 20000
            self.publish = "%d:8080" % self.port

    def probe_config(self, path="/", attempts=3, url=None, timeout=3):
        config = {
            "healthProbe.type": "http",
            "healthProbe.attempts": attempts,
            "healthProbe.intervalSeconds": 1,
            "healthProbe.timeoutSeconds": timeout,
        }
        if url:
            config["healthProbe.url"] = url
        elif self.ctx.host is None:
            config["healthProbe.url"] = "http://127.0.0.1:%d%s" % (self.port, path)
        else:
            config.update({"healthProbe.port": self.port, "healthProbe.path": path})
        return config

    def release(
        self,
        image_key="app_v1",
        version="1.0.0",
        hooks=None,
        probe=None,
        secret_env=False,
        preflight=None,
        ports=True,
        healthcheck=True,
    ):
        config = dict(probe or {})
        if healthcheck and image_key != "app_broken":
            config.update(FAST_HEALTHCHECK)
        release = self.ctx.release(
            image_key,
            version,
            hooks=hooks,
            config={"web": config} if config else None,
            secret_env={SECRET_KEY: self.ctx.secret} if secret_env else None,
        )
        if ports:
            release["components"][0]["ports"] = [self.publish]
        if preflight:
            release["preflight"] = dict(preflight)
        return release

    def planned(self, release):
        """The real planner's output for ``release`` (what the role will plan)."""
        return ar.plan(release, self.ctx.resolved)

    def _argv(self, release, wait_timeout, registry_credentials, check=False):
        self.runs += 1
        run = self.tmp / ("role-run%d" % self.runs)
        run.mkdir()
        (run / "playbook.yml").write_text(PLAYBOOK)
        creds = {"127.0.0.1:5999": {"username": "fx", "password": self.registry_secret}}
        creds.update(registry_credentials or {})
        variables = {
            "release": release,
            "evidence_dir": self.evidence_dir,
            "insecure_registries": self.insecure,
            "registry_credentials": creds,
            "wait_timeout": wait_timeout,
            "results_file": str(run / "results.json"),
            "job_store": str(self.tmp / "jobs.sqlite3"),
        }
        (run / "vars.json").write_text(json.dumps(variables))
        argv = [os.path.join(ar.VENV_BIN, "ansible-playbook"), "-vvv"] + (["--check"] if check else [])
        if self.ctx.host is None:
            argv += [
                "-i",
                "localhost,",
                "-c",
                "local",
                "-e",
                "ansible_python_interpreter=" + os.path.join(ar.VENV_BIN, "python"),
            ]
        else:
            (run / "inventory.ini").write_text(ar.inventory_text(self.ctx.host))
            argv += ["-i", str(run / "inventory.ini")]
        argv += ["-e", "@" + str(run / "vars.json"), str(run / "playbook.yml")]
        env = dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS,
            ANSIBLE_STDOUT_CALLBACK="default",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_HOST_KEY_CHECKING="False",
        )
        return run, argv, env

    def start(self, release, wait_timeout=30, registry_credentials=None, check=False):
        run, argv, env = self._argv(release, wait_timeout, registry_credentials, check)
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ar.ROOT,
            start_new_session=True,
        )
        return run, proc

    def finish(self, run, proc, timeout=300):
        out, err = _communicate(proc, timeout, "ansible-playbook (deploy role)")
        output = out + err
        self.ctx.outputs.append(output)
        (run / "output.txt").write_text(output)
        results_path = run / "results.json"
        results = json.loads(results_path.read_text()) if results_path.exists() else {}
        for key in ("apply", "rollback", "probe"):
            if isinstance(results.get(key), dict):
                self.ctx.results.append(results[key])
        return proc.returncode, results, output

    def play(self, release, wait_timeout=30, registry_credentials=None, timeout=300, check=False):
        run, proc = self.start(release, wait_timeout, registry_credentials, check)
        return self.finish(run, proc, timeout)

    @staticmethod
    def preflight_outcome(results):
        """``{failed, failures, evidence}`` of the preflight that ran inside the role's apply task
        (``deploy_apply_result.preflight`` / ``.preflightFailures``), or ``None`` when none ran."""
        apply = results.get("apply")
        if isinstance(apply, dict) and apply.get("preflight") is not None:
            failures = apply.get("preflightFailures") or []
            return {"failed": bool(failures), "failures": failures, "evidence": apply["preflight"]}
        return None

    def evidence(self, results):
        """The run's evidence documents by file name: the target's ``deployment.json`` and the job's
        ``job.json`` (and ``rollback-evidence.json`` after a rollback)."""
        plan = results["plan"]
        documents = {}
        for directory in (
            os.path.join(self.evidence_dir, plan["projectName"], plan["jobId"], plan["target"]["id"]),
            os.path.join(self.evidence_dir, "jobs", plan["jobId"]),
        ):
            if os.path.isdir(directory):
                documents.update(
                    {
                        name: json.load(open(os.path.join(directory, name), encoding="utf-8"))
                        for name in sorted(os.listdir(directory))
                        if name.endswith(".json")
                    }
                )
        return documents

    def evidence_texts(self):
        texts = []
        for base, _dirs, names in os.walk(self.evidence_dir):
            for name in names:
                with open(os.path.join(base, name), encoding="utf-8", errors="replace") as handle:
                    texts.append(handle.read())
        return texts

    def assert_secrets_nowhere(self):
        """Neither the context's secret nor the registry password is in any output, result, evidence
        file or target file (``.env.stella`` aside)."""
        texts = self.evidence_texts()
        self.ctx.assert_secret_nowhere(*texts)
        self.ctx.assert_secret_nowhere(*texts, secret=self.registry_secret)


# --------------------------------------------------------------------------------------------- DinD faults


def _outer_docker(*argv, check=True, timeout=60):
    proc = subprocess.run(["docker"] + list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("docker %s failed: %s" % (" ".join(argv), proc.stderr))
    return proc.stdout


def dockerd_pid(target):
    """Host pid of the target's nested dockerd (the target container's PID 1)."""
    pid = int(_outer_docker("inspect", "-f", "{{.State.Pid}}", target["container"]).strip())
    with open("/proc/%d/comm" % pid, encoding="utf-8") as handle:
        assert handle.read().strip() == "dockerd", "PID 1 of %s is not dockerd" % target["container"]
    return pid


@contextlib.contextmanager
def hung_daemon(target):
    """The target's dockerd stopped with SIGSTOP: its socket accepts connections and never answers."""
    pid = dockerd_pid(target)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def daemon_socket_moved(target):
    """No daemon where the client looks: the target's /var/run/docker.sock is renamed away."""
    _outer_docker("exec", target["container"], "mv", "/var/run/docker.sock", "/var/run/docker.sock.fx-away")
    try:
        yield
    finally:
        _outer_docker(
            "exec", target["container"], "mv", "/var/run/docker.sock.fx-away", "/var/run/docker.sock", check=False
        )


@contextlib.contextmanager
def small_tmpfs(target, path, size="2m"):
    """A tmpfs of ``size`` mounted at ``path`` inside the target (its own file system, so it fills up)."""
    _outer_docker(
        "exec",
        target["container"],
        "sh",
        "-c",
        "mkdir -p %s && mount -t tmpfs -o size=%s tmpfs %s" % (path, size, path),
    )
    try:
        yield path
    finally:
        _outer_docker("exec", target["container"], "sh", "-c", "umount -l %s; rmdir %s" % (path, path), check=False)


def wait_daemon(target, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run(
            labkit.ssh_argv(target, "docker", "info", "--format", "{{.ServerVersion}}"),
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        if proc.returncode == 0:
            return
        time.sleep(0.5)
    raise AssertionError("the daemon of %s does not answer again" % target["name"])


# --------------------------------------------------------------------------------------------- a probe gate


class ProbeGate:
    """HTTP on 127.0.0.1: the first request sets ``hit`` and is held until ``release()``, then gets 503."""

    def __init__(self):
        self.hit = threading.Event()
        self._go = threading.Event()
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server API)
                gate.hit.set()
                gate._go.wait(240)
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args):
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def release(self):
        self._go.set()

    def close(self):
        self._go.set()
        self.server.shutdown()
        self.server.server_close()
