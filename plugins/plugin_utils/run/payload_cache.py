# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The built payloads of the target-side modules, kept from one run to the next on the controller.

Before a module runs, Ansible builds its payload: it parses every file of the module's ``module_utils``
closure (77 files for ``stella_compose_deploy``, about half of them ansible-core's) and zips them. It
keeps what it built in ``ansiballz_cache`` under the run's own local temporary directory
(``ANSIBLE_LOCAL_TEMP``), which is removed when the run ends, so every ``ansible-playbook`` run builds
every module again: 0.14 to 0.22 s for ``stella_compose_deploy`` on this project's 2-core machine.

Here the entries Ansible wrote for this collection's modules are also kept in a store beside the runs'
temporary directories (``<ANSIBLE_LOCAL_TEMP>/stellaops-runtime-payloads/<key>/``) and put back in the
next run's ``ansiballz_cache`` before the module is built, so Ansible finds them there as it finds
what an earlier task of the same run built. One key serves every module of the collection: a SHA-256
of everything their payloads are made of, the ansible-core and Python versions, where the collection
is (an entry maps the controller's source paths), every ``plugins/modules`` and ``plugins/module_utils``
source of the collection (their bytes), and every ansible-core ``module_utils`` source (path, size,
modification time). A target-side module imports nothing else (``tests/unit/test_boundary.py``), so any
change to what a payload holds is a new key. Only the :data:`KEEP` keys used last are kept: a key per
version (or checkout) of the collection and ansible-core.

A run builds each module once and Ansible reuses that payload for the rest of the run, even when the
collection or ansible-core changes under it (an upgrade while a long job runs). So the run's cache is
bound to the key of its first task here (the file :data:`RUN_KEY` in it, written once): a task whose
key differs from it neither seeds nor stores, and an entry is stored only when the key is the same
after the build as before it. An entry is never filed under a key that does not describe it.

The store is trusted only when it is a directory of the controller's user that no other user may
write (the entries are Python pickles, as in Ansible's own cache). Anything that goes wrong here
leaves the task to Ansible's own build: the store is a shortcut, never a dependency. Entries are
written as every file of the project is (host/files.py ``atomic_write``), so a reader never sees half an
entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator

from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import COLLECTION_ROOT

STORE_NAME = "stellaops-runtime-payloads"
RUN_KEY = "stellaops-runtime.key"  # in a run's ansiballz_cache: the key of the sources its payloads come from
KEEP = 8
MODULE_FQN = "ansible_collections.stellaops.runtime.plugins.modules.%s"


def _sources(directory: str) -> list[tuple[str, str]]:
    """The ``.py`` files under ``directory``, as (path relative to it, full path), in a stable order."""
    found: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found.extend(
            (os.path.relpath(os.path.join(root, name), directory), os.path.join(root, name))
            for name in sorted(files)
            if name.endswith(".py")
        )
    return found


def payload_key(plugins_dir: str, ansible_module_utils_dir: str, versions: tuple[str, ...]) -> str:
    """The key of the collection's payloads: a SHA-256 over ``versions`` (ansible-core's and Python's,
    and where the collection is), the bytes of every source under the collection's ``modules`` and
    ``module_utils`` (in ``plugins_dir``) and the path, size and modification time of every source under
    ansible-core's ``ansible_module_utils_dir``."""
    digest = hashlib.sha256()
    digest.update(("\0".join(versions) + "\n").encode())
    for part in ("modules", "module_utils"):
        for relative, path in _sources(os.path.join(plugins_dir, part)):
            with open(path, "rb") as handle:
                content = handle.read()
            digest.update(("\n%s\0%s\0%d\0" % (part, relative, len(content))).encode() + content)
    for relative, path in _sources(ansible_module_utils_dir):
        info = os.stat(path)
        digest.update(("\nansible\0%s\0%d\0%d" % (relative, info.st_size, info.st_mtime_ns)).encode())
    return digest.hexdigest()


def private_directory(path: str, create: bool = False) -> str | None:
    """``path`` as a directory only the controller's user may write (made with mode 0700 when asked),
    or None: a symbolic link, another user's directory or one that others may write is never trusted."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    trusted = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022
    return path if trusted else None


def entries(directory: str, prefix: str) -> list[str]:
    """The names of a module's cache entries in ``directory``: Ansible names them after the module's
    import path, then its compression and extensions; its own lock and temporary files are left out."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(name for name in names if name.startswith(prefix) and not name.endswith((".lock", "-part")))


def copy_entry(source: str, directory: str, name: str) -> None:
    """Copy the entry ``source`` to ``directory/name``, readable by this user only (``atomic_write``)."""
    with open(source, "rb") as handle:
        atomic_write(os.path.join(directory, name), handle.read(), mode=0o600)


def copy_missing(source: str, destination: str, prefix: str) -> list[str]:
    """Copy the module's entries in ``source`` that ``destination`` lacks, never overwriting one (the
    store into Ansible's cache before the build, Ansible's cache into the store after it); returns their
    names."""
    copied: list[str] = []
    for name in entries(source, prefix):
        if not os.path.exists(os.path.join(destination, name)):
            copy_entry(os.path.join(source, name), destination, name)
            copied.append(name)
    return copied


def prune(root: str, keep_keys: int = KEEP) -> list[str]:
    """Remove all but the ``keep_keys`` keys of ``root`` used last (a key is touched when it is used)."""
    keys: list[tuple[int, str]] = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        with contextlib.suppress(OSError):
            if private_directory(path):
                keys.append((os.stat(path).st_mtime_ns, name))
    removed = [name for _mtime, name in sorted(keys, reverse=True)[keep_keys:]]
    for name in removed:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return removed


def run_key(cache: str, key: str) -> str:
    """The key the run's cache ``cache`` is bound to: ``key`` when this is the run's first task here
    (written once, never replaced), else the one its first task wrote ("" while that is being written,
    which differs from every key)."""
    path = os.path.join(cache, RUN_KEY)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(key)
    return key


def _this_key() -> str:
    import ansible.module_utils
    from ansible.release import __version__

    return payload_key(
        os.path.join(COLLECTION_ROOT, "plugins"),
        os.path.dirname(os.path.abspath(ansible.module_utils.__file__)),
        (__version__, "%d.%d.%d" % sys.version_info[:3], COLLECTION_ROOT),
    )


@contextlib.contextmanager
def reused(module_name: str, local_tmp: str, log: Callable[[str], object] | None = None) -> Iterator[None]:
    """Inside the block, Ansible's payload cache of this run (``<local_tmp>/ansiballz_cache``) holds the
    module's stored entries; after it, what Ansible built there is stored. ``log`` (a callable) hears
    what was done and what went wrong; nothing here fails the task."""
    log = log or (lambda message: None)
    prefix = MODULE_FQN % module_name + "-"
    cache = os.path.join(local_tmp, "ansiballz_cache")
    store = None
    try:
        root = private_directory(os.path.join(os.path.dirname(local_tmp), STORE_NAME), create=True)
        if root is None:
            log("payload store: %s is not a private directory of this user, not used" % STORE_NAME)
        else:
            key = _this_key()
            os.makedirs(cache, exist_ok=True)
            if run_key(cache, key) != key:
                log("payload store: the collection or ansible-core changed during this run, not used")
            else:
                store = private_directory(os.path.join(root, key), create=True)
        if store is not None:
            os.utime(store)
            log("payload store: seeded %s" % (copy_missing(store, cache, prefix) or "nothing"))
    except OSError as error:
        log("payload store: not used: %s" % error)
        store = None
    try:
        yield
    finally:
        if store is not None:
            try:
                built = [name for name in entries(cache, prefix) if not os.path.exists(os.path.join(store, name))]
                if built and _this_key() != os.path.basename(store):  # the key again, only when there is to keep
                    log("payload store: the collection or ansible-core changed during the build, not kept")
                elif built:
                    log("payload store: kept %s" % copy_missing(cache, store, prefix))
                    prune(os.path.dirname(store))
            except OSError as error:
                log("payload store: not kept: %s" % error)
