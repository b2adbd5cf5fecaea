# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``requests`` on the controller, imported the first time an HTTP call needs it.

Every controller HTTP call (registry resolution, HTTP probes, the webhook traffic adapter) goes
through ``requests``. Importing it costs about a tenth of a second, and Ansible imports an action
plugin's module in the controller's main process before the first task that uses it runs, so a
top-level import would be paid by every playbook run, including the many that send no HTTP request
at all (digest-pinned images, no HTTP probes). :func:`load` imports it once, at first use.
"""

from __future__ import annotations

import traceback
from types import ModuleType

# {"module": the requests module or None, "error": the import traceback or None}; filled by load()
_STATE: dict[str, ModuleType | str | None] = {}


def load():
    """The ``requests`` module, or ``None`` when it cannot be imported (see :func:`import_error`)."""
    if "module" not in _STATE:
        try:
            import requests  # pylint: disable=import-outside-toplevel
        except ImportError:
            _STATE.update(module=None, error=traceback.format_exc())
        else:
            _STATE.update(module=requests, error=None)
    return _STATE["module"]


def available():
    """True when ``requests`` can be imported."""
    return load() is not None


def import_error():
    """The last line of the import failure (``ModuleNotFoundError: ...``), or ``None``."""
    load()
    error = (_STATE.get("error") or "").strip().splitlines()
    return error[-1] if error else None
