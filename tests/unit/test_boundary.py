"""The controller/target boundary in the tree (docs/architecture.md).

Modules and module_utils run on targets, which have Python 3 and the Docker CLI only: they may import
the standard library, ``ansible.module_utils`` and the collection's own ``module_utils``, never
``plugin_utils`` (Ansible ships it to no target) or any third-party package.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWN_TARGET = "ansible_collections.stellaops.runtime.plugins.module_utils"
TARGET_DIRS = ("plugins/modules", "plugins/module_utils")


def _files(*dirs):
    for rel in dirs:
        for directory, subdirs, names in os.walk(os.path.join(ROOT, rel)):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    yield os.path.relpath(os.path.join(directory, name), ROOT)


def imported_modules(source):
    """Every absolute module name a source file imports (pure)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.extend("%s.%s" % (node.module, alias.name) for alias in node.names)
    return names


def allowed_on_target(name):
    top = name.split(".", 1)[0]
    if top == "__future__" or top in sys.stdlib_module_names:
        return True
    if name.startswith("ansible.module_utils."):
        return True
    return name.startswith(OWN_TARGET + ".")


@pytest.mark.parametrize("path", list(_files(*TARGET_DIRS)))
def test_target_side_imports_only_stdlib_and_module_utils(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        names = imported_modules(handle.read())
    bad = [name for name in names if not allowed_on_target(name)]
    assert not bad, "%s imports %s, which targets do not have" % (path, ", ".join(bad))


@pytest.mark.parametrize(
    "source,ok",
    [
        ("import json\nfrom os import path", True),
        ("from ansible.module_utils.basic import AnsibleModule", True),
        ("from %s.contract import vocabulary" % OWN_TARGET, True),
        ("from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan", False),
        ("import requests", False),
        ("from ansible.plugins.action import ActionBase", False),
    ],
    ids=["stdlib", "ansible-module-utils", "own-module-utils", "plugin-utils", "third-party", "controller-api"],
)
def test_the_boundary_check_itself(source, ok):
    assert all(allowed_on_target(name) for name in imported_modules(source)) is ok


def test_controller_code_lives_in_plugin_utils():
    names = set(_files("plugins/plugin_utils"))
    assert {
        "plugins/plugin_utils/release/plan.py",
        "plugins/plugin_utils/release/schema.py",
        "plugins/plugin_utils/probe/verify.py",
        "plugins/plugin_utils/evidence/deployment.py",
        "plugins/plugin_utils/evidence/rollback.py",
        "plugins/plugin_utils/evidence/graph_proof.py",
        "plugins/plugin_utils/job/record.py",
        "plugins/plugin_utils/store/sql.py",
    } <= names


SIDES = ("plugins/plugin_utils", "plugins/module_utils")


def test_each_side_is_grouped_into_subpackages_that_say_what_they_own():
    """No flat module beside the subpackages; every package's ``__init__.py`` has a docstring."""
    for side in SIDES:
        flat = [name for name in os.listdir(os.path.join(ROOT, side)) if name.endswith(".py") and name != "__init__.py"]
        assert not flat, "%s holds modules outside a subpackage: %s" % (side, ", ".join(sorted(flat)))
        for directory, subdirs, _names in os.walk(os.path.join(ROOT, side)):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            init = os.path.join(directory, "__init__.py")
            assert os.path.isfile(init), "%s is not a package" % directory
            with open(init, encoding="utf-8") as handle:
                assert ast.get_docstring(ast.parse(handle.read())), "%s says nothing of what it owns" % init


def test_no_plugin_file_above_500_lines():
    long = []
    for rel in (
        "plugins/modules",
        "plugins/module_utils",
        "plugins/plugin_utils",
        "plugins/action",
        "plugins/doc_fragments",
    ):
        for path in _files(rel):
            with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                count = sum(1 for _line in handle)
            if count > 500:
                long.append("%s (%d lines)" % (path, count))
    assert not long, "files above 500 lines: %s" % ", ".join(long)


# Ansible imports an action plugin in the controller's main process before the first task that uses
# it, so what these import is paid by every playbook run. ``requests`` waits for the first HTTP call.
EVERY_RUN_ACTIONS = (
    "stella_plan",
    "stella_probe",
    "stella_evidence",
    "stella_job",
    "stella_compose_deploy",
    "stella_preflight",
    "stella_rollback",
)


@pytest.mark.parametrize("action", EVERY_RUN_ACTIONS)
def test_action_plugins_import_requests_only_when_a_request_is_sent(action):
    code = (
        "import sys\n"
        "import ansible_collections.stellaops.runtime.plugins.action.%s\n"
        "print(sorted(m for m in sys.modules if m == 'requests' or m.startswith('requests.')))\n" % action
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]", "importing the %s action plugin imported %s" % (action, out.strip())


def test_requests_is_loaded_at_first_use():
    code = (
        "import sys\n"
        "from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests\n"
        "assert 'requests' not in sys.modules\n"
        "module = _requests.load()\n"
        "print(module.__name__, 'requests' in sys.modules, _requests.available(), _requests.import_error())\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["requests", "True", "True", "None"]


# What the controller takes from the target side: the contract and the host helpers, shared by both
# sides, and the registry API's pure parsers (the controller's resolver reads what preflight reads).
SHARED_WITH_CONTROLLER = (OWN_TARGET + ".contract.", OWN_TARGET + ".host.", OWN_TARGET + ".engine.registry.")


@pytest.mark.parametrize("path", list(_files("plugins/plugin_utils", "plugins/action")))
def test_the_controller_takes_only_the_shared_packages_from_the_target_side(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        names = [n for n in imported_modules(handle.read()) if n.startswith(OWN_TARGET + ".")]
    bad = [name for name in names if not name.startswith(SHARED_WITH_CONTROLLER)]
    assert not bad, "%s imports %s from the target side" % (path, ", ".join(bad))
