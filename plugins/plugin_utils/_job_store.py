# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store: where deployment job records are persisted on the controller.

:class:`JobStore` is the interface the job playbooks use; :class:`SqliteJobStore` is the embedded
default (one SQLite file, WAL journal). A PostgreSQL backend implements the same five methods over
the same two tables. Every change is one transaction that reads the current record, applies a pure
change from ``_job`` and writes the result with the next revision, so parallel forks (the targets of
one batch) never lose each other's updates, and readers only ever see persisted state.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import sqlite3

from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError

DEFAULT_STORE = "~/.local/state/stellaops/jobs.sqlite3"
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS deployment_jobs (
        job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, release_id TEXT,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, revision INTEGER NOT NULL, record TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS deployment_job_history (
        job_id TEXT NOT NULL, revision INTEGER NOT NULL, status TEXT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (job_id, revision))""",
)


def store_error(message, code="job_store_failed"):
    return StellaError(code, message, phase="job")


class JobStore(abc.ABC):
    """What the job playbooks need of a store."""

    @abc.abstractmethod
    def create(self, record):
        """Persist a new job; ``job_exists`` when its id is taken."""

    @abc.abstractmethod
    def get(self, job_id):
        """The record, or ``None``."""

    @abc.abstractmethod
    def update(self, job_id, change):
        """Apply ``change(record) -> record`` atomically; returns the stored result."""

    @abc.abstractmethod
    def list(self, limit=20):
        """The newest records first."""

    @abc.abstractmethod
    def unfinished(self):
        """Records whose status is not terminal (Pending, Running, RollingBack)."""


class SqliteJobStore(JobStore):
    def __init__(self, path, timeout=30.0):
        self.path = os.path.expanduser(path)
        directory = os.path.dirname(self.path)
        try:
            if directory:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            for statement in SCHEMA:
                self._db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            raise store_error("cannot open the job store %s: %s" % (self.path, exc)) from None
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass

    def close(self):
        self._db.close()

    def _write(self, record, revision, insert):
        row = (record["kind"], record["status"], (record.get("release") or {}).get("id"), record["updatedAt"],
               revision, json.dumps(record, sort_keys=True, separators=(",", ":")), record["jobId"])
        if insert:
            self._db.execute("INSERT INTO deployment_jobs (kind, status, release_id, updated_at, revision, record, "
                             "job_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row + (record["createdAt"],))
        else:
            self._db.execute("UPDATE deployment_jobs SET kind=?, status=?, release_id=?, updated_at=?, revision=?, "
                             "record=? WHERE job_id=?", row)
        self._db.execute("INSERT INTO deployment_job_history (job_id, revision, status, at) VALUES (?, ?, ?, ?)",
                         (record["jobId"], revision, record["status"], record["updatedAt"]))

    @contextlib.contextmanager
    def _transaction(self, job_id):
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back on any error."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise store_error("cannot write job %s: %s" % (job_id, exc)) from None

    def create(self, record):
        with self._transaction(record["jobId"]):
            exists = self._db.execute("SELECT 1 FROM deployment_jobs WHERE job_id=?", (record["jobId"],)).fetchone()
            if exists:
                raise store_error("job %s already exists in %s" % (record["jobId"], self.path), code="job_exists")
            stored = dict(record, revision=1)
            self._write(stored, 1, insert=True)
        return stored

    def get(self, job_id):
        try:
            row = self._db.execute("SELECT record FROM deployment_jobs WHERE job_id=?", (job_id,)).fetchone()
        except sqlite3.Error as exc:
            raise store_error("cannot read job %s: %s" % (job_id, exc)) from None
        return json.loads(row[0]) if row else None

    def update(self, job_id, change):
        with self._transaction(job_id):
            row = self._db.execute("SELECT record, revision FROM deployment_jobs WHERE job_id=?", (job_id,)).fetchone()
            if row is None:
                raise store_error("no job %s in %s" % (job_id, self.path), code="job_not_found")
            revision = row[1] + 1
            record = dict(change(json.loads(row[0])), revision=revision)
            self._write(record, revision, insert=False)
        return record

    def list(self, limit=20):
        rows = self._db.execute("SELECT record FROM deployment_jobs ORDER BY created_at DESC, job_id LIMIT ?",
                                (int(limit),)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def unfinished(self):
        rows = self._db.execute("SELECT record FROM deployment_jobs WHERE status IN ('Pending', 'Running', "
                                "'RollingBack') ORDER BY created_at").fetchall()
        return [json.loads(row[0]) for row in rows]

    def history(self, job_id):
        return [{"revision": r, "status": s, "at": a} for r, s, a in self._db.execute(
            "SELECT revision, status, at FROM deployment_job_history WHERE job_id=? ORDER BY revision", (job_id,))]


def open_store(location=None):
    """The store at ``location``: a file path or a URL ``sqlite:///relative`` / ``sqlite:////absolute``
    (default ``DEFAULT_STORE``)."""
    location = location or DEFAULT_STORE
    if location.startswith("sqlite:///"):
        return SqliteJobStore(location[len("sqlite:///"):])
    if "://" in location:
        raise store_error("job store %r: only SQLite (a path or sqlite:///path) is available" %
                          location.split("://", 1)[0], code="job_store_unsupported")
    return SqliteJobStore(location)
