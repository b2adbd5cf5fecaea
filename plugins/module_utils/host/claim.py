# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The fence of a project on this host: work of a job whose claim was superseded changes nothing.

A job's claim is ``{"jobId", "generation"}``; the job store hands out generations per project that only
grow. The project directory keeps the claim it last accepted (:data:`CLAIM_FILE`). Work that carries an
older generation is refused with ``claim_superseded`` before anything on the host changes: a controller
that was frozen while another took its lease over cannot replace the newer job's release when it wakes.
Work without a claim (a module used on its own) is not fenced. Standard library only.
"""

from __future__ import annotations

import json
import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CLAIM_FILE, CLAIM_SUPERSEDED, INVALID_PAYLOAD)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write


def parse_claim(value):
    """``{"jobId": str, "generation": int >= 1}`` from a task option, ``None`` when none was given."""
    if value is None:
        return None
    generation = value.get("generation") if isinstance(value, dict) else None
    job_id = value.get("jobId") if isinstance(value, dict) else None
    if not isinstance(job_id, str) or not job_id or isinstance(generation, bool) or not isinstance(generation, int) \
            or generation < 1:
        raise StellaError(INVALID_PAYLOAD, "claim must be {jobId: a job id, generation: an integer from 1}, got %s"
                          % json.dumps(value, sort_keys=True, default=str)[:200], phase="preflight")
    return {"jobId": job_id, "generation": generation}


def accepted_claim(directory):
    """The claim this host last accepted for the project in ``directory`` (``None``: none, or unreadable)."""
    try:
        with open(os.path.join(directory, CLAIM_FILE), encoding="utf-8") as handle:
            return parse_claim(json.load(handle))
    except (OSError, ValueError, StellaError):
        return None


def fence(directory, claim, accept=True):
    """Refuse ``claim`` (``claim_superseded``, nothing changed) when the project in ``directory`` accepted
    a newer generation; else, with ``accept`` (under the project lock, once the work may change the
    host), keep ``claim`` as the one accepted. Returns the claim accepted before."""
    if claim is None:
        return None
    current = accepted_claim(directory)
    if current is not None and current["generation"] > claim["generation"]:
        raise StellaError(CLAIM_SUPERSEDED, "job %s (claim generation %d) was superseded on this project by job %s "
                          "(generation %d): nothing was changed; `stella show %s` shows the job that holds it" % (
                              claim["jobId"], claim["generation"], current["jobId"], current["generation"],
                              current["jobId"]),
                          evidence={"claim": claim, "acceptedClaim": current})
    if accept and current != claim:
        atomic_write(os.path.join(directory, CLAIM_FILE), (json.dumps(claim, sort_keys=True) + "\n").encode("utf-8"),
                     mode=0o600)
    return current
