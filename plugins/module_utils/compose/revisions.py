# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The ComposeHost target layout and its retained revisions.

::

    <workDirectory>/<projectName>/
      compose.stella.lock.yml     desired state (staged first)
      stella.version.json         committed only after pull, up and inspection
      apply-manifest.json         written with the sticker
      .env.stella                 optional environment artifact, mode 0600
      .stella.lock                flock held for the whole apply
      revisions/<NNNNNN>-<hash12>/ retained previous revisions: the three files + revision.json

A revision directory is built under a ``.stella-tmp-rev-*`` name and renamed into place, so a
crash never leaves a half-written revision. ``revision.json`` records the SHA-256 of each file;
a revision whose files do not match it is tampered and is never restored. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, fsync_dir, read_bytes

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_KEEP_REVISIONS,
    ENV_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    REVISION_FILES,
    REVISION_RECORD,
    REVISION_SCHEMA,
    REVISIONS_DIR,
    STICKER_FILE,
    TEMP_PREFIX,
    check_project_name,
    check_work_directory,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.artifacts import (
    listed_env_hash,
    verify_artifact_set,
)

_REVISION_RE = re.compile(r"^(?P<seq>\d{6})-(?P<hash>[0-9a-f]{12})$")


class Layout:
    """Paths of one project on a target."""

    def __init__(self, work_directory, project_name):
        self.work_directory = check_work_directory(work_directory)
        self.project_name = check_project_name(project_name)
        self.project_dir = os.path.join(self.work_directory, project_name)
        self.lock_path = os.path.join(self.project_dir, LOCK_FILE)
        self.sticker_path = os.path.join(self.project_dir, STICKER_FILE)
        self.manifest_path = os.path.join(self.project_dir, MANIFEST_FILE)
        self.env_path = os.path.join(self.project_dir, ENV_FILE)
        self.revisions_dir = os.path.join(self.project_dir, REVISIONS_DIR)

    def file_path(self, name):
        return os.path.join(self.project_dir, name)

    def as_dict(self):
        return {
            "projectDirectory": self.project_dir,
            "composePath": self.lock_path,
            "versionStickerPath": self.sticker_path,
            "applyManifestPath": self.manifest_path,
            "revisionsDirectory": self.revisions_dir,
        }


# --------------------------------------------------------------------------- pure helpers


def hash12(manifest_hash):
    """First 12 hex digits of a ``sha256:`` digest (the revision directory suffix)."""
    hexpart = (manifest_hash or "").split(":", 1)[-1].lower()
    if not re.match(r"^[0-9a-f]{12,}$", hexpart):
        raise StellaError("invalid_manifest_hash", "manifest hash %r is not sha256:<hex>" % (manifest_hash,))
    return hexpart[:12]


def revision_name(sequence, manifest_hash):
    return "%06d-%s" % (sequence, hash12(manifest_hash))


def parse_revision_name(name):
    """``(sequence, hash12)`` for a revision directory name, ``None`` for anything else."""
    match = _REVISION_RE.match(name or "")
    if not match:
        return None
    return int(match.group("seq")), match.group("hash")


def sort_revision_names(names):
    """Revision directory names, oldest first (other names dropped)."""
    parsed = [(parse_revision_name(name), name) for name in names]
    return [name for key, name in sorted(item for item in parsed if item[0])]


def next_sequence(names):
    seqs = [parse_revision_name(name)[0] for name in names if parse_revision_name(name)]
    return (max(seqs) + 1) if seqs else 1


def file_hashes(files):
    """``{name: sha256}`` over ``{name: bytes}`` (names sorted by the JSON writer)."""
    return {name: sha256_bytes(data) for name, data in files.items()}


def build_revision_record(project_name, sequence, manifest_hash, files):
    return {
        "schema": REVISION_SCHEMA,
        "projectName": project_name,
        "sequence": sequence,
        "manifestHash": manifest_hash,
        "files": file_hashes(files),
    }


def check_revision_files(record, files):
    """Problems (list of strings) between a revision record and the files found beside it."""
    problems = []
    if not isinstance(record, dict) or record.get("schema") != REVISION_SCHEMA:
        return ["revision.json is missing or has an unknown schema"]
    expected = record.get("files") or {}
    for name in REVISION_FILES:
        if name not in expected:
            problems.append("revision.json records no hash for %s" % name)
    for name in sorted(expected):
        if name not in REVISION_FILES and name != ENV_FILE:
            problems.append("revision.json names an unexpected file %s" % name)
            continue
        data = files.get(name)
        if data is None:
            problems.append("%s is missing" % name)
        elif sha256_bytes(data) != expected[name]:
            problems.append("%s has hash %s, revision.json records %s" % (name, sha256_bytes(data), expected[name]))
    return problems


def path_within(path, root):
    """True when the real path of ``path`` lies strictly inside the real path of ``root``."""
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    return real != base and real.startswith(base.rstrip(os.sep) + os.sep)


# --------------------------------------------------------------------------- disk


def read_current(layout):
    """``{name: bytes or None}`` for the three revision files of the project."""
    return {name: read_bytes(layout.file_path(name)) for name in REVISION_FILES}


def list_revisions(layout):
    """Absolute paths of retained revisions, oldest first."""
    if not os.path.isdir(layout.revisions_dir):
        return []
    # A symlink is never a retained revision: it could point anywhere.
    return [
        os.path.join(layout.revisions_dir, name)
        for name in sort_revision_names(os.listdir(layout.revisions_dir))
        if os.path.isdir(os.path.join(layout.revisions_dir, name))
        and not os.path.islink(os.path.join(layout.revisions_dir, name))
    ]


def remove_stale_revision_temps(layout):
    """Delete revision directories a killed writer left half-built (``.stella-tmp-*``)."""
    removed = []
    if not os.path.isdir(layout.revisions_dir):
        return removed
    for name in sorted(os.listdir(layout.revisions_dir)):
        if name.startswith(TEMP_PREFIX):
            path = os.path.join(layout.revisions_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            removed.append(os.path.join(REVISIONS_DIR, name))
    return removed


def load_revision(path, phase="validate_revision"):
    """Read and validate a revision directory; return ``(record, files)`` or raise ``revision_tampered``."""
    record_bytes = read_bytes(os.path.join(path, REVISION_RECORD))
    try:
        record = json.loads(record_bytes.decode("utf-8")) if record_bytes is not None else None
    except ValueError:
        record = None
    files = {}
    names = set(REVISION_FILES)
    if isinstance(record, dict) and isinstance(record.get("files"), dict):
        names |= set(record["files"]) & {ENV_FILE}
    for name in sorted(names):
        data = read_bytes(os.path.join(path, name))
        if data is not None:
            files[name] = data
    problems = check_revision_files(record, files)
    if problems:
        raise StellaError(
            "revision_tampered",
            "revision %s failed hash validation: %s" % (os.path.basename(path), "; ".join(problems)),
            phase=phase,
            evidence={"revisionPath": path},
        )
    return record, files


def find_identical(layout, files):
    """The newest retained revision whose recorded hashes equal those of ``files`` (or ``None``)."""
    wanted = file_hashes({name: files[name] for name in REVISION_FILES if files.get(name) is not None})
    for path in reversed(list_revisions(layout)):
        data = read_bytes(os.path.join(path, REVISION_RECORD))
        try:
            record = json.loads(data.decode("utf-8")) if data else {}
        except ValueError:
            continue
        recorded = {k: v for k, v in (record.get("files") or {}).items() if k in REVISION_FILES}
        if recorded == wanted:
            return path
    return None


def retain_revision(layout, files, manifest_hash, keep=DEFAULT_KEEP_REVISIONS):
    """Write ``files`` as the next revision (temp dir, fsync, rename); prune beyond ``keep``.

    Returns the new revision's path.
    """
    os.makedirs(layout.revisions_dir, exist_ok=True)
    names = os.listdir(layout.revisions_dir)
    sequence = next_sequence(names)
    final = os.path.join(layout.revisions_dir, revision_name(sequence, manifest_hash))
    tmp = tempfile.mkdtemp(prefix=TEMP_PREFIX + "rev-", dir=layout.revisions_dir)
    try:
        for name in sorted(files):
            if files[name] is None:
                continue
            mode = 0o600 if name == ENV_FILE else 0o644
            atomic_write(os.path.join(tmp, name), files[name], mode=mode)
        record = build_revision_record(
            layout.project_name, sequence, manifest_hash, {k: v for k, v in files.items() if v is not None}
        )
        atomic_write(os.path.join(tmp, REVISION_RECORD), pretty_json(record))
        os.chmod(tmp, 0o755)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(layout.revisions_dir)
    prune_revisions(layout, keep)
    return final


def prune_revisions(layout, keep):
    """Delete the oldest revisions beyond ``keep`` (``keep <= 0`` keeps everything)."""
    removed = []
    if keep and keep > 0:
        revisions = list_revisions(layout)
        for path in revisions[:-keep] if len(revisions) > keep else []:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def revision_manifest_hash(path):
    """The ``manifestHash`` a retained revision's record names (``None`` when unreadable)."""
    try:
        record = json.loads((read_bytes(os.path.join(path, REVISION_RECORD)) or b"").decode("utf-8"))
    except ValueError:
        return None
    return record.get("manifestHash") if isinstance(record, dict) else None


def resolve_revision(layout, explicit=None, other_than=None):
    """The revision to restore: ``explicit`` (must resolve inside ``revisions/``) or the latest, and
    with ``other_than`` (the manifest hash of the release being rolled back) the latest that is not
    that release: a deployment whose outcome is unknown may or may not have retained one before it.

    Fails with ``failurePhase=resolve_revision`` (``no_revision`` / ``revision_path_rejected``).
    """
    if explicit:
        candidate = explicit if os.path.isabs(explicit) else os.path.join(layout.revisions_dir, explicit)
        if not path_within(candidate, layout.revisions_dir):
            raise StellaError(
                "revision_path_rejected",
                "revision path %r resolves outside %s" % (explicit, layout.revisions_dir),
                phase="resolve_revision",
            )
        real = os.path.realpath(candidate)
        if os.path.dirname(real) != os.path.realpath(layout.revisions_dir) or not parse_revision_name(
            os.path.basename(real)
        ):
            raise StellaError(
                "revision_path_rejected",
                "revision path %r is not a retained revision directory "
                "(<NNNNNN>-<hash12> directly under %s)" % (explicit, layout.revisions_dir),
                phase="resolve_revision",
            )
        if not os.path.isdir(real):
            raise StellaError("no_revision", "revision %r does not exist" % (explicit,), phase="resolve_revision")
        return real
    revisions = [
        path for path in list_revisions(layout) if not other_than or revision_manifest_hash(path) != other_than
    ]
    if not revisions:
        raise StellaError(
            "no_revision",
            "project %s has no retained revision under %s%s"
            % (layout.project_name, layout.revisions_dir, " other than release %s" % other_than if other_than else ""),
            phase="resolve_revision",
        )
    return os.path.realpath(revisions[-1])


def latest_other(layout, sticker_bytes):
    """The newest retained revision whose sticker differs from ``sticker_bytes`` (or ``None``)."""
    for path in reversed(list_revisions(layout)):
        if read_bytes(os.path.join(path, STICKER_FILE)) != sticker_bytes:
            return path
    return None


def retain_baseline(layout, current, current_env, new_files, keep=DEFAULT_KEEP_REVISIONS):
    """Retain the committed revision when it exists and differs from ``new_files``; return its path.

    ``current``: the three revision files on disk now. An identical retained revision is reused
    (revisions are deduplicated), so the path returned is the deployment's own rollback baseline.
    """
    if current[STICKER_FILE] is None or current[MANIFEST_FILE] is None:
        return None
    if all(current[name] == new_files[name] for name in (LOCK_FILE, STICKER_FILE)):
        return latest_other(layout, new_files[STICKER_FILE])
    env_listed = listed_env_hash(current[MANIFEST_FILE])
    consistent = not verify_artifact_set(
        current[MANIFEST_FILE],
        {
            LOCK_FILE: current[LOCK_FILE],
            STICKER_FILE: current[STICKER_FILE],
            ENV_FILE: current_env if env_listed else None,
        },
        layout.project_name,
    )
    if not consistent:
        # A killed apply left its lock staged: the committed revision was retained before it.
        for path in reversed(list_revisions(layout)):
            if read_bytes(os.path.join(path, STICKER_FILE)) == current[STICKER_FILE]:
                return path
        return None
    existing = find_identical(layout, current)
    if existing:
        return existing
    try:
        mhash = json.loads(current[STICKER_FILE]).get("manifestHash")
    except ValueError:
        return None
    files = dict(current)
    if current_env is not None and env_listed:
        files[ENV_FILE] = current_env
    return retain_revision(layout, files, mhash, keep=keep)
