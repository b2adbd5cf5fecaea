"""Render the collection's documentation pages for its documentation site.

antsibull-docs publishes a collection's own pages from ``docs/docsite/rst/<page>.rst``, listed in
``docs/docsite/extra-docs.yml``. The pages are written in Markdown under ``docs/``; this renders each
page the site lists into reStructuredText with pandoc (``pypandoc_binary``, a development requirement).
A link to another page of ``docs/`` points to that page on the site when the site has it, else to the
Markdown page in the repository; every other relative link points into the repository.

Usage: ``.venv/bin/python docs/docsite/render.py`` (``make docsite``); ``--check`` exits 1 when a
rendered page differs from what is committed.
"""

from __future__ import annotations

import os
import re
import sys

import pypandoc
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.dirname(HERE)
ROOT = os.path.dirname(DOCS)
RST = os.path.join(HERE, "rst")
REPOSITORY = "https://github.com/stellaops/runtime/blob/main/"
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)\)")


def pages():
    """The page names extra-docs.yml lists, in order."""
    with open(os.path.join(HERE, "extra-docs.yml"), encoding="utf-8") as handle:
        sections = yaml.safe_load(handle)["sections"]
    return [name for section in sections for name in section["toctree"]]


def absolute(markdown, listed):
    """``markdown`` with its relative links made absolute: a listed page to its site page, anything
    else to the repository (pure)."""
    def replace(match):
        target, _hash, anchor = match.group(1).partition("#")
        name = os.path.basename(target)[:-3] if target.endswith(".md") and "/" not in target else None
        if name in listed:
            return "](%s.html%s)" % (name, "#" + anchor if anchor else "")
        path = os.path.normpath(os.path.join("docs", target))
        return "](%s%s%s)" % (REPOSITORY, path, "#" + anchor if anchor else "")
    return LINK.sub(replace, markdown)


def render(name, listed):
    """The reStructuredText of page ``name`` (``docs/<name>.md``), with an anchor for the site's toctree."""
    with open(os.path.join(DOCS, name + ".md"), encoding="utf-8") as handle:
        markdown = absolute(handle.read(), listed)
    body = pypandoc.convert_text(markdown, "rst", format="gfm-gfm_auto_identifiers", extra_args=["--wrap=preserve"])
    return ".. _ansible_collections.stellaops.runtime.docsite.%s:\n\n%s" % (name.replace("-", "_"), body)


def main(argv):
    listed = pages()
    check = "--check" in argv
    stale = []
    os.makedirs(RST, exist_ok=True)
    for name in listed:
        text = render(name, set(listed))
        path = os.path.join(RST, name + ".rst")
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    extra = sorted(set(n[:-4] for n in os.listdir(RST) if n.endswith(".rst")) - set(listed))
    if check and (stale or extra):
        sys.stderr.write("docs/docsite/rst is not current (run make docsite): %s\n" % ", ".join(stale + extra))
        return 1
    for name in extra:
        os.remove(os.path.join(RST, name + ".rst"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
