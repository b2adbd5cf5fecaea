# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store: the schema and its one migration path (schema), the SQL store, its transactions and
writes, and opening the store a location names (sql), its reads (reads), its retention (retention),
SQLite (sqlite), PostgreSQL (postgres), a job as a header and one row per target (rows), what the store
writes (meter), the project claims (claims) and each job's evidence documents (documents). Where a
``stella`` command finds a store is ``provider.location``; the commands that read it live in ``command``.
"""
