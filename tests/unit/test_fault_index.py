"""Every stable failure code is in one table with its ``next`` hint (contract/hints.py), every code the
collection raises is in that table, and docs/faults.md indexes each one, with the same hint and a link to
where it is described. A code added without its hint and its line in the index fails here."""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract import vocabulary
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, human_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import CODES, next_step, with_next
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
CODE_RE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")
ONE_WORD_CODES = ("cancelled", "unsupported")  # the Compose provider's (the scan looks for snake_case)
ROW_RE = re.compile(r"^\| `(?P<code>[a-z0-9_]+)` \| (?P<next>.*) \| \[(?P<label>[^]]+)\]\((?P<link>[^)]+)\) \|$")


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    found, fence = set(), False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("```"):
                fence = not fence
            elif line.startswith("#") and not fence:
                found.add(slug(line.lstrip("#")))
    return found


def index_rows():
    with open(os.path.join(DOCS, "faults.md"), encoding="utf-8") as handle:
        text = handle.read()
    assert "\n## Index by code\n" in text
    rows = [line for line in text.split("\n## Index by code\n", 1)[1].splitlines() if line.startswith("| `")]
    return rows


# A code printed at the start of a ``stella`` command's error line: ``stella report: report_write_failed: ...``.
PRINTED_RE = re.compile(r"^stella( [a-z-]+)?: (?P<code>[a-z][a-z0-9]*(_[a-z0-9]+)+): ")


def raised_codes():
    """Every code string the collection's Python raises or returns: the first argument of ``StellaError`` or
    of any of its subclasses (``ProviderError``, ``TrafficError``, ...), a ``code=`` keyword, a ``"code":``
    dict value, directly or through a module-level constant, and a code a ``stella`` command prints at the
    start of its error line."""
    constants, trees, bases = {}, [], {}
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        trees.append((path, tree))
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                constants.setdefault(node.targets[0].id, set()).add(node.value.value)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    base.id if isinstance(base, ast.Name) else base.attr
                    for base in node.bases
                    if isinstance(base, (ast.Name, ast.Attribute))
                )
    errors = {"StellaError"}
    while True:
        more = {name for name, parents in bases.items() if parents & errors} - errors
        if not more:
            break
        errors |= more

    def values(node):
        if isinstance(node, ast.Constant):
            return [node.value]
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name and len(constants.get(name, ())) == 1:
            return list(constants[name])
        if isinstance(node, ast.IfExp):
            return values(node.body) + values(node.orelse)
        if isinstance(node, ast.BoolOp):
            return [v for part in node.values for v in values(part)]
        return []

    found = {}
    for path, tree in trees:
        for node in ast.walk(tree):
            candidates = []
            if isinstance(node, ast.Call):
                func = (
                    node.func.id
                    if isinstance(node.func, ast.Name)
                    else node.func.attr
                    if isinstance(node.func, ast.Attribute)
                    else None
                )
                if func in errors and node.args:
                    candidates += values(node.args[0])
                candidates += [v for kw in node.keywords if kw.arg == "code" for v in values(kw.value)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PRINTED_RE.match(node.value):
                candidates.append(PRINTED_RE.match(node.value).group("code"))
            elif isinstance(node, ast.Dict):
                candidates += [
                    v
                    for key, value in zip(node.keys, node.values)
                    if isinstance(key, ast.Constant) and key.value == "code"
                    for v in values(value)
                ]
            for value in candidates:
                if isinstance(value, str) and CODE_RE.match(value):
                    found.setdefault(value, os.path.relpath(path, ROOT))
    return found


def test_every_code_the_collection_raises_has_its_entry():
    found = raised_codes()
    assert len(found) > 80  # the scan sees the codes (it would pass on nothing otherwise)
    missing = {code: path for code, path in found.items() if code not in CODES}
    assert not missing, (
        "add these codes to plugins/module_utils/contract/hints.py CODES and docs/faults.md: %s" % missing
    )
    # the scan follows subclasses of StellaError and the codes a stella command prints
    for code in (
        "compose_protocol",
        "image_stream_truncated",
        "invalid_arguments",
        "invalid_option",
        "report_write_failed",
        "traffic_adapter_failed",
    ):
        assert code in found, code


def test_every_code_the_collection_raises_has_a_hint_and_a_line_in_the_index():
    """A code the collection raises tells the operator what to do next (``None`` only for the Compose
    provider's one-word answers, which are the answer itself), and docs/faults.md indexes it."""
    indexed = {ROW_RE.match(row).group("code") for row in index_rows() if ROW_RE.match(row)}
    found = raised_codes()
    no_hint = sorted(code for code in found if next_step(code) is None and code not in ONE_WORD_CODES)
    assert not no_hint, "give these codes a next hint in plugins/module_utils/contract/hints.py: %s" % no_hint
    not_indexed = sorted(code for code in found if code not in indexed)
    assert not not_indexed, "add these codes to docs/faults.md's index by code: %s" % not_indexed


def test_every_code_the_vocabulary_names_has_its_entry():
    named = (
        set(vocabulary.PREFLIGHT_CODES)
        | set(vocabulary.RUNTIME_INSTALL_CODES)
        | set(vocabulary.OFFLINE_CODES)
        | {
            vocabulary.INVALID_PAYLOAD,
            vocabulary.UNREACHABLE_CODE,
            vocabulary.PROJECT_BUSY,
            vocabulary.JOB_INTERRUPTED,
            vocabulary.JOB_CHECK_MODE,
            getattr(vocabulary, "CLAIM_SUPERSEDED", "claim_superseded"),
        }
    )
    assert named - set(CODES) == set()


def test_the_fault_index_has_one_line_per_code_with_its_hint_and_a_link_that_resolves():
    rows = index_rows()
    seen = []
    for row in rows:
        match = ROW_RE.match(row)
        assert match, row
        code = match.group("code")
        seen.append(code)
        assert code in CODES, "docs/faults.md indexes %s, which hints.CODES does not know" % code
        assert match.group("next") == (CODES[code] or "-"), code
        page, _sep, anchor = match.group("link").partition("#")
        path = os.path.join(DOCS, page) if page else os.path.join(DOCS, "faults.md")
        assert os.path.isfile(path) and anchor in anchors(path), (code, match.group("link"))
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    missing = sorted(set(CODES) - set(seen))
    assert not missing, "docs/faults.md's index by code lacks: %s" % ", ".join(missing)


@pytest.mark.parametrize(
    "code",
    [
        "project_busy",
        "workdir_not_writable",
        "job_store_missing",
        "registry_auth_failed",
        "disk_space_low",
        "claim_superseded",
        "target_unreachable",
        "image_unresolved",
    ],
)
def test_codes_an_operator_fixes_name_the_next_step(code):
    assert next_step(code)


def test_hints_are_one_line_of_plain_text():
    for code, hint in CODES.items():
        assert CODE_RE.match(code) or code in ONE_WORD_CODES, code
        if hint is not None:
            assert hint == " ".join(hint.split()) and "|" not in hint and "<" not in hint and len(hint) < 160, code
    assert "stella show" in CODES["claim_superseded"] and "stella interrupt" in CODES["project_busy"]
    assert "--store" in CODES["job_store_missing"] and "registry_credentials" in CODES["registry_auth_failed"]


def test_failures_carry_the_hint_where_their_code_appears():
    assert StellaError("project_busy", "held by job-1").as_dict()["next"] == next_step("project_busy")
    assert "next" not in StellaError("cancelled", "by Compose").as_dict()
    assert with_next({"code": "job_store_missing", "next": "kept"})["next"] == "kept"
    assert with_next({"code": "no_such_code"}) == {"code": "no_such_code"}
    targets = {n: {"targetId": "id-" + n, "targetName": n, "projectName": "shop"} for n in ("a", "b")}
    t0 = "2026-03-01T10:00:00.000000Z"
    record = _job.start(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a", "b"]],
            targets=targets,
            options={},
            now=t0,
        ),
        t0,
    )
    record = _job.finish_target(record, "a", succeeded=True, now=t0)
    record = _job.finish_target(record, "b", succeeded=False, now=t0, reason="busy", code="workdir_not_writable")
    assert "next" not in record["targets"]["a"]
    assert record["targets"]["b"]["next"] == next_step("workdir_not_writable")
    assert "    next: %s" % next_step("workdir_not_writable") in _job_view.render_text(record).splitlines()


def test_byte_counts_read_in_binary_units():
    assert [human_bytes(n) for n in (0, 999, 1024, 1536, 2 * 1024**2, 1024**3, 5 * 1024**4)] == [
        "0 B",
        "999 B",
        "1 KiB",
        "1.5 KiB",
        "2 MiB",
        "1 GiB",
        "5 TiB",
    ]
