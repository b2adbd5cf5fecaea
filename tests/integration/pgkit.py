"""The lab's PostgreSQL server (``lab/lab.sh up`` starts it): a fresh database per test.

The password stays out of every DSN: :func:`pgpass` writes a ``~/.pgpass``-style file that libpq reads
through ``PGPASSFILE`` (set for the whole test session, so ``ansible-playbook`` children inherit it).
"""

from __future__ import annotations

import contextlib
import os
import uuid

import psycopg

import labkit


def settings(lab):
    pg = lab["postgres"]
    with open(labkit.lab_path(lab, pg["password_file"]), encoding="utf-8") as handle:
        password = handle.read().strip()
    return dict(pg, password=password)


def dsn(lab, database=None):
    pg = lab["postgres"]
    return "postgresql://%s@%s:%d/%s" % (pg["user"], pg["host"], pg["port"], database or pg["database"])


def pgpass(lab, path):
    pg = settings(lab)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        handle.write("%s:%d:*:%s:%s\n" % (pg["host"], pg["port"], pg["user"], pg["password"]))
    return path


@contextlib.contextmanager
def fresh_database(lab, prefix="t"):
    """A new empty database owned by the lab's role; dropped (connections and all) afterwards."""
    name = "%s_%s" % (prefix, uuid.uuid4().hex[:12])
    with psycopg.connect(dsn(lab), autocommit=True) as admin:
        admin.execute('CREATE DATABASE "%s"' % name)
    try:
        yield dsn(lab, name)
    finally:
        with psycopg.connect(dsn(lab), autocommit=True) as admin:
            admin.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)
