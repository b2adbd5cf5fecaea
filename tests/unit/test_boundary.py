"""The controller/target boundary in the tree (docs/architecture.md).

Modules and module_utils run on targets, which have Python 3 and the Docker CLI only: they may import
the standard library, ``ansible.module_utils`` and the collection's own ``module_utils``, never
``plugin_utils`` (Ansible ships it to no target) or any third-party package.
"""

from __future__ import annotations

import ast
import collections
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


def formatted_line_count(path):
    """The lines of ``path`` once formatted (``ruff format``, ruff.toml): the size rule counts code as the
    formatter lays it out, so it cannot be met by packing more onto each line."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        source = handle.read()
    proc = subprocess.run(
        [RUFF, "format", "--config", os.path.join(ROOT, "ruff.toml"), "--stdin-filename", path, "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.count("\n")


RUFF = os.path.join(os.path.dirname(sys.executable), "ruff")
PLUGIN_DIRS = (
    "plugins/modules",
    "plugins/module_utils",
    "plugins/plugin_utils",
    "plugins/action",
    "plugins/doc_fragments",
)


def test_no_plugin_file_above_500_lines_once_formatted():
    long = [
        "%s (%d lines)" % (path, count)
        for path in _files(*PLUGIN_DIRS)
        for count in [formatted_line_count(path)]
        if count > 500
    ]
    assert not long, "files above 500 lines once formatted: %s" % ", ".join(long)


def test_the_size_rule_counts_formatted_lines():
    packed = "x = {%s}\n" % ", ".join("'k%d': %d" % (i, i) for i in range(60))
    path = os.path.join(".build", "size-rule-probe.py")
    os.makedirs(os.path.join(ROOT, ".build"), exist_ok=True)
    with open(os.path.join(ROOT, path), "w", encoding="utf-8") as handle:
        handle.write(packed)
    assert packed.count("\n") == 1 and formatted_line_count(path) == 62


# Ansible imports an action plugin in the controller's main process before the first task that uses
# it, so what these import is paid by every playbook run. ``requests`` waits for the first HTTP call.
EVERY_RUN_ACTIONS = (
    "stella_plan",
    "stella_probe",
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


# The controller's packages, bottom to top (docs/architecture.md): a package imports only itself and the
# packages of lower layers, never a sibling of its own layer, never one above.
CONTROLLER_LAYERS = (
    ("execution",),
    ("trust",),
    ("evidence",),
    ("probe", "traffic"),
    ("release",),
    ("job",),
    ("store",),
    ("run",),
    ("provider",),
    ("command",),
)
# The target side's packages, bottom to top.
TARGET_LAYERS = (
    ("contract",),
    ("host",),
    ("engine",),
    ("agent",),
    ("compose", "docker", "relay"),
)
OWN = "ansible_collections.stellaops.runtime.plugins."


def package_of(name):
    """The collection package an absolute module name belongs to: ``plugin_utils.<pkg>``,
    ``module_utils.<pkg>``, ``action``, ``modules`` or ``doc_fragments``; ``None`` outside the collection."""
    if not name.startswith(OWN):
        return None
    parts = name[len(OWN) :].split(".")
    if parts[0] in ("plugin_utils", "module_utils") and len(parts) > 1:
        return "%s.%s" % (parts[0], parts[1])
    return parts[0]


def import_graph(sources):
    """``{package: {imported package: [importing file, ...]}}`` from ``{path: source}`` (pure): every import
    statement counts, at module level or inside a function."""
    graph = collections.defaultdict(lambda: collections.defaultdict(list))
    for path, source in sources.items():
        parts = path.split("/")
        own = "%s.%s" % (parts[1], parts[2]) if parts[1] in ("plugin_utils", "module_utils") else parts[1]
        for name in imported_modules(source):
            other = package_of(name)
            if other and other != own:
                graph[own][other].append(path)
    return graph


def cycles(graph):
    """The strongly connected components of more than one package (Tarjan), each sorted (pure)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, {}):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def upward_imports(graph, side, layers):
    """``["a -> b (file, ...)"]`` for each import of a package of ``side`` that is not below it (pure)."""
    rank = {"%s.%s" % (side, name): level for level, names in enumerate(layers) for name in names}
    bad = []
    for source, targets in sorted(graph.items()):
        for target, files in sorted(targets.items()):
            if source in rank and target in rank and rank[target] >= rank[source]:
                bad.append("%s -> %s (%s)" % (source, target, ", ".join(sorted(set(files)))))
    return bad


def collection_graph():
    sources = {}
    for path in _files("plugins"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            sources[path.replace(os.sep, "/")] = handle.read()
    return import_graph(sources)


def test_every_package_has_a_layer():
    on_disk = {
        "%s.%s" % (side, name)
        for side in ("plugin_utils", "module_utils")
        for name in os.listdir(os.path.join(ROOT, "plugins", side))
        if os.path.isdir(os.path.join(ROOT, "plugins", side, name)) and name != "__pycache__"
    }
    layered = {"plugin_utils.%s" % n for names in CONTROLLER_LAYERS for n in names} | {
        "module_utils.%s" % n for names in TARGET_LAYERS for n in names
    }
    assert on_disk == layered, "packages without a layer: %s; layers without a package: %s" % (
        sorted(on_disk - layered),
        sorted(layered - on_disk),
    )


def test_no_package_imports_upward_or_sideways():
    graph = collection_graph()
    bad = upward_imports(graph, "plugin_utils", CONTROLLER_LAYERS) + upward_imports(
        graph, "module_utils", TARGET_LAYERS
    )
    assert not bad, "imports against the layers: %s" % "; ".join(bad)


def test_no_package_cycle_in_the_collection():
    found = cycles(collection_graph())
    assert not found, "package cycles: %s" % "; ".join(" <-> ".join(c) for c in found)


PURE_JOB_CORE_FORBIDS = ("os", "subprocess", "socket", "sqlite3", "shutil", "tempfile", "time", "psutil", "requests")


@pytest.mark.parametrize("path", list(_files("plugins/plugin_utils/job")))
def test_the_job_core_does_no_io(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        source = handle.read()
    names = [n.split(".")[0] for n in imported_modules(source)]
    assert not [n for n in names if n in PURE_JOB_CORE_FORBIDS], "%s imports %s" % (path, names)
    assert "task_vars" not in source and "open(" not in source, "%s reads task variables or files" % path


@pytest.mark.parametrize(
    "sources,expected_cycles,expected_upward",
    [
        (
            {
                "plugins/plugin_utils/job/a.py": "from %splugin_utils.store import sql" % OWN,
                "plugins/plugin_utils/store/sql.py": "def f():\n    from %splugin_utils.job import a" % OWN,
            },
            [["plugin_utils.job", "plugin_utils.store"]],
            ["plugin_utils.job -> plugin_utils.store (plugins/plugin_utils/job/a.py)"],
        ),
        (
            {
                "plugins/plugin_utils/traffic/a.py": "import %splugin_utils.probe.b" % OWN,
                "plugins/plugin_utils/run/s.py": "from %splugin_utils.job import record" % OWN,
            },
            [],
            ["plugin_utils.traffic -> plugin_utils.probe (plugins/plugin_utils/traffic/a.py)"],
        ),
        (
            {
                "plugins/action/x.py": "from %splugin_utils.run import runner" % OWN,
                "plugins/plugin_utils/run/r.py": "from %smodule_utils.contract import errors" % OWN,
            },
            [],
            [],
        ),
    ],
    ids=["lazy-import-cycle", "same-layer-sibling", "downward-only"],
)
def test_the_layer_checks_themselves(sources, expected_cycles, expected_upward):
    graph = import_graph(sources)
    assert cycles(graph) == expected_cycles
    assert upward_imports(graph, "plugin_utils", CONTROLLER_LAYERS) == expected_upward


def test_the_unit_tests_mirror_the_packages_they_test():
    """tests/unit/plugins/<side>/<package>/test_*.py: no test file sits beside the packages, none in a
    directory that names no package of its side."""
    misplaced = []
    for side in ("plugin_utils", "module_utils"):
        packages = set(os.listdir(os.path.join(ROOT, "plugins", side)))
        base = os.path.join(ROOT, "tests", "unit", "plugins", side)
        for directory, subdirs, names in os.walk(base):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            for name in names:
                if name.startswith("test_") and name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(directory, name), base).split(os.sep)
                    if len(rel) != 2 or rel[0] not in packages:
                        misplaced.append(os.path.join(side, *rel))
    assert not misplaced, "unit tests outside their package's directory: %s" % ", ".join(sorted(misplaced))
