# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The job store: the schema and its one migration path (schema), the SQL store (sql), SQLite (sqlite),
PostgreSQL (postgres), a job as a header and one row per target (rows), what the store writes
(meter), each job's evidence documents (documents), where a ``stella`` command finds a
store (location), and the ``stella`` subcommands that read it (cli: report, health, interrupt, prune;
jobs_cli: list, show; evidence_cli: evidence).
"""
