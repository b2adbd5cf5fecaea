"""The pip package's ``stella`` (python/stellaops_runtime) with a collection of another version: it says which
version it found where, and whether it can run it; with its own version it says nothing more. Fake
collections in a temporary collections path, each run in a fresh Python (a collection is imported by name)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "python")
sys.path.insert(0, PACKAGE)

import stellaops_runtime  # noqa: E402  pylint: disable=wrong-import-position

FAKE_MAIN = """
import sys


def main(argv):
    sys.stdout.write("collection command %s\\n" % " ".join(argv[1:]))
    return 0
"""


def own_version():
    with open(os.path.join(PACKAGE, "pyproject.toml"), encoding="utf-8") as handle:
        return re.search(r'^version = "([^"]+)"$', handle.read(), re.M).group(1)


def collection(tmp_path, version, command=True, manifest=False):
    """A stellaops.runtime of ``version`` under ``tmp_path/collections`` (its root returned): with the
    stella command's module (``command``), its version in MANIFEST.json (``manifest``) or galaxy.yml."""
    root = tmp_path / "collections"
    home = root / "ansible_collections" / "stellaops" / "runtime"
    home.mkdir(parents=True)
    if manifest:
        (home / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
    else:
        (home / "galaxy.yml").write_text("namespace: stellaops\nname: runtime\nversion: %s\n" % version)
    if command:
        entry = home.joinpath(*stellaops_runtime.ENTRY)
        entry.parent.mkdir(parents=True)
        entry.write_text(FAKE_MAIN)
    return root


def stella(tmp_path, root, *argv):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "ANSIBLE_COLLECTIONS_PATH": str(root),
        "ANSIBLE_CONFIG": os.devnull,
    }
    code = "import sys; sys.path.insert(0, %r); import stellaops_runtime; sys.exit(stellaops_runtime.main(%r))" % (
        PACKAGE,
        ["stella"] + list(argv),
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=str(tmp_path),
        timeout=60,
    )


def test_the_package_states_the_version_of_its_pyproject():
    assert stellaops_runtime.VERSION == own_version()


def test_the_same_version_runs_without_a_word(tmp_path):
    done = stella(tmp_path, collection(tmp_path, own_version()), "list")
    assert (done.returncode, done.stdout, done.stderr) == (0, "collection command list\n", "")


@pytest.mark.parametrize("version,word,manifest", [("99.0.0", "newer", True), ("0.0.1", "older", False)])
def test_another_version_that_has_the_command_runs_and_says_which_it_found(tmp_path, version, word, manifest):
    root = collection(tmp_path, version, manifest=manifest)
    done = stella(tmp_path, root, "--version")
    assert (done.returncode, done.stdout) == (0, "collection command --version\n"), done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("stella: warning: ")
    where = str(root / "ansible_collections" / "stellaops" / "runtime")
    for part in (
        "stellaops.runtime %s" % version,
        where,
        "%s than this stella (stellaops-runtime %s)" % (word, own_version()),
        "runs it",
        "stellaops-runtime==%s" % version,
    ):
        assert part in done.stderr, (part, done.stderr)


def test_an_older_collection_without_the_command_is_named_not_reported_missing(tmp_path):
    root = collection(tmp_path, "0.1.0", command=False)
    done = stella(tmp_path, root, "list")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("stella: collection_incompatible: ") and done.stderr.count("\n") == 1, done.stderr
    for part in (
        "stellaops.runtime 0.1.0",
        str(root),
        "older than this stella (stellaops-runtime %s); this stella cannot run it" % own_version(),
        "ansible-galaxy collection install --upgrade stellaops.runtime",
    ):
        assert part in done.stderr, (part, done.stderr)


def test_a_collection_whose_command_cannot_be_imported_is_one_line(tmp_path):
    root = collection(tmp_path, "99.0.0")
    root.joinpath("ansible_collections", "stellaops", "runtime", *stellaops_runtime.ENTRY).write_text(
        "import stella_needs_this_module_99\n"
    )
    done = stella(tmp_path, root, "list")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("stella: collection_incompatible: ") and done.stderr.count("\n") == 1, done.stderr
    assert "stellaops.runtime 99.0.0" in done.stderr and "stella_needs_this_module_99" in done.stderr
    assert "this stella cannot run it" in done.stderr
    assert "python3 -m pip install 'stellaops-runtime==99.0.0'" in done.stderr


def test_no_collection_at_all_is_still_collection_missing(tmp_path):
    done = stella(tmp_path, tmp_path / "nowhere", "list")
    assert done.returncode == 1 and done.stderr.startswith("stella: collection_missing: ")
