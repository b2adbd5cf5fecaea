"""The managed runtime install (role runtime_install, module stella_runtime_install) on Docker-less
Debian 13 targets reached over SSH, from the lab's sources (lab/runtime_sources.sh): the apt repository on
the docker0 gateway behind HTTP basic auth with a planted password in the URL, and the offline bundle.

Two targets: ``rtapt`` installs from the repository; ``rtbundle`` first fails closed in production with
no source and refuses apt in offline mode (dpkg unchanged, so it is still Docker-less), then installs
from the bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest

import labkit
from ansible_run import ROOT, VENV_BIN, _parse_json_callback, ansible_env, inventory_text

SOURCES_SH = os.path.join(ROOT, "lab", "runtime_sources.sh")
PLAYBOOK = os.path.join(ROOT, "playbooks", "runtime_install.yml")
MODULE_TASK = "Run stella_runtime_install on the target"
ACCESS_LOG = os.path.join(ROOT, ".lab", "runtime", "nginx-access.log")


def sources_sh(*args, timeout=900):
    proc = subprocess.run([SOURCES_SH, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    assert proc.returncode == 0, "lab/runtime_sources.sh %s failed (rc=%d):\n%s" % (
        " ".join(args),
        proc.returncode,
        proc.stderr[-4000:],
    )
    return proc.stdout


@pytest.fixture(scope="module")
def sources(lab):
    """The lab's runtime sources (built once, cached); the repository server stops at the end."""
    doc = json.loads(sources_sh("up").strip().splitlines()[-1])
    with open(doc["password_file"], encoding="utf-8") as handle:
        doc["password"] = json.load(handle)["password"]
    assert doc["password"].startswith("planted-")
    try:
        yield doc
    finally:
        sources_sh("down", timeout=60)


@pytest.fixture(scope="module")
def nodocker(sources):  # pylint: disable=redefined-outer-name,unused-argument
    """``nodocker(suffix)`` starts Docker-less target ``it<pid>-<suffix>``; all are removed at the end."""
    started = []

    def start(suffix):
        name = "it%d-%s" % (os.getpid(), suffix)
        started.append(name)
        out = sources_sh("target", "up", name, "--hostname", suffix, timeout=300)
        return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])

    try:
        yield start
    finally:
        for name in started:
            sources_sh("target", "down", name, timeout=120)


def sh(target, command, check=True):
    return labkit.ssh(target, command, check=check).stdout


def dpkg_state(target):
    return sh(target, "dpkg-query -W -f '${binary:Package} ${Version} ${db:Status-Abbrev}\\n' | sort")


def assert_docker_less(target):
    assert sh(target, "command -v docker dockerd containerd || true").strip() == ""
    assert "docker" not in sh(target, "ls /etc/apt/sources.list.d /etc/apt/auth.conf.d")


def run_role(target, extra_vars, verbosity=0, check=False, timeout=900):
    """``ansible-playbook playbooks/runtime_install.yml`` on one target; ``(rc, json doc, all output)``."""
    with tempfile.TemporaryDirectory(prefix="stella-ri-") as tmp:
        inv = os.path.join(tmp, "inventory.ini")
        with open(inv, "w", encoding="utf-8") as handle:
            handle.write("[targets]\n" + inventory_text(target))
        varfile = os.path.join(tmp, "vars.json")
        with open(varfile, "w", encoding="utf-8") as handle:
            json.dump(extra_vars, handle)
        argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inv, PLAYBOOK, "-e", "@" + varfile]
        argv += (["-" + "v" * verbosity] if verbosity else []) + (["--check"] if check else [])
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=ansible_env(), timeout=timeout, cwd=ROOT, check=False
        )
    output = proc.stdout + proc.stderr
    try:
        doc = _parse_json_callback(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook printed no JSON (rc=%d):\n%s" % (proc.returncode, output[-4000:]))
    return proc.returncode, doc, output


def tasks(doc):
    """``[(task name, result)]`` of the single host, in order."""
    return [(t["task"]["name"], next(iter(t["hosts"].values()))) for play in doc["plays"] for t in play["tasks"]]


def module_result(doc):
    results = [r for name, r in tasks(doc) if name.endswith(MODULE_TASK)]
    assert len(results) == 1, [name for name, _result in tasks(doc)]
    return results[0]


def evidence_on(target):
    return sh(target, "cat /var/lib/stella/runtime-install.json")


def assert_runtime_answers(target, compose_version):
    engine = sh(target, "docker info -f '{{.ServerVersion}}'").strip()
    assert engine.split(".")[0].isdigit() and int(engine.split(".")[0]) >= 24, engine
    assert sh(target, "docker compose version --short").strip().lstrip("v") == compose_version
    return engine


def log_mark():
    """The size of the repository server's access log now (lines after it are this test's)."""
    return os.path.getsize(ACCESS_LOG) if os.path.exists(ACCESS_LOG) else 0


def access_log_lines(address, since):
    """Requests from ``address`` logged after ``since`` (a :func:`log_mark`)."""
    if not os.path.exists(ACCESS_LOG):
        return []
    with open(ACCESS_LOG, "rb") as handle:
        handle.seek(since)
        text = handle.read().decode("utf-8", errors="replace")
    return [line for line in text.splitlines() if line.startswith(address + " ")]


def repository_lists(target):
    """The apt lists of the target's repositories (names, sizes, times): apt's auxfiles for local .debs aside."""
    return sh(target, "find /var/lib/apt/lists -maxdepth 1 -type f -printf '%f %s %T@\\n' | sort")


def test_apt_install_from_the_authenticated_repository(sources, nodocker, tmp_path):  # pylint: disable=redefined-outer-name
    target = nodocker("rtapt")
    assert_docker_less(target)
    password = sources["password"]
    url = sources["repo_url"].replace("http://", "http://%s:%s@" % (sources["repo_username"], password), 1)
    with open(sources["signing_key"], encoding="utf-8") as handle:
        key = handle.read()
    evidence_dir = tmp_path / "evidence"
    role_vars = {
        "runtime_install_mode": "production",
        "runtime_install_source_type": "apt",
        "runtime_install_apt_url": url,
        "runtime_install_apt_signing_key": key,
        "runtime_install_evidence_dir": str(evidence_dir),
    }
    before = dpkg_state(target)
    mark = log_mark()

    # check mode: what would be installed, nothing installed or written
    rc, doc, output = run_role(target, role_vars, check=True)
    assert rc == 0, output[-3000:]
    planned = module_result(doc)
    assert planned["changed"] is True and planned["runtimeInstall"]["status"] == "planned"
    assert planned["runtimeInstall"]["plan"]["packages"] == ["docker.io", "docker-cli", "docker-compose-plugin"]
    assert dpkg_state(target) == before
    assert_docker_less(target)
    assert sh(target, "test -e /var/lib/stella/runtime-install.json && echo yes || echo no").strip() == "no"

    # the install, with -vvv: the planted password must appear nowhere
    rc, doc, output = run_role(target, role_vars, verbosity=3)
    assert rc == 0, output[-4000:]
    result = module_result(doc)
    assert result["changed"] is True
    ev = result["runtimeInstall"]
    assert ev["status"] == "installed" and ev["mode"] == "production"
    assert ev["source"]["type"] == "apt" and ev["source"]["url"] == sources["repo_url"]
    assert ev["source"]["credentials"] is True and ev["source"]["trusted"] is False
    assert {"docker.io", "docker-cli", "docker-compose-plugin", "containerd", "runc"} <= set(ev["packageChanges"])
    assert ev["packages"]["docker-compose-plugin"].startswith(sources["compose_version"])
    assert ev["startedAt"] <= ev["finishedAt"]
    engine = assert_runtime_answers(target, sources["compose_version"])
    assert ev["engineVersion"] == engine and ev["composeVersion"] == sources["compose_version"]
    on_target = evidence_on(target)
    assert json.loads(on_target) == ev
    fetched = (evidence_dir / ("runtime-install-%s.json" % target["name"])).read_text()
    assert json.loads(fetched) == ev
    for where, text in (
        ("-vvv output", output),
        ("result", json.dumps(doc)),
        ("evidence on the target", on_target),
        ("evidence on the controller", fetched),
        ("sources list", sh(target, "cat /etc/apt/sources.list.d/stella-runtime.list")),
    ):
        assert password not in text, "the planted password leaked into the %s" % where
    assert "<%s> SSH: EXEC" % target["address"] in output  # it really was verbose
    assert sh(target, "stat -c '%a %U' /etc/apt/auth.conf.d/stella-runtime.conf").split() == ["600", "root"]
    # the target really read the repository with the credential (nginx saw it authenticated)
    assert any(
        " - stella-apt [" in line and "/InRelease HTTP" in line and '" 200 ' in line
        for line in access_log_lines(target["address"], mark)
    )

    # the second run changes nothing
    rc, doc, output = run_role(target, role_vars)
    assert rc == 0, output[-3000:]
    again = module_result(doc)
    assert again["changed"] is False and again["runtimeInstall"]["status"] == "satisfied"
    assert not [name for name, r in tasks(doc) if r.get("changed")]
    assert evidence_on(target) == on_target
    assert password not in output


def test_production_without_a_source_fails_closed_then_the_offline_bundle_installs(sources, nodocker, tmp_path):  # pylint: disable=redefined-outer-name
    target = nodocker("rtbundle")
    assert_docker_less(target)
    before = dpkg_state(target)
    lists_before = repository_lists(target)
    mark = log_mark()

    rc, doc, output = run_role(target, {"runtime_install_mode": "production"})
    assert rc != 0
    failed = module_result(doc)
    assert failed["failed"] is True and failed["code"] == "runtime_install_source_missing", output[-3000:]
    rc, doc, output = run_role(
        target,
        {
            "runtime_install_mode": "offline",
            "runtime_install_source_type": "apt",
            "runtime_install_apt_url": sources["repo_url"],
            "runtime_install_apt_trusted": True,
        },
    )
    assert rc != 0 and module_result(doc)["code"] == "runtime_install_source_not_allowed", output[-3000:]
    assert dpkg_state(target) == before
    assert_docker_less(target)
    assert sh(target, "test -e /var/lib/stella/runtime-install.json && echo yes || echo no").strip() == "no"

    role_vars = {
        "runtime_install_mode": "offline",
        "runtime_install_source_type": "bundle",
        "runtime_install_bundle_dir": sources["bundle_dir"],
    }
    rc, doc, output = run_role(target, role_vars)
    assert rc == 0, output[-4000:]
    result = module_result(doc)
    ev = result["runtimeInstall"]
    assert result["changed"] is True and ev["status"] == "installed" and ev["mode"] == "offline"
    assert ev["source"]["type"] == "bundle" and ev["source"]["path"] == "/var/lib/stella/runtime-bundle"
    assert [(f["name"], f["sha256"]) for f in ev["source"]["files"]] == [
        (f["name"], f["sha256"]) for f in sources["bundle_files"]
    ]
    installed = {f["package"]: f["version"] for f in ev["source"]["files"]}
    assert {name: ev["packages"][name] for name in installed if name in ev["packages"]} == installed
    engine = assert_runtime_answers(target, sources["compose_version"])
    assert ev["engineVersion"] == engine
    assert json.loads(evidence_on(target)) == ev
    # no repository was touched: no request reached the lab's repository, the apt lists are as they were
    assert access_log_lines(target["address"], mark) == []
    assert repository_lists(target) == lists_before and "InRelease" in lists_before

    rc, doc, output = run_role(target, role_vars)
    assert rc == 0, output[-3000:]
    assert module_result(doc)["changed"] is False
    assert not [name for name, r in tasks(doc) if r.get("changed")]
