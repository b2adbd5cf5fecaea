# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What the verification of running containers shares, Compose project or DockerHost containers,
deploy or rollback: the health a verified container shows, the problems of one container's runtime
state, the Stella labels its evidence keeps, and the ``(code, reason)`` problems found raised as one
contract error. Pure and standard library only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError


HEALTH_VERIFIED = ("healthy", "none")  # Docker's health of a container verified running ("none": no healthcheck)


def container_problems(container, what, health=HEALTH_VERIFIED):
    """``(code, reason)`` problems of one container's runtime state: running, not restarting, and its
    Docker health one of ``health`` (not looked at when ``None``)."""
    name = container.get("name")
    if not container.get("running") or container.get("restarting"):
        return [
            (
                "service_not_running",
                "%s %s is %s (exit code %s)" % (what, name, container.get("state"), container.get("exitCode")),
            )
        ]
    if health is not None and container.get("health") not in health:
        return [("service_unhealthy", "%s %s health is %s" % (what, name, container.get("health")))]
    return []


def stella_labels(labels):
    """The labels a container's evidence keeps: Stella's own and Compose's project and service."""
    return {
        k: v
        for k, v in sorted((labels or {}).items())
        if k.startswith("stella.") or k in ("com.docker.compose.project", "com.docker.compose.service")
    }


def first_problem(problems):
    """``(code, reason)`` of the first problem, the reason counting the others."""
    code, reason = problems[0]
    if len(problems) > 1:
        reason += " (and %d more problem(s))" % (len(problems) - 1)
    return code, reason


def raise_problems(problems, phase, evidence=None):
    """The problems found, if any, as one error: the first one's code, every reason in evidence."""
    if problems:
        code, reason = first_problem(problems)
        raise StellaError(code, reason, phase=phase, evidence=dict(evidence or {}, problems=[p[1] for p in problems]))
