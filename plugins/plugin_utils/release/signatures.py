# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This plugin_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The signature check of planning (docs/trust.md): each image the policy (policy.py) requires, once its
digest is pinned, must carry a cosign signature that a trusted key verifies for that digest and identity.

Signatures are found as cosign publishes them: OCI 1.1 referrers first (``GET /v2/<repo>/referrers/
<digest>``, manifests of artifact type :data:`SIGNATURE_ARTIFACT_TYPE`), then the tag ``sha256-<hex>.sig``;
or, for an offline site, the files ``sha256-<hex>.sig`` and ``sha256-<hex>.payload`` of the policy's
``signatureDirectory``. Registry requests go through planning's own :class:`DigestResolver` (its session,
credentials, tokens and retries). Every read is bounded: a signature manifest by
``MAX_SIGNATURE_MANIFEST_BYTES``, a payload by ``MAX_PAYLOAD_BYTES`` (a bigger one is refused, never read
whole).

The verdict of each image reference: ``{image, digest, status: verified | not_required, keyFingerprint,
keyPath, signatureDigest, source: referrers | tag | directory, identity}``. A required image that has no
signature fails with ``image_unsigned``; one whose signatures all fail with ``image_signature_invalid``
naming the first reason of each (at most three). Neither the keys' material nor any credential appears in
a verdict, a reason or evidence.
"""

from __future__ import annotations

import hashlib
import json
import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DIGEST_RE
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    MEDIA_DOCKER_MANIFEST,
    MEDIA_OCI_INDEX,
    MEDIA_OCI_MANIFEST,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import LOCAL_IMAGE_KEY, pin_image

SIGNATURE_ARTIFACT_TYPE = "application/vnd.dev.cosign.artifact.sig.v1+json"
SIGNATURE_ACCEPT = ", ".join((MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST))
MAX_REASONS = 3
MAX_REFERRERS = 16
# Answers of a registry that has no OCI 1.1 referrers API (distribution 2.x: 404).
NO_REFERRERS_API = (400, 404, 405)


def _cosign():
    # pylint: disable-next=import-outside-toplevel  # cryptography is loaded only when a policy requires it
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign

    return cosign


def _sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def default_identity(image):
    """The identity a signature must name by default: the image's repository, ``registry/repository``."""
    ref = parse_image_ref(image)
    return "%s/%s" % (ref.registry, ref.repository)


class _Check:
    """One required image's check: its pinned reference, the trusted keys ``[(path, PublicKey)]``, the
    identity; ``reasons`` collects why each signature seen was refused."""

    def __init__(self, image, digest, keys, identity):
        self.image, self.digest, self.keys, self.identity = image, digest, keys, identity
        self.ref = parse_image_ref(image)
        self.reasons = []
        self.seen = 0

    def verdict(self, key, signature_digest, source):
        path = next(p for p, k in self.keys if k == key)
        return {
            "image": self.image,
            "digest": self.digest,
            "status": "verified",
            "keyFingerprint": key.fingerprint,
            "keyPath": path,
            "signatureDigest": signature_digest,
            "source": source,
            "identity": self.identity,
        }

    def refuse(self, reason):
        self.reasons.append(" ".join(str(reason).split()))

    def payload(self, payload, signature):
        """The key that verifies ``payload``'s ``signature`` for this image, or ``None`` (the reason kept)."""
        key, why = _cosign().check_signature(payload, signature, [k for _p, k in self.keys], self.digest, self.identity)
        if key is None:
            self.refuse(why)
        return key


def _manifest(check, resolver, body, headers, source):
    """The verdict of one signature manifest's bytes, or ``None`` (its reasons kept)."""
    cosign = _cosign()
    check.seen += 1
    if len(body) > cosign.MAX_SIGNATURE_MANIFEST_BYTES:
        check.refuse("the signature manifest is over %d bytes" % cosign.MAX_SIGNATURE_MANIFEST_BYTES)
        return None
    signature_digest = _sha256(body)
    announced = (headers or {}).get("docker-content-digest")
    if announced and announced != signature_digest:
        check.refuse("the signature manifest's bytes are not %s" % announced)
        return None
    try:
        layers = cosign.parse_signature_manifest(body)
    except ValueError as exc:
        check.refuse(exc)
        return None
    if not layers:
        check.refuse("the signature manifest holds no simple signing layer with a signature")
        return None
    for layer in layers:
        if layer["size"] > cosign.MAX_PAYLOAD_BYTES:
            check.refuse("payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES)
            continue
        status, _headers, payload = resolver.fetch(
            check.image,
            "/v2/%s/blobs/%s" % (check.ref.repository, layer["digest"]),
            max_bytes=cosign.MAX_PAYLOAD_BYTES,
        )
        if status != 200:
            check.refuse("the payload blob %s answered HTTP %d" % (layer["digest"], status))
            continue
        if len(payload) > cosign.MAX_PAYLOAD_BYTES:
            check.refuse("payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES)
            continue
        if _sha256(payload) != layer["digest"]:
            check.refuse("the payload's bytes are not its digest %s (edited after signing?)" % layer["digest"])
            continue
        key = check.payload(payload, layer["signature"])
        if key is not None:
            return check.verdict(key, signature_digest, source)
    return None


def _referrers(check, resolver):
    """The verdict of a signature the registry lists as an OCI 1.1 referrer, or ``None`` (none verifies, or
    the registry offers no referrers API)."""
    cosign = _cosign()
    unsupported = getattr(resolver, "referrers_unsupported", set())
    if check.ref.registry in unsupported:
        return None
    path = "/v2/%s/referrers/%s" % (check.ref.repository, check.digest)
    status, headers, body = resolver.fetch(
        check.image, path, accept=MEDIA_OCI_INDEX, max_bytes=cosign.MAX_SIGNATURE_MANIFEST_BYTES
    )
    if status in NO_REFERRERS_API:
        # the spec's answer for a digest without referrers is 200 and an empty index: 404 (or 400, 405) says
        # the registry has no such API, for this image and the next ones of this planning
        unsupported.add(check.ref.registry)
        return None
    if status != 200 or len(body) > cosign.MAX_SIGNATURE_MANIFEST_BYTES:
        return None
    try:
        index = json.loads(body)
    except ValueError:
        return None
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        return None
    found = [
        entry["digest"]
        for entry in index["manifests"]
        if isinstance(entry, dict)
        and entry.get("artifactType") == SIGNATURE_ARTIFACT_TYPE
        and isinstance(entry.get("digest"), str)
        and DIGEST_RE.match(entry["digest"])
    ]
    for digest in found[:MAX_REFERRERS]:
        status, headers, body = resolver.fetch(
            check.image,
            "/v2/%s/manifests/%s" % (check.ref.repository, digest),
            accept=SIGNATURE_ACCEPT,
            max_bytes=cosign.MAX_SIGNATURE_MANIFEST_BYTES,
        )
        if status != 200:
            check.seen += 1
            check.refuse("the referrer %s answered HTTP %d" % (digest, status))
            continue
        verdict = _manifest(check, resolver, body, headers, "referrers")
        if verdict:
            return verdict
    return None


def _tag(check, resolver):
    """The verdict of the signatures at the tag ``sha256-<hex>.sig``, or ``None``."""
    cosign = _cosign()
    path = "/v2/%s/manifests/%s" % (check.ref.repository, cosign.signature_tag(check.digest))
    status, headers, body = resolver.fetch(
        check.image, path, accept=SIGNATURE_ACCEPT, max_bytes=cosign.MAX_SIGNATURE_MANIFEST_BYTES
    )
    if status == 404:
        return None
    if status != 200:
        check.seen += 1
        check.refuse("the signature tag answered HTTP %d" % status)
        return None
    return _manifest(check, resolver, body, headers, "tag")


def _read_bounded(path, limit):
    """``(bytes, over)`` of the file at ``path``, read at most to ``limit`` + 1 bytes; ``None`` when absent."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StellaError(
            "image_policy_invalid",
            "signatureDirectory: cannot read %s: %s" % (path, exc.strerror or exc),
            phase="plan",
        ) from None
    return data


def _directory(check, directory):
    """The verdict of the signature files of the offline ``directory``, or ``None``."""
    cosign = _cosign()
    stem = os.path.join(directory, cosign.signature_tag(check.digest)[: -len(".sig")])
    signature = _read_bounded(stem + ".sig", cosign.MAX_SIGNATURE_MANIFEST_BYTES)
    payload = _read_bounded(stem + ".payload", cosign.MAX_PAYLOAD_BYTES)
    if signature is None and payload is None:
        return None
    check.seen += 1
    if signature is None or payload is None:
        check.refuse("%s.%s is missing" % (stem, "sig" if signature is None else "payload"))
        return None
    if len(signature) > cosign.MAX_SIGNATURE_MANIFEST_BYTES:
        check.refuse("%s.sig is over %d bytes" % (stem, cosign.MAX_SIGNATURE_MANIFEST_BYTES))
        return None
    if len(payload) > cosign.MAX_PAYLOAD_BYTES:
        check.refuse("payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES)
        return None
    try:
        text = signature.decode("ascii").strip()
    except UnicodeDecodeError:
        check.refuse("%s.sig is not base64" % stem)
        return None
    key = check.payload(payload, text)
    return check.verdict(key, _sha256(signature), "directory") if key is not None else None


def check_image(resolver, image, digest, keys, identity, directory=None):
    """The verdict of one required image (``image`` pinned to ``digest``); raises ``image_unsigned`` or
    ``image_signature_invalid`` (or the registry's ``registry_unreachable`` / ``registry_auth_failed``)."""
    check = _Check(image, digest, keys, identity)
    if directory:
        verdict = _directory(check, directory)
        where = "in %s" % directory
    else:
        verdict = _referrers(check, resolver) or _tag(check, resolver)
        where = "in %s/%s (tag %s, or a referrer)" % (
            check.ref.registry,
            check.ref.repository,
            _cosign().signature_tag(digest),
        )
    if verdict:
        return verdict
    evidence = {"image": image, "digest": digest, "identity": identity, "keys": [k.fingerprint for _p, k in keys]}
    if not check.seen:
        raise StellaError(
            "image_unsigned",
            "image %s has no signature %s; the image policy requires one" % (image, where),
            phase="plan",
            evidence=evidence,
        )
    reasons = check.reasons[:MAX_REASONS]
    raise StellaError(
        "image_signature_invalid",
        "image %s: no signature verifies (%s)" % (image, "; ".join(reasons) or "no signature layer"),
        phase="plan",
        evidence=dict(evidence, reasons=reasons),
    )


def verify_images(resolver, policy, release, resolved):
    """``{image reference: verdict}`` for every component of ``release`` under ``policy`` (policy.py),
    ``resolved`` the pinned digests (reference -> ``sha256:...``). Each distinct check is done once."""
    verdicts, done = {}, {}
    components = sorted(release.get("components") or [], key=lambda c: not policy.rules[c["name"]].require)
    for component in components:
        rule, reference = policy.rules[component["name"]], component["image"]
        local = (component.get("config") or {}).get(LOCAL_IMAGE_KEY)
        if local and rule.require:
            raise StellaError(
                "image_unsigned",
                "component %s runs the locally loaded image %s: a locally loaded image carries no registry "
                "signature, and the image policy requires one" % (component["name"], local),
                phase="plan",
                evidence={"image": reference, "imageId": local, "component": component["name"]},
            )
        pinned, digest = pin_image(reference, resolved, local)
        if not rule.require:
            verdicts.setdefault(reference, {"image": pinned, "digest": digest, "status": "not_required"})
            continue
        identity = rule.identity or default_identity(reference)
        keys = policy.keys_of(rule)
        key = (pinned, tuple(path for path, _k in keys), identity)
        if key not in done:
            done[key] = check_image(resolver, pinned, digest, keys, identity, policy.directory)
        if verdicts.get(reference, {}).get("status") != "verified":
            verdicts[reference] = done[key]
    return dict(sorted(verdicts.items()))
