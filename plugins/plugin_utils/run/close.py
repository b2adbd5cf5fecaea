# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella_job`` step ``close``: a rollback in progress finished, the job's evidence (and report) kept and
written, its terminal projection, and the final record; in check mode, what each target would do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    job_evidence_dir,
    utc_timestamp,
)
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

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def keep_evidence(
    store: SqlJobStore, record: JobRecord, root: str | None, rollback: dict[str, Any] | None, report: bool
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The job's own evidence (``job.json``, ``rollback-evidence.json`` when there is rollback evidence, and
    with ``report`` the HTML report) kept in the job store, and written under ``root`` when the job has an
    evidence directory. ``(files, documents)``: ``{file name: {"sha256", "document", "path"}}`` and
    ``{document name: sha256}`` of every document the store keeps for the job."""
    documents: dict[str, Any] = {JOB_EVIDENCE_FILE: _job_view.job_evidence(record)}
    if rollback is not None:
        documents[ROLLBACK_EVIDENCE_FILE] = rollback
    directory = job_evidence_dir("", record["jobId"])
    files, stored = keep_documents(root, directory, documents)
    if report:
        # pylint: disable-next=import-outside-toplevel  # the report (and its page) only when one is asked for
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import report as page

        _files, deployments = stored_evidence(store, record)
        base = job_evidence_dir(root, record["jobId"]) if root else directory
        data = page.render_report(record, files, rollback, deployments, base=base).encode("utf-8")
        more, stored_page = keep_documents(root, directory, {page.REPORT_FILE: data})
        files.update(more)
        stored.update(stored_page)
    store.put_documents(record["jobId"], stored, utc_timestamp())
    return files, {name: entry["sha256"] for name, entry in store.document_index(record["jobId"]).items()}


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
        hostvars = ctx.hostvars
        return close(
            run,
            {
                name: hostvars[name][_preview.PREVIEW_FACT]
                for name in run.get(order) or []
                if name in hostvars and _preview.PREVIEW_FACT in hostvars[name]
            },
        )

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
        rollback = _job_view.rollback_evidence(record, source)
        files, documents = keep_evidence(store, record, args["evidence_dir"], rollback, args["report"])
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
