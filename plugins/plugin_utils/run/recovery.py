# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The recovery of the deployment an operator rollback job rolls back, persisted through the job store:
``RollingBack`` from the rollback's start, ``RolledBack`` or ``Failed`` at its end, ``Failed`` when the
rollback job was recorded interrupted. The changes themselves are job/recovery.py's (pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.recovery import (
    ended_by,
    recovering,
    recovery_ended,
    recovery_started,
)

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def started(store: SqlJobStore, rollback_job: JobRecord, now: str | None = None) -> JobRecord:
    """The deployment the stored operator rollback job ``rollback_job`` rolls back is ``RollingBack``, from
    the rollback's start (once); the stored deployment."""
    now = now or utc_timestamp()

    def change(source: JobRecord) -> JobRecord | None:
        if recovering(source) == rollback_job["jobId"] or ended_by(source, rollback_job["jobId"]):
            return None
        return recovery_started(source, rollback_job, now)

    try:
        stored: JobRecord = store.update(rollback_job["sourceJobId"], change)
        return stored
    except StellaError as exc:  # rolled back meanwhile: the rollback job ends before any target changes
        store.update(
            rollback_job["jobId"],
            lambda r: _job.fail_closed(
                r, code=_rollback.ROLLBACK_ALREADY_DONE, reason=exc.reason, failed_targets={}, now=now
            ),
        )
        raise _job.job_error(exc.reason, code=_rollback.ROLLBACK_ALREADY_DONE) from None


def ended(
    store: SqlJobStore, rollback_job: JobRecord, keys: dict[str, Any], now: str | None = None
) -> dict[str, Any] | None:
    """The deployment the finished operator rollback job ``rollback_job`` rolled back: ``RolledBack`` or
    ``Failed`` (once), and its projection with ``keys`` (the rollback's strategy evidence keys). A
    deployment whose recovery was not recorded started (a rollback begun before it was) gets both."""
    now = now or utc_timestamp()
    ident = rollback_job["jobId"]
    head: JobRecord | None = store.head(rollback_job["sourceJobId"])
    if head is not None and ended_by(head, ident):
        return None

    def begin(source: JobRecord) -> JobRecord | None:
        return (
            None
            if recovering(source) == ident or ended_by(source, ident)
            else recovery_started(source, rollback_job, now)
        )

    def end(source: JobRecord) -> JobRecord | None:
        return None if ended_by(source, ident) else recovery_ended(source, rollback_job, now)

    store.update(rollback_job["sourceJobId"], begin, end)
    projection: dict[str, Any] | None = store.project_recovery(rollback_job["sourceJobId"], keys, now)
    return projection


def interrupted(store: SqlJobStore, rollback_job: JobRecord, now: str | None = None) -> dict[str, Any] | None:
    """The operator rollback job ``rollback_job`` was recorded interrupted: the deployment it was rolling
    back ends ``Failed`` (``RollbackFailed``), never ``RollingBack`` with nothing running it."""
    if rollback_job.get("kind") != "rollback" or not rollback_job.get("sourceJobId"):
        return None
    source = store.head(rollback_job["sourceJobId"])
    if source is None or recovering(source) != rollback_job["jobId"]:
        return None
    return ended(store, rollback_job, _projection.recovery_keys(rollback_job), now)
