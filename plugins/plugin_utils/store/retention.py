# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Retention: which finished jobs ``stella prune`` removes from the job store (:func:`prune_selection`,
pure), and removing them with everything the store keeps of them, in one transaction
(:meth:`RetentionStore.prune`). Mixed into :class:`.sql.SqlJobStore`.
"""

from __future__ import annotations

import json

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.projects import project_names
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import UNFINISHED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import reads as _reads


def prune_selection(finished, protected, before, keep=0, sources=None):
    """Which finished jobs a retention run removes, oldest first (pure). ``finished``: ``(job id, status,
    updated at)`` of every finished job; ``protected``: job ids that must stay (named by a target's health,
    holding a project claim). The ``keep`` most recently updated stay whatever their age; of the others,
    those last updated before ``before`` (a timestamp as the store writes them) go. ``sources``: ``{rollback
    job id: the job it rolled back}``; a rollback job stays as long as the job it rolled back stays (that
    job's projection names the rollback job's evidence document, ``rollback.evidence.id``)."""
    newest_first = sorted(finished, key=lambda row: (row[2], row[0]), reverse=True)
    chosen = [row for row in newest_first[max(int(keep), 0) :] if row[2] < before and row[0] not in protected]
    going = {row[0] for row in chosen}
    sources = sources or {}
    chosen = [row for row in chosen if row[0] not in sources or sources[row[0]] in going]
    return sorted(chosen, key=lambda row: (row[2], row[0]))


class RetentionStore:
    """Pruning over the SQL store's connection (``_execute``, ``_transaction``, ``_records``, ``LOCK``: its)."""

    def prune(self, before, keep=0, dry_run=False):
        with self._transaction("prune the job store"):
            finished = self._execute(
                "SELECT job_id, status, updated_at FROM deployment_jobs WHERE status NOT IN (%s)"
                % _reads.marks(UNFINISHED)
                + self.LOCK,
                UNFINISHED,
            ).fetchall()
            protected = {r[0] for r in self._execute("SELECT job_id FROM target_health").fetchall()}
            protected.update(r[0] for r in self._execute("SELECT job_id FROM project_claims").fetchall())
            # the deployment an unfinished rollback job rolls back: its close reads it and writes about it
            protected.update(
                json.loads(r[0]).get("sourceJobId")
                for r in self._execute(
                    "SELECT record FROM deployment_jobs WHERE kind = 'rollback' AND status IN (%s)"
                    % _reads.marks(UNFINISHED),
                    UNFINISHED,
                ).fetchall()
            )
            # the rollback jobs whose source is still stored (finished, or unfinished and so staying)
            stored = {r[0] for r in finished} | {
                r[0]
                for r in self._execute(
                    "SELECT job_id FROM deployment_jobs WHERE status IN (%s)" % _reads.marks(UNFINISHED), UNFINISHED
                ).fetchall()
            }
            sources = {
                job_id: source
                for job_id, source in (
                    (r[0], json.loads(r[1]).get("sourceJobId"))
                    for r in self._execute(
                        "SELECT job_id, record FROM deployment_jobs WHERE kind = 'rollback'"
                    ).fetchall()
                )
                if source in stored
            }
            chosen = prune_selection([tuple(r) for r in finished], protected, before, keep, sources)
            ids = [row[0] for row in chosen]
            projects = {}
            for start in range(0, len(ids), _reads.ID_CHUNK):
                part = tuple(ids[start : start + _reads.ID_CHUNK])
                for record in self._records("j.job_id IN (%s)" % _reads.marks(part), part):
                    projects[record["jobId"]] = project_names(record)
                if dry_run:
                    continue
                for table, column in (
                    ("deployment_job_history", "job_id"),
                    ("job_leases", "job_id"),
                    ("job_documents", "job_id"),
                    ("job_targets", "job_id"),
                    ("deployment_jobs", "job_id"),
                    ("deployment_targets", "deployment_id"),
                    ("deployment_projection_history", "deployment_id"),
                    ("deployments", "deployment_id"),
                ):
                    self._execute("DELETE FROM %s WHERE %s IN (%s)" % (table, column, _reads.marks(part)), part)
        return [
            {"jobId": job_id, "status": status, "updatedAt": at, "projects": projects.get(job_id, [])}
            for job_id, status, at in chosen
        ]
