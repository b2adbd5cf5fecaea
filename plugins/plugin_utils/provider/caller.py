# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which Compose runs the provider, when it does not say which messages it accepts.

No released Compose sets ``COMPOSE_PROVIDER_MESSAGES``, and none passes its version: it passes the
user's environment plus ``COMPOSE_PROJECT_NAME`` (and ``DOCKER_CLI_PLUGIN_SOCKET`` when it runs as a
Docker CLI plugin), and it starts the provider itself, so the provider's parent process is the Compose
binary (``docker-compose``, plugin or standalone). :func:`compose_version` asks that binary
``version --short``; :func:`base_messages` is what a Compose of that version accepts (``debug`` from
2.36.1 on: 2.36.0 aborts on it). An unknown version gets no ``debug`` (the safe default).
"""

from __future__ import annotations

import os
import re
import subprocess

BASE_WITHOUT_DEBUG = ("info", "error", "setenv")
DEBUG_SINCE = (2, 36, 1)
_VERSION = re.compile(r"^\s*v?([0-9]+)\.([0-9]+)\.([0-9]+)")


def parse_version(text):
    """``(major, minor, patch)`` from ``2.40.3``, ``v2.36.0``, ``2.40.3-desktop.1`` (``None`` otherwise) (pure)."""
    match = _VERSION.match(text or "")
    return tuple(int(part) for part in match.groups()) if match else None


def base_messages(version):
    """The message types a Compose of ``version`` accepts without announcing any (pure): ``info``,
    ``error``, ``setenv``, and ``debug`` from 2.36.1 on; an unknown version (``None``) gets no ``debug``."""
    if version is not None and tuple(version) >= DEBUG_SINCE:
        return frozenset(BASE_WITHOUT_DEBUG + ("debug",))
    return frozenset(BASE_WITHOUT_DEBUG)


def _parent(pid, proc):
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def compose_binary(pid=None, proc="/proc", depth=3):
    """The executable of the nearest ancestor (up to ``depth`` levels) whose executable's name holds
    ``compose``: the Compose that runs this provider (``None`` without ``/proc`` or such an ancestor)."""
    pid = os.getpid() if pid is None else pid
    for _level in range(depth):
        pid = _parent(pid, proc)
        if not pid or pid <= 1:
            return None
        try:
            exe = os.readlink(os.path.join(proc, str(pid), "exe"))
        except OSError:
            return None
        if "compose" in os.path.basename(exe) and os.access(exe, os.X_OK):
            return exe
    return None


def compose_version(pid=None, proc="/proc", run=subprocess.run, timeout=10):
    """The version of the Compose that runs this provider, as ``(major, minor, patch)``; ``None`` when
    it cannot be told (no ``/proc``, no Compose ancestor, an answer that is not a version)."""
    binary = compose_binary(pid, proc)
    if not binary:
        return None
    try:
        proc_ = run(
            [binary, "version", "--short"],
            capture_output=True,
            check=False,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc_.returncode != 0:
        return None
    return parse_version(proc_.stdout.decode("utf-8", errors="replace") if proc_.stdout else "")
