# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``close``: a rollback in progress finished, the job's evidence (and report) kept and
written, with a signing key each document signed (evidence/signing.py), its terminal projection, and the
final record; in check mode, what each target would do (and whether the signing key opens)."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import sha256_bytes

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    job_evidence_dir,
    utc_timestamp,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence import signing as _signing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import (
    JOB_EVIDENCE_FILE,
    ROLLBACK_EVIDENCE_FILE,
    keep_documents,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import projection as _projection
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import view as _job_view
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import recovery as _recovery
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, job_of
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome, Step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.documents import stored_evidence
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys as _keys

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def signing_key(ctx: StepContext, args: StepArgs) -> Any:
    """The evidence signing key the task names (``signing_key``), opened with its passphrase
    (``signing_passphrase``, else ``STELLA_SIGNING_PASSPHRASE``), which joins the secrets redacted from any
    failure; ``None`` without one; ``signing_key_invalid`` when it cannot be opened."""
    path = args.get("signing_key")
    if not path:
        return None
    given = args.get("signing_passphrase")
    passphrase = given.encode("utf-8", "surrogateescape") if given else _keys.passphrase_from()
    if passphrase:
        ctx.secrets.append(passphrase.decode("utf-8", "replace"))
    return _keys.load_private_key(path, passphrase, code="signing_key_invalid")


def _kept(store: SqlJobStore, job_id: str) -> dict[str, bytes]:
    """Every document the store keeps for job ``job_id``, each checked against its SHA-256."""
    kept = {}
    for name, entry in store.document_index(job_id).items():
        data = store.document(job_id, name)
        if data is None or sha256_bytes(data) != entry["sha256"]:
            raise StellaError(
                "evidence_corrupt",
                "the job store's document %s of job %s does not hash to the SHA-256 recorded with it: "
                "nothing was signed or written" % (name, job_id),
            )
        kept[name] = data
    return kept


def keep_evidence(
    store: SqlJobStore,
    record: JobRecord,
    root: str | None,
    rollback: dict[str, Any] | None,
    report: bool,
    key: Any = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The job's own evidence (``job.json``, ``rollback-evidence.json`` when there is rollback evidence, and
    with ``report`` the HTML report) kept in the job store, and written under ``root`` when the job has an
    evidence directory. With the signing key ``key``, every document of the job that has no envelope yet
    (each target's ``deployment.json`` too) gets one (evidence/signing.py), kept and written beside it;
    envelopes the store keeps already are written again as they are. Nothing is written before every
    document and envelope was made. ``(files, documents)``: ``{file name: {"sha256", "document", "path"}}``
    of the job's directory and ``{document name: sha256}`` of every document the store keeps for the job."""
    job_id = record["jobId"]
    documents: dict[str, Any] = {JOB_EVIDENCE_FILE: _job_view.job_evidence(record)}
    if rollback is not None:
        documents[ROLLBACK_EVIDENCE_FILE] = rollback
    directory = job_evidence_dir("", job_id)
    files, stored = keep_documents(root, directory, documents, check_mode=True)
    if report:
        # pylint: disable-next=import-outside-toplevel  # the report (and its page) only when one is asked for
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as page

        _files, deployments = stored_evidence(store, record)
        base = job_evidence_dir(root, job_id) if root else directory
        data = page.render_report(record, files, rollback, deployments, base=base).encode("utf-8")
        more, stored_page = keep_documents(root, directory, {page.REPORT_FILE: data}, check_mode=True)
        files.update(more)
        stored.update(stored_page)
    kept = (
        _kept(store, job_id) if key is not None or any(map(_signing.is_envelope, store.document_index(job_id))) else {}
    )
    everything = {**kept, **stored}
    envelopes: dict[str, Any] = {name: data for name, data in kept.items() if _signing.is_envelope(name)}
    if key is not None:
        unsigned = [n for n in everything if not _signing.is_envelope(n) and _signing.envelope_name(n) not in kept]
        envelopes.update(_signing.sign_documents(job_id, everything, key, unsigned))
    by_directory: dict[str, dict[str, Any]] = {directory: {posixpath.basename(n): stored[n] for n in stored}}
    for name, envelope in envelopes.items():
        by_directory.setdefault(posixpath.dirname(name), {})[posixpath.basename(name)] = envelope
    for where, group in by_directory.items():  # every conflict on disk is found before anything is written
        keep_documents(root, where, group, check_mode=True)
    stored = {}
    for where, group in by_directory.items():
        entries, written = keep_documents(root, where, group)
        stored.update(written)
        if where == directory:
            files = entries
    store.put_documents(job_id, stored, utc_timestamp())
    return files, {name: entry["sha256"] for name, entry in store.document_index(job_id).items()}


def sign_record(store: SqlJobStore, record: JobRecord, key: Any) -> JobRecord:
    """``record`` saying its evidence is signed by ``key`` (``evidenceSignedBy``: the public key's
    fingerprint), stored; ``evidence_immutable`` (nothing changed) when its ``job.json`` was written
    already without saying so: evidence is written once."""
    fingerprint = key.public_key.fingerprint
    if record.get("evidenceSignedBy") == fingerprint:
        return record
    written = posixpath.join(job_evidence_dir("", record["jobId"]), JOB_EVIDENCE_FILE)
    if written in store.document_index(record["jobId"]):
        raise StellaError(
            "evidence_immutable",
            "job %s's evidence was written %s, so it is not signed with the key %s now: nothing was changed"
            % (
                record["jobId"],
                "signed by " + record["evidenceSignedBy"] if record.get("evidenceSignedBy") else "unsigned",
                fingerprint,
            ),
        )

    def change(current: JobRecord) -> JobRecord:
        new = _job.next_revision(current, utc_timestamp())
        new["evidenceSignedBy"] = fingerprint
        return new

    updated: JobRecord = store.update(record["jobId"], change)
    return updated


class Close(Step):
    """Finish a rollback in progress, write the job's evidence, and return the final record."""

    name = "close"

    def preview(self, ctx: StepContext, args: StepArgs) -> Outcome:
        """What each target would do, from the start's outcome the task hands over (``started``: the job's
        ``start``, or the rollback's ``rollback_start``) and the preview each target's recording step left
        on it (``PREVIEW_FACT``)."""
        run = args["started"] or {}
        if run.get("jobId") != args["job_id"] or not run.get("checkMode"):
            raise StellaError("job_not_found", "no job %s was previewed in this run" % args["job_id"], phase="job")
        close, order = (
            (_preview.rollback_close, "rollbackOrder")
            if run.get("kind") == "rollback"
            else (_preview.close, "targetOrder")
        )
        key = signing_key(ctx, args)  # a wrong key or passphrase is said now; nothing is signed
        hostvars = ctx.hostvars
        previewed = close(
            run,
            {
                name: hostvars[name][_preview.PREVIEW_FACT]
                for name in run.get(order) or []
                if name in hostvars and _preview.PREVIEW_FACT in hostvars[name]
            },
        )
        return previewed if key is None else {**previewed, "evidenceSigningKey": key.public_key.fingerprint}

    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        record = job_of(store, args)
        if record["status"] == "RollingBack":
            record = store.update(args["job_id"], lambda r: _rollback.finish_rollback(r, utc_timestamp()))
        elif record["status"] == "Running":
            record = store.update(args["job_id"], lambda r: _job.finish(r, utc_timestamp()))
        # an operator rollback job's evidence is about the deployment it rolls back (its source)
        source: JobRecord | None = (
            store.get(record["sourceJobId"]) if record["kind"] == "rollback" and record.get("sourceJobId") else None
        )
        # the key is opened once the job's outcome is recorded, before any document is written: with a wrong
        # key or passphrase the close fails with nothing written, and `stella close JOB --signing-key KEY`
        # finishes it
        key = signing_key(ctx, args)
        if key is not None:
            record = sign_record(store, record, key)
        rollback = _job_view.rollback_evidence(record, source)
        files, documents = keep_evidence(store, record, args["evidence_dir"], rollback, args["report"], key)
        # the id of the rollback evidence packet (its document name in the store), only when it was written
        evidence_id = files[ROLLBACK_EVIDENCE_FILE]["document"] if ROLLBACK_EVIDENCE_FILE in files else None
        if record["status"] in _job.TERMINAL:  # the terminal projection: after the terminal evidence exists
            store.project_terminal(
                record["jobId"], _projection.strategy_evidence(record, rollback, evidence_id, files), utc_timestamp()
            )
            if source is not None and rollback is not None:
                # the deployment an operator rollback job rolled back ends RolledBack (or Failed), once, and its
                # projection carries the rollback's evidence and traffic rollback keys (run/recovery.py)
                _recovery.ended(
                    store, record, _projection.recovery_keys(record, rollback, evidence_id), utc_timestamp()
                )
        on_disk = {name: entry for name, entry in files.items() if entry.get("path")}
        return {
            "jobId": record["jobId"],
            "job": record,
            "status": record["status"],
            "reason": record["reason"],
            "msg": _job_view.closing_line(record["jobId"], record["status"], record["reason"]),
            "succeeded": _job.succeeded(record),
            "evidenceFiles": on_disk,
            "evidenceDocuments": documents,
            "outcome": _job_view.outcome(record, on_disk),
            "text": _job_view.render_text(record),
        }
