# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How long the controller waits on a target's apply or rollback task before it takes the target for gone
(a host that hangs while its connection stays up: a paused VM, a host that lost power behind a live
route). The task's timeout ends the wait; the target is then recorded ``target_unreachable``, its outcome
unknown (job/target.py). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_WAIT_TIMEOUT,
)

# Seconds a target's apply or rollback may take besides its waits and hooks: pulling images, creating and
# starting containers, the inspection.
TASK_ALLOWANCE = 600


def task_timeout(wait_timeout: int | None, hooks: Iterable[dict[str, Any]] | None = (), given: int | None = 0) -> int:
    """Seconds after which the controller gives up on a target's apply or rollback task that does not answer:
    ``given`` when set, else the services' wait twice (the apply's, and a failed apply's restore), every
    hook's timeout and :data:`TASK_ALLOWANCE`."""
    if given:
        return int(given)
    hooked = sum(int(hook.get("timeoutSeconds") or DEFAULT_HOOK_TIMEOUT) for hook in hooks or ())
    return 2 * int(wait_timeout or DEFAULT_WAIT_TIMEOUT) + hooked + TASK_ALLOWANCE
