"""``stella install`` and every ``stella compose ...`` call check the provider's Python dependencies first,
run by real virtual environments that lack them: ``provider_dependency_missing`` and the ``pip install``
line for that very Python, nothing written, no traceback. A user other than root gets ``~/.local/bin``
(with a warning when it is not on PATH) and project directories of their own; root keeps
``/usr/local/bin`` and ``/var/lib/stella/projects`` (docs/provider.md#install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _command
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import dependencies as _dependencies
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import service as _service

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))
STELLA = os.path.join(ROOT, "scripts", "stella.py")

# every error line ends with the code's next step (contract/hints.py)
HINT = "; next: " + next_step("provider_dependency_missing")


def site_packages():
    """The site-packages directory of the Python running these tests (it has all three dependencies)."""
    import ansible  # pylint: disable=import-outside-toplevel

    return os.path.dirname(os.path.dirname(ansible.__file__))


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """Two real virtual environments of this Python: ``bare`` has none of the dependencies; ``no_runner``
    sees ansible-core and requests (the packages of this test's environment, through a .pth file naming a
    directory that holds only those two) and no ansible-runner."""
    base = tmp_path_factory.mktemp("venvs")
    made = {}
    for name in ("bare", "no_runner"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / name)], check=True, timeout=120)
        made[name] = str(base / name / "bin" / "python")
    shared = base / "shared"
    shared.mkdir()
    for package in ("ansible", "requests"):
        os.symlink(os.path.join(site_packages(), package), shared / package)
    purelib = subprocess.run(
        [made["no_runner"], "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(purelib, "shared.pth"), "w", encoding="utf-8") as handle:
        handle.write(str(shared) + "\n")
    return made


def run(python, *args, cwd=None):
    return subprocess.run(
        [python, STELLA] + list(args),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )


def test_the_second_environment_lacks_only_ansible_runner(venvs):
    probe = (
        "import importlib.util as u; print([m for m in ('ansible', 'ansible_runner', 'requests') if u.find_spec(m)])"
    )
    assert (
        subprocess.run([venvs["no_runner"], "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
        == "['ansible', 'requests']"
    )
    assert (
        subprocess.run([venvs["bare"], "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


def test_install_without_ansible_runner_names_the_pip_line_and_writes_nothing(venvs, tmp_path):
    proc = run(venvs["no_runner"], "install", "--bin-dir", str(tmp_path / "bin"), "--plugin-dir", str(tmp_path / "p"))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "stella install: provider_dependency_missing: stella install needs the Python module "
        "ansible_runner, which {py} cannot import: run {py} -m pip install ansible-runner{hint}\n".format(
            py=venvs["no_runner"], hint=HINT
        )
    )
    assert not (tmp_path / "bin").exists() and not (tmp_path / "p").exists()


def test_install_in_a_bare_environment_names_every_missing_package(venvs, tmp_path):
    proc = run(venvs["bare"], "install", "--bin-dir", str(tmp_path / "bin"), "--plugin-dir", str(tmp_path / "p"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and not (tmp_path / "p").exists()
    assert proc.stderr.endswith(
        "run %s -m pip install ansible-core ansible-runner requests%s\n" % (venvs["bare"], HINT)
    )
    assert "modules ansible, ansible_runner, requests," in proc.stderr


@pytest.mark.parametrize(
    "command,extra",
    [
        ("metadata", []),
        ("up", ["--image=registry.example/web:1"]),
        ("down", []),
        ("stop", []),
        ("pull", ["--image=registry.example/web:1", "--source=registry", "--policy=missing"]),
    ],
)
def test_every_provider_call_checks_first_and_answers_one_json_error(venvs, tmp_path, command, extra):
    argv = ["compose", "--project-name=shop", command] + extra + ["--state_directory=%s" % (tmp_path / "s")]
    proc = run(venvs["no_runner"], *(argv + (["web"] if command != "metadata" else [])))
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 1 and [line["type"] for line in lines] == ["error"], proc.stdout + proc.stderr
    assert lines[0]["message"] == (
        "provider_dependency_missing: stella compose {cmd} needs the Python module "
        "ansible_runner, which {py} cannot import: run {py} -m pip install ansible-runner{hint}".format(
            cmd=command, py=venvs["no_runner"], hint=HINT
        )
    )
    assert not (tmp_path / "s").exists()


def test_down_does_not_ask_for_requests_and_up_does(venvs):
    lines = run(venvs["bare"], "compose", "--project-name=shop", "down", "web").stdout
    assert json.loads(lines)["message"].endswith("-m pip install ansible-core ansible-runner" + HINT)
    lines = run(venvs["bare"], "compose", "--project-name=shop", "up", "--image=r/w:1", "web").stdout
    assert json.loads(lines)["message"].endswith("-m pip install ansible-core ansible-runner requests" + HINT)


def test_the_check_finds_what_is_there():
    _dependencies.require("install")  # this test's environment has them all
    assert _dependencies.missing(_dependencies.NEEDS["up"], lambda name: None if name == "requests" else True) == [
        ("requests", "requests")
    ]


def test_the_launchers_import_main_from_the_command_package(tmp_path, capsys):
    assert _command.ENTRY_POINT == _command.main.__module__
    assert (
        _command.main(["stella", "install", "--bin-dir", str(tmp_path / "b"), "--plugin-dir", str(tmp_path / "p")]) == 0
    )
    capsys.readouterr()
    assert "from %s import main\n" % _command.ENTRY_POINT in (tmp_path / "b" / "stella").read_text()
    with open(os.path.join(ROOT, "scripts", "stella.py"), encoding="utf-8") as handle:
        assert "from %s import main  #" % _command.ENTRY_POINT in handle.read()


# ------------------------------------------------------------------------------------ who installs


def as_user(monkeypatch, tmp_path, euid, path):
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", path)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)


def test_a_user_other_than_root_gets_local_bin_and_a_warning_when_it_is_not_on_path(tmp_path, monkeypatch, capsys):
    as_user(monkeypatch, tmp_path, 1000, "/usr/bin:/bin")
    assert _command.main(["stella", "install", "--plugin-dir", str(tmp_path / "p")]) == 0
    out, err = capsys.readouterr()
    launcher = tmp_path / ".local" / "bin" / "stella"
    assert out == "installed %s, %s\n" % (launcher, tmp_path / "p" / "docker-stella")
    assert os.access(launcher, os.X_OK)
    assert err == (
        'stella install: warning: {d} is not on PATH: add it (export PATH="{d}:$PATH" in your shell '
        "profile) or run {l}\n".format(d=tmp_path / ".local" / "bin", l=launcher)
    )
    monkeypatch.setenv("PATH", "%s:/usr/bin" % (tmp_path / ".local" / "bin"))
    assert _command.main(["stella", "install", "--plugin-dir", str(tmp_path / "p")]) == 0
    assert capsys.readouterr()[1] == ""


def test_root_keeps_usr_local_bin(tmp_path, monkeypatch):
    as_user(monkeypatch, tmp_path, 0, "/usr/bin")
    assert _command.default_bin_dir() == "/usr/local/bin"
    assert "/usr/local/bin for root, ~/.local/bin for any other user" in " ".join(
        _command.install_parser().format_help().split()
    )


def test_project_directories_are_per_user_unless_root(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert _arguments.default_work_directory(home, 0) == "/var/lib/stella/projects"
    assert _arguments.default_work_directory(home, 1000) == str(tmp_path / ".local" / "state" / "stella" / "projects")
    assert _arguments.default_work_directory(dict(home, XDG_STATE_HOME="/xdg"), 1000) == "/xdg/stella/projects"
    assert _arguments.default_work_directory(dict(home, XDG_STATE_HOME="rel"), 1000).startswith(str(tmp_path))


def test_up_and_down_of_a_user_other_than_root_use_their_own_project_directories(tmp_path, monkeypatch):
    as_user(monkeypatch, tmp_path, 1000, "/usr/bin")
    parsed = _arguments.parse_argv(["compose", "--project-name=shop", "up", "--image=r/w:1", "web"])
    assert _service.release_from(parsed)["workDirectory"] == str(tmp_path / ".local" / "state" / "stella" / "projects")
    parsed = _arguments.parse_argv(
        ["compose", "--project-name=shop", "up", "--image=r/w:1", "--work_directory=/w", "web"]
    )
    assert _service.release_from(parsed)["workDirectory"] == "/w"
