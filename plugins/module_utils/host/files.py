# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Crash-safe file writes and the per-project lock (target side I/O)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path, data, mode=0o644):
    """Write ``data`` (bytes) to ``path``: temp file in the same directory, fsync, rename, fsync dir.

    A crash at any point leaves either the old file or the new one, never a mix.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".stella-tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def read_bytes(path):
    """File content, or ``None`` when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def remove_stale_temps(directory):
    """Delete temp files a killed writer left behind (names start with ``.stella-tmp-``)."""
    removed = []
    if not os.path.isdir(directory):
        return removed
    for name in sorted(os.listdir(directory)):
        if name.startswith(".stella-tmp-"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
                removed.append(name)
    return removed


@contextlib.contextmanager
def project_lock(directory):
    """Hold an exclusive ``flock`` on ``<directory>/.stella.lock`` for the duration of the block.

    The kernel drops the lock when the holder dies (even by SIGKILL), so a crashed apply never
    leaves the project locked.
    """
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, ".stella.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class StagedFiles:
    """Files of one directory replaced as a unit: every replaced file is first hard-linked aside
    (``.stella-tmp-prev-<name>``, which needs no data blocks, so a full disk cannot stop a restore);
    :meth:`restore` puts every file back exactly as it was, :meth:`commit` drops the copies aside."""

    def __init__(self, directory):
        self.directory = directory
        self.aside = {}

    def write(self, name, data, mode=0o644):
        path = os.path.join(self.directory, name)
        if name not in self.aside:
            backup = os.path.join(self.directory, ".stella-tmp-prev-" + name.lstrip("."))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup)
            try:
                os.link(path, backup)
            except FileNotFoundError:
                backup = None
            self.aside[name] = backup
        atomic_write(path, data, mode=mode)

    def names(self):
        return sorted(self.aside)

    def restore(self):
        for name, backup in sorted(self.aside.items()):
            path = os.path.join(self.directory, name)
            if backup is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            else:
                os.replace(backup, path)
                # rename(2) does nothing when both names are links to one file (the write never landed)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(backup)
        if self.aside:
            fsync_dir(self.directory)
        restored = self.names()
        self.aside = {}
        return restored

    def commit(self):
        for backup in self.aside.values():
            if backup:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(backup)
        self.aside = {}
