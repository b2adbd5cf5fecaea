# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The deployment job on the controller as data, pure and typed: its documents (model), its record and
state machine (record) and rollback (rollback), the job plan and each target's inputs (plan), one target's
outcome from what its tasks returned (target), the strategies' batches and gate (strategy), traffic in the
record (traffic), the deployments projection (projection), the recovery of the deployment an operator
rollback rolls back (recovery), health, an error inside one of its steps (step_failure), the views (view),
the check-mode preview (preview), the evidence report (report, report_view), the projects a job claims
(projects) and its task timeouts (timeouts). No I/O: the runner (``run``) reads and persists what these
compute.
"""
