# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment job on the controller: its typed record and state machine (record), the job plan and each
target's inputs (plan), one target's outcome from what its tasks returned (target), the strategies' batches
and gate (strategy), health, traffic in the record, the check-mode preview, the views and the deployments
projection, the recovery of the deployment an operator rollback rolls back (recovery), the run that owns a
job and its claim lease, the fence of its claims (fencing), an error inside one of its steps (step_failure),
and the steps of ``stella_job`` (steps). Pure, but for owner, process, lease, fencing, recovery and steps.
"""
