# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store's schema, the same on SQLite and PostgreSQL, and its one migration path.

Tables: ``deployment_jobs`` (the typed job, one JSON record per job with its revision) and
``deployment_job_history`` (every persisted status, by revision); ``deployments`` (the progress
projection) and ``deployment_projection_history``; ``target_health`` (one contract status per
target); ``project_claims`` (which unfinished job holds a target's Compose project);
``job_leases`` (when the controller run of an unfinished job last renewed its claim lease);
``claim_generations`` (per project, the last claim generation handed out: it only grows, and is at
least the store's clock in milliseconds when it was handed out); ``store_identity`` (the store's id,
created with the store: the targets tell claims of different stores apart by it);
``job_documents`` (each job's evidence documents, by their path under an evidence directory);
``job_targets`` and ``deployment_targets`` (one row per target of a job and of its projection, so
recording one target writes that target's row, see :mod:`.rows`);
``stella_schema`` (the applied version).

:func:`migrate` runs at every start-up inside one transaction: it applies the versions not yet
applied (a version may also move data: 6 splits each stored record and projection into a header and
one row per target), then refreshes the ``target_health`` status constraint in place when an existing database
was created with a narrower check (data kept). Only portable SQL is used; each backend supplies
the few catalogue questions that differ (:class:`Catalogue`).
"""

from __future__ import annotations

import abc
import uuid

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import HEALTH_STATUSES
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.rows import split_stored

SCHEMA_VERSION = 7
STORE_ID = "store_id"
HEALTH_CONSTRAINT = "target_health_status_check"
HEALTH_CHECK = "CHECK (status IN (%s))" % ", ".join("'%s'" % s for s in HEALTH_STATUSES)
HEALTH_COLUMNS = (
    ("target_id", "TEXT PRIMARY KEY"),
    ("target_name", "TEXT"),
    ("status", "TEXT NOT NULL CONSTRAINT %s %s" % (HEALTH_CONSTRAINT, HEALTH_CHECK)),
    ("reason", "TEXT"),
    ("code", "TEXT"),
    ("job_id", "TEXT"),
    ("updated_at", "TEXT"),
)


def health_table(name="target_health"):
    return "CREATE TABLE IF NOT EXISTS %s (%s)" % (name, ", ".join("%s %s" % c for c in HEALTH_COLUMNS))


MIGRATIONS = {
    1: (
        """CREATE TABLE IF NOT EXISTS deployment_jobs (
            job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, release_id TEXT,
            created_at TEXT NOT NULL, updated_at TEXT NOT NULL, revision INTEGER NOT NULL, record TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS deployment_job_history (
            job_id TEXT NOT NULL, revision INTEGER NOT NULL, status TEXT NOT NULL, at TEXT NOT NULL,
            PRIMARY KEY (job_id, revision))""",
    ),
    2: (
        """CREATE TABLE IF NOT EXISTS deployments (
            deployment_id TEXT PRIMARY KEY, status TEXT NOT NULL, terminal INTEGER NOT NULL,
            job_revision INTEGER NOT NULL, projection TEXT NOT NULL, updated_at TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS deployment_projection_history (
            deployment_id TEXT NOT NULL, seq INTEGER NOT NULL, job_revision INTEGER NOT NULL, status TEXT NOT NULL,
            terminal INTEGER NOT NULL, at TEXT NOT NULL, PRIMARY KEY (deployment_id, seq))""",
        health_table(),
        """CREATE TABLE IF NOT EXISTS project_claims (
            project_key TEXT PRIMARY KEY, job_id TEXT NOT NULL, claimed_at TEXT NOT NULL)""",
    ),
    3: ("""CREATE TABLE IF NOT EXISTS job_leases (job_id TEXT PRIMARY KEY, renewed_at TEXT NOT NULL)""",),
    4: ("""CREATE TABLE IF NOT EXISTS claim_generations (project_key TEXT PRIMARY KEY, generation BIGINT NOT NULL)""",),
    5: (
        """CREATE TABLE IF NOT EXISTS job_documents (
            job_id TEXT NOT NULL, name TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL, body TEXT NOT NULL,
            written_at TEXT NOT NULL, PRIMARY KEY (job_id, name))""",
    ),
    6: (
        """CREATE TABLE IF NOT EXISTS job_targets (
            job_id TEXT NOT NULL, name TEXT NOT NULL, position INTEGER NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (job_id, name))""",
        """CREATE TABLE IF NOT EXISTS deployment_targets (
            deployment_id TEXT NOT NULL, name TEXT NOT NULL, position INTEGER NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (deployment_id, name))""",
        lambda execute: split_rows(execute, "deployment_jobs", "job_id", "record", "job_targets"),
        lambda execute: split_rows(execute, "deployments", "deployment_id", "projection", "deployment_targets"),
    ),
    7: ("""CREATE TABLE IF NOT EXISTS store_identity (name TEXT PRIMARY KEY, value TEXT NOT NULL)""",),
}
WIDENED = 7  # from this version on, claim generations are 64-bit (4 to 6 created them 32-bit on PostgreSQL)
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS stella_schema (name TEXT PRIMARY KEY, version INTEGER NOT NULL)"


def split_rows(execute, table, key, column, targets):
    """Schema 6: move the targets of every document ``table`` keeps whole into rows of ``targets``."""
    for ident, head in execute("SELECT %s, %s FROM %s" % (key, column, table)).fetchall():
        text, rows = split_stored(head)
        for name, position, body in rows:
            execute(
                "INSERT INTO %s (%s, name, position, body) VALUES (?, ?, ?, ?)" % (targets, key),
                (ident, name, position, body),
            )
        execute("UPDATE %s SET %s = ? WHERE %s = ?" % (table, column, key), (text, ident))


def narrow(definition):
    """True when a status check ``definition`` (SQL text) admits fewer statuses than the contract's."""
    return any("'%s'" % status not in definition for status in HEALTH_STATUSES)


class Catalogue(abc.ABC):
    """What differs between backends: asked through ``execute(sql, params)`` of an open transaction."""

    @abc.abstractmethod
    def health_checks(self, execute):
        """``[(name, definition)]`` of the check constraints on ``target_health.status``."""

    @abc.abstractmethod
    def columns(self, execute, table):
        """The column names of ``table``."""

    @abc.abstractmethod
    def refresh_health_check(self, execute, stale):
        """Replace the ``stale`` constraints with the contract's check, keeping every row."""

    @abc.abstractmethod
    def widen_integer(self, execute, table, column):
        """Make ``table.column`` hold 64-bit integers, keeping every row."""


def new_store_id():
    """A new store's id: 16 random hex digits."""
    return uuid.uuid4().hex[:16]


def store_id(execute, new_id=None):
    """The store's id, created (``new_id`` or :func:`new_store_id`) when the store has none: a new store,
    or one whose tables were emptied."""
    execute(
        "INSERT INTO store_identity (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
        (STORE_ID, new_id or new_store_id()),
    )
    return execute("SELECT value FROM store_identity WHERE name = ?", (STORE_ID,)).fetchone()[0]


def migrate(execute, catalogue, new_id=None):
    """Bring the schema to :data:`SCHEMA_VERSION` and the health constraint to the contract's set.
    Returns what was done and the store's id (``{"from": v, "to": v, "healthConstraint":
    "kept"|"created"|"refreshed", "storeId": id}``)."""
    execute(VERSION_TABLE)
    row = execute("SELECT version FROM stella_schema WHERE name = ?", ("job_store",)).fetchone()
    version = row[0] if row else 0
    for step in sorted(MIGRATIONS):
        if step > version:
            for statement in MIGRATIONS[step]:
                if callable(statement):
                    statement(execute)
                else:
                    execute(statement)
    if 4 <= version < WIDENED:
        catalogue.widen_integer(execute, "claim_generations", "generation")
    if row is None:
        execute("INSERT INTO stella_schema (name, version) VALUES (?, ?)", ("job_store", SCHEMA_VERSION))
    elif version < SCHEMA_VERSION:
        execute("UPDATE stella_schema SET version = ? WHERE name = ?", (SCHEMA_VERSION, "job_store"))
    checks = catalogue.health_checks(execute)
    stale = [name for name, definition in checks if narrow(definition)]
    health = "kept"
    if not checks or stale:
        catalogue.refresh_health_check(execute, stale)
        health = "refreshed" if stale else "created"
    present = set(catalogue.columns(execute, "target_health"))
    if not {"target_id", "status"} <= present:
        raise ValueError("table target_health has no target_id and status columns: not a health table")
    for name, _kind in HEALTH_COLUMNS:
        if name not in present:
            execute("ALTER TABLE target_health ADD COLUMN %s TEXT" % name)
    return {"from": version, "to": SCHEMA_VERSION, "healthConstraint": health, "storeId": store_id(execute, new_id)}
