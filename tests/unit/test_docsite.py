"""The collection's pages on its documentation site: docs/docsite/rst is what docs/docsite/render.py
makes of the Markdown pages extra-docs.yml lists, and antsibull-docs accepts the collection's docs."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
RENDER = os.path.join(ROOT, "docs", "docsite", "render.py")


def test_the_rendered_pages_are_current():
    proc = subprocess.run([sys.executable, RENDER, "--check"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_a_stale_page_is_found(tmp_path):
    page = os.path.join(ROOT, "docs", "docsite", "rst", "install.rst")
    with open(page, encoding="utf-8") as handle:
        kept = handle.read()
    try:
        with open(page, "a", encoding="utf-8") as handle:
            handle.write("\nedited by hand\n")
        proc = subprocess.run(
            [sys.executable, RENDER, "--check"], capture_output=True, text=True, check=False, cwd=ROOT
        )
        assert proc.returncode == 1 and "docs/docsite/rst/install.rst" in proc.stderr
    finally:
        with open(page, "w", encoding="utf-8") as handle:
            handle.write(kept)


def test_every_listed_page_is_rendered_and_links_to_other_pages_stay_on_the_site():
    sys.path.insert(0, os.path.dirname(RENDER))
    try:
        import render  # pylint: disable=import-outside-toplevel,import-error
    finally:
        sys.path.pop(0)
    listed = render.pages()
    assert sorted(n[:-4] for n in os.listdir(os.path.join(ROOT, "docs", "docsite", "rst"))) == sorted(listed)
    text = render.absolute("[jobs](jobs.md#the-job-record) [lab](lab.md) [up](../README.md)", set(listed))
    assert text == (
        "[jobs](jobs.html#the-job-record) [lab](https://github.com/stellaops/runtime/blob/main/docs/lab.md) "
        "[up](https://github.com/stellaops/runtime/blob/main/README.md)"
    )


def test_antsibull_docs_accepts_the_collection_docs():
    proc = subprocess.run(
        [os.path.join(BIN, "antsibull-docs"), "lint-collection-docs", "."],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
