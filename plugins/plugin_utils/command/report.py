# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella report`` (docs/report.md): the HTML evidence report of a job, from the evidence the job store
keeps for it or, with ``--evidence-dir``, from its evidence directory (command/report_files.py), every
document checked against the SHA-256 the store recorded with it.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import report_files as _report_files
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import (
    STORE_HELP,
    chosen_store,
    fail_line,
    parse_command,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as _report
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import checked_document, stored_evidence


def report_parser():
    """``stella report JOB [--store LOCATION] [--evidence-dir DIR] [--output FILE]`` (docs/report.md)."""
    parser = argparse.ArgumentParser(
        prog="stella report", description="Render the HTML evidence report of a deployment job (docs/report.md)."
    )
    parser.add_argument("job", metavar="JOB", help="the job id")
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    parser.add_argument(
        "--evidence-dir",
        metavar="DIR",
        help="the evidence directory the job wrote to: its files "
        "are linked and hashed, and the report goes to DIR/jobs/JOB/report.html",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="where to write the report ('-': stdout; default: next to "
        "the job's evidence with --evidence-dir, else stdout)",
    )
    return parser


def report(argv, stdout=None, stderr=None):
    """``stella report``: 0 when the report was written, 1 with one error line when the job (or its
    store) does not exist or cannot be read, or after writing the report when an evidence document
    failed its SHA-256 check (``evidence_corrupt``: the page shows it as corrupt, never its contents),
    2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = parse_command(report_parser(), argv)
    if options is None:
        return rc
    corrupt = {}
    try:
        with chosen_store(options) as store:
            record = store.get(options.job)
            location = store.location
            if record is None:
                raise StellaError("job_not_found", "no job %s in the job store %s" % (options.job, location))
            index = store.document_index(record["jobId"])
            # without an evidence directory, the evidence the job store keeps for the job
            files, deployments = ({}, {}) if options.evidence_dir else stored_evidence(store, record, corrupt)
            stored_rollback = files.get(_report.ROLLBACK_EVIDENCE_FILE)
            rollback = None
            if stored_rollback and not stored_rollback.get("corrupt"):
                rollback = checked_document(store, record["jobId"], stored_rollback["document"], index)
        # the job's own files in an evidence directory are checked against the copies the store keeps
        recorded = {
            name: index[document]["sha256"]
            for name, document in (
                (name, posixpath.join(job_evidence_dir("", record["jobId"]), name)) for name in _report.JOB_FILES
            )
            if document in index
        }
        directory = job_evidence_dir(options.evidence_dir, record["jobId"]) if options.evidence_dir else None
        if directory and options.output is None:
            written = _report_files.write_report(record, directory, recorded, corrupt)
            stdout.write("report: %s\n" % written["path"])
            return corrupt_line(stderr, corrupt)
        if directory:
            files, rollback, deployments = _report_files.load_evidence(record, directory, recorded, corrupt)
        to_stdout = options.output in (None, "-")
        if to_stdout:  # links relative to the job's evidence directory (none without one)
            base = os.path.abspath(directory) if directory else None
        else:
            base = os.path.dirname(os.path.abspath(options.output))
        page = _report.render_report(record, files, rollback, deployments, base=base, corrupt=corrupt)
        if to_stdout:
            stdout.write(page)
        else:
            atomic_write(options.output, page.encode("utf-8"), mode=0o640)
            stdout.write("report: %s\n" % options.output)
        return corrupt_line(stderr, corrupt)
    except StellaError as exc:
        return fail_line(stderr, "report", exc)
    except OSError as exc:
        stderr.write("stella report: report_write_failed: %s\n" % exc)
        return 1


def corrupt_line(stderr, corrupt):
    """0, or 1 after the one ``evidence_corrupt`` line naming every document of ``corrupt`` (``{name: error}``)
    that failed its check."""
    if not corrupt:
        return 0
    names = sorted(corrupt)
    first = corrupt[names[0]]
    reason = "; ".join(str(corrupt[name].reason) for name in names)
    return fail_line(
        stderr,
        "report",
        StellaError(
            first.code,
            reason + "; the report shows %s as corrupt, without "
            "%s contents" % ("it" if len(names) == 1 else "them", "its" if len(names) == 1 else "their"),
        ),
    )
