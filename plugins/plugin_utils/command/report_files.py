# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The files of a job's evidence report (docs/report.md): the job's evidence read from its evidence
directory (``<evidence_dir>/jobs/<jobId>``, and each target's ``deployment.json`` the record names), and
``report.html`` written beside ``job.json``. What the files hold is checked, and the page rendered, by the
job core (job/report.py), which does no I/O; here are only the reads and the write.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as _report
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord


def read_file(path: str) -> bytes | None:
    """The bytes of the file ``path``, ``None`` when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def load_evidence(
    record: JobRecord,
    directory: str | None,
    recorded: Mapping[str, str] | None = None,
    corrupt: dict[str, StellaError] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """``(evidence_files, rollback evidence, deployments)`` read from the job's evidence ``directory``
    (``None``: none) and each target's ``deployment.json`` the record names, each file checked as
    :func:`.report.evidence_from` checks it (``recorded``, ``corrupt``: as there)."""
    return _report.evidence_from(record, directory, read_file, recorded, corrupt)


def write_report(
    record: JobRecord,
    directory: str,
    recorded: Mapping[str, str] | None = None,
    corrupt: dict[str, StellaError] | None = None,
) -> dict[str, str]:
    """Write ``<directory>/report.html`` atomically (``directory``: the job's evidence directory, where
    ``job.json`` is); returns ``{"path", "sha256"}``. ``recorded``, ``corrupt``: as :func:`load_evidence`'s."""
    os.makedirs(directory, mode=0o750, exist_ok=True)
    corrupt = {} if corrupt is None else corrupt
    files, rollback, deployments = load_evidence(record, directory, recorded, corrupt)
    data = _report.render_report(
        record, files, rollback, deployments, base=os.path.abspath(directory), corrupt=corrupt
    ).encode("utf-8")
    path = os.path.join(directory, _report.REPORT_FILE)
    atomic_write(path, data, mode=0o640)
    return {"path": path, "sha256": sha256_bytes(data)}
