# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Compose projects a job deploys, and the claim key of each target's project (pure): the job store
holds one claim per key while the job is unfinished (store/claims.py)."""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord


def project_keys(record: JobRecord) -> dict[str, str]:
    """``{target name: claim key}``: a target (by id) and the Compose project the job deploys there."""
    return {
        name: "%s|%s" % (t.get("targetId") or name, t.get("projectName") or "")
        for name, t in (record.get("targets") or {}).items()
    }


def project_names(record: JobRecord) -> list[str]:
    """The Compose projects the job deployed, sorted (pure)."""
    return sorted({t["projectName"] for t in (record.get("targets") or {}).values() if t.get("projectName")})
