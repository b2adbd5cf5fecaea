# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""One container of a DockerHost release as ``docker inspect`` shows it: whether it already runs its
request and why not (pure), the problems of a new one (pure), its ``services`` evidence entry (pure),
and the wait until it settles. Standard library only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import (
    HEALTH_VERIFIED,
    container_problems,
    stella_labels,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref

# A container without a healthcheck must stay up (same start, no restart) this long to count as running.
SETTLE_SECONDS = 2.0


def identity_problems(container, labels, image_id):
    """``(code, reason)`` differences of an inspected container from what it must run: the image
    ``image_id`` and every label of ``labels`` (pure)."""
    name = container.get("name")
    problems = []
    if container.get("imageId") != image_id:
        problems.append(
            ("digest_mismatch", "container %s runs %s, not %s" % (name, container.get("imageId"), image_id))
        )
    found = container.get("labels") or {}
    for key, value in sorted(labels.items()):
        if found.get(key) != value:
            problems.append(
                ("label_mismatch", "container %s label %s is %r, expected %r" % (name, key, found.get(key), value))
            )
    return problems


def container_gaps(container, request, image_id, health=HEALTH_VERIFIED):
    """Why an inspected container does not already run this request, one line each (image, labels,
    running, and its Docker health one of ``health`` unless that is ``None``); ``[]`` when it does (pure)."""
    if not container:
        return ["container %s does not exist" % request["name"]]
    labels = dict(request["labels"], **{"stella.container.name": request["name"]})
    return [
        reason
        for _code, reason in identity_problems(container, labels, image_id)
        + container_problems(container, "container", health)
    ]


def verify_container(container, request, image_id):
    """``(code, reason)`` problems of the new container (pure)."""
    problems = container_problems(container, "container")
    if not problems and container.get("restartCount"):
        problems.append(
            (
                "service_not_running",
                "container %s restarted %d time(s) since it was created"
                % (container["name"], container["restartCount"]),
            )
        )
    return problems + identity_problems(container, request["labels"], image_id)


def service_entry(request, container, image_id):
    """One container in the ``services`` evidence shape Compose results use (pure)."""
    return {
        "service": request["service"],
        "containerId": container["id"],
        "containerName": container["name"],
        "state": container["state"],
        "health": container["health"],
        "exitCode": container.get("exitCode"),
        "startedAt": container.get("startedAt"),
        "image": request["image"],
        "imageDigest": parse_image_ref(request["image"]).digest if container.get("imageId") == image_id else None,
        "imageId": container.get("imageId"),
        "ipAddress": container.get("ipAddress"),
        "restartCount": container.get("restartCount"),
        "labels": stella_labels(container.get("labels")),
    }


def wait_settled(cli, name, timeout, settle, sleep, clock, phase="inspect_container"):
    """Inspect until the container settles: healthy/unhealthy with a healthcheck, otherwise running
    with the same start time and no restart for ``settle`` seconds (a crash loop never settles)."""
    deadline = clock() + timeout
    stable_since = None
    seen = None
    while True:
        container = cli.container(name, phase=phase)
        if container is None:
            raise StellaError("service_not_running", "container %s disappeared" % name, phase=phase)
        health = container.get("health")
        if health in ("healthy", "unhealthy"):
            return container
        if health == "none":
            key = (container.get("startedAt"), container.get("running"), container.get("restarting"))
            if not container.get("running") and not container.get("restarting"):
                return container
            if key != seen or container.get("restarting"):
                seen, stable_since = key, clock()
            elif clock() - stable_since >= settle:
                return container
        if clock() > deadline:
            return container
        sleep(0.25)
