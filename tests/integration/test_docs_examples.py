"""Every fenced ```yaml block of docs/*.md that is a play or a task list passes ``ansible-playbook --syntax-check``.

A block is a play list when one of its items has ``hosts`` or ``import_playbook``; otherwise a list of
mappings is a task list and is wrapped in a play. docs/roles.md and docs/playbooks.md may contain
nothing else: each of their YAML blocks must be one of the two, so no example there goes unchecked.
The collection is resolved from ``.build/collections`` (``make collection``).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
STRICT = {"roles.md", "playbooks.md"}
FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
PLAY_KEYS = {"hosts", "import_playbook", "ansible.builtin.import_playbook"}


def yaml_blocks():
    blocks = []
    for path in sorted(glob.glob(os.path.join(DOCS, "*.md"))):
        text = open(path, encoding="utf-8").read()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((os.path.basename(path), line, match.group(1)))
    return blocks


def kind(data):
    if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
        return None
    if any(PLAY_KEYS & set(item) for item in data):
        return "play"
    return "tasks"


BLOCKS = yaml_blocks()


def test_the_docs_have_examples_to_check():
    names = {name for name, _line, _text in BLOCKS}
    assert STRICT <= names, "docs/roles.md and docs/playbooks.md must have YAML examples"


@pytest.mark.parametrize("name, line, text", BLOCKS, ids=["%s:%d" % (b[0], b[1]) for b in BLOCKS])
def test_yaml_example(name, line, text, tmp_path):
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        if name in STRICT:
            pytest.fail("docs/%s:%d: not valid YAML: %s" % (name, line, exc))
        data = None
    example = kind(data)
    if example is None:
        assert name not in STRICT, "docs/%s:%d: a YAML example that is neither a play nor a task list" % (name, line)
        return  # other docs: release inputs, evidence payloads ... are checked by their own tests
    playbook = (
        text
        if example == "play"
        else yaml.safe_dump(
            [{"name": "docs example %s:%d" % (name, line), "hosts": "localhost", "gather_facts": False, "tasks": data}],
            sort_keys=False,
        )
    )
    path = tmp_path / "example.yml"
    path.write_text(playbook)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "--syntax-check", "-i", "localhost,", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, "docs/%s:%d (%s) fails --syntax-check:\n%s%s" % (
        name,
        line,
        example,
        proc.stdout,
        proc.stderr,
    )
    assert "[ERROR]" not in proc.stderr, proc.stderr
