#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This file only documents the stella_plan action plugin (plugins/action/stella_plan.py).

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_plan
short_description: Plan a Stella release for one Docker or Compose target (digests, lock, sticker, payloads)
version_added: 0.1.0
description:
  - Runs on the controller (action plugin). Validates the release input against the release input
    schema (C(docs/release-input.md)), resolves every image tag to its manifest digest against its
    registry, and builds the deterministic artifact set, C(compose.stella.lock.yml),
    C(stella.version.json), C(apply-manifest.json) and the optional C(.env.stella), plus the agent task
    payloads C(compose.preflight), C(compose.up), C(compose.rollback) (ComposeHost) or C(docker.run)
    (DockerHost) with the runtime contract's exact property names.
  - The same release planned twice gives byte-identical artifacts, whatever the order of components,
    config keys or environment entries.
  - An image that cannot be resolved fails the task with code C(image_unresolved) and nothing is written.
  - Under an image policy (O(image_policy), the release's C(imagePolicy)), an image whose signature does not
    verify fails the task (C(image_unsigned), C(image_signature_invalid)) and nothing is written.
  - Secret environment values (C(secretEnv)) and registry credentials never appear in the result; secret
    values only reach C(.env.stella) (mode 0600) when O(dest) is set, and are bound by digest elsewhere.
requirements:
  - requests (on the controller, for resolving tags to digests; images already pinned by digest need none)
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.attributes.action
attributes:
  check_mode:
    support: full
    details: With O(dest), nothing is written in check mode; C(changed) tells whether files would change.
  diff_mode:
    support: full
    details: With O(dest), the diff shows the compose lock before and after.
  idempotent:
    support: full
options:
  release:
    description:
      - The release input (see C(docs/release-input.md) and C(docs/schemas/release-input.schema.json)).
      - Errors name the offending field, for example C(components[0].image).
    type: dict
    required: true
  registry_credentials:
    description:
      - Registry credentials keyed by registry host (as written in image references, for example
        V(127.0.0.1:5002)). Each value has C(username) and C(password) or C(password_file) (read on the
        controller). Basic auth and the Bearer token flow are supported.
    type: dict
    default: {}
  insecure_registries:
    description:
      - Registries reached over plain HTTP. Loopback registries always are.
    type: list
    elements: str
    default: []
  resolved:
    description:
      - Digests already known, keyed by the original image reference (for example from an earlier plan or
        an offline bundle). These references are not looked up.
    type: dict
    default: {}
  resolve:
    description:
      - Look up tags in their registries. With V(false), every image must carry a digest or be listed in
        O(resolved).
    type: bool
    default: true
  dest:
    description:
      - Directory on the controller where the artifact set is written atomically (each file through a
        temporary file, fsync and rename; C(apply-manifest.json) last; C(.env.stella) with mode 0600).
      - When omitted nothing is written and the task never reports a change.
    type: path
  timeout:
    description:
      - Timeout in seconds of each registry request.
    type: float
    default: 15.0
  target_types:
    description:
      - The target types the caller deploys. A release whose C(target.type) is not listed fails with
        V(target_type_unsupported) before any registry is asked.
    type: list
    elements: str
    choices: [ComposeHost, DockerHost]
  image_policy:
    description:
      - The image signature policy (C(docs/trust.md)); its top-level keys win over the release's
        C(imagePolicy). V(keys) (PEM public key files on the controller), V(require) (default true once a
        key is named), V(identity) (default each component's own C(registry/repository)),
        V(signatureDirectory) (offline sites) and V(components) (per-component V(require), V(keys),
        V(identity)).
      - Each required image's cosign signature (OCI referrers, then the tag C(sha256-<hex>.sig), or the
        directory's files) must verify with a trusted key for its pinned digest and identity, checked with
        the same registry session as the digests. It fails, before anything is planned or written, with
        V(image_policy_invalid), V(image_unsigned), V(image_signature_invalid), V(registry_unreachable),
        V(registry_auth_failed).
      - With no policy (here or in the release) nothing is checked and no request is added.
    type: dict
    default: {}
notes:
  - Default slots are strategy-aware, rolling and all-at-once use V(active), canary uses V(canary),
    blue-green and a-b use V(green), unless C(slot), C(variantId), C(strategyConfig.slot),
    C(strategyConfig["deployment.slot"]) or C(strategyConfig.variantId) is given.
  - Traffic roles are active->active, canary->canary, blue/green->standby (active when it equals
    C(activeSlot)), variant id->variant.
seealso:
  - module: stellaops.runtime.stella_preflight
"""

EXAMPLES = r"""
- name: Plan the release and keep the artifacts next to the playbook
  stellaops.runtime.stella_plan:
    release:
      release: {id: rel-42, name: shop, version: 1.4.2}
      tenant: acme
      environment: prod
      application: shop
      strategy: blue-green
      target:
        id: tgt-01
        name: vm-01
        type: ComposeHost
        endpoint: ssh://10.0.0.5
        executionMode: ssh
      components:
        - name: web
          image: registry.example.com/shop/web:1.4.2
          config:
            env.MODE: "yes"
            healthcheck.test: wget -q -O- http://127.0.0.1:8080/
            healthcheck.interval: 10s
          ports: ["8080:8080"]
      secretEnv:
        DB_PASSWORD: "{{ vault_db_password }}"
    registry_credentials:
      registry.example.com:
        username: deploy
        password: "{{ vault_registry_password }}"
    dest: "{{ playbook_dir }}/artifacts/shop"
  register: plan

- name: Hand the compose.up payload to the target
  ansible.builtin.debug:
    var: plan.payloads['compose.up'].ProjectName
"""

RETURN = r"""
projectName:
  description: Compose project name (stable for tenant/environment/target/application/slot).
  returned: success
  type: str
  sample: acme_prod_tgt-01_shop_green
slot:
  description: Selected slot.
  returned: success
  type: str
  sample: green
slotSource:
  description: Where the slot came from (field name, or C(default:<strategy>)).
  returned: success
  type: str
  sample: default:blue-green
trafficRole:
  description: Traffic role of the slot (active, canary, standby, variant).
  returned: success
  type: str
  sample: standby
projectDirectory:
  description: Project directory on the target.
  returned: success
  type: str
  sample: /var/lib/stella/projects/acme_prod_tgt-01_shop_green
workDirectory:
  description: Work directory on the target.
  returned: success
  type: str
paths:
  description: Target paths of the artifacts (composePath, versionStickerPath, applyManifestPath, envArtifactPath).
  returned: success
  type: dict
jobId:
  description: Deployment job id (given, or derived from the inputs).
  returned: success
  type: str
taskId:
  description: Deployment task id (given, or derived from the inputs).
  returned: success
  type: str
lock:
  description: Text of C(compose.stella.lock.yml).
  returned: success
  type: str
sticker:
  description: Text of C(stella.version.json).
  returned: success
  type: str
applyManifest:
  description: Text of C(apply-manifest.json).
  returned: success
  type: str
manifestHash:
  description: C(sha256:) over the canonical desired state.
  returned: success
  type: str
composeHash:
  description: C(sha256:) of the lock bytes.
  returned: success
  type: str
versionStickerHash:
  description: C(sha256:) of the sticker bytes.
  returned: success
  type: str
applyManifestHash:
  description: C(sha256:) of the apply manifest bytes.
  returned: success
  type: str
envArtifactHash:
  description: C(sha256:) of C(.env.stella), or null when there are no secrets.
  returned: success
  type: str
artifactHashes:
  description: Every artifact file name mapped to its hash.
  returned: success
  type: dict
desiredState:
  description: The canonical desired state (secret values replaced by digests).
  returned: success
  type: dict
components:
  description: Each component with its original reference, pinned image and digest.
  returned: success
  type: list
  elements: dict
resolution:
  description: Per original reference, how it was resolved (digest, mediaType, platforms of an index).
  returned: success
  type: dict
signatures:
  description:
    - Per original reference, its signature verdict under the image policy, C(image), C(digest), C(status)
      (V(verified) or V(not_required)) and, when verified, C(keyFingerprint) (SHA-256 of the key's DER),
      C(keyPath), C(signatureDigest), C(source) (V(referrers), V(tag) or V(directory)) and C(identity).
    - No key material.
  returned: success, under an image policy
  type: dict
payloads:
  description:
    - Agent task payloads keyed by task type, with the contract's exact property names.
    - C(compose.preflight) always; C(compose.up) and C(compose.rollback) for ComposeHost; C(docker.run) (a list,
      one per component) for DockerHost.
  returned: success
  type: dict
written:
  description: Artifact files written (or that would be written in check mode) under O(dest).
  returned: when O(dest) is set
  type: list
  elements: str
code:
  description: Stable failure code (C(release_invalid), C(image_unresolved), C(image_unsigned), ...).
  returned: failure
  type: str
"""
