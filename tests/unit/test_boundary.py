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
        for name in sorted(os.listdir(os.path.join(ROOT, rel))):
            if name.endswith(".py"):
                yield os.path.join(rel, name)


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


@pytest.mark.parametrize("source,ok", [
    ("import json\nfrom os import path", True),
    ("from ansible.module_utils.basic import AnsibleModule", True),
    ("from %s import _contract" % OWN_TARGET, True),
    ("from ansible_collections.stellaops.runtime.plugins.plugin_utils import _plan", False),
    ("import requests", False),
    ("from ansible.plugins.action import ActionBase", False),
], ids=["stdlib", "ansible-module-utils", "own-module-utils", "plugin-utils", "third-party", "controller-api"])
def test_the_boundary_check_itself(source, ok):
    assert all(allowed_on_target(name) for name in imported_modules(source)) is ok


def test_controller_code_lives_in_plugin_utils():
    names = {os.path.basename(p) for p in _files("plugins/plugin_utils")}
    assert {"_plan.py", "_release.py", "_probe.py", "_evidence.py", "_rollback_evidence.py", "_graph_proof.py",
            "_naming.py", "_lock.py", "_payloads.py"} <= names


def test_no_plugin_file_above_500_lines():
    long = []
    for rel in ("plugins/modules", "plugins/module_utils", "plugins/plugin_utils", "plugins/action",
                "plugins/doc_fragments"):
        for path in _files(rel):
            with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
                count = sum(1 for _line in handle)
            if count > 500:
                long.append("%s (%d lines)" % (path, count))
    assert not long, "files above 500 lines: %s" % ", ".join(long)


# Ansible imports an action plugin in the controller's main process before the first task that uses
# it, so what these import is paid by every playbook run. ``requests`` waits for the first HTTP call.
EVERY_RUN_ACTIONS = ("stella_plan", "stella_probe", "stella_evidence", "stella_job", "stella_compose_deploy",
                     "stella_preflight", "stella_rollback")


@pytest.mark.parametrize("action", EVERY_RUN_ACTIONS)
def test_action_plugins_import_requests_only_when_a_request_is_sent(action):
    code = ("import sys\n"
            "import ansible_collections.stellaops.runtime.plugins.action.%s\n"
            "print(sorted(m for m in sys.modules if m == 'requests' or m.startswith('requests.')))\n" % action)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "[]", "importing the %s action plugin imported %s" % (action, out.strip())


def test_requests_is_loaded_at_first_use():
    code = ("import sys\n"
            "from ansible_collections.stellaops.runtime.plugins.plugin_utils import _requests\n"
            "assert 'requests' not in sys.modules\n"
            "module = _requests.load()\n"
            "print(module.__name__, 'requests' in sys.modules, _requests.available(), _requests.import_error())\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["requests", "True", "True", "None"]
