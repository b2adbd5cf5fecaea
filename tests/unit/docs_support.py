"""Reading the commands a doc shows, for the tests that run them as written."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def doc_text(name):
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as handle:
        return handle.read()


def doc_section(text, heading):
    """The part of ``text`` from its ``## heading...`` line to the next ``## `` heading (or the end)."""
    section = text[text.index("## " + heading) :]
    return section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section


def doc_commands(text, prefix):
    """The lines of ``text`` that start with ``prefix`` (stripped)."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith(prefix)]


def options_in(text):
    """Every ``--option`` ``text`` names."""
    return set(OPTION.findall(text))


def parser_options(parser):
    """The long options of an argparse parser, ``-h`` left out."""
    return {a.option_strings[0] for a in parser._actions if a.option_strings} - {"-h"}  # pylint: disable=protected-access
