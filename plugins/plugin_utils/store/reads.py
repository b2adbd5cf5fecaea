# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reading the job store: a job's record (whole, or its header only), the newest jobs and the unfinished
ones, a job's status history, the deployments projection and its history, and the health the store keeps
for each target. A record is assembled from its header and its targets' rows (:mod:`.rows`), with its
last claim lease renewal as ``leaseRenewedAt``. Mixed into :class:`.sql.SqlJobStore`.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import health as _health
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.projects import project_names
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import LEASE_FIELD, UNFINISHED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import rows as _rows
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.rows import project_pattern

ID_CHUNK = 500  # ids per IN (...) list (SQLite's older builds allow 999 parameters per statement)


def marks(values):
    """``?, ?, ...``: one parameter per value, for an ``IN (...)`` list."""
    return ", ".join("?" * len(values))


class ReadStore:
    """Reads over the SQL store's connection (``_read`` is its)."""

    @staticmethod
    def _leased(record, renewed):
        """``record`` with its last lease renewal (a row ``(renewed_at,)`` or ``None``)."""
        if renewed is not None and renewed[0]:
            record[LEASE_FIELD] = renewed[0]
        return record

    def _target_rows(self, table, key, ids):
        """``{id: [(name, body)]}`` of the target rows of the jobs or projections ``ids``, in position order."""
        found = {}
        for start in range(0, len(ids), ID_CHUNK):
            part = tuple(ids[start : start + ID_CHUNK])
            for ident, name, body in self._read(
                "SELECT %s, name, body FROM %s WHERE %s IN (%s) ORDER BY %s, position"
                % (key, table, key, marks(part), key),
                part,
            ):
                found.setdefault(ident, []).append((name, body))
        return found

    def _records(self, where, params=(), tail="", targets=True):
        """The records selected by ``where``, with their targets' rows (``targets``) and last lease renewal."""
        heads = self._read(
            "SELECT j.job_id, j.record, j.status, j.revision, j.updated_at, l.renewed_at FROM "
            "deployment_jobs j LEFT JOIN job_leases l ON l.job_id = j.job_id WHERE " + where + tail,
            params,
        )
        rows = self._target_rows("job_targets", "job_id", [h[0] for h in heads]) if targets else None
        return [
            self._leased(
                _rows.assemble(
                    head,
                    {"status": status, "revision": revision, "updatedAt": at},
                    None if rows is None else rows.get(job_id, ()),
                ),
                (renewed,),
            )
            for job_id, head, status, revision, at, renewed in heads
        ]

    def get(self, job_id):
        found = self._records("j.job_id=?", (job_id,))
        return found[0] if found else None

    def head(self, job_id):
        found = self._records("j.job_id=?", (job_id,), targets=False)
        return found[0] if found else None

    def list(self, limit=20, statuses=None, project=None):
        """One query: the status filter on its column, the project filter on the record's text (then
        checked on the targets of each record found)."""
        where, params = ["1=1"], []
        if statuses:
            where.append("j.status IN (%s)" % marks(statuses))
            params.extend(statuses)
        if project:
            where.append("j.job_id IN (SELECT t.job_id FROM job_targets t WHERE t.body LIKE ? ESCAPE '!')")
            params.append(project_pattern(project))
        tail = " ORDER BY j.created_at DESC, j.job_id"
        if limit:
            tail += " LIMIT ?"
            params.append(int(limit))
        found = self._records(" AND ".join(where), tuple(params), tail)
        return [record for record in found if not project or project in project_names(record)]

    def last_succeeded(self, project, target):
        """The newest deployment job whose target ``target`` (its name) deployed ``project`` and ``Succeeded``,
        and was not rolled back since (an operator rollback restored what ran before); ``None`` when there
        is none. What a drift check compares the target with (run/drift.py)."""
        rows = self._read(
            "SELECT t.job_id FROM job_targets t JOIN deployment_jobs j ON j.job_id = t.job_id "
            "WHERE t.name=? AND t.body LIKE ? ESCAPE '!' ORDER BY j.created_at DESC, j.job_id",
            (target, project_pattern(project)),
        )
        for (job_id,) in rows:
            record = self.get(job_id)
            entry = ((record or {}).get("targets") or {}).get(target) or {}
            if (
                record is not None
                and not record.get("isRollback")
                and entry.get("projectName") == project
                and entry.get("status") == "Succeeded"
                and not (entry.get("rollback") or {}).get("succeeded")
            ):
                return record
        return None

    def unfinished(self):
        return self._records("j.status IN (%s)" % marks(UNFINISHED), UNFINISHED, " ORDER BY j.created_at")

    def history(self, job_id):
        return [
            {"revision": r, "status": s, "at": a}
            for r, s, a in self._read(
                "SELECT revision, status, at FROM deployment_job_history WHERE job_id=? ORDER BY revision", (job_id,)
            )
        ]

    def projection(self, deployment_id):
        rows = self._read(
            "SELECT projection, status, job_revision FROM deployments WHERE deployment_id=?", (deployment_id,)
        )
        if not rows:
            return None
        views = self._target_rows("deployment_targets", "deployment_id", [deployment_id])
        return _rows.assemble(
            rows[0][0], {"status": rows[0][1], "jobRevision": rows[0][2]}, views.get(deployment_id, ())
        )

    def projection_history(self, deployment_id):
        return [
            {"seq": q, "jobRevision": r, "status": s, "terminal": bool(t), "at": a}
            for q, r, s, t, a in self._read(
                "SELECT seq, job_revision, status, terminal, at FROM deployment_projection_history "
                "WHERE deployment_id=? ORDER BY seq",
                (deployment_id,),
            )
        ]

    def health(self, target_ids=None):
        rows = self._read(
            "SELECT target_id, target_name, status, reason, code, job_id, updated_at FROM target_health "
            "ORDER BY target_id"
        )
        found = {
            r[0]: {
                "targetId": r[0],
                "targetName": r[1],
                "status": r[2],
                "reason": r[3],
                "code": r[4],
                "jobId": r[5],
                "updatedAt": r[6],
            }
            for r in rows
        }
        if target_ids is None:
            return list(found.values())
        return [found.get(t) or {"targetId": t, "status": _health.UNKNOWN} for t in target_ids]
