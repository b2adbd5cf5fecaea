# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one ``stella_job`` task hands its step: the task's variables, whether it runs in check mode, the
job store's location, and the secrets and warnings the step collects; and the reads every step shares."""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import JOB_INTERRUPTED
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import interrupt_gone


class StepContext:
    """One ``stella_job`` task: its task variables, whether it runs in check mode, the store it opened
    (``location``), and the secrets it saw (redacted from any failure it reports) and its warnings."""

    def __init__(self, task_vars, check_mode):
        self.vars = task_vars or {}
        self.check_mode = check_mode
        self.secrets = []
        self.warnings = []
        self.location = None

    @property
    def hostvars(self):
        return self.vars.get("hostvars") or {}


def need(args, *names):
    """``job_invalid`` unless every option in ``names`` has a value."""
    for name in names:
        if args.get(name) in (None, ""):
            raise StellaError("job_invalid", "step %s needs %s" % (args["step"], name), phase="job")


def job_of(store, args, targets=True):
    """The persisted record of ``job_id`` (without ``targets``: its header only, ``JobStore.head``);
    ``job_not_found`` when the store has none."""
    record = store.get(args["job_id"]) if targets else store.head(args["job_id"])
    if record is None:
        raise StellaError("job_not_found", "no job %s in the job store" % args["job_id"], phase="job")
    return record


def refuse_interrupted(record):
    """A job recorded interrupted (its run was taken for gone) goes no further, not even to a rollback."""
    if record.get("interrupted"):
        raise StellaError(
            JOB_INTERRUPTED,
            "job %s was recorded interrupted, this run stops: %s" % (record["jobId"], record["interrupted"]["why"]),
            phase="job",
        )


def batch_of(record, args):
    """The batch ``args`` names: ``batch``, else the one batch of ``targets``."""
    if args["batch"] is not None:
        return args["batch"]
    indexes = {record["targets"][n]["batch"] for n in args["targets"] if n in record["targets"]}
    if len(indexes) != 1:
        raise StellaError(
            "job_invalid",
            "step %s needs the targets of one batch (got %s)" % (args["step"], ", ".join(args["targets"]) or "none"),
            phase="job",
        )
    return indexes.pop()


def interrupt_gone_jobs(store, now):
    """Record every unfinished job whose run is gone (or whose claim lease expired) interrupted, which
    releases its projects, before a new job claims any; their job ids."""
    return [
        record["jobId"]
        for record in store.unfinished()
        if interrupt_gone(store, record, now)["status"] != record["status"]
    ]
