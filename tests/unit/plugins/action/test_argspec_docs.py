"""Each module's documentation (with its doc fragments) documents exactly the options its argument spec
accepts: the module's ``ARGUMENT_SPEC`` for target-side modules (also those run by a
``TargetModuleAction``), the action plugin's ``ARGUMENT_SPEC`` for the controller-side ones (whose
``plugins/modules/<name>.py`` only documents them)."""

from __future__ import annotations

import ast
import importlib
import os
import re

import pytest
import yaml

from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.target_action import TargetModuleAction

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULES = os.path.join(ROOT, "plugins", "modules")
ACTIONS = os.path.join(ROOT, "plugins", "action")
FRAGMENTS = os.path.join(ROOT, "plugins", "doc_fragments")
PACKAGE = "ansible_collections.stellaops.runtime.plugins"
NAMES = sorted(name[:-3] for name in os.listdir(MODULES) if name.endswith(".py") and not name.startswith("_"))
SECRET_WORDS = re.compile(r"password|secret|token|credential|env_artifact|private_key")
SPEC_KEYS = {
    "type",
    "default",
    "choices",
    "required",
    "elements",
    "options",
    "no_log",
    "aliases",
    "apply_defaults",
    "removed_in_version",
    "removed_at_date",
    "fallback",
    "mutually_exclusive",
    "required_if",
    "required_one_of",
    "required_together",
    "required_by",
}


def literal(path, name):
    """The value of a module-level string assignment, read without importing the file."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.Assign) and any(getattr(t, "id", None) == name for t in item.targets):
                    return ast.literal_eval(item.value)
    return None


def fragment(reference):
    """``stellaops.runtime.<file>[.<VARIABLE>]`` -> the fragment's parsed YAML."""
    prefix = "stellaops.runtime."
    assert reference.startswith(prefix), "fragment %s is not this collection's" % reference
    parts = reference[len(prefix) :].split(".")
    path = os.path.join(FRAGMENTS, parts[0] + ".py")
    assert os.path.isfile(path), "fragment file %s is missing" % path
    text = literal(path, parts[1].upper() if len(parts) > 1 else "DOCUMENTATION")
    assert text is not None, "fragment %s has no such variable" % reference
    return yaml.safe_load(text) or {}


def documentation(name):
    """The module's DOCUMENTATION with its fragments' options merged in (a name may be documented once)."""
    doc = yaml.safe_load(literal(os.path.join(MODULES, name + ".py"), "DOCUMENTATION"))
    options = dict(doc.get("options") or {})
    for reference in doc.get("extends_documentation_fragment") or []:
        for option, value in (fragment(reference).get("options") or {}).items():
            assert option not in options, "%s: option %s documented by the module and by %s" % (name, option, reference)
            options[option] = value
    doc["options"] = options
    return doc


def argument_spec(name):
    """``(spec, where)``: the action plugin's spec for a controller-side action plugin, else (a
    target-side module, with or without the action that runs it) the module's."""
    module, where = None, None
    if os.path.isfile(os.path.join(ACTIONS, name + ".py")):
        module = importlib.import_module("%s.action.%s" % (PACKAGE, name))
        where = "plugins/action/%s.py" % name
    if module is None or issubclass(module.ActionModule, TargetModuleAction):
        module = importlib.import_module("%s.modules.%s" % (PACKAGE, name))
        where = "plugins/modules/%s.py" % name
    spec = getattr(module, "ARGUMENT_SPEC", None)
    assert isinstance(spec, dict), "%s defines no ARGUMENT_SPEC" % where
    return spec, where


def compare(name, documented, spec, path=""):
    """Problems between documented options and an argument spec (recursing into suboptions)."""
    problems = []
    for option in sorted(set(documented) - set(spec)):
        problems.append("%s: %s%s is documented but not accepted" % (name, path, option))
    for option in sorted(set(spec) - set(documented)):
        problems.append("%s: %s%s is accepted but not documented" % (name, path, option))
    for option in sorted(set(documented) & set(spec)):
        doc, arg, where = documented[option] or {}, spec[option], "%s: %s%s" % (name, path, option)
        unknown = set(arg) - SPEC_KEYS
        if unknown:
            problems.append("%s spec has unknown keys %s" % (where, sorted(unknown)))
        if not doc.get("description"):
            problems.append("%s has no description" % where)
        for key, fallback in (
            ("type", "str"),
            ("default", None),
            ("choices", None),
            ("required", False),
            ("elements", None),
        ):
            if doc.get(key, fallback) != arg.get(key, fallback):
                problems.append(
                    "%s %s: documented %r, spec %r" % (where, key, doc.get(key, fallback), arg.get(key, fallback))
                )
        if arg.get("required") and "default" in arg:
            problems.append("%s is required and has a default" % where)
        if SECRET_WORDS.search(option) and not arg.get("no_log"):
            problems.append("%s looks secret but is not no_log" % where)
        if arg.get("no_log") and arg.get("default") not in (None, [], {}):
            problems.append("%s is no_log with a non-empty default" % where)
        if "options" in arg or "suboptions" in doc:
            problems.extend(compare(name, doc.get("suboptions") or {}, arg.get("options") or {}, path + option + "."))
    return problems


@pytest.mark.parametrize("name", NAMES)
def test_documented_options_match_the_argument_spec(name):
    spec, _where = argument_spec(name)
    assert compare(name, documentation(name)["options"], spec) == []


@pytest.mark.parametrize("name", NAMES)
def test_documentation_is_complete(name):
    doc = documentation(name)
    assert doc["module"] == name
    for section in ("EXAMPLES", "RETURN"):
        text = literal(os.path.join(MODULES, name + ".py"), section)
        assert text and yaml.safe_load(text) is not None, "%s has no %s" % (name, section)
    assert set(doc.get("attributes") or {}) >= {"check_mode", "diff_mode"}


@pytest.mark.parametrize("name", NAMES)
def test_check_and_diff_support_match_the_attributes(name):
    attributes = documentation(name)["attributes"]
    check = attributes["check_mode"]["support"]
    diff = attributes["diff_mode"]["support"]
    plugin = None
    if os.path.isfile(os.path.join(ACTIONS, name + ".py")):
        plugin = importlib.import_module("%s.action.%s" % (PACKAGE, name)).ActionModule
    if plugin is not None and not issubclass(plugin, TargetModuleAction):
        assert bool(getattr(plugin, "_supports_check_mode", False)) == (check != "none")
        assert bool(getattr(plugin, "_supports_diff", False)) == (diff != "none")
    else:  # the module itself says what it supports
        with open(os.path.join(MODULES, name + ".py"), encoding="utf-8") as handle:
            source = handle.read()
        assert ("supports_check_mode=True" in source) == (check != "none")
        assert (re.search(r"\bmodule\._diff\b|diff=module\._diff", source) is not None) == (diff != "none")


def test_every_module_is_checked():
    assert set(NAMES) >= {
        "stella_compose_deploy",
        "stella_plan",
        "stella_preflight",
        "stella_probe",
        "stella_rollback",
    }
    for name in os.listdir(ACTIONS):
        if name.endswith(".py") and not name.startswith("_"):
            assert name[:-3] in NAMES, "action %s has no documentation stub in plugins/modules" % name


def test_compare_reports_each_kind_of_drift():
    documented = {
        "a": {"description": "x", "type": "int", "default": 1},
        "b": {"description": "x"},
        "nested": {
            "description": "x",
            "type": "list",
            "elements": "dict",
            "suboptions": {"n": {"description": "x", "choices": ["p", "q"]}},
        },
        "api_token": {"description": "x"},
    }
    spec = {
        "a": {"type": "int", "default": 2},
        "c": {"type": "str"},
        "nested": {"type": "list", "elements": "dict", "options": {"n": {"type": "str", "choices": ["p"]}}},
        "api_token": {"type": "str"},
    }
    problems = compare("m", documented, spec)
    assert problems == [
        "m: b is documented but not accepted",
        "m: c is accepted but not documented",
        "m: a default: documented 1, spec 2",
        "m: api_token looks secret but is not no_log",
        "m: nested.n choices: documented ['p', 'q'], spec ['p']",
    ]
