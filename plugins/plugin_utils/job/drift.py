# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Drift: is what a target runs still what the last successful job recorded? Pure, no I/O.

:func:`expected` takes what a job recorded for one target (its record and its ``deployment.json``):
each component's digest and the SHA-256 of the lock, version sticker and apply manifest. :func:`compare`
holds that against what ``stella_inspect`` observed of the project on the target and lists the
differences, each ``{"kind", "service", "recorded", "observed"}``:

=================  ==============================================================================
kind               when
=================  ==============================================================================
``missing_service``  a recorded component has no container
``extra_service``    a container of the project is no recorded component (a DockerHost container kept
                     for rollback, ``-stella-previous`` and the like, does not count)
``digest``           a container of a component does not run the recorded digest: its image's digests
                     (``RepoDigests``, or its id) do not hold it, or its ``stella.image.digest`` label
                     names another
``stopped``          a container of a component is not running
``lock``             the lock file's SHA-256 is not the recorded one, or the file is missing
``sticker``          the same for the version sticker
``manifest``         the same for the apply manifest
=================  ==============================================================================

:func:`verdict` makes one verdict per target and project: ``in_sync``, ``drifted`` (with its differences)
or ``unknown`` (nothing to compare with: no successful job recorded for the project, the target could not
be inspected); :func:`line` is its one line of text.
"""

from __future__ import annotations

from typing import Any

IN_SYNC = "in_sync"
DRIFTED = "drifted"
UNKNOWN = "unknown"
VERDICTS = (IN_SYNC, DRIFTED, UNKNOWN)
KINDS = ("missing_service", "extra_service", "digest", "stopped", "lock", "sticker", "manifest")
# the project files: the kind of a difference, the recorded artifact's key, the file on the target
FILES = (
    ("lock", "composeLockHash", "compose.stella.lock.yml"),
    ("sticker", "versionStickerHash", "stella.version.json"),
    ("manifest", "applyManifestHash", "apply-manifest.json"),
)
SHORT = len("sha256:") + 12
MAX_REASON = 400


def expected(job_id: str, target: dict[str, Any], deployment: dict[str, Any] | None) -> dict[str, Any] | None:
    """What job ``job_id`` recorded for one target (its record ``target`` and its ``deployment.json``
    ``deployment``): ``{"jobId", "projectName", "components": {name: digest}, "files": {kind: hash}}``;
    ``None`` when the job kept no deployment evidence (nothing to compare the containers with)."""
    if not deployment or not deployment.get("images"):
        return None
    artifacts = dict(target.get("artifacts") or {})
    artifacts.update({k: v for k, v in (deployment.get("artifacts") or {}).items() if v})
    return {
        "jobId": job_id,
        "projectName": deployment.get("projectName") or target.get("projectName"),
        "components": {c["name"]: c.get("digest") for c in deployment["images"] if c.get("name")},
        "files": {kind: artifacts[key] for kind, key, _file in FILES if artifacts.get(key)},
    }


def short(value: Any) -> str:
    """A digest cut to ``sha256:`` and 12 hex digits (``..`` when cut), ``missing`` for ``None``."""
    if value is None:
        return "missing"
    text = str(value)
    return text[:SHORT] + ".." if text.startswith("sha256:") and len(text) > SHORT else text


def _difference(kind: str, service: str | None, recorded: Any, observed: Any) -> dict[str, Any]:
    return {"kind": kind, "service": service, "recorded": recorded, "observed": observed}


def running_digest(container: dict[str, Any], recorded: str | None) -> tuple[bool, str | None]:
    """``(runs the recorded digest, the digest it runs)`` of one observed container. The image's own
    digests decide (``RepoDigests``, its id for an image loaded without a registry); a container whose
    image could not be inspected is taken at its ``stella.image.digest`` label."""
    label = container.get("imageDigest")
    repo = container.get("repoDigests")
    if repo is None:
        return (recorded is not None and label == recorded), label
    digests = [entry.partition("@")[2] for entry in repo if "@" in entry]
    proven = recorded is not None and (recorded in digests or container.get("imageId") == recorded)
    if not proven:
        return False, (digests[0] if digests else container.get("imageId") or label)
    return label == recorded, (recorded if label == recorded else label)


def compare(want: dict[str, Any], observed: dict[str, Any]) -> list[dict[str, Any]]:
    """The differences between what was recorded (:func:`expected`) and what ``stella_inspect`` observed of
    the project (one entry of its ``projects``), in the order of :data:`KINDS`, each kind by service."""
    components = want["components"]
    containers = [c for c in observed.get("containers") or [] if not c.get("retained")]
    by_component: dict[str, list[dict[str, Any]]] = {}
    for container in containers:
        by_component.setdefault(container.get("component") or "", []).append(container)
    found: list[dict[str, Any]] = []
    for name in sorted(components):
        if name not in by_component:
            found.append(_difference("missing_service", name, components[name], None))
    for name in sorted(by_component):
        if name not in components:
            for container in by_component[name]:
                found.append(
                    _difference("extra_service", name or container.get("name"), None, container.get("imageDigest"))
                )
    for name in sorted(set(by_component) & set(components)):
        for container in by_component[name]:
            same, runs = running_digest(container, components[name])
            if not same:
                found.append(_difference("digest", name, components[name], runs))
    for name in sorted(set(by_component) & set(components)):
        for container in by_component[name]:
            if not container.get("running"):
                found.append(_difference("stopped", name, "running", container.get("state") or "stopped"))
    files = observed.get("files") or {}
    for kind, _key, file_name in FILES:
        recorded = want["files"].get(kind)
        if recorded and files.get(file_name) != recorded:
            found.append(_difference(kind, None, recorded, files.get(file_name)))
    return found


def describe(difference: dict[str, Any]) -> str:
    """One difference in words: ``digest of app sha256:aaa.. != recorded sha256:bbb..``, ``stopped db``."""
    kind, service = difference["kind"], difference["service"]
    if kind == "missing_service":
        return "missing %s" % service
    if kind == "extra_service":
        return "extra %s" % service
    if kind == "stopped":
        return "stopped %s" % service
    if kind == "digest":
        return "digest of %s %s != recorded %s" % (
            service,
            short(difference["observed"]),
            short(difference["recorded"]),
        )
    if difference["observed"] is None:
        return "%s missing" % kind
    return "%s %s != recorded %s" % (kind, short(difference["observed"]), short(difference["recorded"]))


def summary(differences: list[dict[str, Any]]) -> str:
    """The differences in one line, ``; ``-separated, bounded."""
    text = "; ".join(describe(d) for d in differences)
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def verdict(
    target: str, project: str | None, want: dict[str, Any] | None, observed: dict[str, Any], why: str | None = None
) -> dict[str, Any]:
    """One target's verdict for one project: ``unknown`` without a recording to compare with (``why``
    says why; default: no successful job recorded), else ``in_sync`` or ``drifted``."""
    if want is None:
        reason = why or "no successful job recorded for project %s" % project
        return {
            "target": target,
            "project": project,
            "verdict": UNKNOWN,
            "jobId": None,
            "differences": [],
            "reason": reason,
        }
    differences = compare(want, observed)
    return {
        "target": target,
        "project": project,
        "verdict": DRIFTED if differences else IN_SYNC,
        "jobId": want["jobId"],
        "differences": differences,
        "reason": summary(differences) if differences else "runs what job %s recorded" % want["jobId"],
    }


def line(entry: dict[str, Any]) -> str:
    """``in_sync web-1 project P``, ``drifted web-2 project P: <differences>``, ``unknown web-3 project P: <why>``."""
    head = "%s %s" % (entry["verdict"], entry["target"])
    if entry.get("project"):
        head += " project %s" % entry["project"]
    return head if entry["verdict"] == IN_SYNC else "%s: %s" % (head, entry["reason"])


def target_reason(entries: list[dict[str, Any]]) -> str:
    """The one-line health reason of a target whose projects drifted: each drifted project and what differs."""
    text = "; ".join(
        "project %s drifted from job %s: %s" % (e["project"], e["jobId"], e["reason"])
        for e in entries
        if e["verdict"] == DRIFTED
    )
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."
