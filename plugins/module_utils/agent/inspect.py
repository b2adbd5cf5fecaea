# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side, read-only inspection of deployed projects (module ``stella_inspect``), for drift checks:
what runs under each project's ``stella.project`` label and the SHA-256 of the project directory's
committed files (lock, version sticker, apply manifest: docs/target-layout.md).

Three Docker calls at most, each one argv list: ``docker ps`` of every container with a
``stella.project`` label, one ``docker inspect`` of them, one ``docker image inspect`` of their images.
The files are hashed, never returned. Nothing is written, started, stopped or locked. The answer is
bounded (:data:`MAX_PROJECTS` projects, :data:`MAX_CONTAINERS` containers, only ``stella.*`` labels).
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WORK_DIRECTORY,
    DOCKER_PREVIOUS_SUFFIX,
    DOCKER_REPLACED_SUFFIX,
    DOCKER_ROLLED_BACK_SUFFIX,
    LABEL_COMPONENT,
    LABEL_IMAGE_DIGEST,
    LABEL_PROJECT,
    LOCK_FILE,
    MANIFEST_FILE,
    PROJECT_RE,
    STICKER_FILE,
    check_project_name,
    check_work_directory,
    invalid,
)

COMPOSE_SERVICE_LABEL = "com.docker.compose.service"
COMPOSE_DIR_LABEL = "com.docker.compose.project.working_dir"
FILES = (LOCK_FILE, STICKER_FILE, MANIFEST_FILE)
# DockerHost keeps the release before the running one as stopped containers with these suffixes
RETAINED_SUFFIXES = (DOCKER_PREVIOUS_SUFFIX, DOCKER_REPLACED_SUFFIX, DOCKER_ROLLED_BACK_SUFFIX)
MAX_PROJECTS = 200
MAX_CONTAINERS = 1000
MAX_REPO_DIGESTS = 10
CHUNK = 1 << 16


def parse_request(options):
    """``{"work_directory", "projects"}`` from the module's options (``projects``: names, or ``None`` for
    every project found)."""
    work = check_work_directory(options.get("work_directory") or DEFAULT_WORK_DIRECTORY, "work_directory")
    names = options.get("projects")
    if names is not None:
        if not isinstance(names, list):
            raise invalid("projects must be a list of project names")
        names = sorted({check_project_name(name, "projects") for name in names})
        if len(names) > MAX_PROJECTS:
            raise invalid("projects names %d projects, at most %d are inspected at once" % (len(names), MAX_PROJECTS))
    return {"work_directory": work, "projects": names}


def file_hash(path):
    """``sha256:<hex>`` of the regular file ``path`` (symbolic links not followed), ``None`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def directory_projects(work_directory):
    """The project names under ``work_directory`` whose directory holds a version sticker, sorted."""
    try:
        entries = sorted(os.listdir(work_directory))
    except OSError:
        return []
    return [
        name
        for name in entries
        if PROJECT_RE.match(name) and os.path.isfile(os.path.join(work_directory, name, STICKER_FILE))
    ]


def repo_digest_of(entry):
    """The ``sha256:...`` part of a ``RepoDigests`` entry ``repo@sha256:...``."""
    return entry.partition("@")[2] or None


def container_view(summary, image):
    """What drift needs of one container: its name, component, state, the digest its label claims and
    what its image is (id, repository digests), its ``stella.*`` labels."""
    labels = summary.get("labels") or {}
    name = summary.get("name") or ""
    return {
        "id": (summary.get("id") or "")[:12],
        "name": name,
        "component": labels.get(LABEL_COMPONENT) or labels.get(COMPOSE_SERVICE_LABEL),
        "service": labels.get(COMPOSE_SERVICE_LABEL),
        "state": summary.get("state"),
        "running": bool(summary.get("running")),
        "image": summary.get("image"),
        "imageId": summary.get("imageId"),
        "imageDigest": labels.get(LABEL_IMAGE_DIGEST),
        "repoDigests": None if image is None else list(image.get("repoDigests") or [])[:MAX_REPO_DIGESTS],
        "retained": name.endswith(RETAINED_SUFFIXES),
        "composeDirectory": labels.get(COMPOSE_DIR_LABEL),
        "labels": {k: v for k, v in sorted(labels.items()) if k.startswith("stella.")},
    }


def project_directory(work_directory, name, views):
    """The project's directory: the one Compose recorded on its containers when that is an absolute
    path ending in the project's name (a release with another ``workDirectory``), else
    ``<work_directory>/<name>``."""
    for view in views:
        found = view.get("composeDirectory")
        if (
            found
            and found.startswith("/")
            and ".." not in found.split("/")
            and posixpath.basename(posixpath.normpath(found)) == name
        ):
            return posixpath.normpath(found)
    return posixpath.join(work_directory, name)


class Inspect:
    """Reads the projects of a target through the engine client ``cli`` (``engine.cli.DockerCli``)."""

    def __init__(self, cli, warn=None):
        self.cli = cli
        self.warn = warn or (lambda _message: None)

    def containers(self):
        """Every container with a ``stella.project`` label, inspected, with its image (one call each)."""
        _rc, out, _err = self.cli.run(
            ["ps", "--all", "--quiet", "--no-trunc", "--filter", "label=" + LABEL_PROJECT], phase="inspect"
        )
        ids = sorted({line.strip() for line in out.splitlines() if line.strip()})
        truncated = len(ids) > MAX_CONTAINERS
        summaries = self.cli.inspect_containers(ids[:MAX_CONTAINERS], phase="inspect")
        images = self.cli.image_inspect_many([s["imageId"] for s in summaries if s.get("imageId")], phase="inspect")
        return [container_view(s, images.get(s.get("imageId"))) for s in summaries], truncated

    def run(self, request, check_mode=False):  # pylint: disable=unused-argument  # read-only either way
        work = request["work_directory"]
        containers, truncated = self.containers()
        by_project = {}
        for view in containers:
            by_project.setdefault(view["labels"].get(LABEL_PROJECT), []).append(view)
        named = request["projects"]
        if named is None:
            names = sorted(set(directory_projects(work)) | {p for p in by_project if p and PROJECT_RE.match(p)})
        else:
            names = list(named)
        if len(names) > MAX_PROJECTS:
            names, truncated = names[:MAX_PROJECTS], True
        projects = {}
        for name in names:
            views = sorted(by_project.get(name) or [], key=lambda v: (v["component"] or "", v["name"]))
            directory = project_directory(work, name, views)
            projects[name] = {
                "projectName": name,
                "projectDirectory": directory,
                "directoryExists": os.path.isdir(directory),
                "files": {f: file_hash(posixpath.join(directory, f)) for f in FILES},
                "containers": views,
            }
        evidence = {"workDirectory": work, "projects": projects, "truncated": truncated}
        return {"changed": False, "evidence": evidence, "warnings": []}
