# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Keeping a job's claim lease while the controller run that owns it is alive.

A deployment job started with a claim lease is taken for gone by another controller when its run has
neither persisted a change nor renewed the lease for longer than the lease (run/owner.py). One step
can last longer than that (a slow pull, the services' health wait, hooks), so while the
``ansible-playbook`` run that owns the job is alive, a keeper renews the lease every third of it
(:meth:`JobStore.renew_lease`: no revision, no history).

``stella_job step=start`` starts the keeper (:func:`start_keeper`): a new Python process in the run's
process group, its output on ``/dev/null``, with its own store connection. It renews while
the owner process exists and runs. It does not renew while the owner is stopped (SIGSTOP, a suspended
terminal): a run that makes no progress still loses its lease. It ends within a second of the owner
ending, and at the first renewal after the job finished or was recorded interrupted. A store it cannot
reach is tried again at the next renewal.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, cast

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import COLLECTIONS_PATH
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.owner import owner_state
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import Owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import UNFINISHED, SqlJobStore, open_store

POLL_SECONDS = 1.0  # how often the keeper looks at its owner process
RENEWALS_PER_LEASE = 3
MIN_LEASE_SECONDS = 3  # a renewal at most every second, three per lease


def renew_every(lease: float) -> float:
    """Seconds between two renewals of a ``lease``-second claim lease."""
    return max(1.0, float(lease) / RENEWALS_PER_LEASE)


def keep(
    renew: Callable[[], str | None],
    state: Callable[[], str],
    lease: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    poll: float = POLL_SECONDS,
) -> str:
    """Renew the lease with ``renew() -> job status`` every :func:`renew_every` seconds while
    ``state()`` (the owner's :func:`owner_state`) is ``"running"``. Returns why it stopped:
    ``"owner_gone"`` or ``"job_finished"`` (finished, recorded interrupted, or no longer stored)."""
    every = renew_every(lease)
    due = clock()
    while True:
        now_state = state()
        if now_state == "gone":
            return "owner_gone"
        if now_state == "running" and clock() >= due:
            due = clock() + every
            try:
                if renew() not in UNFINISHED:
                    return "job_finished"
            except StellaError:
                pass  # the store could not be reached: tried again at the next renewal
        sleep(min(poll, every))


def run_keeper(location: str | None, job_id: str, owner: Owner, lease: float) -> str:
    """The keeper's loop over its own connection to the store at ``location``."""
    held: list[SqlJobStore] = []

    def renew() -> str | None:
        if not held:
            held.append(open_store(location))
        try:
            status: str | None = held[0].renew_lease(job_id, utc_timestamp())
            return status
        except StellaError:
            held.pop().close()
            raise

    try:
        return keep(renew, lambda: owner_state(owner), lease)
    finally:
        if held:
            held[0].close()


KEEPER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.lease import keeper_main; keeper_main()"
)


def start_keeper(location: str | None, job_id: str, owner: Owner | None, lease: int) -> int | None:
    """Start the keeper of ``job_id``'s lease: a new Python process of this interpreter (nothing of the
    task worker is inherited, its open store connection included), in the run's process group, its
    output on /dev/null, told what to keep on its standard input (the store location may hold a
    password). Returns its pid, ``None`` when it could not be started."""
    order = json.dumps({"location": location, "jobId": job_id, "owner": owner, "lease": lease}).encode("utf-8")
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-c", KEEPER, COLLECTIONS_PATH],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError:
        return None
    stdin = cast(IO[bytes], keeper.stdin)  # a pipe (stdin=subprocess.PIPE)
    try:
        stdin.write(order)
        stdin.close()
    except OSError:
        keeper.kill()
        keeper.wait()
        return None
    return keeper.pid


def keeper_main() -> None:
    """The keeper process: reads its order from standard input, keeps the lease, ends."""
    order = json.load(sys.stdin)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    run_keeper(order["location"], order["jobId"], order["owner"], order["lease"])
