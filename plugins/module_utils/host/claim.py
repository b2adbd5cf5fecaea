# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The fence of a project on this host: work of a job whose claim was superseded changes nothing.

A job's claim is ``{"jobId", "generation", "storeId"}``: the job store that holds the job (``storeId``)
hands out generations per project that only grow. The project directory keeps, in :data:`CLAIM_FILE`,
the claim it last accepted and the newest claim of each store it accepted work from. Work that carries
a generation older than its store's newest (or the same generation for another job) is refused with
``claim_superseded`` before anything on the host changes: a controller that was frozen while another
took its lease over cannot replace the newer job's release when it wakes.

A claim of another store (a job store moved to PostgreSQL, a second AWX, a store re-created, a demo and
a test each with their own) is accepted: that store's controller checked, right before it sent the work,
that its job still holds the project there. The claim it takes over is kept in the file (``takeovers``)
and returned, so the job records which store, job and generation it superseded.

A claim file that is missing or unreadable where a job's sticker runs fails closed: work of a job not
shown newer than the sticker's job is refused with ``claim_lost`` (an unreadable file: unless shown
newer; a missing one: when shown older, since a project deployed without a job never had one). Work
without a claim (a module used on its own) is not fenced. Standard library only.
"""

from __future__ import annotations

import json
import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CLAIM_FILE,
    CLAIM_LOST,
    CLAIM_STORES_KEPT,
    CLAIM_SUPERSEDED,
    INVALID_PAYLOAD,
    STICKER_FILE,
    job_is_newer,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write

TAKEOVERS_KEPT = 8  # the last takeovers by another store the claim file keeps, newest first
MISSING, UNREADABLE = "missing", "unreadable"


def _text(value, limit=200):
    return isinstance(value, str) and 0 < len(value) <= limit


def parse_claim(value):
    """``{"jobId": str, "generation": int >= 1[, "storeId": str]}`` from a task option, ``None`` when none
    was given."""
    if value is None:
        return None
    generation = value.get("generation") if isinstance(value, dict) else None
    job_id = value.get("jobId") if isinstance(value, dict) else None
    store = value.get("storeId") if isinstance(value, dict) else None
    if (
        not _text(job_id)
        or isinstance(generation, bool)
        or not isinstance(generation, int)
        or generation < 1
        or (store is not None and not _text(store))
    ):
        raise StellaError(
            INVALID_PAYLOAD,
            "claim must be {jobId: a job id, generation: an integer from 1, storeId: "
            "the job store's id}, got %s" % json.dumps(value, sort_keys=True, default=str)[:200],
            phase="preflight",
        )
    claim = {"jobId": job_id, "generation": generation}
    if store is not None:
        claim["storeId"] = store
    return claim


def _entry(claim):
    """A claim as the file keeps it (``storeId`` ``None``: a claim from before stores had ids)."""
    return {"storeId": claim.get("storeId"), "jobId": claim["jobId"], "generation": claim["generation"]}


def parse_kept(data):
    """The claim file's content as ``{"claim", "stores", "takeovers"}``; a file written before stores had
    ids (``{jobId, generation}``) reads as that one claim of an unnamed store. Raises ``ValueError``."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    try:
        claim = parse_claim({key: data[key] for key in ("jobId", "generation", "storeId") if key in data})
        stores = [_entry(parse_claim(entry)) for entry in data.get("stores") or [claim]]
    except (StellaError, AttributeError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    takeovers = data.get("takeovers") or []
    if not isinstance(takeovers, list):
        raise ValueError("takeovers is not a list")
    return {"claim": _entry(claim), "stores": stores, "takeovers": takeovers}


def read_kept(directory):
    """``(kept, problem)``: what the project in ``directory`` keeps (:func:`parse_kept`), or ``None`` and
    why (``"missing"``, ``"unreadable"``)."""
    try:
        with open(os.path.join(directory, CLAIM_FILE), "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None, MISSING
    except OSError:
        return None, UNREADABLE
    try:
        return parse_kept(json.loads(raw.decode("utf-8"))), None
    except ValueError:  # UnicodeDecodeError and json's errors are ValueErrors
        return None, UNREADABLE


def accepted_claim(directory):
    """The claim this host last accepted for the project in ``directory`` (``None``: none, or unreadable)."""
    kept, _problem = read_kept(directory)
    return kept["claim"] if kept else None


def sticker_job(directory):
    """The job whose sticker the project in ``directory`` runs (``None``: no sticker, or none named)."""
    try:
        with open(os.path.join(directory, STICKER_FILE), encoding="utf-8") as handle:
            job_id = json.load(handle).get("jobId")
    except (OSError, ValueError, AttributeError):
        return None
    return job_id if isinstance(job_id, str) and job_id else None


def _describe(claim):
    store = " of store %s" % claim["storeId"] if claim.get("storeId") else ""
    return "job %s (claim generation %d%s)" % (claim["jobId"], claim["generation"], store)


def superseded_by(kept, claim):
    """The newest claim of ``claim``'s store that supersedes it, ``None`` when none does (pure): a newer
    generation, or the same generation held by another job."""
    store = claim.get("storeId")
    for mark in kept["stores"]:
        if mark["storeId"] == store:
            newer = mark["generation"] > claim["generation"]
            twin = mark["generation"] == claim["generation"] and mark["jobId"] != claim["jobId"]
            return mark if newer or twin else None
    return None


def lost_claim_refusal(problem, claim, sticker):
    """Why work of ``claim`` must not run where the claim file is ``problem`` (missing, unreadable) and the
    sticker names job ``sticker``; ``None`` when it may (pure)."""
    if problem is None or not sticker or sticker == claim["jobId"]:
        return None
    newer = job_is_newer(claim["jobId"], sticker)
    if newer is True or (problem == MISSING and newer is None):
        return None
    order = "started before" if newer is False else "cannot be shown newer than"
    return (
        "job %s %s job %s, whose release this project runs, and the project's %s is %s: nothing was "
        "changed; restore the file, or run a new job of this project once no older job can still be "
        "running" % (claim["jobId"], order, sticker, CLAIM_FILE, problem)
    )


def decide(kept, problem, claim, sticker, at=None):
    """The fence's decision for ``claim`` on a project that keeps ``kept`` (``None``: ``problem``) and runs
    the sticker of job ``sticker`` (pure). Raises ``claim_superseded`` / ``claim_lost``; else returns
    ``(new kept or None when unchanged, evidence)`` where the evidence says what the acceptance took
    over (``claimTakeover``) or re-created (``claimFileRecreated``)."""
    evidence = {}
    if kept is None:
        why = lost_claim_refusal(problem, claim, sticker)
        if why:
            raise StellaError(CLAIM_LOST, why, evidence={"claim": claim, "claimFile": problem, "stickerJobId": sticker})
        if problem == UNREADABLE or sticker:
            evidence["claimFileRecreated"] = {"was": problem, "stickerJobId": sticker}
        kept = {"claim": None, "stores": [], "takeovers": []}
    else:
        newer = superseded_by(kept, claim)
        if newer is not None:
            raise StellaError(
                CLAIM_SUPERSEDED,
                "%s was superseded on this project by job %s (generation %d): nothing "
                "was changed; `stella show %s` shows the job that holds it"
                % (_describe(claim), newer["jobId"], newer["generation"], newer["jobId"]),
                evidence={"claim": claim, "acceptedClaim": newer},
            )
    entry, current = _entry(claim), kept["claim"]
    takeovers = list(kept["takeovers"])
    if current is not None and current["storeId"] != entry["storeId"]:
        evidence["claimTakeover"] = dict(current)
        takeovers = [dict(current, byStoreId=entry["storeId"], byJobId=entry["jobId"], at=at)] + takeovers
    stores = [entry] + [mark for mark in kept["stores"] if mark["storeId"] != entry["storeId"]]
    new = {"claim": entry, "stores": stores[:CLAIM_STORES_KEPT], "takeovers": takeovers[:TAKEOVERS_KEPT]}
    return (None if new == kept else new), evidence


def render_kept(kept):
    """The claim file's bytes: the accepted claim at the top (as files before stores had ids), then the
    newest claim of each store and the takeovers."""
    claim = kept["claim"]
    document = {
        "jobId": claim["jobId"],
        "generation": claim["generation"],
        "stores": kept["stores"],
        "takeovers": kept["takeovers"],
    }
    if claim["storeId"] is not None:
        document["storeId"] = claim["storeId"]
    return (json.dumps(document, sort_keys=True) + "\n").encode("utf-8")


def fence(directory, claim, accept=True, at=None):
    """Refuse ``claim`` (``claim_superseded`` or ``claim_lost``, nothing changed) when the project in
    ``directory`` accepted newer work; else, with ``accept`` (under the project lock, once the work may
    change the host), keep ``claim`` as the one accepted. Returns the evidence of the acceptance
    (``claimTakeover``, ``claimFileRecreated``; empty when there is nothing to say or no claim)."""
    if claim is None:
        return {}
    kept, problem = read_kept(directory)
    new, evidence = decide(kept, problem, claim, sticker_job(directory), at=at or utc_timestamp())
    if accept and new is not None:
        atomic_write(os.path.join(directory, CLAIM_FILE), render_kept(new), mode=0o600)
    return evidence if accept else {}
