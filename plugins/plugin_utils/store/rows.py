# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How a job record and its projection are laid out in rows, so that recording one target writes that
target's part, not the whole job (pure, no I/O).

A job record is stored as a *header* (``deployment_jobs.record``: the record without its targets and
without the values its own columns hold: status, revision, update time) and one row per target
(``job_targets``). A change writes the header only when something in it changed besides those columns
(a gate, an event, the rollback plan, the job's outcome), and only the rows of the targets it changed.
The ``deployments`` projection is laid out the same way (``deployment_targets``, one view per target).
What one change writes is then the size of what it changed, whatever the number of targets in the job.
"""

from __future__ import annotations

import json

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import LEASE_FIELD

# record fields kept in deployment_jobs' own columns (and the lease, which is never stored with the record)
RECORD_COLUMNS = ("status", "revision", "updatedAt")
# projection fields kept in deployments' own columns
PROJECTION_COLUMNS = ("status", "jobRevision")


def dumps(document):
    """The stored text of a document: canonical JSON (sorted keys, no spaces)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def header(document, columns):
    """``document`` without its ``targets`` and without the fields ``columns`` keeps apart."""
    return {k: v for k, v in document.items() if k not in columns and k not in ("targets", LEASE_FIELD)}


def record_header(record):
    return header(record, RECORD_COLUMNS)


def projection_header(projection):
    return header(projection, PROJECTION_COLUMNS)


def changed_parts(before, after):
    """``(header changed, {name: target to write}, [names to delete])`` between two versions of a record
    or projection: ``before`` ``None`` writes everything (a new row set). A target entry ``after`` shares
    with ``before`` (the same object: a change of another target, job/record.py) is unchanged without
    being compared."""
    targets = after.get("targets") or {}
    if before is None:
        return True, dict(targets), []
    old = before.get("targets") or {}
    columns = RECORD_COLUMNS if "revision" in after else PROJECTION_COLUMNS
    return (
        dumps(header(before, columns)) != dumps(header(after, columns)),
        {
            name: entry
            for name, entry in targets.items()
            if name not in old or (old[name] is not entry and dumps(old[name]) != dumps(entry))
        },
        sorted(set(old) - set(targets)),
    )


def positions(document):
    """``{name: position}``: each target's place in the document (rows are read back in that order)."""
    return {name: index for index, name in enumerate(document.get("targets") or {})}


def assemble(head, values, rows):
    """A document from its stored header (JSON text), its column ``values`` (``{field: value}``) and its
    target ``rows`` (``[(name, JSON text)]``, in position order; ``None``: the document without ``targets``)."""
    document = json.loads(head)
    document.update(values)
    if rows is not None:
        document["targets"] = {name: json.loads(body) for name, body in rows}
    return document


def split_stored(head):
    """Migration (schema 6): ``(header text, [(name, position, target text)])`` of a record or projection stored
    whole before targets had rows."""
    document = json.loads(head)
    targets = document.pop("targets", None) or {}
    return dumps(document), [(name, index, dumps(entry)) for index, (name, entry) in enumerate(targets.items())]


def project_pattern(project):
    """The ``LIKE`` pattern (escape character ``!``) of a record whose stored JSON names ``project`` as a
    ``projectName`` (pure)."""
    text = '"projectName":' + json.dumps(project)
    return "%" + text.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
