# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella health`` (docs/job-store.md): the health status the job store keeps for each target, as a
table or one JSON document; with ``--check``, for monitoring, whether every target shown is healthy.
"""

from __future__ import annotations

import argparse
import json
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import (
    STORE_HELP,
    chosen_store,
    fail_line,
    parse_command,
)

# stella health --check: every target shown is healthy (0), or not (this status)
NOT_HEALTHY_RC = 3
HEALTH_COLUMNS = (
    ("TARGET", "targetId"),
    ("NAME", "targetName"),
    ("STATUS", "status"),
    ("JOB", "jobId"),
    ("UPDATED", "updatedAt"),
)


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
