"""Helpers for integration tests that use the Docker lab built by ``lab/lab.sh`` (``make lab``).

- ``load_lab()``: the lab description ``.lab/lab.json`` (fails with a clear message when absent).
- ``start_target(name, compose=True, image=None)`` / ``stop_target(name)``: a DinD target host reached over
  SSH, from target image ``bookworm`` (default; Engine 20.10) or ``trixie`` (Engine 26.1).
- ``ssh_argv(target, *command)``: argv to run a command on a target as root over SSH.
- ``ansible_inventory(targets)``: an Ansible YAML inventory (group ``targets``) for those targets.

A target is the dict printed by ``lab.sh target up``: ``name``, ``container``, ``address``,
``hostname``, ``ssh_user``, ``ssh_key``, ``compose``, ``image`` (e.g. ``stella-target:trixie``),
``flavour`` (``bookworm`` or ``trixie``), ``engine_version`` and ``compose_version`` (``None`` without
Compose), both as the target reports them.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB_SH = os.path.join(ROOT, "lab", "lab.sh")
LAB_JSON = os.path.join(ROOT, ".lab", "lab.json")
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes")


class LabNotRunning(AssertionError):
    """The lab is absent: the message says to run ``make lab``."""


class LabCommandFailed(AssertionError):
    """``lab/lab.sh`` exited non-zero."""


def free_port():
    """A TCP port nothing listens on now (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_lab(path: str = LAB_JSON) -> dict:
    """The lab description written by ``lab/lab.sh up``."""
    if not os.path.isfile(path):
        raise LabNotRunning("the Docker lab is not set up (%s is missing): run `make lab` (lab/lab.sh up) first" % path)
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def lab_path(lab: dict, relative: str) -> str:
    """A path from lab.json made absolute (lab.json paths are relative to the checkout)."""
    return relative if os.path.isabs(relative) else os.path.join(lab.get("root", ROOT), relative)


def auth_credentials(lab: dict) -> tuple[str, str]:
    """(username, password) of the htpasswd registry."""
    registry = lab["registries"]["auth"]
    with open(lab_path(lab, registry["password_file"]), encoding="utf-8") as handle:
        data = json.load(handle)
    return data.get("username", registry["username"]), data["password"]


def run_lab(*args: str, timeout: float = 300) -> str:
    """Run ``lab/lab.sh ARGS``; return its stdout, raise LabCommandFailed with its stderr on failure."""
    proc = subprocess.run([LAB_SH, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise LabCommandFailed(
            "lab/lab.sh %s failed (rc=%d):\n%s%s" % (" ".join(args), proc.returncode, proc.stdout, proc.stderr[-4000:])
        )
    return proc.stdout


def start_target(
    name: str, compose: bool = True, hostname: str | None = None, image: str | None = None, timeout: float = 300
) -> dict:
    """Start (or reuse) the DinD target ``stella-target-NAME``; wait until it answers over SSH.

    The target's hostname is ``hostname`` (default: ``name``); ``image`` is the target image flavour,
    ``"bookworm"`` (the default, Engine 20.10) or ``"trixie"`` (Engine 26.1, meets the contract's default
    gates). A running target with another hostname or image is recreated.
    """
    load_lab()
    args = ["target", "up", name] + ([] if compose else ["--no-compose"])
    if hostname:
        args += ["--hostname", hostname]
    if image:
        args += ["--image", image]
    stdout = run_lab(*args, timeout=timeout)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise LabCommandFailed("lab/lab.sh target up %s printed no JSON line:\n%s" % (name, stdout))
    return json.loads(lines[-1])


def stop_target(name: str) -> None:
    """Remove the target container ``stella-target-NAME`` (no error when it is absent)."""
    run_lab("target", "down", name, timeout=120)


def ssh_argv(target: dict, *command: str) -> list[str]:
    """argv running ``command`` (one remote shell command line, or several words) on the target."""
    argv = ["ssh", "-i", target["ssh_key"], *SSH_OPTIONS, "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]
    argv.append("%s@%s" % (target.get("ssh_user", "root"), target["address"]))
    argv.extend(command)
    return argv


def ssh(target: dict, *command: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command on the target over SSH."""
    proc = subprocess.run(ssh_argv(target, *command), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            "ssh %s %s failed (rc=%d): %s" % (target["name"], " ".join(command), proc.returncode, proc.stderr)
        )
    return proc


def ansible_inventory(targets: list[dict]) -> str:
    """An Ansible YAML inventory with the targets in group ``targets``."""
    common = " ".join(SSH_OPTIONS)
    lines = ["all:", "  children:", "    targets:"]
    if not targets:
        lines.append("      hosts: {}")
    else:
        lines.append("      hosts:")
    for target in targets:
        lines += [
            "        %s:" % target["name"],
            "          ansible_host: %s" % json.dumps(target["address"]),
            "          ansible_user: %s" % target.get("ssh_user", "root"),
            "          ansible_ssh_private_key_file: %s" % json.dumps(target["ssh_key"]),
            "          ansible_ssh_common_args: %s" % json.dumps(common),
            "          ansible_python_interpreter: /usr/bin/python3",
        ]
    return "\n".join(lines) + "\n"


def http_get(url: str, headers: dict | None = None, auth: tuple[str, str] | None = None, method: str = "GET"):
    """(status, headers, body) of a plain HTTP request to a lab address (never through a proxy)."""
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    if auth:
        token = base64.b64encode(("%s:%s" % auth).encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, exc.read()
