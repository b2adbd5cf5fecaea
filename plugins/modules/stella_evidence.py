#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This file only documents the stella_evidence action plugin (plugins/action/stella_evidence.py).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_evidence
short_description: Record deployment, rollback and recovery evidence on the controller
version_added: 0.1.0
description:
  - Runs on the controller (action plugin). Turns the registered results of
    M(stellaops.runtime.stella_plan), M(stellaops.runtime.stella_preflight),
    M(stellaops.runtime.stella_compose_deploy), M(stellaops.runtime.stella_probe) and
    M(stellaops.runtime.stella_rollback) into evidence records and writes them atomically under
    O(dest)C(/<projectName>/<jobId>/<target>/) (the target's id).
  - V(deployment) writes C(deployment.json) (C(stella.deployment.evidence.v1)). Its C(status) is
    V(succeeded) only when every condition of the contract's success boundary holds, preflight passed,
    images pinned and pulled, workload running, runtime verified, sticker recorded, and the health
    probes (when configured) passed or were explicitly skipped.
  - V(rollback) writes C(rollback-evidence.json) (C(release.rollback.evidence.v1), with C(proofDigest)
    and C(orderProofDigest)) and C(recovery.json). The original deployment stays V(failed); rollback
    success is the separate recovery record.
  - Digests in the records are RFC 8785 C(sha256:) digests that leave out C(createdAt), so replaying the
    same inputs gives the same digests.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.attributes.action
attributes:
  check_mode:
    support: full
    details: In check mode the records are built and returned but not written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Evidence files are records of runs, not managed state, so writing them never reports a change.
options:
  dest:
    description: Evidence root directory on the controller.
    type: path
    required: true
  kind:
    description: Which records to write.
    type: str
    choices: [deployment, rollback]
    default: deployment
  plan:
    description: The registered result of M(stellaops.runtime.stella_plan).
    type: dict
    required: true
  preflight:
    description: The registered result of M(stellaops.runtime.stella_preflight).
    type: dict
  apply:
    description:
      - The registered result of M(stellaops.runtime.stella_compose_deploy). For O(kind=rollback), the result
        of the deployment that failed or whose probe failed.
    type: dict
  probe:
    description: The registered result of M(stellaops.runtime.stella_probe).
    type: dict
  rollback:
    description:
      - The registered result of M(stellaops.runtime.stella_rollback). Omit it when no rollback ran; the
        recovery record then says V(rollback_skipped).
    type: dict
  created_at:
    description: Record creation time (ISO 8601 UTC). Defaults to now. Not covered by any digest.
    type: str
  timestamps:
    description:
      - For O(kind=rollback), the times of the order proof entries (ISO 8601 UTC) under the keys
        C(deployStartedAt), C(deployCompletedAt), C(rollbackStartedAt) and C(rollbackCompletedAt).
    type: dict
    default: {}
seealso:
  - module: stellaops.runtime.stella_rollback
"""

EXAMPLES = r"""
- name: Record the deployment evidence
  stellaops.runtime.stella_evidence:
    dest: /var/lib/stella/evidence
    plan: "{{ plan }}"
    preflight: "{{ preflight }}"
    apply: "{{ apply }}"
    probe: "{{ probe }}"

- name: Record rollback evidence and the recovery record
  stellaops.runtime.stella_evidence:
    dest: /var/lib/stella/evidence
    kind: rollback
    plan: "{{ plan }}"
    apply: "{{ apply }}"
    probe: "{{ probe }}"
    rollback: "{{ rollback }}"
"""

RETURN = r"""
evidenceDirectory:
  description: Directory the records were written to.
  returned: success
  type: str
  sample: /var/lib/stella/evidence/acme_prod_tgt-01_shop/job-3f2a
files:
  description: Each written record's path and the SHA-256 of its bytes.
  returned: success
  type: dict
  sample:
    deployment.json:
      path: /var/lib/stella/evidence/acme_prod_tgt-01_shop/job-3f2a/deployment.json
      sha256: sha256:5d1c...
records:
  description: The records themselves, keyed by file name.
  returned: success
  type: dict
"""
