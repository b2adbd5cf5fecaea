# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signed evidence: each evidence document of a job gets an in-toto Statement v1 in a DSSE envelope, kept
beside it as ``<document>.dsse.json`` (docs/trust.md).

A statement's subjects (:func:`subjects`, pure) are the document itself (its name in the job store, the
SHA-256 of its bytes); for a target's ``deployment.json`` also each image it deployed (the repository, the
image digest) and the lock, sticker and apply manifest it records (their file names and hashes); for
``job.json`` also every other document of the job, so a missing one is found. :func:`sign_documents`
makes the envelopes (at close, the only place a signing key is loaded); :func:`verify_documents` checks a
job's documents and envelopes offline with the public key, one verdict per document, in one pass.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    DEPLOYMENT_EVIDENCE_FILE,
    JOB_EVIDENCE_FILE,
    ROLLBACK_EVIDENCE_FILE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import dsse as _dsse

PREDICATE_TYPE = "https://stellaops.dev/evidence/v1"
ENVELOPE_SUFFIX = ".dsse.json"
REPORT_FILE = "report.html"  # job/report.py's REPORT_FILE (a layer above)
KINDS = {
    DEPLOYMENT_EVIDENCE_FILE: "deployment",
    JOB_EVIDENCE_FILE: "job",
    ROLLBACK_EVIDENCE_FILE: "rollback",
    REPORT_FILE: "report",
}
# what a deployment.json records of the files the target committed: (path key, hash key, name without a path)
ARTIFACTS = (
    ("composeLockPath", "composeLockHash", "compose.lock"),
    ("versionStickerPath", "versionStickerHash", "version-sticker"),
    ("applyManifestPath", "applyManifestHash", "apply-manifest"),
)
_SHA256_RE = re.compile(r"^sha256:([0-9a-f]{64})\Z")
INVALID = _dsse.INVALID


def envelope_name(document: str) -> str:
    """The name of the envelope kept beside ``document``."""
    return document + ENVELOPE_SUFFIX


def is_envelope(name: str) -> bool:
    return name.endswith(ENVELOPE_SUFFIX)


def kind_of(name: str) -> str | None:
    """``deployment``, ``job``, ``rollback`` or ``report`` by the document's file name; ``None`` otherwise."""
    return KINDS.get(posixpath.basename(name))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hex(digest: Any) -> str | None:
    """The hex of a ``sha256:<hex>`` digest; ``None`` for anything else."""
    match = _SHA256_RE.match(digest) if isinstance(digest, str) else None
    return match.group(1) if match else None


def _subject(name: str, hex_digest: str) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": hex_digest}}


def repository(image: Any) -> str | None:
    """The repository of an image reference, without tag or digest (``registry:5000/shop/web:1@sha256:..``
    -> ``registry:5000/shop/web``); ``None`` for an image id alone (``sha256:...``) or no reference."""
    if not isinstance(image, str) or not image or _hex(image):
        return None
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def deployment_subjects(document: Any) -> list[dict[str, Any]]:
    """The subjects a target's deployment evidence records besides itself: each deployed image (its
    repository, the hex of its digest) and the lock, sticker and apply manifest (their file names and
    hashes). Pure; what is not recorded is left out."""
    found: list[dict[str, Any]] = []
    if not isinstance(document, dict):
        return found
    for image in document.get("images") or []:
        if not isinstance(image, dict):
            continue
        digest = _hex(image.get("digest"))
        name = repository(image.get("image")) or repository(image.get("reference")) or image.get("name")
        if digest and isinstance(name, str) and name:
            found.append(_subject(name, digest))
    artifacts = document.get("artifacts") or {}
    if isinstance(artifacts, dict):
        for path_key, hash_key, fallback in ARTIFACTS:
            digest = _hex(artifacts.get(hash_key))
            path = artifacts.get(path_key)
            if digest:
                found.append(_subject(posixpath.basename(path) if isinstance(path, str) and path else fallback, digest))
    return found


def subjects(name: str, data: bytes, documents: dict[str, bytes] | None = None) -> list[dict[str, Any]]:
    """The subjects of the statement about document ``name`` (bytes ``data``): the document itself, and by
    its kind what it records (a deployment) or every other document of the job in ``documents`` (``{name:
    bytes}``, envelopes left out; for ``job.json``). Sorted, each subject once. ``ValueError`` for a
    deployment document that is not JSON."""
    found = [_subject(name, sha256_hex(data))]
    kind = kind_of(name)
    if kind == "deployment":
        found.extend(deployment_subjects(json.loads(data)))
    elif kind == "job":
        found.extend(
            _subject(other, sha256_hex(body))
            for other, body in (documents or {}).items()
            if other != name and not is_envelope(other)
        )
    unique = {(s["name"], s["digest"]["sha256"]): s for s in found}
    return [unique[key] for key in sorted(unique)]


def statement_of(job_id: str, name: str, data: bytes, documents: dict[str, bytes] | None = None) -> dict[str, Any]:
    """The in-toto Statement v1 about document ``name`` of job ``job_id``."""
    return _dsse.statement(
        subjects(name, data, documents),
        PREDICATE_TYPE,
        {"jobId": job_id, "document": name, "kind": kind_of(name)},
    )


def sign_documents(job_id: str, documents: dict[str, bytes], key: Any, names: Any = None) -> dict[str, dict]:
    """``{envelope name: DSSE envelope}`` of each document of ``names`` (default: every document of
    ``documents``, the job's ``{name: bytes}``) signed with the private key ``key``."""
    wanted = sorted(name for name in (documents if names is None else names) if not is_envelope(name))
    return {
        envelope_name(name): _dsse.sign_statement(statement_of(job_id, name, documents[name], documents), key)
        for name in wanted
    }


# ------------------------------------------------------------------------------------------ verifying


def _signed_set(statement: dict[str, Any]) -> dict[str, str]:
    """``{subject name: sha256 hex}`` of a statement (a name given twice: the set of its digests joined)."""
    signed: dict[str, str] = {}
    for entry in statement.get("subject") or []:
        digest = entry.get("digest") if isinstance(entry, dict) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and isinstance(digest, dict):
            value = str(digest.get("sha256"))
            signed[name] = value if name not in signed else ",".join(sorted({*signed[name].split(","), value}))
    return signed


def _expected_set(expected: list[dict[str, Any]]) -> dict[str, str]:
    return _signed_set({"subject": expected})


def _check_document(job_id: str, name: str, data: bytes, envelope: bytes | None, documents, key) -> tuple:
    """``(reason or None, statement or None)`` of one document."""
    if envelope is None:
        return "no envelope: %s is missing" % posixpath.basename(envelope_name(name)), None
    try:
        statement = _dsse.open_envelope(envelope, key)
    except StellaError as exc:
        return "envelope: %s" % exc.reason, None
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    about = (statement.get("predicateType"), predicate.get("jobId"), predicate.get("document"))
    if about != (PREDICATE_TYPE, job_id, name):
        return "the envelope is signed evidence of %s of job %s, not of this document" % (about[2], about[1]), None
    signed = _signed_set(statement)
    digest = sha256_hex(data)
    if signed.get(name) != digest:
        return "its bytes (sha256 %s) are not the ones signed (%s)" % (digest, signed.get(name)), statement
    try:
        expected = _expected_set(subjects(name, data, {} if kind_of(name) == "job" else None))
    except ValueError:
        return "it is no JSON document", statement
    own = {n: d for n, d in signed.items() if kind_of(name) != "job" or n == name}
    if own != expected:
        changed = sorted(set(own.items()) ^ set(expected.items()))
        return "the signed subjects differ from what it records (%s)" % ", ".join(
            sorted({n for n, _d in changed})
        ), statement
    return None, statement


def verify_documents(job_id: str, files: dict[str, bytes], key: Any) -> list[dict[str, Any]]:
    """Verify job ``job_id``'s evidence ``files`` (``{name: bytes}``: its documents and envelopes, as the
    job store or an evidence directory holds them) with the public key ``key``: ``[{"document", "ok",
    "reason", "code"}]`` (``code``: ``evidence_signature_invalid`` when it failed) sorted by document, one per
    document found, listed by ``job.json``'s statement or named by an envelope. A document fails when it has no
    envelope, its envelope is not ``key``'s signature of a statement about it, its bytes or what it records are
    not the signed subjects, or ``job.json``'s signed statement does not list it; a document ``job.json`` lists
    that is not there fails as missing."""
    documents = {name: data for name, data in files.items() if not is_envelope(name)}
    envelopes = {name[: -len(ENVELOPE_SUFFIX)]: data for name, data in files.items() if is_envelope(name)}
    job_name = posixpath.join("jobs", job_id, JOB_EVIDENCE_FILE)
    reasons: dict[str, str | None] = {}
    listed: dict[str, str] | None = None
    for name in sorted(documents):
        reason, statement = _check_document(job_id, name, documents[name], envelopes.get(name), documents, key)
        reasons[name] = reason
        if name == job_name and statement is not None and reason is None:
            listed = _signed_set(statement)
    if job_name not in documents:
        reasons[job_name] = "missing: no job.json, which lists the job's documents"
    elif listed is not None:
        for name, data in documents.items():
            if name == job_name or reasons[name] is not None:
                continue
            if name not in listed:
                reasons[name] = "not listed in the signed statement of %s" % job_name
            elif listed[name] != sha256_hex(data):
                reasons[name] = "its bytes are not the ones %s's signed statement lists" % job_name
        for name in listed:
            if name not in documents:
                reasons[name] = "missing: %s's signed statement lists it" % job_name
    for name in envelopes:
        if name not in documents and name not in reasons:
            reasons[name] = "missing: its envelope %s is there" % posixpath.basename(envelope_name(name))
    return [
        {"document": name, "ok": reasons[name] is None, "reason": reasons[name], "code": reasons[name] and INVALID}
        for name in sorted(reasons)
    ]
