"""host/files.py StagedFiles: files of one directory replaced as a unit and put back exactly."""

from __future__ import annotations

import errno
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.host import files as _fsutil


def listing(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            out[name] = handle.read()
    return out


def test_restore_puts_back_replaced_and_removes_new_files(tmp_path):
    (tmp_path / "lock").write_bytes(b"old lock")
    staged = _fsutil.StagedFiles(str(tmp_path))
    staged.write("lock", b"new lock")
    staged.write("lock", b"newer lock")
    staged.write(".env", b"SECRET=1\n", mode=0o600)
    assert listing(str(tmp_path)) == {
        ".env": b"SECRET=1\n",
        ".stella-tmp-prev-lock": b"old lock",
        "lock": b"newer lock",
    }
    assert os.stat(tmp_path / ".env").st_mode & 0o777 == 0o600
    assert staged.names() == [".env", "lock"]
    assert staged.restore() == [".env", "lock"]
    assert listing(str(tmp_path)) == {"lock": b"old lock"}
    assert staged.restore() == []


def test_commit_drops_the_copies_aside(tmp_path):
    (tmp_path / "lock").write_bytes(b"old lock")
    staged = _fsutil.StagedFiles(str(tmp_path))
    staged.write("lock", b"new lock")
    staged.commit()
    assert listing(str(tmp_path)) == {"lock": b"new lock"}


def test_restore_after_a_write_that_never_replaced_the_file(tmp_path, monkeypatch):
    """A write that fails (full disk) before replacing the file leaves the file and its copy aside as two
    names of one inode; restoring must still leave only the file."""
    (tmp_path / "lock").write_bytes(b"old lock")

    def full(path, data, mode=0o644):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(_fsutil, "atomic_write", full)
    staged = _fsutil.StagedFiles(str(tmp_path))
    with pytest.raises(OSError):
        staged.write("lock", b"new lock")
    assert staged.restore() == ["lock"]
    assert listing(str(tmp_path)) == {"lock": b"old lock"}


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path, monkeypatch):
    def broken_replace(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(_fsutil.os, "replace", broken_replace)
    with pytest.raises(OSError):
        _fsutil.atomic_write(str(tmp_path / "f"), b"data")
    assert os.listdir(str(tmp_path)) == []


def test_remove_stale_temps(tmp_path):
    for name in (".stella-tmp-abc", ".stella-tmp-prev-lock", "lock"):
        (tmp_path / name).write_bytes(b"x")
    assert _fsutil.remove_stale_temps(str(tmp_path)) == [".stella-tmp-abc", ".stella-tmp-prev-lock"]
    assert os.listdir(str(tmp_path)) == ["lock"]
    assert _fsutil.remove_stale_temps(str(tmp_path / "missing")) == []
