# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The SQLite job store (the embedded default): a file in WAL mode, one ``BEGIN IMMEDIATE`` transaction per
change, the schema of :mod:`.schema` (documentation: docs/job-store.md)."""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore, store_error


class SqliteCatalogue(_job_schema.Catalogue):
    def health_checks(self, execute):
        row = execute("SELECT sql FROM sqlite_master WHERE type='table' AND name='target_health'").fetchone()
        text = row[0] if row else ""
        start = text.upper().find("CHECK")
        while start >= 0 and "status" not in text[start : start + 40].lower():
            start = text.upper().find("CHECK", start + 5)
        return [("target_health", text[start:])] if start >= 0 else []

    def columns(self, execute, table):
        return [r[1] for r in execute("PRAGMA table_info(%s)" % table).fetchall()]

    def refresh_health_check(self, execute, stale):
        """SQLite cannot alter a constraint: the table is rebuilt with the contract's check and every row
        copied, in the migration's transaction (SQLite's documented way to change a table's schema)."""
        keep = [c for c in self.columns(execute, "target_health") if c in dict(_job_schema.HEALTH_COLUMNS)]
        execute(_job_schema.health_table("target_health_new"))
        execute("INSERT INTO target_health_new (%s) SELECT %s FROM target_health" % (", ".join(keep), ", ".join(keep)))
        execute("DROP TABLE target_health")
        execute("ALTER TABLE target_health_new RENAME TO target_health")

    def widen_integer(self, execute, table, column):
        """Nothing to do: an SQLite INTEGER holds 64 bits."""


class SqliteJobStore(SqlJobStore):
    catalogue = SqliteCatalogue()

    def __init__(self, path, timeout=30.0):
        self.path = self.location = os.path.expanduser(path)
        directory = os.path.dirname(self.path)
        try:
            if directory:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        except (OSError, sqlite3.Error) as exc:
            raise store_error("cannot open the job store %s: %s" % (self.path, exc)) from None
        self._migrate()
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass

    def close(self):
        self._db.close()

    @contextlib.contextmanager
    def _begin(self, what):
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
            raise store_error("cannot %s in %s: %s" % (what, self.path, exc)) from None
