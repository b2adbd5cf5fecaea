# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Options every target-side agent task shares (argument spec: ``TASK_ARGUMENT_SPEC`` in
    module_utils/agent/module.py)."""

    DOCUMENTATION = r"""
options:
  payload:
    description:
      - The agent task payload verbatim, with the contract's exact, case-sensitive key names.
      - An unknown key, a missing required key or a wrongly typed value is refused before anything on
        the host changes (code V(invalid_payload)).
      - A value given both as a payload key and as the matching snake_case option must be equal;
        otherwise the task is refused. Either form alone is enough.
    type: dict
  target:
    description:
      - Target identity with keys C(id), C(name), C(type), C(endpoint), C(executionMode) (payload key
        C(Target) with C(Id), C(Name), C(Type), C(Endpoint), C(ExecutionMode)).
      - The endpoint must name the host the task runs on, otherwise the task fails with V(wrong_host).
    type: dict
  work_directory:
    description:
      - Stella-owned work directory (payload key C(WorkDirectory)); the project directory is
        C(<work_directory>/<project>). An absolute path without C(..) segments.
      - Defaults to C(/var/lib/stella/projects).
    type: path
  wait_timeout:
    description:
      - Seconds the services may take to become running and healthy (the wait after
        C(docker compose up -d), or the container health wait of V(docker.run)).
    type: int
    default: 120
  claim:
    description:
      - The claim of the job this work belongs to, C({jobId, generation, storeId}). The job store
        (C(storeId)) hands out a generation per project that only grows, and the job playbooks pass it.
      - The project directory keeps the claim it last accepted and the newest claim of each store
        (C(.stella-claim.json)). Work whose generation is older than its store's newest is refused with
        C(claim_superseded) before anything changes, so a job whose claim another job took over (its
        controller was frozen past its claim lease) cannot replace the newer job's release. A claim of
        another store takes the project over, returned as C(claimTakeover).
      - A claim file that is missing or unreadable where a job's sticker runs refuses work of a job that
        started before the sticker's job (and, with a damaged file, of one not shown newer) with
        C(claim_lost).
      - Without it, the work is not fenced.
    type: dict
  job_store:
    description:
      - With O(claim), the job store (a path or a PostgreSQL DSN, as O(stellaops.runtime.stella_job#module:store))
        the controller reads right before it sends the work. A job recorded interrupted, or whose project
        another job now holds, is refused with C(claim_superseded) without contacting the target.
      - Read on the controller only; never sent to the target. Defaults to the job store's default.
    type: str
"""
