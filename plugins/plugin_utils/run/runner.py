# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One ``stella_job`` task (documentation: plugins/modules/stella_job.py): its step looked up in the table
(run/steps.py), checked, and run with the job store open; in check mode, a step's preview opens no store.

A step reads the job record from the job store, applies one pure change from the job core (plugin_utils/job)
and persists the result in the same transaction, so the record never shows progress that was not persisted.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    JOB_CHECK_MODE,
    JOB_INTERRUPTED,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.writer import clean
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import fencing as _fencing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import step_failure as _step_failure
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import (
    StepArgs,
    StepContext,
    job_of,
    need,
    refuse_interrupted,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.step import Outcome
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.steps import STEPS
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

# Codes a recorded failure never takes in: the job cannot be written, or must go no further.
UNRECORDED_CODES = (JOB_INTERRUPTED, "job_not_found", "job_store_failed")


class JobRunner(StepContext):
    """Runs the step a ``stella_job`` task names, with that task's variables and check mode."""

    def run(self, args: StepArgs) -> Outcome:
        """The outcome of step ``args["step"]``; a :class:`StellaError` when it cannot run."""
        step = STEPS[args["step"]]
        need(args, *step.needs)
        if self.check_mode and step.check_mode not in ("read", "preview"):
            raise StellaError(
                JOB_CHECK_MODE,
                "step %s records the job in the job store, so it does not run in "
                "check mode: nothing was planned, persisted or changed" % args["step"],
            )
        if self.check_mode and step.check_mode == "preview":  # no store is opened: a preview persists nothing
            return step.preview(self, args)
        self.location = args["store"] or self.vars.get("stella_job_store")
        missing = _job_store.missing_sqlite(self.location) if self.check_mode else None
        if missing:
            raise StellaError(
                "job_store_missing", "no job store at %s (check mode creates none)" % missing, phase="job"
            )
        # a step of a recorded job needs the store its start wrote: a vanished or truncated one is an error
        store = _job_store.open_store(self.location, existing=step.recorded_job)
        try:
            if step.acting:  # the job's header only: the step reads what it changes under the store's lock
                record = job_of(store, args, targets=False)
                refused = _fencing.refused_work(clean(args["failure"])) if args["step"] == "target" else None
                if refused and record.get("interrupted"):  # what the fence refused is still recorded
                    return _fencing.record_refusal(store, args, refused)
                refuse_interrupted(record)
            try:
                return step.act(self, store, args)
            except Exception as exc:  # pylint: disable=broad-except  # recorded, so the job still ends
                if not step.records_failure or getattr(exc, "code", None) in UNRECORDED_CODES:
                    raise
                return _step_failure.recorded(store, args, exc, self.secrets)
        finally:
            store.close()
