# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The retained revision of a DockerHost project: ``<project>/previous/``.

``docker.run`` writes it when a release replaced another one: the replaced release's sticker and
``revision.json`` (schema ``stella.docker-revision.v1``) with the ids of its stopped
``<name>-stella-previous`` containers. ``docker.rollback`` reads and validates it. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DOCKER_REVISION_DIR,
    DOCKER_REVISION_SCHEMA,
    STICKER_FILE,
    TEMP_PREFIX,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, fsync_dir, read_bytes

REVISION_RECORD = "revision.json"


def build_revision_record(project_name, sticker_bytes, containers):
    """``previous/revision.json``: the replaced release's sticker hash and its retained containers."""
    sticker = json.loads(sticker_bytes)
    return {
        "schema": DOCKER_REVISION_SCHEMA,
        "projectName": project_name,
        "manifestHash": sticker.get("manifestHash"),
        "files": {STICKER_FILE: sha256_bytes(sticker_bytes)},
        "containers": {name: containers[name] for name in sorted(containers)},
    }


def revision_problems(record, sticker_bytes):
    """Problems (strings) between a Docker revision record and the sticker beside it (pure)."""
    if not isinstance(record, dict) or record.get("schema") != DOCKER_REVISION_SCHEMA:
        return ["%s is missing or has an unknown schema" % REVISION_RECORD]
    problems = []
    if sticker_bytes is None:
        problems.append("%s is missing" % STICKER_FILE)
    elif sha256_bytes(sticker_bytes) != (record.get("files") or {}).get(STICKER_FILE):
        problems.append(
            "%s has hash %s, %s records %s"
            % (
                STICKER_FILE,
                sha256_bytes(sticker_bytes),
                REVISION_RECORD,
                (record.get("files") or {}).get(STICKER_FILE),
            )
        )
    if not isinstance(record.get("containers"), dict) or not record["containers"]:
        problems.append("%s records no container" % REVISION_RECORD)
    return problems


def remove_stale_revision_temps(directory):
    """Delete revision directories a killed writer left half-built (``.stella-tmp-*`` directories)."""
    removed = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        path = os.path.join(directory, name)
        if name.startswith(TEMP_PREFIX) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def write_revision(project_directory, project_name, sticker_bytes, containers):
    """Replace ``previous/`` with the replaced release's sticker and container ids (temp dir, fsync,
    rename); return its path."""
    final = os.path.join(project_directory, DOCKER_REVISION_DIR)
    tmp = tempfile.mkdtemp(prefix=TEMP_PREFIX + "rev-", dir=project_directory)
    try:
        atomic_write(os.path.join(tmp, STICKER_FILE), sticker_bytes)
        atomic_write(
            os.path.join(tmp, REVISION_RECORD),
            pretty_json(build_revision_record(project_name, sticker_bytes, containers)),
        )
        os.chmod(tmp, 0o755)
        if os.path.isdir(final):
            old = tempfile.mkdtemp(prefix=TEMP_PREFIX + "old-", dir=project_directory)
            os.rename(final, os.path.join(old, DOCKER_REVISION_DIR))
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(project_directory)
    return final


def load_revision(path, phase="validate_revision"):
    """``(record, sticker bytes)`` of a Docker revision, or ``revision_tampered``."""
    data = read_bytes(os.path.join(path, REVISION_RECORD))
    try:
        record = json.loads(data) if data is not None else None
    except ValueError:
        record = None
    sticker = read_bytes(os.path.join(path, STICKER_FILE))
    problems = revision_problems(record, sticker)
    if problems:
        raise StellaError(
            "revision_tampered",
            "revision %s failed validation: %s" % (path, "; ".join(problems)),
            phase=phase,
            evidence={"revisionPath": path},
        )
    return record, sticker
