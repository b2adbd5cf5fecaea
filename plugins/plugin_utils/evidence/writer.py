# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Evidence documents: the one writer every evidence file goes through.

Each document is canonical pretty JSON (the report: its HTML). :func:`keep_documents` names each by its
path under an evidence directory, for the job store (which keeps every job's evidence, see
store/documents.py), and with an evidence directory also writes it there: through a temporary file and
a rename (never half written), mode 0640 in a 0750 directory. The result names each file's SHA-256,
its document name in the store and, when written to disk, its path.
"""

from __future__ import annotations

import os
import posixpath

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write, read_bytes

# The job's evidence documents, under <evidence dir>/jobs/<job id>/; each target's, under
# <evidence dir>/<projectName>/<job id>/<target>/.
JOB_EVIDENCE_FILE = "job.json"
ROLLBACK_EVIDENCE_FILE = "rollback-evidence.json"
DEPLOYMENT_EVIDENCE_FILE = "deployment.json"
# An evidence file on disk that another job wrote (a job of the same id in another job store sharing the
# evidence directory): it is never replaced.
EVIDENCE_CONFLICT = "evidence_conflict"
# Keys of registered results that are Ansible plumbing, not evidence.
PLUMBING = (
    "invocation",
    "diff",
    "_ansible_no_log",
    "_ansible_verbose_always",
    "ansible_facts",
    "warnings",
    "deprecations",
)


def clean(result):
    """A registered task result without Ansible's plumbing (``None`` and ``{}`` as they are), with the
    credentials of every URL in its text removed (a message may quote one): what a job records or keeps
    as evidence of a result never holds a ``user:password@``."""
    if not result:
        return result
    return {k: _without_userinfo(v) for k, v in result.items() if k not in PLUMBING and not k.startswith("_ansible")}


def _without_userinfo(value):
    if isinstance(value, str):
        return redact_url(value) if "@" in value else value
    if isinstance(value, dict):
        return {k: _without_userinfo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_userinfo(v) for v in value]
    return value


def keep_documents(root, directory, documents, check_mode=False):
    """The evidence ``documents`` (``{file name: JSON-able document, or bytes}``) of one evidence
    directory, ``directory`` relative to an evidence root (as the vocabulary's helpers build it with
    ``root=""``). Returns ``(entries, stored)``: ``entries`` ``{file name: {"sha256", "document", "path"}}``
    (``path`` only when ``root`` is given and the file was written under it; nothing is written in check
    mode) and ``stored`` ``{document name: bytes}`` for the job store. A file already there with other
    bytes is never replaced: ``evidence_conflict``, before any of ``documents`` is written."""
    entries, stored = {}, {}
    documents = {name: doc if isinstance(doc, bytes) else pretty_json(doc) for name, doc in documents.items()}
    if root:
        for name, data in documents.items():
            path = posixpath.join(root, directory, name)
            if read_bytes(path) not in (None, data):
                raise StellaError(
                    EVIDENCE_CONFLICT,
                    "evidence file %s exists with other contents (a job of the "
                    "same id in another job store wrote it): it is kept, nothing was written" % path,
                    phase="job",
                )
    for name, data in documents.items():
        relative = posixpath.join(directory, name)
        entry = {"sha256": sha256_bytes(data), "document": relative}
        if root:
            path = posixpath.join(root, relative)
            if not check_mode:
                os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
                atomic_write(path, data, mode=0o640)
            entry["path"] = path
        entries[name] = entry
        stored[relative] = data
    return entries, stored


def check_new_job_directory(root, job_id):
    """Refuse (``evidence_conflict``) a new job ``job_id`` whose evidence directory under ``root`` exists: a job of
    the same id in another job store (two AWX, two stores sharing one evidence directory) wrote there."""
    directory = job_evidence_dir(root, job_id) if root else None
    if directory and os.path.exists(directory):
        raise StellaError(
            EVIDENCE_CONFLICT,
            "job %s already has evidence in %s, written by a job of the same id in "
            "another job store: nothing was changed" % (job_id, directory),
            phase="job",
        )
