# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stella`` subcommands that find and read jobs (docs/stella-command.md): ``stella list`` (the
jobs of a store, newest first) and ``stella show JOB`` (the job as ``job_show`` prints it; with
``--follow``, each phase as the store records it, until the job ends).

Both only read the store: a job whose controller run is gone is reported, never recorded interrupted
(``stella interrupt`` does that). Both say which store they read, and fail as the other store commands
do: one line ``stella <command>: <code>: <reason>`` and exit status 1; 2 is a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import store as _store_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.projects import project_names

FOLLOW_INTERVAL = 1.0  # seconds between two reads of the store by ``show --follow``
INTERRUPTED_RC = 130  # ``show --follow`` stopped by Ctrl-C (SIGINT)
LIST_COLUMNS = (
    ("JOB", "jobId"),
    ("KIND", "kind"),
    ("STATUS", "status"),
    ("RELEASE", "releaseName"),
    ("VERSION", "version"),
    ("TARGETS", "targets"),
    ("STARTED", "startedAt"),
    ("ENDED", "completedAt"),
)


# What stella show adds for an ended job whose close did not finish (its job.json is not in the store).
UNCLOSED = (
    "evidence: missing: the job's close did not finish, so its job.json was never written; "
    "`stella close %s` writes it\n"
)


def _where(location):
    return "store: %s\n" % _location.describe(location)


def _run_gone(record):
    """Why nothing runs the unfinished ``record`` any more (its run is gone on this host, or its claim
    lease expired), as one error; ``None`` while nothing says so."""
    why = _job_owner.gone_why(record, utc_timestamp())
    if why is None:
        return None
    return StellaError(
        "job_run_gone",
        "job %s is %s, but %s; `stella interrupt %s` records it interrupted"
        % (record["jobId"], record["status"], why.replace("interrupted: ", "", 1), record["jobId"]),
    )


# --------------------------------------------------------------------------------------------- list


def job_status(text):
    """An argparse type: a job status, in any letter case."""
    for status in _job.JOB_STATUSES:
        if status.lower() == text.lower():
            return status
    raise argparse.ArgumentTypeError("not a job status: %r (one of %s)" % (text, ", ".join(_job.JOB_STATUSES)))


def list_parser():
    """``stella list [--status STATUS] [--project PROJECT] [--limit N] [--json]`` and the store options."""
    parser = argparse.ArgumentParser(
        prog="stella list", description="The jobs of a job store, newest first (docs/stella-command.md)."
    )
    parser.add_argument(
        "--status",
        metavar="STATUS",
        type=job_status,
        action="append",
        help="only jobs in this status (%s); give it again for several" % ", ".join(_job.JOB_STATUSES),
    )
    parser.add_argument(
        "--project",
        metavar="PROJECT",
        help="only jobs with a target in this Compose project (the project a target's line of stella show names)",
    )
    parser.add_argument(
        "--limit",
        metavar="N",
        type=_store_cli.bounded("a whole number", int, 0, 10**9),
        default=20,
        help="at most N jobs (default 20; 0: every job)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    return _location.add_options(parser)


def summary(record):
    """What ``stella list`` shows of a job (pure)."""
    release = record.get("release") or {}
    return {
        "jobId": record["jobId"],
        "kind": record.get("kind"),
        "status": record["status"],
        "code": record.get("code"),
        "release": release.get("id"),
        "releaseName": release.get("name") or release.get("id"),
        "version": release.get("version"),
        "targets": len(record.get("targets") or {}),
        "projects": project_names(record),
        "createdAt": record.get("createdAt"),
        "startedAt": record.get("startedAt"),
        "completedAt": record.get("completedAt"),
    }


def _cell(value):
    if value is None or value == "":
        return "-"
    return re.sub(r"\.\d+Z$", "Z", str(value))  # timestamps to the second


def jobs_table(rows):
    """The rows as an aligned text table (pure)."""
    cells = [[title for title, _key in LIST_COLUMNS]]
    cells += [[_cell(row.get(key)) for _title, key in LIST_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(LIST_COLUMNS))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n" for line in cells)


def list_jobs(argv, stdout=None, stderr=None):
    """``stella list``: 0 when the store was read, 1 with one error line when it cannot be, 2 on a usage
    error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = _store_cli.parse_command(list_parser(), argv, provider_options=False)
    if options is None:
        return rc
    try:
        where = _location.resolve(options)
        with _store_cli.existing_store(where.location, where.source) as store:
            rows = [
                summary(record)
                for record in store.list(options.limit, statuses=options.status, project=options.project)
            ]
    except StellaError as exc:
        return _store_cli.fail_line(stderr, "list", exc)
    if options.json:
        stdout.write(
            json.dumps(
                {"store": _location.shown(where), "storeSource": where.source, "jobs": rows}, indent=2, sort_keys=True
            )
            + "\n"
        )
    else:
        stdout.write(_where(where) + (jobs_table(rows) if rows else "no jobs\n"))
    return 0


# --------------------------------------------------------------------------------------------- show


def show_parser():
    """``stella show JOB [--json] [--follow]`` and the store options."""
    parser = argparse.ArgumentParser(
        prog="stella show",
        description="One job of a job store, as the job_show playbook prints it (docs/stella-command.md).",
    )
    parser.add_argument("job", metavar="JOB", help="the job id (stella list shows them)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print {store, job, projection} as JSON (with --follow: one JSON object per line)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="read the store every second and print each phase "
        "as it is recorded until the job ends; then exit 0 when the job succeeded, 1 otherwise",
    )
    return _location.add_options(parser)


def progress(record):
    """What ``show --follow`` prints of ``record``, in the record's order (pure): each target's status
    once it started, each recorded phase and rollback phase, each gate and each job event; the job's
    status first while it runs, last once it ended."""
    items = []
    for name in record.get("targetOrder") or sorted(record.get("targets") or {}):
        target = record["targets"][name]
        for key, rollback in (("phases", False), ("rollbackPhases", True)):
            for phase in target.get(key) or []:
                items.append(
                    {
                        "event": "phase",
                        "target": name,
                        "phase": phase.get("name"),
                        "rollback": rollback,
                        "status": phase.get("status"),
                        "durationMs": phase.get("durationMs"),
                    }
                )
        if target.get("status") not in (None, "Pending"):
            items.append(
                {"event": "target", "target": name, "status": target["status"], "reason": target.get("reason")}
            )
    for gate in record.get("gates") or []:
        items.append(
            {"event": "gate", "batch": gate.get("batch"), "proceed": gate.get("proceed"), "reason": gate.get("reason")}
        )
    for event in record.get("events") or []:
        items.append({"event": "jobEvent", "kind": event.get("kind"), "at": event.get("at")})
    status = {"event": "job", "jobId": record["jobId"], "status": record["status"]}
    return items + [status] if record["status"] in _job.TERMINAL else [status] + items


def progress_line(item):
    """One item of :func:`progress` as a line of text (pure)."""
    kind = item["event"]
    if kind == "job":
        return "job %s %s" % (item["jobId"], item["status"])
    if kind == "phase":
        return "  %s: %s%s %s %sms" % (
            item["target"],
            "rollback " if item["rollback"] else "",
            item["phase"],
            item["status"],
            item["durationMs"] or 0,
        )
    if kind == "target":
        return "  %s: %s%s" % (
            item["target"],
            item["status"],
            ": %s" % " ".join(item["reason"].split()) if item.get("reason") else "",
        )
    if kind == "gate":
        return "batch %s gate: %s (%s)" % (
            (item["batch"] or 0) + 1,
            "proceed" if item["proceed"] else "stop",
            item["reason"],
        )
    return "event %s at %s" % (item["kind"], item["at"])


def follow(store, record, where, as_json, stdout):
    """Print :func:`progress` of the job as the store records it, every ``FOLLOW_INTERVAL`` seconds, until
    it ends; then the job (as ``show`` prints it). Its exit status: 0 when the job succeeded, 1 otherwise,
    ``INTERRUPTED_RC`` after Ctrl-C. A job whose run is gone, or that leaves the store, is an error."""
    seen = set()

    def write(item):
        stdout.write((json.dumps(item, sort_keys=True) if as_json else progress_line(item)) + "\n")

    stdout.write(
        json.dumps({"event": "store", "store": _location.shown(where), "storeSource": where.source}) + "\n"
        if as_json
        else _where(where)
    )
    try:
        while True:
            for item in progress(record):
                key = json.dumps(item, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    write(item)
            stdout.flush()
            if record["status"] in _job.TERMINAL:
                break
            gone = _run_gone(record)
            if gone is not None:
                raise gone
            time.sleep(FOLLOW_INTERVAL)
            job_id, record = record["jobId"], store.get(record["jobId"])
            if record is None:
                raise StellaError("job_not_found", "job %s left the job store %s" % (job_id, store.location))
    except KeyboardInterrupt:
        return INTERRUPTED_RC
    done = _job.succeeded(record)
    stdout.write(
        json.dumps(
            {"event": "end", "jobId": record["jobId"], "status": record["status"], "succeeded": done, "job": record},
            sort_keys=True,
        )
        + "\n"
        if as_json
        else "\n" + _job_view.render_text(record)
    )
    return 0 if done else 1


def show(argv, stdout=None, stderr=None):
    """``stella show``: 0 when the job was printed (with ``--follow``: when it ended and succeeded), 1
    with one error line when the store or the job cannot be read (with ``--follow``: also when the job
    ended otherwise), 2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = _store_cli.parse_command(show_parser(), argv, provider_options=False)
    if options is None:
        return rc
    try:
        where = _location.resolve(options)
        with _store_cli.existing_store(where.location, where.source) as store:
            record = store.get(options.job)
            if record is None:
                raise StellaError("job_not_found", "no job %s in the job store %s" % (options.job, store.location))
            if options.follow:
                return follow(store, record, where, options.json, stdout)
            projection = store.projection(record["jobId"])
            unclosed = (
                record["status"] in _job.TERMINAL
                and store.document(record["jobId"], "jobs/%s/job.json" % record["jobId"]) is None
            )
    except StellaError as exc:
        return _store_cli.fail_line(stderr, "show", exc)
    gone = _run_gone(record)
    if options.json:
        stdout.write(
            json.dumps(
                {
                    "store": _location.shown(where),
                    "storeSource": where.source,
                    "job": record,
                    "projection": projection,
                    "runGone": gone.reason if gone else None,
                    "evidenceMissing": unclosed,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
    else:
        stdout.write(
            _where(where)
            + _job_view.render_text(record)
            + ("note: %s\n" % gone.reason if gone else "")
            + (UNCLOSED % record["jobId"] if unclosed else "")
        )
    return 0
