# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store: where deployment job records are persisted on the controller.

:class:`JobStore` is what the job playbooks use. :class:`SqlJobStore` implements it once, in portable
SQL over the schema of :mod:`.schema`; ``sqlite.SqliteJobStore`` (one file, WAL journal, the embedded
default) and ``postgres.PostgresJobStore`` (a ``postgresql://`` DSN) only open the connection, run a
transaction and name their error types.

Every change is one transaction that reads the current record (locked on PostgreSQL), applies pure
changes from ``job.record`` and writes each result as the next revision: the record's header and the
rows of the targets it changed (:mod:`.rows`), so parallel forks and other controllers never lose each
other's updates and readers only see persisted state. In the same transaction: the status history,
the target health the change implies, the progress projection when what it mirrors changed, and the
project claims (a second job for a project an unfinished job holds is refused, ``project_busy``:
:mod:`.claims`). The store's reads are :mod:`.reads`, its retention (``stella prune``) :mod:`.retention`,
each job's evidence documents :mod:`.documents`; :func:`open_store` opens the store a location names.
A claim lease is renewed apart from the record (:meth:`JobStore.renew_lease`): no revision, no
history; records read from the store carry it as ``leaseRenewedAt``, never in the stored JSON.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import sqlite3
from typing import ClassVar

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import health as _health
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import rows as _rows
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.meter import Meter
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.claims import ClaimStore
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import DocumentStore
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.reads import ReadStore
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.retention import RetentionStore
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.record import LEASE_FIELD, UNFINISHED

DEFAULT_STORE = "~/.local/state/stellaops/jobs.sqlite3"


def store_error(message, code="job_store_failed"):
    return StellaError(code, message, phase="job")


_json = _rows.dumps


class JobStore(abc.ABC):
    """What the job playbooks need of a store (every backend implements all of it)."""

    location = None

    @abc.abstractmethod
    def create(self, record):
        """Persist a new ``Pending`` job and claim its projects: ``(stored, held)`` where ``held`` is
        ``{target name: job id}`` of the projects another unfinished job holds (then none is claimed)."""

    @abc.abstractmethod
    def get(self, job_id):
        """The record, or ``None``."""

    @abc.abstractmethod
    def head(self, job_id):
        """The record without its ``targets`` (read at a cost that is not the job's size), or ``None``."""

    @abc.abstractmethod
    def update(self, job_id, *changes):
        """Apply each ``change(record) -> record`` in order, atomically, one revision each (a change that
        returns ``None`` writes nothing); returns the stored result."""

    @abc.abstractmethod
    def renew_lease(self, job_id, at):
        """Renew the claim lease of the unfinished job ``job_id`` at ``at`` (a finished job is left as
        it is); returns the job's status, ``None`` when there is no such job."""

    @abc.abstractmethod
    def list(self, limit=20, statuses=None, project=None):
        """The newest records first, at most ``limit`` (``None`` or 0: all); with ``statuses``, only jobs
        in one of them; with ``project``, only jobs with a target in that Compose project."""

    @abc.abstractmethod
    def unfinished(self):
        """Records whose status is not terminal (Pending, Running, RollingBack)."""

    @abc.abstractmethod
    def prune(self, before, keep=0, dry_run=False):
        """Remove finished jobs last updated before ``before`` (see :func:`.retention.prune_selection`: a
        rollback job stays while the job it rolled back does) with their status history, their evidence
        documents and their deployments projection, in one transaction; returns
        ``[{"jobId", "status", "updatedAt", "projects"}]`` of what went (or would go, with ``dry_run``),
        oldest first (``projects``: the Compose projects each deployed, where its evidence lies)."""

    @abc.abstractmethod
    def close(self):
        """Release the connection."""


class SqlJobStore(ReadStore, RetentionStore, DocumentStore, ClaimStore, JobStore):
    """The store over a DB-API connection; subclasses provide :meth:`_transaction` and :meth:`_sql`."""

    LOCK = ""  # appended to the SELECT that reads a record for update
    _meter = None  # what the store writes (store/meter.py), from its first transaction on
    catalogue: ClassVar[_job_schema.Catalogue]  # the backend's answers to what its catalogue holds
    errors = (sqlite3.Error,)

    def _sql(self, statement):
        return statement

    def _execute(self, statement, params=()):
        if self._meter is not None:
            self._meter.count(statement, params)
        return self._db.execute(self._sql(statement), params)

    def _read(self, statement, params=()):
        try:
            return self._execute(statement, params).fetchall()
        except self.errors as exc:
            raise store_error("cannot read the job store %s: %s" % (self.location, exc)) from None

    @abc.abstractmethod
    def _begin(self, what):
        """A context manager: one transaction, committed when the block ends, rolled back on any error."""

    @contextlib.contextmanager
    def _transaction(self, what):
        """One transaction (the backend's :meth:`_begin`); what it wrote is metered once it committed."""
        if self._meter is None:
            self._meter = Meter()
        self._meter.discard()
        with self._begin(what):
            yield
        self._meter.committed()

    def _migrate(self):
        with self._transaction("migrate the job store"):
            self.migration = _job_schema.migrate(self._execute, self.catalogue)

    # ------------------------------------------------------------------ writes
    def _write(self, record, previous=None):
        """Write revision ``record`` of a job over ``previous`` (``None``: a new job): its columns and
        history row always; its header and its targets' rows only where they changed (:mod:`.rows`)."""
        head, targets, gone = _rows.changed_parts(previous, record)
        columns = (record["status"], record["updatedAt"], record["revision"])
        if previous is None:
            self._execute(
                "INSERT INTO deployment_jobs (kind, release_id, record, status, updated_at, revision, "
                "job_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (record["kind"], (record.get("release") or {}).get("id"), _json(_rows.record_header(record)))
                + columns
                + (record["jobId"], record["createdAt"]),
            )
        elif head:
            self._execute(
                "UPDATE deployment_jobs SET record=?, status=?, updated_at=?, revision=? WHERE job_id=?",
                (_json(_rows.record_header(record)),) + columns + (record["jobId"],),
            )
        else:
            self._execute(
                "UPDATE deployment_jobs SET status=?, updated_at=?, revision=? WHERE job_id=?",
                columns + (record["jobId"],),
            )
        self._put_rows("job_targets", "job_id", record["jobId"], record, targets, gone)
        self._execute(
            "INSERT INTO deployment_job_history (job_id, revision, status, at) VALUES (?, ?, ?, ?)",
            (record["jobId"], record["revision"], record["status"], record["updatedAt"]),
        )

    def _put_rows(self, table, key, ident, document, targets, gone):
        """Upsert the rows of the ``targets`` that changed, delete those ``gone``."""
        places = _rows.positions(document)
        for name, entry in targets.items():
            self._execute(
                "INSERT INTO %s (%s, name, position, body) VALUES (?, ?, ?, ?) ON CONFLICT (%s, name) "
                "DO UPDATE SET position=excluded.position, body=excluded.body" % (table, key, key),
                (ident, name, places[name], _json(entry)),
            )
        for name in gone:
            self._execute("DELETE FROM %s WHERE %s=? AND name=?" % (table, key), (ident, name))

    def _put_health(self, event, only_code=None):
        """Write one health event over the target's row (with ``only_code``: only over a row of that code)."""
        values = (
            event["targetId"],
            event["targetName"],
            event["status"],
            event["reason"],
            event["code"],
            event["jobId"],
            event["at"],
        )
        if only_code is not None:
            self._execute(
                "UPDATE target_health SET target_name=?, status=?, reason=?, code=?, job_id=?, updated_at=? "
                "WHERE target_id=? AND code=?",
                values[1:] + (values[0], only_code),
            )
            return
        self._execute(
            "INSERT INTO target_health (target_id, target_name, status, reason, code, job_id, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (target_id) DO UPDATE SET target_name=excluded.target_name, "
            "status=excluded.status, reason=excluded.reason, code=excluded.code, job_id=excluded.job_id, "
            "updated_at=excluded.updated_at",
            values,
        )

    def _apply_health(self, before, after):
        current = {}
        if _health.started(before, after):  # only this rule reads what the store holds now
            current = {r[0]: r[1] for r in self._execute("SELECT target_id, status FROM target_health").fetchall()}
        for event in _health.health_events(before, after, current):
            self._put_health(event)

    def record_drift(self, drifted, restored):
        """A drift check's health changes (job/health.py), in one transaction: each event of ``drifted``
        over the target's status, each of ``restored`` only over a status of code ``runtime_drift`` (a
        status a job or another check set since stays)."""
        with self._transaction("record the drift check of %d targets" % (len(drifted) + len(restored))):
            for event in drifted:
                self._put_health(event)
            for event in restored:
                self._put_health(event, only_code=_health.DRIFT_CODE)

    def _put_projection(self, projection, at, previous=None):
        """Write ``projection`` over ``previous`` (``None``: a new one), its target views as rows."""
        head, targets, gone = _rows.changed_parts(previous, projection)
        columns = (projection["status"], int(projection["terminal"]), projection["jobRevision"], at)
        if previous is None:
            self._execute(
                "INSERT INTO deployments (projection, status, terminal, job_revision, updated_at, "
                "deployment_id) VALUES (?, ?, ?, ?, ?, ?)",
                (_json(_rows.projection_header(projection)),) + columns + (projection["deploymentId"],),
            )
        elif head:
            self._execute(
                "UPDATE deployments SET projection=?, status=?, terminal=?, job_revision=?, updated_at=? "
                "WHERE deployment_id=?",
                (_json(_rows.projection_header(projection)),) + columns + (projection["deploymentId"],),
            )
        else:
            self._execute(
                "UPDATE deployments SET status=?, terminal=?, job_revision=?, updated_at=? WHERE deployment_id=?",
                columns + (projection["deploymentId"],),
            )
        self._put_rows("deployment_targets", "deployment_id", projection["deploymentId"], projection, targets, gone)
        seq = (
            self._execute(
                "SELECT COUNT(*) FROM deployment_projection_history WHERE deployment_id=?",
                (projection["deploymentId"],),
            ).fetchone()[0]
            + 1
        )
        self._execute(
            "INSERT INTO deployment_projection_history (deployment_id, seq, job_revision, status, terminal, "
            "at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                projection["deploymentId"],
                seq,
                projection["jobRevision"],
                projection["status"],
                int(projection["terminal"]),
                at,
            ),
        )

    def create(self, record):
        with self._transaction("create job %s" % record["jobId"]):
            exists = self._execute("SELECT 1 FROM deployment_jobs WHERE job_id=?", (record["jobId"],)).fetchone()
            if exists:
                raise store_error("job %s already exists in %s" % (record["jobId"], self.location), code="job_exists")
            stored = dict(json.loads(json.dumps(record)), revision=1)
            held = self._claim(stored, stored["updatedAt"])  # first: a claimed target's record keeps its claim
            self._write(stored)
            self._apply_health(None, stored)
            if not stored.get("isRollback") and stored["status"] == "Pending":
                self._put_projection(_projection.initial(stored), stored["updatedAt"])
        return stored, held

    def update(self, job_id, *changes, documents=None):
        """As :meth:`JobStore.update`; ``documents`` (``{name: bytes}``) are stored in the same transaction."""
        with self._transaction("write job %s" % job_id):
            if (
                self._execute("SELECT revision FROM deployment_jobs WHERE job_id=?" + self.LOCK, (job_id,)).fetchone()
                is None
            ):
                raise store_error("no job %s in %s" % (job_id, self.location), code="job_not_found")
            record = self.get(job_id)
            revision = record["revision"]
            for change in changes:
                changed = change(record)
                if changed is None:  # this step has nothing to change
                    continue
                revision += 1
                previous, record = record, dict(changed, revision=revision)
                self._write(record, previous)
                self._apply_health(previous, record)
            self._refresh(record)
            if documents:
                self._put_documents(job_id, documents, record["updatedAt"])
            if record["status"] not in UNFINISHED:
                self._execute("DELETE FROM project_claims WHERE job_id=?", (job_id,))
                self._execute("DELETE FROM job_leases WHERE job_id=?", (job_id,))
                record.pop(LEASE_FIELD, None)
        return record

    def renew_lease(self, job_id, at):
        with self._transaction("renew the claim lease of job %s" % job_id):
            row = self._execute("SELECT status FROM deployment_jobs WHERE job_id=?" + self.LOCK, (job_id,)).fetchone()
            if row is not None and row[0] in UNFINISHED:
                self._execute(
                    "INSERT INTO job_leases (job_id, renewed_at) VALUES (?, ?) ON CONFLICT (job_id) "
                    "DO UPDATE SET renewed_at=excluded.renewed_at",
                    (job_id, at),
                )
        return row[0] if row is not None else None

    def _refresh(self, record):
        projection = self.projection(record["jobId"])
        new = _projection.refresh(projection, record)
        if new is not None:
            self._put_projection(new, record["updatedAt"], projection)

    def project_terminal(self, job_id, evidence, at):
        """The terminal projection of a finished job, once its terminal evidence exists."""
        with self._transaction("project job %s" % job_id):
            record = self.get(job_id)
            projection = self.projection(job_id)
            if record is None or projection is None or projection.get("terminal"):
                return projection
            new = _projection.terminal(projection, record, evidence)
            self._put_projection(new, at, projection)
        return new

    def project_recovery(self, job_id, keys, at):
        """The projection of a finished job after an operator rollback of it ended (``keys``: the
        rollback's strategy evidence keys), over its terminal projection."""
        with self._transaction("project the rollback of job %s" % job_id):
            record = self.get(job_id)
            projection = self.projection(job_id)
            if record is None or projection is None:
                return projection
            new = _projection.recovery(projection, record, keys)
            self._put_projection(new, at, projection)
        return new


def _sqlite_path(location):
    """The file of the SQLite store ``location`` (a path or ``sqlite:///path``); ``None`` for another URL."""
    if location.startswith("sqlite:///"):
        return location[len("sqlite:///") :]
    return None if "://" in location else location


def missing_sqlite(location=None):
    """The SQLite store ``location`` names when no file is there, else ``None`` (for readers that create none)."""
    path = _sqlite_path(location or DEFAULT_STORE)
    return path if path is not None and not os.path.isfile(os.path.expanduser(path)) else None


def vanished_sqlite(location=None):
    """The SQLite store ``location`` names when it is missing or empty (a running job's store, now gone)."""
    path = _sqlite_path(location or DEFAULT_STORE)
    path = path and os.path.expanduser(path)
    return path if path and (not os.path.isfile(path) or os.path.getsize(path) == 0) else None


def open_store(location=None, existing=False):
    """The store at ``location``: a file path, ``sqlite:///relative`` / ``sqlite:////absolute``, or a
    PostgreSQL DSN ``postgresql://user@host:port/db`` (default ``DEFAULT_STORE``). With ``existing``, a
    SQLite store that is missing or empty is ``job_store_failed`` instead of a new, empty store: the
    steps of a job that is under way must never start over on a blank store."""
    location = location or DEFAULT_STORE
    if existing and vanished_sqlite(location):
        raise store_error(
            "job store %s is missing or empty, though this job was recorded there: it was removed or "
            "truncated; restore it from a backup (nothing was created in its place)" % vanished_sqlite(location)
        )
    if location.startswith(("postgresql://", "postgres://")):
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.postgres import (  # pylint: disable=import-outside-toplevel
            PostgresJobStore,
        )

        return PostgresJobStore(location)
    path = _sqlite_path(location)
    if path is None:
        raise store_error(
            "job store %s: only SQLite (a path or sqlite:///path) and PostgreSQL (postgresql://) are "
            "available" % redact_url(location),
            code="job_store_unsupported",
        )
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sqlite import (  # pylint: disable=import-outside-toplevel
        SqliteJobStore,
    )

    return SqliteJobStore(path)
