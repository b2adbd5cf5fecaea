# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a ``stella_job`` step declares, and its default check-mode preview."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import preview as _preview
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.context import StepArgs, StepContext, needed

if TYPE_CHECKING:
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import SqlJobStore

# What a step answers: the task's result (the action adds ``changed``).
Outcome = Mapping[str, Any]


class Step(abc.ABC):
    """One step of ``stella_job``.

    - ``needs``: the options it cannot run without;
    - ``acting``: whether it acts for a running job, and is refused once the job was recorded interrupted
      (its projects are released, and another job may hold them now);
    - ``check_mode``: ``read`` (it reads the store, :meth:`act` with the context's ``check_mode`` set) or
      ``preview`` (:meth:`preview`, which opens no store);
    - ``recorded_job``: it works on a job already recorded, so the store it opens must be the one its
      start wrote (never a new one);
    - ``records_failure``: an error inside it is recorded in the job instead of ending the playbook before
      the job is closed (run/step_failure.py).
    """

    name: str = ""
    needs: tuple[str, ...] = ("job_id",)
    acting: bool = False
    check_mode: Literal["read", "preview"] = "preview"
    recorded_job: bool = True
    records_failure: bool = False

    @abc.abstractmethod
    def act(self, ctx: StepContext, store: SqlJobStore, args: StepArgs) -> Outcome:
        """The step's outcome, with the job store open (every step defines it)."""

    def preview(self, ctx: StepContext, args: StepArgs) -> Outcome:  # pylint: disable=unused-argument
        """The step's outcome in check mode (``check_mode`` ``preview``): nothing is opened, recorded or
        written. A recording step answers that nothing was recorded; a gate lets every batch be previewed."""
        return _preview.passing(self.name, needed(args, "job_id"), args["batch"])
