# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store's project claims (tables ``project_claims`` and ``claim_generations``) and its id.

A job holds the Compose project of each of its targets while it is unfinished: a second job for one of
them is refused (``project_busy``). Each project a job claims gets the project's next claim generation,
kept in its target's record as ``claim`` with the store's id (``storeId``, :func:`.schema.store_id`); the
target fences the job's work with it (module_utils/host/claim.py) and the controller reads where a claim
stands right before it sends work (:meth:`ClaimStore.standing`, run/fencing.py). Mixed into
:class:`.sql.SqlJobStore`, inside its transactions.
"""

from __future__ import annotations

import json
import time

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import UNFINISHED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.projects import project_keys


class ClaimStore:
    """Claims over the store's connection (``_execute``, ``_read``, ``_transaction``, ``LOCK``, ``migration``)."""

    clock = staticmethod(time.time)  # seconds since the epoch: claim generations are at least its milliseconds

    def _claim(self, record, now):
        """Claim every project of ``record``; ``{name: holder}`` when another unfinished job holds one
        (then the job keeps no claim). The primary key decides between two controllers inserting at
        once; a claim left by a finished job is taken over under the claim row's lock."""
        held = {}
        for name, key in sorted(project_keys(record).items()):
            if (
                self._execute(
                    "INSERT INTO project_claims (project_key, job_id, claimed_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (project_key) DO NOTHING",
                    (key, record["jobId"], now),
                ).rowcount
                == 1
            ):
                continue
            holder = self._execute(
                "SELECT job_id FROM project_claims WHERE project_key = ?" + self.LOCK, (key,)
            ).fetchone()[0]
            if holder == record["jobId"]:
                continue
            status = self._execute("SELECT status FROM deployment_jobs WHERE job_id = ?", (holder,)).fetchone()
            if status is not None and status[0] in UNFINISHED:
                held[name] = holder
            else:
                self._execute(
                    "UPDATE project_claims SET job_id = ?, claimed_at = ? WHERE project_key = ?",
                    (record["jobId"], now, key),
                )
        if held:
            self._execute("DELETE FROM project_claims WHERE job_id = ?", (record["jobId"],))
        else:
            self._hand_out_generations(record)
        return held

    @property
    def store_id(self):
        """The store's id (schema.store_id): each claim it hands out names it."""
        return self.migration["storeId"]

    def _hand_out_generations(self, record):
        """Each project the job claimed gets the next claim generation, kept in its target's record as
        ``claim`` with the store's id (host/claim.py fences with it). A generation is the last one plus one,
        or the store's clock in milliseconds when that is higher: they only grow, per project, outlive every
        job, and a store restored from a backup never hands out one it handed out before."""
        clock = max(int(self.clock() * 1000), 1)
        for name, key in sorted(project_keys(record).items()):
            self._execute(
                "INSERT INTO claim_generations (project_key, generation) VALUES (?, ?) ON CONFLICT "
                "(project_key) DO UPDATE SET generation = CASE WHEN claim_generations.generation >= "
                "excluded.generation THEN claim_generations.generation + 1 ELSE excluded.generation END",
                (key, clock),
            )
            generation = self._execute(
                "SELECT generation FROM claim_generations WHERE project_key = ?", (key,)
            ).fetchone()[0]
            record["targets"][name]["claim"] = {
                "jobId": record["jobId"],
                "generation": generation,
                "projectKey": key,
                "storeId": self.store_id,
            }

    def standing(self, job_id, project_key):
        """``(job status or None, whether it was recorded interrupted, the project's holder, its latest
        claim generation)``: what the controller checks right before it sends a job's work to a target."""
        with self._transaction("read the claim of job %s" % job_id):
            row = self._execute("SELECT status, record FROM deployment_jobs WHERE job_id=?", (job_id,)).fetchone()
            holder = self._execute("SELECT job_id FROM project_claims WHERE project_key=?", (project_key,)).fetchone()
            generation = self._execute(
                "SELECT generation FROM claim_generations WHERE project_key=?", (project_key,)
            ).fetchone()
        return (
            row[0] if row else None,
            bool(row and json.loads(row[1]).get("interrupted")),
            holder[0] if holder else None,
            generation[0] if generation else None,
        )

    def claims(self):
        """``{project key: the job that holds it}``."""
        return {r[0]: r[1] for r in self._read("SELECT project_key, job_id FROM project_claims ORDER BY project_key")}
