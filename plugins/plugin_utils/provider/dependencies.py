# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Python packages the provider needs, checked before anything runs (standard library only).

``stella install`` and every ``stella compose ...`` call look for them in the Python that runs
``stella`` and fail with ``provider_dependency_missing`` and the one ``pip install`` line to run
(docs/provider.md#install). ``up`` and ``pull`` also need ``requests`` (planning resolves image
references in registries); ``install`` checks everything the provider will need.
"""

from __future__ import annotations

import importlib.util
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

DEPENDENCY_MISSING = "provider_dependency_missing"
# (module imported, package pip installs)
ANSIBLE_CORE = ("ansible", "ansible-core")
ANSIBLE_RUNNER = ("ansible_runner", "ansible-runner")
REQUESTS = ("requests", "requests")
NEEDS = {
    "install": (ANSIBLE_CORE, ANSIBLE_RUNNER, REQUESTS),
    "up": (ANSIBLE_CORE, ANSIBLE_RUNNER, REQUESTS),
    "pull": (ANSIBLE_CORE, ANSIBLE_RUNNER, REQUESTS),
    "down": (ANSIBLE_CORE, ANSIBLE_RUNNER),
    "stop": (ANSIBLE_CORE, ANSIBLE_RUNNER),
    "metadata": (ANSIBLE_CORE, ANSIBLE_RUNNER),
}


def missing(needed, find_spec=importlib.util.find_spec):
    """The ``(module, package)`` pairs of ``needed`` this Python cannot import (found without importing)."""
    absent = []
    for module, package in needed:
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append((module, package))
    return absent


def pip_line(packages, python=None):
    """``<python> -m pip install <packages>``: the command that installs them for this Python (pure)."""
    return "%s -m pip install %s" % (python or sys.executable, " ".join(packages))


def require(command, python=None, find_spec=importlib.util.find_spec):
    """Raise ``provider_dependency_missing`` naming what ``command`` needs and this Python lacks."""
    absent = missing(NEEDS.get(command, NEEDS["install"]), find_spec)
    if absent:
        python = python or sys.executable
        raise StellaError(
            DEPENDENCY_MISSING,
            "%s needs the Python module%s %s, which %s cannot import: run %s"
            % (
                "stella install" if command == "install" else "stella compose %s" % command,
                "s" if len(absent) > 1 else "",
                ", ".join(module for module, _package in absent),
                python,
                pip_line([package for _module, package in absent], python),
            ),
        )
