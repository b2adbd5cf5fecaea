# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""One Compose project on this host: its config, containers, images, ``up`` and verification.

:class:`ComposeProject` is what apply and rollback share; the checks of what runs against the lock
(:func:`verify_services`) are pure and driven by unit tests with captured ``docker inspect`` output.
Standard library only.
"""

from __future__ import annotations

import json
import re
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.verification import (
    container_problems,
    first_problem,
    raise_problems,
    stella_labels,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WAIT_TIMEOUT,
    LABEL_MANIFEST_HASH,
    REQUIRED_STELLA_LABELS,
    target_labels,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli_output import repo_digests_contain
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import image_id, pinned_digest

PULL_TIMEOUT = 900
NOT_ASKED = object()  # a question not asked yet
# How often the containers are looked at while they start: every READY_POLL_SECONDS for the first
# READY_FAST_SECONDS, then every READY_SLOW_SECONDS.
READY_POLL_SECONDS = 0.1
READY_FAST_SECONDS = 10.0
READY_SLOW_SECONDS = 0.5
_SERVICE_LINE = re.compile(r"^  ([A-Za-z0-9_][A-Za-z0-9_.-]*):$")
_IMAGE_LINE = re.compile(r'^    image: "([^"\\$]*)"$')
_LABEL_LINE = re.compile(r'^      ([A-Za-z0-9_][A-Za-z0-9_.-]*): "([^"\\$]*)"$')


def read_lock_services(lock_bytes):
    """``(images, labels)`` per service read straight from a lock the planner rendered, or ``None``.

    Only for a lock whose bytes are the committed, hash-verified artifact: the planner's emitter
    writes one service per two-space key with ``image`` and ``labels`` as plain double-quoted
    scalars. Anything else (escapes, ``$`` that Compose would interpolate, unknown layout) returns
    ``None`` and the caller asks ``docker compose config`` instead.
    """
    images, labels, service, in_services, in_labels = {}, {}, None, False, False
    for line in lock_bytes.decode("utf-8", "replace").splitlines():
        if not line.startswith(" "):
            in_services, service, in_labels = line == "services:", None, False
            continue
        if not in_services:
            continue
        match = _SERVICE_LINE.match(line)
        if match:
            service, in_labels = match.group(1), False
            labels[service] = {}
            continue
        if service is None:
            return None
        if line.startswith("      ") and in_labels:
            match = _LABEL_LINE.match(line)
            if not match:
                return None
            labels[service][match.group(1)] = match.group(2)
            continue
        in_labels = line == "    labels:"
        match = _IMAGE_LINE.match(line)
        if match:
            images[service] = match.group(1)
        elif line.startswith("    image:"):
            return None
    if not images or set(images) != set(labels):
        return None
    return images, labels


def service_images(config):
    """``{service: image}`` from ``docker compose config --format json`` output."""
    services = (config or {}).get("services") or {}
    return {name: (services[name] or {}).get("image") for name in sorted(services)}


def service_labels(config):
    services = (config or {}).get("services") or {}
    out = {}
    for name in sorted(services):
        labels = (services[name] or {}).get("labels") or {}
        if isinstance(labels, list):
            labels = dict(item.split("=", 1) if "=" in item else (item, "") for item in labels)
        # compose config prints a literal "$" as "$$"; the container carries the "$"
        out[name] = {
            key: value.replace("$$", "$") if isinstance(value, str) else value for key, value in labels.items()
        }
    return out


def check_pinned(images, phase):
    """Every service image must be ``registry/repository[:tag]@sha256:...``, or an image id pin
    (``sha256:...``, a locally loaded image: ``imageref.image_id``)."""
    for service, image in sorted(images.items()):
        if not image or not pinned_digest(image):
            raise StellaError(
                "image_not_pinned", "service %s image %r is not pinned by digest" % (service, image), phase=phase
            )


def verify_services(expected_images, expected_labels, containers, image_ids, target, manifest_hash):
    """Check inspected containers against the lock; return ``(services evidence, problems)`` (pure).

    ``containers``: container summaries of the project; ``image_ids``: ``{service: image id of the
    pinned digest}``.
    """
    services = []
    problems = []
    by_service = {}
    for container in containers:
        by_service.setdefault(container.get("service"), []).append(container)
    want_target = dict(target_labels(target), **{LABEL_MANIFEST_HASH: manifest_hash})
    for service in sorted(expected_images):
        found = sorted(by_service.get(service, []), key=lambda c: c.get("name") or "")
        if not found:
            problems.append(("service_not_running", "service %s has no container" % service))
            continue
        image = expected_images[service]
        digest = pinned_digest(image)
        for container in found:
            services.append(
                {
                    "service": service,
                    "containerId": container["id"],
                    "containerName": container["name"],
                    "state": container["state"],
                    "health": container["health"],
                    "exitCode": container.get("exitCode"),
                    "startedAt": container.get("startedAt"),
                    "image": image,
                    "imageDigest": digest if container.get("imageId") == image_ids.get(service) else None,
                    "imageId": container.get("imageId"),
                    "ipAddress": container.get("ipAddress"),
                    "labels": stella_labels(container.get("labels")),
                }
            )
            name = container["name"]
            problems.extend(container_problems(container, "container of service %s:" % service))
            if container.get("imageId") != image_ids.get(service):
                problems.append(
                    (
                        "digest_mismatch",
                        "container %s runs image %s, not the pinned %s (%s)"
                        % (name, container.get("imageId"), image, image_ids.get(service)),
                    )
                )
            labels = container.get("labels") or {}
            wanted = dict(expected_labels.get(service) or {})
            for key in REQUIRED_STELLA_LABELS:
                if key not in wanted:
                    problems.append(("label_mismatch", "service %s lock lacks required label %s" % (service, key)))
            wanted.update(want_target)
            for key in sorted(wanted):
                if labels.get(key) != wanted[key]:
                    problems.append(
                        (
                            "label_mismatch",
                            "container %s label %s is %r, expected %r" % (name, key, labels.get(key), wanted[key]),
                        )
                    )
    for service in sorted(set(by_service) - set(expected_images), key=str):
        problems.append(("service_unexpected", "project has containers of service %s not in the lock" % service))
    return services, problems


def container_fingerprint(containers):
    """What ``changed`` compares: container ids with their start times."""
    return sorted((c.get("id"), c.get("startedAt")) for c in containers)


def readiness(containers):
    """Whether the containers ``up -d`` started are ready, by the rule of ``docker compose up --wait``
    (pure): ``("ready" | "waiting" | "failed", problems)``.

    A container that exited (or is dead) fails the wait; one with a healthcheck is ready when healthy
    and fails when unhealthy; one without a healthcheck is ready when it runs (not while restarting).
    A project without containers is waiting: Compose may not have listed them yet.
    """
    if not containers:
        return "waiting", []
    waiting = False
    for container in sorted(containers, key=lambda c: c.get("name") or ""):
        name, state, health = container.get("name"), container.get("state"), container.get("health")
        if state in ("exited", "dead"):
            return "failed", [("service_not_running", "container %s exited (%s)" % (name, container.get("exitCode")))]
        if health == "unhealthy":
            return "failed", [("service_unhealthy", "container %s is unhealthy" % name)]
        if health in (None, "none"):
            waiting = waiting or state != "running" or bool(container.get("restarting"))
        elif health != "healthy":
            waiting = True
    return ("waiting" if waiting else "ready"), []


def not_ready_problems(containers, waited):
    """Why the containers were still not ready after ``waited`` seconds (pure)."""
    problems = []
    for container in sorted(containers, key=lambda c: c.get("name") or ""):
        name, health = container.get("name"), container.get("health")
        if health not in (None, "none", "healthy"):
            problems.append(("service_unhealthy", "container %s is still %s after %ss" % (name, health, waited)))
        elif container.get("state") != "running" or container.get("restarting"):
            problems.append(
                ("service_not_running", "container %s is still %s after %ss" % (name, container.get("state"), waited))
            )
    return problems or [("service_not_running", "the project has no container after %ss" % waited)]


def holds_pin(info, image):
    """Whether the engine's ``info`` of ``image`` is the pinned image: the same id for an image id
    pin, a RepoDigests entry with the pinned digest otherwise (pure)."""
    return info["id"] == image if image_id(image) else repo_digests_contain(info["repoDigests"], image)


def present_image_ids(images, found):
    """``{service: image id}`` when every image of ``images`` (per service) is in ``found`` (what the
    engine has of each, ``None`` when absent) with its pinned digest, else ``None`` (pure)."""
    ids = {}
    for service, image in images.items():
        info = found.get(image)
        if info is None or not holds_pin(info, image):
            return None
        ids[service] = info["id"]
    return ids


class ServicesNotReady(StellaError):
    """The started containers did not become ready; ``containers`` is what the last look saw."""

    def __init__(self, problems, phase, containers):
        code, reason = first_problem(problems)
        super().__init__(code, reason, phase=phase, evidence={"problems": [p[1] for p in problems]})
        self.containers = containers


def services_evidence(services):
    return {"services": services, "serviceCount": len({s["service"] for s in services})}


class ComposeProject:
    """A Compose project of this host, named and laid out by ``layout`` (see compose/revisions.py ``Layout``)."""

    def __init__(self, cli, layout, wait_timeout=DEFAULT_WAIT_TIMEOUT, clock=time.monotonic, sleep=time.sleep):
        self.cli = cli
        self.layout = layout
        self.wait_timeout = wait_timeout
        self.clock = clock
        self.sleep = sleep

    def _base(self):
        return self.cli.compose_base(self.layout.project_name, self.layout.lock_path, self.layout.project_dir)

    def config(self, phase):
        """``docker compose config`` of the staged lock, as JSON."""
        _rc, out, _err = self.cli.run(self._base() + ["config", "--format", "json"], code="lock_invalid", phase=phase)
        try:
            return json.loads(out)
        except ValueError:
            raise StellaError("lock_invalid", "docker compose config printed no JSON", phase=phase)

    def expected(self, lock_bytes, phase):
        """``(images, labels)`` per service of the lock: read directly from the hash-verified lock the
        planner rendered, or from ``docker compose config`` when the reader declines."""
        read = read_lock_services(lock_bytes) if lock_bytes else None
        if read:
            return read
        config = self.config(phase)
        return service_images(config), service_labels(config)

    def containers(self, phase=None):
        return self.cli.inspect_containers(
            self.cli.project_container_ids(self.layout.project_name, phase=phase), phase=phase
        )

    def image_ids(self, images, phase):
        """``{service: image id}`` when every pinned image is present with its digest, else ``None``."""
        return present_image_ids(images, self.cli.image_inspect_many(images.values(), phase=phase))

    def lock_images(self, lock_bytes, phase):
        """``(images, found)`` of a lock the planner rendered, asked without Compose: the images per
        service and what the engine has of each (:meth:`DockerCli.image_inspect_many`). ``None`` when
        the reader declines the lock or the engine errs (the caller then asks again, and reports)."""
        read = read_lock_services(lock_bytes)
        if not read:
            return None
        try:
            return read[0], self.cli.image_inspect_many(read[0].values(), phase=phase)
        except StellaError:
            return None

    def ensure_images(self, images, pull, phase, found=None):
        """Pull what is missing (or fail when pulls are disabled); verify RepoDigests; return
        ``({service: image id}, [pulled services])``. ``found`` is what the engine had of ``images``
        when the caller already asked."""
        if found is None:
            found = self.cli.image_inspect_many(images.values(), phase=phase)
        infos = {service: found[image] for service, image in images.items() if found[image] is not None}
        missing = sorted(service for service in images if service not in infos)
        if missing:
            if not pull:
                raise StellaError(
                    "image_missing",
                    "PullImages is false and image(s) are not present: %s" % ", ".join(images[s] for s in missing),
                    phase=phase,
                )
            self.cli.run(
                self._base() + ["pull", "--quiet"] + missing,
                code="image_pull_failed",
                phase=phase,
                timeout=PULL_TIMEOUT,
            )
            for service in missing:
                info = self.cli.image_inspect(images[service], phase=phase)
                if info is None:
                    raise StellaError(
                        "image_pull_failed", "image %s is still absent after pull" % images[service], phase=phase
                    )
                infos[service] = info
        raise_problems(
            [
                (
                    "digest_mismatch",
                    "image %s of service %s has RepoDigests %s, none is the pinned digest"
                    % (images[service], service, infos[service]["repoDigests"]),
                )
                for service in sorted(images)
                if not holds_pin(infos[service], images[service])
            ],
            phase,
        )
        return {service: infos[service]["id"] for service in infos}, missing

    def up(self, phase="compose_up"):
        """``up -d``, then wait until every container is ready (:func:`readiness`); return the
        containers as the last look saw them, so verification needs no second look.

        The containers are looked at every ``READY_POLL_SECONDS`` (Compose's own ``--wait`` looks
        every half second), for at most ``wait_timeout`` seconds; :class:`ServicesNotReady` otherwise.
        """
        self.cli.compose_up(
            self.layout.project_name,
            self.layout.lock_path,
            self.layout.project_dir,
            wait_timeout=self.wait_timeout,
            phase=phase,
        )
        return self.wait_ready(phase)

    def wait_ready(self, phase="compose_up"):
        started = self.clock()
        ids = None
        while True:
            containers = self._look_again(ids, phase)
            ids = [container["id"] for container in containers]
            status, problems = readiness(containers)
            if status == "ready":
                return containers
            if status == "failed":
                raise ServicesNotReady(problems, phase, containers)
            waited = self.clock() - started
            if waited >= self.wait_timeout:
                raise ServicesNotReady(not_ready_problems(containers, self.wait_timeout), phase, containers)
            pause = READY_POLL_SECONDS if waited < READY_FAST_SECONDS else READY_SLOW_SECONDS
            self.sleep(min(pause, max(self.wait_timeout - waited, 0)))

    def _look_again(self, ids, phase):
        """The containers the last look found, inspected again by id (``up -d`` created every one of
        them before it returned): one engine call instead of two. The project is listed anew when the
        last look found none, or when the inspect fails (a container went away)."""
        if ids:
            try:
                return self.cli.inspect_containers(ids, phase=phase)
            except StellaError:
                pass
        return self.containers(phase=phase)

    def verify(self, expected, image_ids, target, manifest_hash, phase, containers=None):
        """``(containers, services evidence, problems)`` of what runs now (or of ``containers``, what
        ``up`` last saw) against ``expected`` (images, labels)."""
        if containers is None:
            containers = self.containers(phase=phase)
        services, problems = verify_services(expected[0], expected[1], containers, image_ids, target, manifest_hash)
        return containers, services, problems

    def converged(self, containers, target, manifest_hash, lock_bytes=None, phase="inspect_services", ids=NOT_ASKED):
        """Services evidence when the committed lock already runs exactly (images, labels, health), else
        ``None``: the first item of :meth:`convergence`."""
        return self.convergence(containers, target, manifest_hash, lock_bytes, phase, ids)[0]

    def convergence(self, containers, target, manifest_hash, lock_bytes=None, phase="inspect_services", ids=NOT_ASKED):
        """``(services evidence, [])`` when the committed lock already runs exactly (images, labels,
        health), else ``(None, reasons)``: one line each, why it does not. ``lock_bytes`` (the
        hash-verified committed lock) spares asking Compose to render it; ``ids`` is :meth:`image_ids`
        of the lock's images when the caller already asked.

        Any engine error counts as "not converged": the caller then applies and reports that error.
        """
        if not containers:
            return None, ["the project has no containers"]
        try:
            images, expected_labels = self.expected(lock_bytes, phase)
            if ids is NOT_ASKED:
                ids = self.image_ids(images, phase)
        except StellaError as exc:
            return None, ["the engine did not answer (%s): %s" % (exc.code, exc.reason)]
        if ids is None:
            return None, ["not every image of the lock is present with its pinned digest"]
        services, problems = verify_services(images, expected_labels, containers, ids, target, manifest_hash)
        return (None, [reason for _code, reason in problems]) if problems else (services, [])
