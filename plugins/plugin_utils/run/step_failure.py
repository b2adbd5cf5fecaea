# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An error inside one of the controller's steps of a running job, recorded through the job store so the
job still ends (the changes to the record: job/step_failure.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    first_line,
    redact_text,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import rollback as _rollback
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.step_failure import (
    INTERNAL_ERROR,
    abandoned,
    answer,
    step_failed,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import JobRecord, RollbackOrder
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore


def recorded(store: SqlJobStore, args: StepArgs, exc: Exception, secrets: list[str]) -> dict[str, Any]:
    """The error ``exc`` inside step ``args["step"]`` of a running job, recorded in the job (``secrets``
    redacted) so that the gate closes and the job is finished, its rollback decided; the step's answer
    is then what it answers when the job failed, with a warning saying what happened. An error of a
    job that is not running (or, for ``finish``, whose rollback was already decided) is raised again."""
    code = exc.code if isinstance(exc, StellaError) else INTERNAL_ERROR
    text = exc.reason if isinstance(exc, StellaError) else "%s: %s" % (type(exc).__name__, exc)
    reason = redact_text(first_line(text) or type(exc).__name__, secrets)
    now, step = utc_timestamp(), args["step"]
    record: JobRecord | None = store.get(args["job_id"])
    outcome: RollbackOrder | dict[str, Any]
    if step == "finish":
        if record is None or record["status"] not in ("Running", "Failed") or record.get("rollback") is not None:
            raise exc
        record = store.update(args["job_id"], lambda r: abandoned(r, code=code, reason=reason, now=now))
        outcome = _rollback.rollback_orders(record)
    else:
        if record is None or record["status"] != "Running":
            raise exc
        batch = (
            args["batch"]
            if args["batch"] is not None
            else next((record["targets"][n]["batch"] for n in args["targets"] if n in record["targets"]), None)
        )
        record = store.update(
            args["job_id"],
            lambda r: step_failed(
                r,
                step=step,
                code=code,
                reason=reason,
                now=now,
                batch=batch,
                target=args["target"] if step == "target" else None,
            ),
        )
        outcome = answer(record, step, args["target"], batch)
    warning = "job %s: step %s failed (%s: %s); the error is recorded in the job, which fails" % (
        args["job_id"],
        step,
        code,
        reason,
    )
    return dict(outcome, stepFailure={"step": step, "code": code, "reason": reason}, warnings=[warning])
