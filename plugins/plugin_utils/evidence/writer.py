# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Evidence documents on the controller's disk: the one writer every evidence file goes through.

Each document is written as canonical pretty JSON through a temporary file and a rename (never half
written), mode 0640 in a 0750 directory; the result names each file's path and SHA-256.
"""

from __future__ import annotations

import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json, sha256_bytes
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import deployment_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write

# Keys of registered results that are Ansible plumbing, not evidence.
# The job's evidence documents, under <evidence dir>/jobs/<job id>/.
JOB_EVIDENCE_FILE = "job.json"
ROLLBACK_EVIDENCE_FILE = "rollback-evidence.json"
PLUMBING = ("invocation", "diff", "_ansible_no_log", "_ansible_verbose_always", "ansible_facts", "warnings",
            "deprecations")


def clean(result):
    """A registered task result without Ansible's plumbing (``None`` and ``{}`` as they are)."""
    if not result:
        return result
    return {k: v for k, v in result.items() if k not in PLUMBING and not k.startswith("_ansible")}


def write_documents(directory, documents, check_mode=False):
    """Write ``documents`` (``{file name: JSON-able document}``) into ``directory``; in check mode
    nothing is written. ``{name: {"path", "sha256"}}``."""
    written = {}
    for name, document in documents.items():
        data = pretty_json(document)
        path = os.path.join(directory, name)
        if not check_mode:
            os.makedirs(directory, mode=0o750, exist_ok=True)
            atomic_write(path, data, mode=0o640)
        written[name] = {"path": path, "sha256": sha256_bytes(data)}
    return written


def write_target_documents(root, plan, documents, check_mode=False):
    """Write one target's evidence ``documents`` into its deployment's directory under ``root``
    (``<projectName>/<jobId>/<target>/``); ``(directory, {name: {"path", "sha256"}})``."""
    directory = deployment_evidence_dir(root, plan.get("projectName"), plan.get("jobId"),
                                        (plan.get("target") or {}).get("id"))
    return directory, write_documents(directory, documents, check_mode=check_mode)
