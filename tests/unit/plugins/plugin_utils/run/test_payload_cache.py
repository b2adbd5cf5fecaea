"""The built payloads of the target-side modules kept from one run to the next: a key that changes
with everything a payload is made of, a store trusted only when it is the user's own, entries copied
whole, the keys used last kept, and nothing here ever failing the task."""

from __future__ import annotations

import os

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import payload_cache as _payload_cache

PREFIX = _payload_cache.MODULE_FQN % "stella_preflight" + "-"
ENTRY = PREFIX + "ZIP_DEFLATED-none"
VERSIONS = ("2.19.14", "3.11.7")


@pytest.fixture
def sources(tmp_path):
    """A collection's modules and module_utils, and an ansible-core module_utils, as files."""
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    module = tmp_path / "plugins" / "modules" / "stella_preflight.py"
    module.write_text("import x\n")
    utils = tmp_path / "plugins" / "module_utils"
    (utils / "sub").mkdir(parents=True)
    (utils / "_a.py").write_text("A = 1\n")
    (utils / "sub" / "_b.py").write_text("B = 2\n")
    core = tmp_path / "core"
    core.mkdir()
    (core / "basic.py").write_text("BASIC = 1\n")
    return module, utils, core


def key(sources, versions=VERSIONS):
    _module, utils, core = sources
    return _payload_cache.payload_key(str(utils.parent), str(core), versions)


def test_the_key_is_stable_and_ignores_bytecode_caches_and_other_plugins(sources):
    first = key(sources)
    (sources[1].parent / "action").mkdir()
    (sources[1].parent / "action" / "stella_preflight.py").write_text("controller side")
    (sources[1] / "__pycache__").mkdir()
    (sources[1] / "__pycache__" / "_a.py").write_text("cached")
    (sources[1] / "README.txt").write_text("not a source")
    assert key(sources) == first and len(first) == 64


@pytest.mark.parametrize(
    "change",
    [
        "module",
        "new module",
        "util content",
        "util same size",
        "new util",
        "renamed util",
        "core mtime",
        "core size",
        "new core",
        "versions",
    ],
)
def test_the_key_changes_with_everything_the_payload_is_made_of(sources, change):
    module, utils, core = sources
    before = key(sources)
    versions = VERSIONS
    if change == "module":
        module.write_text("import y\n")
    elif change == "new module":
        (module.parent / "stella_probe.py").write_text("")
    elif change == "util content":
        (utils / "sub" / "_b.py").write_text("B = 22\n")
    elif change == "util same size":
        (utils / "_a.py").write_text("A = 9\n")
    elif change == "new util":
        (utils / "_c.py").write_text("")
    elif change == "renamed util":
        (utils / "_a.py").rename(utils / "_z.py")
    elif change == "core mtime":
        info = os.stat(core / "basic.py")
        os.utime(core / "basic.py", ns=(info.st_atime_ns, info.st_mtime_ns + 1))
    elif change == "core size":
        (core / "basic.py").write_text("BASIC = 10\n")
    elif change == "new core":
        (core / "common.py").write_text("")
    else:
        versions = ("2.19.15", "3.11.7")
    assert key(sources, versions) != before


def test_a_private_directory_is_made_with_mode_0700(tmp_path):
    path = str(tmp_path / "store")
    assert _payload_cache.private_directory(path, create=True) == path
    assert os.stat(path).st_mode & 0o777 == 0o700
    assert _payload_cache.private_directory(path, create=True) == path  # already there


@pytest.mark.parametrize("kind", ["group writable", "world writable", "symlink", "file", "missing"])
def test_a_directory_others_may_write_or_a_link_is_not_trusted(tmp_path, kind):
    path = tmp_path / "store"
    if kind == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "real")
    elif kind == "file":
        path.write_text("")
    elif kind != "missing":
        path.mkdir()
        os.chmod(path, 0o770 if kind == "group writable" else 0o707)
    assert _payload_cache.private_directory(str(path)) is None


def test_another_users_directory_is_not_trusted(tmp_path, monkeypatch):
    path = str(tmp_path / "store")
    os.mkdir(path, 0o700)
    monkeypatch.setattr(_payload_cache.os, "geteuid", lambda: os.stat(path).st_uid + 1)
    assert _payload_cache.private_directory(path) is None


def test_entries_are_the_modules_own_without_locks_and_temporaries(tmp_path):
    for name in (
        ENTRY,
        ENTRY + ".lock",
        ENTRY + "-part",
        ".stella-x1",
        PREFIX + "ZIP_STORED-none",
        _payload_cache.MODULE_FQN % "stella_preflight_x" + "-ZIP_DEFLATED-none",
        _payload_cache.MODULE_FQN % "stella_probe" + "-ZIP_DEFLATED-none",
    ):
        (tmp_path / name).write_text(name)
    assert _payload_cache.entries(str(tmp_path), PREFIX) == [ENTRY, PREFIX + "ZIP_STORED-none"]
    assert _payload_cache.entries(str(tmp_path / "missing"), PREFIX) == []


def test_what_is_missing_is_copied_and_nothing_overwritten(tmp_path):
    store, cache = tmp_path / "store", tmp_path / "cache"
    store.mkdir()
    cache.mkdir()
    (cache / ENTRY).write_bytes(b"built")
    assert _payload_cache.copy_missing(str(cache), str(store), PREFIX) == [ENTRY]
    assert (store / ENTRY).read_bytes() == b"built"
    (cache / ENTRY).write_bytes(b"built again")
    assert _payload_cache.copy_missing(str(cache), str(store), PREFIX) == []
    assert (store / ENTRY).read_bytes() == b"built"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert _payload_cache.copy_missing(str(store), str(fresh), PREFIX) == [ENTRY]
    assert (fresh / ENTRY).read_bytes() == b"built"
    assert _payload_cache.copy_missing(str(store), str(fresh), PREFIX) == []
    assert sorted(os.listdir(store)) == [ENTRY] and sorted(os.listdir(fresh)) == [ENTRY]


def test_a_failed_copy_leaves_neither_the_entry_nor_its_temporary(tmp_path, monkeypatch):
    (tmp_path / "src").write_bytes(b"x" * 10)
    (tmp_path / "dst").mkdir()

    def replace(_src, _dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_payload_cache.os, "replace", replace)
    with pytest.raises(OSError):
        _payload_cache.copy_entry(str(tmp_path / "src"), str(tmp_path / "dst"), ENTRY)
    assert os.listdir(tmp_path / "dst") == []


def test_prune_keeps_the_keys_used_last(tmp_path):
    for age, name in enumerate(["k0", "k1", "k2", "k3"]):
        os.mkdir(tmp_path / name, 0o700)
        os.utime(tmp_path / name, ns=(10**18 - age, 10**18 - age))
    os.mkdir(tmp_path / "shared", 0o777)
    os.chmod(tmp_path / "shared", 0o777)
    assert sorted(_payload_cache.prune(str(tmp_path), keep_keys=2)) == ["k2", "k3"]
    assert sorted(os.listdir(tmp_path)) == ["k0", "k1", "shared"]


def test_reused_keeps_what_ansible_built_then_seeds_the_next_run(tmp_path):
    heard = []
    local_tmp = tmp_path / "ansible-local-1"
    local_tmp.mkdir()
    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        assert not (local_tmp / "ansiballz_cache" / ENTRY).exists()
        (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"payload")
    root = tmp_path / _payload_cache.STORE_NAME
    [key] = os.listdir(root)
    assert (root / key / ENTRY).read_bytes() == b"payload"
    assert os.stat(root).st_mode & 0o777 == 0o700 and os.stat(root / key).st_mode & 0o777 == 0o700
    next_run = tmp_path / "ansible-local-2"
    next_run.mkdir()
    with _payload_cache.reused("stella_preflight", str(next_run), heard.append):
        assert (next_run / "ansiballz_cache" / ENTRY).read_bytes() == b"payload"
    assert heard == [
        "payload store: seeded nothing",
        "payload store: kept [%r]" % ENTRY,
        "payload store: seeded [%r]" % ENTRY,
    ]


def test_reused_keeps_what_was_built_when_the_task_fails(tmp_path):
    local_tmp = tmp_path / "ansible-local-1"
    with pytest.raises(RuntimeError):
        with _payload_cache.reused("stella_preflight", str(local_tmp)):
            (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"payload")
            raise RuntimeError("module failed")
    [key] = os.listdir(tmp_path / _payload_cache.STORE_NAME)
    assert os.listdir(tmp_path / _payload_cache.STORE_NAME / key) == [ENTRY]


def test_a_store_others_may_write_is_not_used(tmp_path):
    heard = []
    root = tmp_path / _payload_cache.STORE_NAME
    root.mkdir()
    os.chmod(root, 0o777)
    local_tmp = tmp_path / "ansible-local-1"
    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        os.makedirs(local_tmp / "ansiballz_cache")
        (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"payload")
    assert os.listdir(root) == []
    assert heard == ["payload store: %s is not a private directory of this user, not used" % _payload_cache.STORE_NAME]


def test_nothing_here_fails_the_task(tmp_path, monkeypatch):
    heard = []
    local_tmp = tmp_path / "ansible-local-1"
    local_tmp.mkdir()

    def broken_copy(*_args):
        raise OSError(28, "No space left on device")

    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"payload")
        monkeypatch.setattr(_payload_cache, "copy_entry", broken_copy)
    assert heard[-1] == "payload store: not kept: [Errno 28] No space left on device"
    with _payload_cache.reused("stella_preflight", str(tmp_path / "no" / "such" / "dir"), heard.append):
        pass
    assert heard[-1].startswith("payload store: ")


def test_every_module_of_the_collection_shares_one_key(tmp_path):
    local_tmp = tmp_path / "ansible-local-1"
    for name in ("stella_preflight", "stella_rollback"):
        with _payload_cache.reused(name, str(local_tmp)):
            entry = _payload_cache.MODULE_FQN % name + "-ZIP_DEFLATED-none"
            (local_tmp / "ansiballz_cache" / entry).write_bytes(name.encode())
    [key] = os.listdir(tmp_path / _payload_cache.STORE_NAME)
    assert sorted(os.listdir(tmp_path / _payload_cache.STORE_NAME / key)) == [
        _payload_cache.MODULE_FQN % name + "-ZIP_DEFLATED-none" for name in ("stella_preflight", "stella_rollback")
    ]


def test_a_run_whose_sources_change_under_it_never_files_its_payload_under_the_new_key(tmp_path, monkeypatch):
    """A run builds a module once and Ansible reuses that payload to the run's end: after an upgrade in
    the middle of the run, its payload describes the old sources and must not be kept under the new key."""
    heard = []
    keys = iter(["old", "old", "new", "new", "new", "new"])  # each task once, and again after a build
    monkeypatch.setattr(_payload_cache, "_this_key", lambda: next(keys))
    local_tmp = tmp_path / "ansible-local-1"
    local_tmp.mkdir()
    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"old payload")
    root = tmp_path / _payload_cache.STORE_NAME
    assert os.listdir(root) == ["old"] and (root / "old" / ENTRY).read_bytes() == b"old payload"
    # the collection is upgraded; the same run's next task reuses its old payload: nothing is seeded or kept
    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        pass
    other = _payload_cache.MODULE_FQN % "stella_rollback" + "-ZIP_DEFLATED-none"
    with _payload_cache.reused("stella_rollback", str(local_tmp), heard.append):
        (local_tmp / "ansiballz_cache" / other).write_bytes(b"built from the new sources, in the old run")
    assert os.listdir(root) == ["old"] and os.listdir(root / "old") == [ENTRY]
    assert heard[-2:] == ["payload store: the collection or ansible-core changed during this run, not used"] * 2
    # a new run of the new sources builds its own
    next_run = tmp_path / "ansible-local-2"
    next_run.mkdir()
    with _payload_cache.reused("stella_preflight", str(next_run), heard.append):
        assert not (next_run / "ansiballz_cache" / ENTRY).exists()
        (next_run / "ansiballz_cache" / ENTRY).write_bytes(b"new payload")
    assert (root / "new" / ENTRY).read_bytes() == b"new payload"


def test_a_payload_built_while_the_sources_changed_is_not_kept(tmp_path, monkeypatch):
    heard = []
    keys = iter(["before", "after"])
    monkeypatch.setattr(_payload_cache, "_this_key", lambda: next(keys))
    local_tmp = tmp_path / "ansible-local-1"
    local_tmp.mkdir()
    with _payload_cache.reused("stella_preflight", str(local_tmp), heard.append):
        (local_tmp / "ansiballz_cache" / ENTRY).write_bytes(b"a payload of both")
    assert os.listdir(tmp_path / _payload_cache.STORE_NAME / "before") == []
    assert heard == [
        "payload store: seeded nothing",
        "payload store: the collection or ansible-core changed during the build, not kept",
    ]
