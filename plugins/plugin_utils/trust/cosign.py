# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""cosign's image signatures (sigstore/cosign specs/SIGNATURE_SPEC.md), key-based, in its tag layout.

An image ``REPO@sha256:HEX`` is signed by an OCI image manifest at ``REPO:sha256-HEX.sig`` whose layers
are simple signing payloads (:data:`SIMPLE_SIGNING_TYPE`: JSON naming the image's digest and repository),
each with its base64 signature in the :data:`SIGNATURE_ANNOTATION` annotation. This module builds and
reads those manifests and checks a payload's signature against trusted keys; registry traffic is the
caller's. Pure apart from the key objects (keys.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (
    DEFAULT_REGISTRY,
    parse_image_ref,
    registry_key,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DIGEST_RE

SIMPLE_SIGNING_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIGNATURE_TYPE = "cosign container image signature"
OCI_MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MAX_SIGNATURE_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_SIGNATURES = 32
# the zero time Go writes for the config's timestamps (cosign's signature images have no dates)
ZERO_TIME = "0001-01-01T00:00:00Z"


def _compact(document):
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_digest(data):
    """``sha256:<hex>`` of ``data`` (bytes)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def signature_tag(digest):
    """The tag of ``digest``'s signatures: ``sha256:abc...`` -> ``sha256-abc....sig``; ``ValueError``
    for anything that is not ``sha256:<64 hex>``."""
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise ValueError("%r is not a sha256:<64 hex> digest" % (digest,))
    return digest.replace(":", "-", 1) + ".sig"


def simple_signing_payload(docker_reference, manifest_digest):
    """The simple signing payload cosign writes for an image: compact JSON, its keys in cosign's order."""
    return _compact(
        {
            "critical": {
                "identity": {"docker-reference": docker_reference},
                "image": {"docker-manifest-digest": manifest_digest},
                "type": SIGNATURE_TYPE,
            },
            "optional": None,
        }
    )


def sign_payload(key, payload):
    """The base64 signature of ``payload`` by the :class:`~.keys.PrivateKey` ``key`` (the annotation's value)."""
    return base64.b64encode(key.sign(payload)).decode("ascii")


def signature_manifest(entries):
    """The signature image of ``entries`` (``[{"payload": bytes, "signature": base64 str}]``), as cosign
    writes it: ``{"manifest": bytes, "config": bytes, "blobs": {digest: bytes}, "digest": str}``; ``blobs``
    holds the payloads and the config. Deterministic for given entries."""
    entries = list(entries)
    if not entries:
        raise ValueError("a signature manifest needs at least one signature")
    if len(entries) > MAX_SIGNATURES:
        raise ValueError("%d signatures, more than %d" % (len(entries), MAX_SIGNATURES))
    blobs, layers, diff_ids = {}, [], []
    for entry in entries:
        payload, signature = bytes(entry["payload"]), entry["signature"]
        if not isinstance(signature, str) or not signature:
            raise ValueError("a signature entry has no base64 signature")
        digest = sha256_digest(payload)
        blobs[digest] = payload
        diff_ids.append(digest)
        layers.append(
            {
                "mediaType": SIMPLE_SIGNING_TYPE,
                "size": len(payload),
                "digest": digest,
                "annotations": {SIGNATURE_ANNOTATION: signature},
            }
        )
    config = _compact(
        {
            "architecture": "",
            "created": ZERO_TIME,
            "history": [{"created": ZERO_TIME}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "config": {},
        }
    )
    config_digest = sha256_digest(config)
    blobs[config_digest] = config
    manifest = _compact(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": config_digest},
            "layers": layers,
        }
    )
    return {"manifest": manifest, "config": config, "blobs": blobs, "digest": sha256_digest(manifest)}


def parse_signature_manifest(data):
    """The signature layers of a signature manifest: ``[{"digest", "size", "mediaType", "signature"}]``.

    ``ValueError`` for a manifest over :data:`MAX_SIGNATURE_MANIFEST_BYTES`, not JSON, not an object, of
    a media type that is neither an OCI nor a Docker schema 2 image manifest, without layers or with more
    than :data:`MAX_SIGNATURES`. Layers that are not simple signing payloads with a signature annotation
    (other attachments) are skipped.
    """
    if len(data) > MAX_SIGNATURE_MANIFEST_BYTES:
        raise ValueError(
            "the signature manifest is %d bytes, over the limit of %d" % (len(data), MAX_SIGNATURE_MANIFEST_BYTES)
        )
    try:
        document = json.loads(data)
    except (TypeError, ValueError) as exc:
        raise ValueError("the signature manifest is not JSON (%s)" % " ".join(str(exc).split())[:120]) from None
    if not isinstance(document, dict):
        raise ValueError("the signature manifest is not a JSON object")
    media_type = document.get("mediaType")
    if media_type not in (OCI_MANIFEST_TYPE, DOCKER_MANIFEST_TYPE):
        raise ValueError(
            "the signature manifest's media type is %r, not an OCI or Docker image manifest" % (media_type,)
        )
    layers = document.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ValueError("the signature manifest has no layers")
    if len(layers) > MAX_SIGNATURES:
        raise ValueError("the signature manifest has %d layers, more than %d" % (len(layers), MAX_SIGNATURES))
    found = []
    for layer in layers:
        if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING_TYPE:
            continue
        annotations = layer.get("annotations")
        signature = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
        if not isinstance(signature, str):
            continue
        digest, size = layer.get("digest"), layer.get("size")
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise ValueError("a signature layer's digest %r is not sha256:<64 hex>" % (digest,))
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError("the signature layer %s has no valid size" % digest)
        found.append({"digest": digest, "size": size, "mediaType": SIMPLE_SIGNING_TYPE, "signature": signature})
    return found


def _repository(ref):
    """``(registry, repository)`` with Docker Hub's names as one (``index.docker.io/nginx`` is
    ``docker.io/library/nginx``)."""
    registry, repository = registry_key(ref.registry), ref.repository
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = "library/" + repository
    return registry, repository


def identity_matches(reference, identity):
    """Whether a payload's ``docker-reference`` names the repository ``identity``: the same repository
    (Docker Hub's short names normalized), alone or with a tag or digest. When ``identity`` has a tag or
    digest itself, the reference must carry the same one."""
    try:
        ref, want = parse_image_ref(reference), parse_image_ref(identity)
    except StellaError:
        return False
    if _repository(ref) != _repository(want):
        return False
    if want.tag and ref.tag != want.tag:
        return False
    return not (want.digest and ref.digest != want.digest)


def _payload_fields(payload):
    """``(digest, docker-reference)`` of a simple signing payload; ``ValueError`` naming what is wrong."""
    if not isinstance(payload, (bytes, bytearray)):
        raise ValueError("not bytes")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError("%d bytes, over the limit of %d" % (len(payload), MAX_PAYLOAD_BYTES))
    try:
        document = json.loads(bytes(payload))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not JSON") from None
    critical = document.get("critical") if isinstance(document, dict) else None
    if not isinstance(critical, dict):
        raise ValueError("no critical object")
    if critical.get("type") != SIGNATURE_TYPE:
        raise ValueError("critical.type is %r, not %r" % (critical.get("type"), SIGNATURE_TYPE))
    image, identity = critical.get("image"), critical.get("identity")
    digest = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    reference = identity.get("docker-reference") if isinstance(identity, dict) else None
    if not isinstance(digest, str) or not digest:
        raise ValueError("no critical.image.docker-manifest-digest")
    if not isinstance(reference, str):
        raise ValueError("no critical.identity.docker-reference")
    return digest, reference


def check_signature(payload, signature_b64, keys, digest, identity):
    """``(the key that verified, "")``, or ``(None, reason)``: the payload is not a simple signing payload,
    the signature is not base64, no key in ``keys`` verifies it, or (verified) it names another digest
    than ``digest`` or (``identity`` given) another repository."""
    try:
        signed_digest, reference = _payload_fields(payload)
    except ValueError as exc:
        return None, "payload is not a cosign simple signing payload (%s)" % exc
    try:
        signature = base64.b64decode(signature_b64 or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        return None, "the signature annotation is not base64"
    if not signature:
        return None, "the signature annotation is empty"
    verified = next((key for key in keys if key.verify(signature, bytes(payload))), None)
    if verified is None:
        return None, "no trusted key verifies the signature"
    if signed_digest != digest:
        return None, "the signature names digest %s, not %s" % (signed_digest, digest)
    if identity is not None and not identity_matches(reference, identity):
        return None, "the signature names %s, not the repository %s" % (reference, identity)
    return verified, ""
