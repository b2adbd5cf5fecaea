# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store on a PostgreSQL server (``psycopg`` 3 on the controller), selected by a DSN.

Same schema, same SQL and same behaviour as the embedded SQLite store (:class:`.sql.SqlJobStore`).
What differs: parameters are ``%s``; a record is read ``FOR UPDATE`` inside its transaction, so two
controllers changing one job serialize on its row; project claims are rows with a primary key, read
``FOR UPDATE``; and the start-up migration holds a transaction-level advisory lock, so controllers
starting at once migrate one after the other. The DSN's password never appears in an error: libpq
also reads it from ``PGPASSWORD`` or a ``~/.pgpass`` file, which keeps it out of the DSN entirely.
"""

from __future__ import annotations

import contextlib
from types import ModuleType

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import redact_text, redact_url
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import schema as _job_schema
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore, store_error

psycopg: ModuleType | None  # None: the controller lacks the optional requirement
try:
    import psycopg
except ImportError:  # pragma: no cover - the controller lacks the optional requirement
    psycopg = None

MIGRATION_LOCK = 0x5374656C  # pg_advisory_xact_lock key of the job store's start-up migration


class PostgresCatalogue(_job_schema.Catalogue):
    def health_checks(self, execute):
        rows = execute(
            "SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE t.relname = 'target_health' AND n.nspname = current_schema() AND c.contype = 'c'"
        ).fetchall()
        return [(name, definition) for name, definition in rows if "status" in definition]

    def columns(self, execute, table):
        return [
            r[0]
            for r in execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "AND table_schema = current_schema()",
                (table,),
            ).fetchall()
        ]

    def refresh_health_check(self, execute, stale):
        """``ALTER TABLE``: drop the narrow checks, add the contract's; rows stay where they are."""
        for name in stale:
            execute('ALTER TABLE target_health DROP CONSTRAINT "%s"' % name.replace('"', '""'))
        execute(
            "ALTER TABLE target_health ADD CONSTRAINT %s %s" % (_job_schema.HEALTH_CONSTRAINT, _job_schema.HEALTH_CHECK)
        )

    def widen_integer(self, execute, table, column):
        execute("ALTER TABLE %s ALTER COLUMN %s TYPE BIGINT" % (table, column))


class PostgresJobStore(SqlJobStore):
    LOCK = " FOR UPDATE"
    catalogue = PostgresCatalogue()

    def __init__(self, dsn, timeout=30):
        self.location = redact_url(dsn)
        self._secret = [dsn]
        if psycopg is None:
            raise store_error(
                "job store %s: the controller's Python lacks psycopg (pip install 'psycopg[binary]')" % self.location,
                code="job_store_unsupported",
            )
        self.errors = (psycopg.Error,)
        try:
            self._db = psycopg.connect(
                dsn, autocommit=True, connect_timeout=int(timeout), application_name="stellaops.runtime"
            )
        except psycopg.Error as exc:
            raise store_error("cannot open the job store %s: %s" % (self.location, self._clean(exc))) from None
        self._migrate()

    def _clean(self, exc):
        return redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, self._secret)

    def _sql(self, statement):
        return statement.replace("?", "%s")

    def close(self):
        self._db.close()

    def _migrate(self):
        with self._transaction("migrate the job store"):
            self._execute("SELECT pg_advisory_xact_lock(%d)" % MIGRATION_LOCK)
            self.migration = _job_schema.migrate(self._execute, self.catalogue)

    @contextlib.contextmanager
    def _begin(self, what):
        try:
            with self._db.transaction():
                yield
        except psycopg.IntegrityError as exc:
            raise store_error(
                "cannot %s in %s: %s" % (what, self.location, self._clean(exc)),
                code="job_exists" if "deployment_jobs_pkey" in str(exc) else "job_store_failed",
            ) from None
        except psycopg.Error as exc:
            raise store_error("cannot %s in %s: %s" % (what, self.location, self._clean(exc))) from None
