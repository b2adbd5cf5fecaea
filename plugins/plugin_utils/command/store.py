# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stella`` subcommands of the job store: ``stella report`` (docs/report.md), ``stella health``,
``stella interrupt`` and ``stella prune`` (docs/job-store.md).

All read the store that ``--store LOCATION``, the Compose provider's options (``--compose-project P
[--service S] [--state-directory DIR]``), ``STELLA_JOB_STORE`` or the default choose (``location``),
never create a store that is not there, and end with one error line ``stella <command>: <code>:
<reason>`` (credentials of a DSN redacted) and exit status 1 when the store or the job cannot be read;
2 is a usage error (docs/stella-command.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import posixpath
import re
import shutil
import socket
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import error_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    job_evidence_dir,
    project_evidence_dir,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import checked_document, stored_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as _report
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import report_files as _report_files

STORE_HELP = _location.STORE_HELP
# stella health --check: every target shown is healthy (0), or not (this status)
NOT_HEALTHY_RC = 3
HEALTH_COLUMNS = (
    ("TARGET", "targetId"),
    ("NAME", "targetName"),
    ("STATUS", "status"),
    ("JOB", "jobId"),
    ("UPDATED", "updatedAt"),
)


# What a missing store's error line adds, by the rule that chose the store (``--store`` adds nothing).
MISSING_HINTS = {
    "default": "the default store; --store, --compose-project or $%s choose another" % _location.STORE_ENV,
    _location.STORE_ENV: "from $%s" % _location.STORE_ENV,
}


@contextlib.contextmanager
def existing_store(location, source=None):
    """The job store at ``location``, closed when the block ends; ``job_store_missing`` when a SQLite
    store is not there (these commands never create one). ``source``: the rule that chose it."""
    path = _job_store.missing_sqlite(location)
    if path:
        hint = MISSING_HINTS.get(source, source) if source not in (None, "--store") else None
        raise StellaError(
            "job_store_missing", "no job store at %s%s" % (os.path.expanduser(path), " (%s)" % hint if hint else "")
        )
    store = _job_store.open_store(location)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def chosen_store(options, environ=None):
    """The existing job store the parsed store options choose (``location.resolve``)."""
    where = _location.resolve(options, environ)
    with existing_store(where.location, where.source) as store:
        yield store


def parse_command(parser, argv, provider_options=True):
    """``(options, None)``, or ``(None, exit status)`` after ``-h`` or a usage error. The parser gets the
    Compose provider's store options unless ``provider_options`` is false (it has them already)."""
    if provider_options:
        _location.add_options(parser, store=False)
    try:
        options = parser.parse_args(argv)
        problem = _location.usage_error(options)
        if problem:
            parser.error(problem)
        return options, None
    except SystemExit as exc:
        return None, exc.code


def fail_line(stderr, command, exc):
    """The one error line of a failed command: ``stella COMMAND: CODE: REASON; next: HINT``."""
    stderr.write("stella %s: %s\n" % (command, error_line(exc.code, redact_url(str(exc.reason)))))
    return 1


# ------------------------------------------------------------------------------------------- report


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


# ------------------------------------------------------------------------------------------- health


def health_parser():
    """``stella health [TARGET ...] [--store LOCATION] [--json] [--check]`` (docs/job-store.md)."""
    parser = argparse.ArgumentParser(
        prog="stella health",
        description="Show the health status the job store keeps for each target (docs/job-store.md).",
    )
    parser.add_argument(
        "targets",
        metavar="TARGET",
        nargs="*",
        help="target ids to show (default: every target the store knows; a target it does not know is 'unknown')",
    )
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit %d unless every target shown is healthy (for monitoring)" % NOT_HEALTHY_RC,
    )
    return parser


def health_table(rows):
    """The rows as an aligned text table, the code and reason of a status last (pure)."""
    cells = [[title for title, _key in HEALTH_COLUMNS] + ["REASON"]]
    for row in rows:
        why = ": ".join(part for part in (row.get("code"), row.get("reason")) if part)
        cells.append([str(row.get(key) or "-") for _title, key in HEALTH_COLUMNS] + [" ".join(why.split()) or "-"])
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEALTH_COLUMNS))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] + "\n" for line in cells
    )


def health(argv, stdout=None, stderr=None):
    """``stella health``: 0 when the store was read (and, with ``--check``, every target shown is
    healthy), 3 with ``--check`` when one is not, 1 with one error line when the store cannot be read,
    2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = parse_command(health_parser(), argv)
    if options is None:
        return rc
    try:
        with chosen_store(options) as store:
            rows = store.health(options.targets or None)
    except StellaError as exc:
        return fail_line(stderr, "health", exc)
    stdout.write(json.dumps({"health": rows}, indent=2, sort_keys=True) + "\n" if options.json else health_table(rows))
    if options.check and any(row.get("status") != "healthy" for row in rows):
        return NOT_HEALTHY_RC
    return 0


# ---------------------------------------------------------------------------------------- interrupt


def interrupt_parser():
    """``stella interrupt JOB [--store LOCATION] [--reason TEXT]`` (docs/job-store.md)."""
    parser = argparse.ArgumentParser(
        prog="stella interrupt",
        description="Record an unfinished deployment job "
        "whose controller run is gone as interrupted (Failed, job_interrupted), and "
        "release its Compose projects (docs/job-store.md).",
    )
    parser.add_argument("job", metavar="JOB", help="the job id")
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    parser.add_argument("--reason", metavar="TEXT", help="why, recorded with the job (one line)")
    return parser


def interrupt(argv, stdout=None, stderr=None):
    """``stella interrupt``: 0 when the job is recorded interrupted (or was already finished), 1 with one
    error line when it cannot be (no such job, or its run is still alive on this host), 2 on a usage
    error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = parse_command(interrupt_parser(), argv)
    if options is None:
        return rc
    try:
        with chosen_store(options) as store:
            record = store.get(options.job)
            if record is None:
                raise StellaError("job_not_found", "no job %s in the job store" % options.job)
            if record["status"] in _job.TERMINAL:
                stdout.write("job %s is already %s: nothing to interrupt\n" % (record["jobId"], record["status"]))
                return 0
            owner = record.get("owner") or {}
            if _job_owner.on_this_host(owner) and not _job_owner.owner_gone(owner):
                raise StellaError(
                    "job_running",
                    "the controller run of job %s (pid %s) is still running on this host"
                    % (record["jobId"], owner.get("pid")),
                )
            why = "interrupted by an operator on %s (the controller run, pid %s on %s, is gone)" % (
                socket.gethostname(),
                owner.get("pid"),
                owner.get("host") or "an unknown host",
            )
            if options.reason:
                why += ": " + " ".join(options.reason.split())
            record = _job_owner.record_interrupted(store, record["jobId"], why)
    except StellaError as exc:
        return fail_line(stderr, "interrupt", exc)
    stdout.write("job %s: %s (%s); its projects are released\n" % (record["jobId"], record["status"], record["code"]))
    return 0


# -------------------------------------------------------------------------------------------- close


def close_parser():
    """``stella close JOB [--evidence-dir DIR] [--report] [--store LOCATION]`` (docs/stella-command.md)."""
    parser = argparse.ArgumentParser(
        prog="stella close",
        description="Close a job whose close step did not "
        "finish (a job store that was unreachable, a controller run killed at its "
        "end): finish it as its record says, and write its evidence (job.json, the "
        "rollback evidence, with --report the report) in the job store and, with "
        "--evidence-dir, there too (docs/stella-command.md).",
    )
    parser.add_argument("job", metavar="JOB", help="the job id")
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    parser.add_argument("--evidence-dir", metavar="DIR", help="also write the evidence files under DIR")
    parser.add_argument("--report", action="store_true", help="also keep jobs/JOB/report.html")
    return parser


def close(argv, stdout=None, stderr=None):
    """``stella close``: 0 when the job is closed (its evidence written) and succeeded, 1 with one line when
    it cannot be closed (no such job, its run still alive on this host) or closed otherwise, 2 on a usage
    error. An unfinished job whose run is gone is first recorded interrupted, as ``stella show`` does."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = parse_command(close_parser(), argv)
    if options is None:
        return rc
    # pylint: disable-next=import-outside-toplevel  # the runner's steps only for this command
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner

    try:
        where = _location.resolve(options)
        with existing_store(where.location, where.source) as store:
            record = store.get(options.job)
            if record is None:
                raise StellaError("job_not_found", "no job %s in the job store" % options.job)
            record = _job_owner.interrupt_gone(store, record)
            if record["status"] not in _job.TERMINAL:
                raise StellaError(
                    "job_running",
                    "job %s is %s and its controller run may still be alive: it closes "
                    "itself (stella interrupt JOB if its run is gone)" % (record["jobId"], record["status"]),
                )
        closed = JobRunner({}, False).run(
            {
                "step": "close",
                "store": where.location,
                "job_id": options.job,
                "evidence_dir": options.evidence_dir,
                "report": options.report,
            }
        )
    except StellaError as exc:
        return fail_line(stderr, "close", exc)
    stdout.write(closed["text"] + "evidence: %s\n" % ", ".join(sorted(closed["evidenceDocuments"])))
    return 0 if closed["succeeded"] else 1


# -------------------------------------------------------------------------------------------- prune


def prune_parser():
    """``stella prune --older-than DAYS [--keep N] [--dry-run] [--json] [--store LOCATION]`` (docs/job-store.md)."""
    parser = argparse.ArgumentParser(
        prog="stella prune",
        description="Remove finished deployment jobs (with their "
        "status history and deployments projection) from the job store "
        "(docs/job-store.md); with --evidence-dir, their evidence too.",
    )
    parser.add_argument(
        "--older-than",
        metavar="DAYS",
        type=bounded("a number of days", float, 0, 100000),
        required=True,
        help="remove finished jobs last updated more than DAYS days ago (a decimal number)",
    )
    parser.add_argument(
        "--keep",
        metavar="N",
        type=bounded("a whole number", int, 0, 10**9),
        default=0,
        help="keep the N most recently updated finished jobs whatever their age (default 0); an "
        "operator rollback job stays while the job it rolled back stays",
    )
    parser.add_argument(
        "--evidence-dir",
        metavar="DIR",
        help="also remove the removed jobs' evidence under DIR (the jobs' evidence directory): "
        "DIR/jobs/JOB and DIR/PROJECT/JOB",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    return parser


# A job id or project name that is one plain path component: evidence is removed only under such names.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def evidence_dirs(root, job):
    """The evidence directories of the pruned ``job`` under ``root`` (pure): the job's own and one per
    project it deployed. A name that is not one plain path component gives none."""
    if not SAFE_NAME.match(job["jobId"]):
        return []
    projects = [project for project in job.get("projects") or () if SAFE_NAME.match(project)]
    return [job_evidence_dir(root, job["jobId"])] + [
        project_evidence_dir(root, project, job["jobId"]) for project in projects
    ]


def within(root, directory):
    """Whether ``directory`` lies under ``root`` with no symbolic link on the way (neither it nor any
    parent below ``root``): what prune may remove never leaves the evidence root."""
    real_root = os.path.realpath(root)
    relative = os.path.relpath(os.path.abspath(directory), os.path.abspath(root))
    if relative == os.curdir or relative.startswith(os.pardir):
        return False
    return os.path.realpath(directory) == os.path.join(real_root, relative)


def remove_evidence(root, jobs, dry_run):
    """Remove (or, with ``dry_run``, only list) the evidence directories of ``jobs`` that exist under
    ``root``; each job gets ``evidence``, the directories removed. Returns the failures as lines."""
    failures = []
    for job in jobs:
        job["evidence"] = []
        for directory in evidence_dirs(root, job):
            if not within(root, directory) or not os.path.isdir(directory):
                continue
            try:
                if not dry_run:
                    shutil.rmtree(directory)
                    with contextlib.suppress(OSError):  # the project's directory, once it holds no job
                        os.rmdir(os.path.dirname(directory))
                job["evidence"].append(directory)
            except OSError as exc:
                failures.append("%s: %s" % (directory, exc.strerror or exc))
    return failures


def bounded(kind, parse, low, high):
    """An argparse type: ``parse(text)`` from ``low`` up to (not including) ``high``, else a usage error."""

    def convert(text):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not %s: %r" % (kind, text)) from None
        if not low <= value < high:
            raise argparse.ArgumentTypeError("%s from %s up to %s, not %s" % (kind, low, high, text))
        return value

    return convert


def cutoff(now, days):
    """The store-format timestamp ``days`` before ``now`` (an aware ``datetime``) (pure)."""
    return utc_timestamp(now - datetime.timedelta(days=days))


def prune(argv, stdout=None, stderr=None, now=None):
    """``stella prune``: 0 when the store was pruned (or, with ``--dry-run``, read), 1 with one error line
    when it cannot be, 2 on a usage error. Unfinished jobs, the job a target's health names, jobs holding
    a project claim, the deployment an unfinished rollback rolls back and the ``--keep`` newest finished
    jobs always stay."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = parse_command(prune_parser(), argv)
    if options is None:
        return rc
    before = cutoff(now or datetime.datetime.now(datetime.timezone.utc), options.older_than)
    try:
        with chosen_store(options) as store:
            removed = store.prune(before, keep=options.keep, dry_run=options.dry_run)
    except StellaError as exc:
        return fail_line(stderr, "prune", exc)
    evidence_dir = os.path.expanduser(options.evidence_dir) if options.evidence_dir else None
    failures = remove_evidence(evidence_dir, removed, options.dry_run) if evidence_dir else []
    if options.json:
        stdout.write(
            json.dumps(
                {"before": before, "dryRun": options.dry_run, "evidenceDir": evidence_dir, "jobs": removed},
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
    else:
        verb = "would remove" if options.dry_run else "removed"
        plural = "" if len(removed) == 1 else "s"
        stdout.write("%s %d finished job%s last updated before %s\n" % (verb, len(removed), plural, before))
        for job in removed:
            stdout.write("  %s  %s  %s\n" % (job["jobId"], job["status"], job["updatedAt"]))
            for directory in job.get("evidence") or ():
                stdout.write("    evidence %s\n" % directory)
    if failures:
        return fail_line(
            stderr,
            "prune",
            StellaError(
                "evidence_remove_failed",
                "the jobs are removed from the store, but not all of their evidence: " + "; ".join(failures),
            ),
        )
    return 0
