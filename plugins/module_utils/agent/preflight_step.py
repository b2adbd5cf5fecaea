# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The runtime preflight as the ``preflight`` step of an apply task (``compose.up``, ``docker.run``):
asked through the task's ``preflight`` option, it runs before anything on the host changes, over the
task's engine client. Standard library only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import (
    ARGUMENT_SPEC as PREFLIGHT_OPTIONS,
    preflight_with,
    raise_failures,
)


def preflight_params(given):
    """The preflight options with their defaults, from the (partial) ``preflight`` option."""
    params = {name: spec.get("default") for name, spec in PREFLIGHT_OPTIONS.items()}
    params.update({k: v for k, v in (given or {}).items() if v is not None})
    return params


def runtime_preflight(cli, rec, evidence, given):
    """The runtime preflight of an apply task's ``preflight`` option (``given``; its payload and
    ``target_type`` as given), as the step ``preflight``: before anything on the host changes, over the
    task's engine client (which remembers the versions it learns here). ``evidence`` gets ``preflight``
    and ``preflightFailures``; a failed check raises its stable code (:func:`raise_failures`)."""
    with rec.phase("preflight"):
        checks, failures = preflight_with(cli, preflight_params(given))
        evidence["preflight"] = checks
        evidence["preflightFailures"] = failures
        raise_failures(checks, failures)
