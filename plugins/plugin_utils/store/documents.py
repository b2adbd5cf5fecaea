# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A job's evidence documents in the job store (table ``job_documents``), so the evidence outlives the
controller that wrote it (an AWX job's container, a CI runner) and any controller that reaches the
store can show it, report it or export it.

A document is named by its path relative to an evidence directory (:func:`evidence_path`:
``<projectName>/<jobId>/<target>/deployment.json``, ``jobs/<jobId>/job.json``, ...): the store keeps the
same tree ``stella_evidence_dir`` receives as a copy on disk. Each row keeps the bytes, their SHA-256
and size. A document is written once: writing it again with the same bytes changes nothing, with other
bytes it is ``evidence_immutable`` (the evidence of a deployment never changes after it was written).
"""

from __future__ import annotations

import json
import posixpath

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    DEPLOYMENT_EVIDENCE_FILE,
    JOB_EVIDENCE_FILE,
    ROLLBACK_EVIDENCE_FILE,
)

EVIDENCE_IMMUTABLE = "evidence_immutable"


def evidence_path(root, path):
    """The store's name of the evidence file ``path`` written under the evidence directory ``root``
    (both as the evidence helpers build them, with ``root=""`` giving the relative name directly)."""
    return posixpath.relpath(path, root) if root else posixpath.normpath(path)


EVIDENCE_CORRUPT = "evidence_corrupt"


def checked_document(store, job_id, name, index):
    """The parsed JSON document ``name`` of job ``job_id`` once its bytes hash to the SHA-256 ``index``
    (``document_index``) recorded with it; ``evidence_corrupt`` when they do not or are no JSON document
    (its contents are never returned then)."""
    data = store.document(job_id, name)
    if data is None or sha256_bytes(data) != index[name]["sha256"]:
        raise StellaError(
            EVIDENCE_CORRUPT,
            "the job store's document %s of job %s does not hash to the SHA-256 recorded with it" % (name, job_id),
        )
    try:
        return json.loads(data)
    except ValueError:
        raise StellaError(
            EVIDENCE_CORRUPT, "the job store's document %s of job %s is no JSON document" % (name, job_id)
        ) from None


def stored_evidence(store, record, corrupt=None):
    """``(evidence_files, deployments)`` of ``record`` from the job store: the job's own documents
    (``job.json``, ``rollback-evidence.json``: ``{name: {"sha256", "document"}}``) and each target's
    ``deployment.json`` its record names (``{target: document}``). Every document is checked
    (:func:`checked_document`): one that fails is left out of ``deployments``, its file entry gets
    ``"corrupt": True``, and its ``evidence_corrupt`` error is added to ``corrupt`` (``{document: error}``)
    when given."""
    index = store.document_index(record["jobId"])
    directory = job_evidence_dir("", record["jobId"])
    problems = {} if corrupt is None else corrupt
    files = {}
    for name in (JOB_EVIDENCE_FILE, ROLLBACK_EVIDENCE_FILE):
        document = posixpath.join(directory, name)
        if document in index:
            files[name] = {"sha256": index[document]["sha256"], "document": document}
            try:
                checked_document(store, record["jobId"], document, index)
            except StellaError as exc:
                files[name]["corrupt"] = True
                problems[document] = exc
    deployments = {}
    for name, target in (record.get("targets") or {}).items():
        document = ((target.get("evidence") or {}).get(DEPLOYMENT_EVIDENCE_FILE) or {}).get("document")
        if document in index:
            try:
                deployments[name] = checked_document(store, record["jobId"], document, index)
            except StellaError as exc:
                problems[document] = exc
    return files, deployments


class DocumentStore:
    """Mixed into the SQL store: ``_execute``, ``_read``, ``_transaction`` and ``location`` are its."""

    def _put_documents(self, job_id, documents, at):
        """Inside an open transaction: store ``documents`` (``{name: bytes}``) of job ``job_id``."""
        for name in sorted(documents):
            data = documents[name]
            digest = sha256_bytes(data)
            row = self._execute("SELECT sha256 FROM job_documents WHERE job_id=? AND name=?", (job_id, name)).fetchone()
            if row is not None:
                if row[0] != digest:
                    raise StellaError(
                        EVIDENCE_IMMUTABLE,
                        "job %s: the evidence document %s is already in the job store "
                        "with other content (%s); evidence is written once and never changed" % (job_id, name, row[0]),
                    )
                continue
            self._execute(
                "INSERT INTO job_documents (job_id, name, sha256, size, body, written_at) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, name, digest, len(data), data.decode("utf-8"), at),
            )

    def put_documents(self, job_id, documents, at):
        """Store ``documents`` (``{name: bytes}``, UTF-8 text) of job ``job_id`` in one transaction;
        ``{name: sha256}``."""
        with self._transaction("store the evidence of job %s" % job_id):
            self._put_documents(job_id, documents, at)
        return {name: sha256_bytes(data) for name, data in documents.items()}

    def document_index(self, job_id):
        """``{name: {"sha256", "size", "writtenAt"}}`` of every document job ``job_id`` stored."""
        return {
            r[0]: {"sha256": r[1], "size": r[2], "writtenAt": r[3]}
            for r in self._read(
                "SELECT name, sha256, size, written_at FROM job_documents WHERE job_id=? ORDER BY name", (job_id,)
            )
        }

    def document(self, job_id, name):
        """The bytes of the document ``name`` of job ``job_id``, ``None`` when the store has none."""
        rows = self._read("SELECT body FROM job_documents WHERE job_id=? AND name=?", (job_id, name))
        return rows[0][0].encode("utf-8") if rows else None
