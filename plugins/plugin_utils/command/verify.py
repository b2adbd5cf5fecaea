# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella verify JOB --key PUB [--evidence-dir DIR] [--json] [STORE]`` (docs/trust.md): a job's signed
evidence checked offline with the signing key's public key: every document and envelope of the job, read
from the job store or from an evidence directory (the tree ``stella evidence --output DIR`` writes, or a
job's ``stella_evidence_dir``), verified by evidence/signing.py. One line per document (``ok   NAME`` or
``FAIL NAME: REASON``) and a summary; exit status 0 when every document verified, 1 otherwise.

``stella verify --live ...`` is another check (whether the targets still run what their last job recorded):
it goes to ``command/drift.py``'s ``live``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import store as _store_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence import signing as _signing
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys as _keys

DRIFT_MODULE = "ansible_collections.stellaops.runtime.plugins.plugin_utils.command.drift"
# the evidence directory of a job's own documents; a target's lie under <projectName>/<jobId>/<target>/
JOBS_DIR = "jobs"


def verify_parser():
    """``stella verify JOB --key PUB [--evidence-dir DIR] [--json] [STORE]``."""
    parser = argparse.ArgumentParser(
        prog="stella verify",
        description="Check a job's signed evidence offline with the signing key's public key: every "
        "document has an envelope signed by the key, its bytes and what it records are what was signed, "
        "and job.json's signed statement lists every document (docs/trust.md). "
        "stella verify --live checks the targets instead (stella verify --live -h).",
    )
    parser.add_argument("job", metavar="JOB", help="the job id (stella list shows them)")
    parser.add_argument("--key", metavar="PUB", required=True, help="the public key of the evidence signing key")
    parser.add_argument(
        "--evidence-dir",
        metavar="DIR",
        help="read the evidence from DIR (an evidence directory, or the tree stella evidence --output wrote) "
        "instead of the job store",
    )
    parser.add_argument("--json", action="store_true", help="print {jobId, key, source, verified, documents} as JSON")
    return _location.add_options(parser)


def from_store(store, job_id):
    """``{name: bytes}`` of every document (envelopes too) the job store keeps for job ``job_id``."""
    if store.get(job_id) is None:
        raise StellaError("job_not_found", "no job %s in the job store %s" % (job_id, store.location))
    return {name: store.document(job_id, name) or b"" for name in store.document_index(job_id)}


def from_directory(root, job_id):
    """``{name: bytes}`` of every file of job ``job_id`` under the evidence directory ``root``: the files
    under ``jobs/JOB/`` and under each ``<projectName>/JOB/`` (named by their path under ``root``)."""
    if not os.path.isdir(root):
        raise StellaError("job_not_found", "no evidence directory %s" % root)
    files = {}
    for top in sorted(os.listdir(root)):
        base = os.path.join(root, top, job_id)
        if not os.path.isdir(base) or os.path.islink(base):
            continue
        for directory, subdirs, names in os.walk(base):
            subdirs.sort()
            for name in sorted(names):
                path = os.path.join(directory, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        files["/".join(os.path.relpath(path, root).split(os.sep))] = handle.read()
    if not files:
        raise StellaError("job_not_found", "no evidence of job %s under %s" % (job_id, root))
    return files


def summary(job_id, results, fingerprint):
    failed = sum(1 for entry in results if not entry["ok"])
    if failed:
        return "job %s: %d of %d documents failed verification with the key %s" % (
            job_id,
            failed,
            len(results),
            fingerprint,
        )
    return "job %s: all %d documents verified with the key %s" % (job_id, len(results), fingerprint)


def verify(argv, stdout=None, stderr=None):
    """``stella verify``: 0 when every document of the job verified, 1 when one did not (or the key, the
    store or the evidence cannot be read: one error line), 2 on a usage error. With ``--live``:
    ``command/drift.py``'s ``live`` with the other arguments."""
    argv = list(argv)
    if "--live" in argv:
        drift = importlib.import_module(DRIFT_MODULE)
        return drift.live([arg for arg in argv if arg != "--live"])
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    options, rc = _store_cli.parse_command(verify_parser(), argv, provider_options=False)
    if options is None:
        return rc
    try:
        key = _keys.load_public_key(options.key, code="signing_key_invalid")
        if options.evidence_dir:
            source = options.evidence_dir
            files = from_directory(options.evidence_dir, options.job)
        else:
            where = _location.resolve(options)
            source = _location.shown(where)
            with _store_cli.existing_store(where.location, where.source) as store:
                files = from_store(store, options.job)
        results = _signing.verify_documents(options.job, files, key)
    except StellaError as exc:
        return _store_cli.fail_line(stderr, "verify", exc)
    except OSError as exc:
        return _store_cli.fail_line(
            stderr, "verify", StellaError("job_not_found", "cannot read the evidence: %s" % exc)
        )
    verified = all(entry["ok"] for entry in results)
    if options.json:
        document = {
            "jobId": options.job,
            "key": key.fingerprint,
            "source": source,
            "verified": verified,
            "documents": results,
        }
        stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        for entry in results:
            stdout.write(
                "ok   %s\n" % entry["document"]
                if entry["ok"]
                else "FAIL %s: %s\n" % (entry["document"], entry["reason"])
            )
        stdout.write(summary(options.job, results, key.fingerprint) + "\n")
    return 0 if verified else 1
