# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the job store writes, measured: when ``STELLA_JOB_STORE_METER`` names a file, every committed
transaction that wrote appends one line to it, the number of bytes of the values it wrote (text as
UTF-8, numbers as their decimal text). Rows deleted count their key values only. One ``write()`` of a
short line per transaction, to a file opened for appending, so the forks of one run add up in one
file. Off (nothing counted) when the variable is unset. docs/job-store.md says how to read it.
"""

from __future__ import annotations

import os

VARIABLE = "STELLA_JOB_STORE_METER"
WRITES = ("INSERT", "UPDATE", "DELETE")


def value_size(value):
    """Bytes a parameter value takes as written (pure)."""
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    return len(str(value).encode("utf-8"))


class Meter:
    def __init__(self, path=None):
        self.path = path if path is not None else os.environ.get(VARIABLE) or None
        self.pending = 0

    def count(self, statement, params):
        if self.path and statement.lstrip()[:6].upper() in WRITES:
            self.pending += sum(value_size(value) for value in params)

    def discard(self):
        self.pending = 0

    def committed(self):
        if self.path and self.pending:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(descriptor, b"%d\n" % self.pending)
            finally:
                os.close(descriptor)
        self.pending = 0


def total(path):
    """The bytes a meter file records (the sum of its lines); 0 when there is no file."""
    try:
        with open(path, encoding="ascii") as stream:
            return sum(int(line) for line in stream if line.strip())
    except FileNotFoundError:
        return 0
