"""docs/architecture.md names every file under plugins/ as it is, and names none that is not there.

A file is named by its path relative to ``plugins/plugin_utils/`` or ``plugins/module_utils/``
(``run/start.py``, ``compose/apply.py``), or relative to ``plugins/`` (``modules/stella_job.py``), or
from the checkout root (``plugins/action/stella_job.py``). A path the page names is checked against the
tree unless it starts with a top-level directory of the checkout other than ``plugins`` (``tests/...``,
``docs/...``): a path under ``plugins/`` that is gone fails the test as surely as a file not named.
"""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGINS = os.path.join(ROOT, "plugins")
DOC = os.path.join(ROOT, "docs", "architecture.md")
# The roots a path the page names may be relative to, most specific first.
ROOTS = ("plugins/plugin_utils/", "plugins/module_utils/", "plugins/")
# A path: directories and a file name, not part of a longer path or word.
PATH_RE = re.compile(r"(?<![\w./<>-])((?:[\w-]+/)+[\w-]+\.py)(?![\w/])")


def plugin_files():
    """Every ``.py`` file under plugins/ but ``__init__.py``, relative to the checkout root."""
    found = []
    for directory, dirs, files in os.walk(PLUGINS):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py") and name != "__init__.py":
                found.append(os.path.relpath(os.path.join(directory, name), ROOT).replace(os.sep, "/"))
    return found


def named_paths(text):
    """Every ``dir/.../file.py`` path the text names (pure)."""
    return {m.group(1) for m in PATH_RE.finditer(text)}


def candidates(path):
    """How a file under plugins/ may be named: from the checkout root, from plugins/, and from
    plugins/plugin_utils/ or plugins/module_utils/ (pure)."""
    names = {path}
    for root in ROOTS:
        if path.startswith(root):
            names.add(path[len(root) :])
    return names


def resolve(path, exists, top_level):
    """``True`` when ``path`` names a file that exists under plugins/, ``False`` when it names none,
    ``None`` when it is not a path under plugins/ (``tests/...``, ``roles/...``) (pure over ``exists``)."""
    first = path.split("/", 1)[0]
    if first != "plugins" and first in top_level:
        return None
    if path.startswith("plugins/"):
        return exists(path)
    return any(exists(root + path) for root in ROOTS)


def unnamed_and_missing(text, files, exists, top_level):
    """``(files the text does not name, paths it names under plugins/ that do not exist)`` (pure)."""
    named = named_paths(text)
    unnamed = [f for f in files if not candidates(f) & named]
    missing = sorted(p for p in named if resolve(p, exists, top_level) is False)
    return unnamed, missing


def _exists(path):
    return os.path.isfile(os.path.join(ROOT, path))


def _top_level():
    return {name for name in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, name))}


def _doc():
    with open(DOC, encoding="utf-8") as handle:
        return handle.read()


def test_every_plugin_file_is_named_in_the_architecture_page():
    unnamed, _missing = unnamed_and_missing(_doc(), plugin_files(), _exists, _top_level())
    assert not unnamed, "docs/architecture.md does not name: %s" % ", ".join(unnamed)


def test_every_plugin_path_the_architecture_page_names_exists():
    _unnamed, missing = unnamed_and_missing(_doc(), plugin_files(), _exists, _top_level())
    assert not missing, "docs/architecture.md names files that do not exist: %s" % ", ".join(missing)


TREE = {
    "plugins/plugin_utils/run/start.py",
    "plugins/module_utils/compose/apply.py",
    "plugins/modules/stella_job.py",
    "plugins/action/stella_job.py",
}


@pytest.mark.parametrize(
    "text, unnamed, missing",
    [
        (
            "`run/start.py`, `compose/apply.py`, `modules/stella_job.py`, `plugins/action/stella_job.py`",
            [],
            [],
        ),
        # a name relative to plugins/ or plugins/plugin_utils/ counts; a bare file name does not
        (
            "plugin_utils/run/start.py, module_utils/compose/apply.py, stella_job.py",
            ["plugins/action/stella_job.py", "plugins/modules/stella_job.py"],
            [],
        ),
        # gone or misspelled files under plugins/ are reported; paths outside plugins/ are not checked
        (
            "`run/start.py` `compose/apply.py` `modules/stella_job.py` `action/stella_job.py` "
            "`job/steps.py` `plugins/action/stella_evidence.py` `tests/unit/test_boundary.py` `roles/x/y.py`",
            [],
            ["job/steps.py", "plugins/action/stella_evidence.py"],
        ),
        # a path inside a longer one is not a name of its own; a placeholder is no path
        ("tests/unit/plugins/module_utils/compose/apply.py, plugins/action/<name>.py", sorted(TREE), []),
    ],
)
def test_the_check_itself(text, unnamed, missing):
    found = unnamed_and_missing(text, sorted(TREE), TREE.__contains__, {"plugins", "tests", "roles", "docs"})
    assert (sorted(found[0]), found[1]) == (unnamed, missing)
