# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella evidence JOB [--output DIR] [--json]`` (docs/stella-command.md): the evidence documents the
job store keeps for a job, listed (name, size, SHA-256), or exported as the evidence tree a job's
``stella_evidence_dir`` receives (``jobs/<job>/job.json``, ``<project>/<job>/<target>/deployment.json``,
...), each file checked against its SHA-256 before anything is written. A signed job's envelopes
(``<document>.dsse.json``, docs/trust.md) are documents like the others: listed and exported beside their
documents, so ``stella verify JOB --key PUB --evidence-dir DIR`` checks the exported tree.

An export never changes a file that is there: a file with the same bytes is kept, one with other bytes
fails the export (``evidence_conflict``) before any file is written.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import store as _store_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location


def evidence_parser():
    parser = argparse.ArgumentParser(
        prog="stella evidence",
        description="The evidence documents the job store "
        "keeps for a job: listed, or exported as an evidence directory "
        "(docs/stella-command.md).",
    )
    parser.add_argument("job", metavar="JOB", help="the job id (stella list shows them)")
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="write the documents under DIR, as the job's evidence "
        "directory holds them (existing files with the same bytes are kept)",
    )
    parser.add_argument("--json", action="store_true", help="print {store, jobId, documents} as JSON")
    return _location.add_options(parser)


def safe_name(name):
    """``name`` when it is a relative path inside an evidence directory, else ``evidence_invalid``."""
    normal = posixpath.normpath(name)
    if normal != name or normal.startswith(("/", "../")) or normal in (".", ".."):
        raise StellaError(
            "evidence_invalid",
            "the job store names a document %r, which is not a path inside an "
            "evidence directory; nothing was written" % name,
        )
    return name


def plan_export(documents, output):
    """``[(path, data)]`` to write for ``documents`` (``{name: bytes}``) under ``output``: files already
    there with the same bytes are left out; one with other bytes is ``evidence_conflict`` (pure but
    for reading the files that are there)."""
    writes = []
    for name in sorted(documents):
        path = os.path.join(output, *safe_name(name).split("/"))
        data = documents[name]
        try:
            with open(path, "rb") as handle:
                present = handle.read()
        except FileNotFoundError:
            writes.append((path, data))
            continue
        if present != data:
            raise StellaError(
                "evidence_conflict",
                "%s is there with other content than the job store keeps "
                "(sha256 %s, not %s); nothing was written" % (path, sha256_bytes(present), sha256_bytes(data)),
            )
    return writes


def evidence(argv, stdout=None, stderr=None):
    """``stella evidence``: 0 when the documents were listed or exported, 1 with one error line when the
    store, the job or a document cannot be read or written, 2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = _store_cli.parse_command(evidence_parser(), argv, provider_options=False)
    if options is None:
        return rc
    try:
        where = _location.resolve(options)
        with _store_cli.existing_store(where.location, where.source) as store:
            if store.get(options.job) is None:
                raise StellaError("job_not_found", "no job %s in the job store %s" % (options.job, store.location))
            index = store.document_index(options.job)
            documents = {name: store.document(options.job, name) for name in index} if options.output else {}
        for name, data in documents.items():
            if data is None or sha256_bytes(data) != index[name]["sha256"]:
                raise StellaError(
                    "evidence_corrupt",
                    "the job store's document %s of job %s does not hash to the "
                    "SHA-256 recorded with it; nothing was written" % (name, options.job),
                )
        if options.output:
            writes = plan_export(documents, options.output)
            for path, data in writes:
                os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
                atomic_write(path, data, mode=0o640)
    except StellaError as exc:
        return _store_cli.fail_line(stderr, "evidence", exc)
    except OSError as exc:
        return _store_cli.fail_line(stderr, "evidence", StellaError("evidence_write_failed", str(exc)))
    if options.json:
        stdout.write(
            json.dumps(
                {"store": _location.shown(where), "jobId": options.job, "documents": index}, indent=2, sort_keys=True
            )
            + "\n"
        )
    elif options.output:
        stdout.write(
            "%d documents of job %s in %s (%d written, %d already there)\n"
            % (len(documents), options.job, options.output, len(writes), len(documents) - len(writes))
        )
    else:
        stdout.write("store: %s\n" % _location.describe(where))
        for name, entry in index.items():
            stdout.write("%s  %8d  %s\n" % (entry["sha256"], entry["size"], name))
        if not index:
            stdout.write("no evidence documents kept for job %s\n" % options.job)
    return 0
