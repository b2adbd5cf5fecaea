# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runner of a deployment job on the controller: the only controller package that opens a job store or
reads a task's variables. ``stella_job`` looks its step up in the declared table (steps), the runner
(runner) opens the store and hands the step its context (context); one module per step (start, target,
traffic, gate, finish, rollback_start, rollback_target, close, show, health), each with its check-mode
preview beside its real path (the base: step). Around them: the fence of a job's claims (fencing), its
claim lease and keeper (lease), the run that owns a job (owner, process), the recovery of the deployment an
operator rollback rolls back (recovery), an error inside a step recorded in the job (step_failure), the
action of the target-side modules (target_action) and the payload cache (payload_cache).
"""
