# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella prune`` (docs/job-store.md): finished jobs past a retention age removed from the job store
(store/retention.py says which stay) and, with ``--evidence-dir``, their evidence directories.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    job_evidence_dir,
    project_evidence_dir,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import (
    STORE_HELP,
    bounded,
    chosen_store,
    fail_line,
    parse_command,
)


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
