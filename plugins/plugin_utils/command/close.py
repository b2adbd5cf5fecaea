# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Ending a job from outside its controller run (docs/job-store.md, docs/stella-command.md): ``stella
interrupt`` records an unfinished job whose run is gone as interrupted (Failed, ``job_interrupted``) and
releases its Compose projects; ``stella close`` finishes a job whose close step did not (a job store that
was unreachable, a run killed at its end) as its record says, and writes its evidence.
"""

from __future__ import annotations

import argparse
import socket
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import (
    STORE_HELP,
    chosen_store,
    existing_store,
    fail_line,
    parse_command,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner


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
    """``stella close JOB [--evidence-dir DIR] [--report] [--signing-key KEY [--passphrase-file FILE]]
    [--store LOCATION]`` (docs/stella-command.md)."""
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
    parser.add_argument(
        "--signing-key",
        metavar="KEY",
        help="sign every evidence document of the job with this private key (docs/trust.md)",
    )
    parser.add_argument(
        "--passphrase-file",
        metavar="FILE",
        help="the signing key's passphrase, read from FILE (default: $STELLA_SIGNING_PASSPHRASE)",
    )
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
        passphrase = None
        if options.signing_key:
            # pylint: disable-next=import-outside-toplevel  # the keys only when the evidence is signed
            from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys as _keys

            given = _keys.passphrase_from(options.passphrase_file)
            passphrase = given.decode("utf-8", "surrogateescape") if given else None
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
                "signing_key": options.signing_key,
                "signing_passphrase": passphrase,
            }
        )
    except StellaError as exc:
        return fail_line(stderr, "close", exc)
    stdout.write(closed["text"] + "evidence: %s\n" % ", ".join(sorted(closed["evidenceDocuments"])))
    return 0 if closed["succeeded"] else 1
