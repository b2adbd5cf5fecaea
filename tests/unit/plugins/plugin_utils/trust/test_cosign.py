"""cosign's image signatures (plugin_utils/trust/cosign.py), against signatures real cosign made:
containers/image's fixtures (tests/unit/fixtures/cosign/containers-image, see its NOTICE) with the key,
digest and identity containers/image's own tests use; the signature manifests this module writes, read
back as cosign reads them and verified without this module's key objects; and the limits of reading."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign, keys

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "cosign")
VECTORS = os.path.join(FIXTURES, "containers-image")
IDENTITY = "192.168.64.2:5000/cosign-signed-single-sample"
SIGNED_DIGEST = "sha256:634a8f35b5f16dcf4aaa0822adc0b1964bb786fca12f6831de8ddc45e5986a00"


def vector(*parts):
    return os.path.join(VECTORS, *parts)


def read(*parts):
    with open(vector(*parts), "rb") as handle:
        return handle.read()


def dir_signature(*parts):
    """A containers/image "dir" transport signature: 0x00, "sigstore-json\\n", then JSON."""
    data = read(*parts)
    assert data.startswith(b"\x00sigstore-json\n")
    document = json.loads(data[len(b"\x00sigstore-json\n") :])
    return (
        document["mimeType"],
        base64.b64decode(document["payload"]),
        document["annotations"].get(cosign.SIGNATURE_ANNOTATION),
    )


def image_digest(directory):
    return "sha256:" + hashlib.sha256(read(directory, "manifest.json")).hexdigest()


@pytest.fixture(scope="module")
def trusted():
    return keys.load_public_key(vector("cosign.pub"))


@pytest.fixture(scope="module")
def other_key():
    return keys.load_public_key(vector("cosign2.pub"))


def signatures(directory):
    return sorted(name for name in os.listdir(vector(directory)) if name.startswith("signature-"))


@pytest.mark.parametrize(
    "directory,identity",
    [
        ("dir-img-cosign-valid", IDENTITY),
        ("dir-img-cosign-valid-2", IDENTITY),
        ("dir-img-cosign-valid-with-tag", "192.168.64.2:5000/skopeo-signed"),
        ("dir-img-cosign-valid-with-tag", "192.168.64.2:5000/skopeo-signed:tag"),
    ],
)
def test_every_valid_vector_verifies(trusted, other_key, directory, identity):
    digest = image_digest(directory)
    assert digest == SIGNED_DIGEST
    names = signatures(directory)
    assert names
    for name in names:
        media_type, payload, signature = dir_signature(directory, name)
        assert media_type == cosign.SIMPLE_SIGNING_TYPE
        assert cosign.check_signature(payload, signature, [other_key, trusted], digest, identity) == (trusted, "")
        assert cosign.check_signature(payload, signature, [trusted], digest, None) == (trusted, "")


def test_written_by_cosign_in_its_own_words(trusted):
    _media, payload, signature = dir_signature("dir-img-cosign-valid", "signature-1")
    # the payload real cosign wrote is byte for byte what simple_signing_payload writes
    assert payload == cosign.simple_signing_payload(IDENTITY, SIGNED_DIGEST)


def test_a_tag_in_the_identity_must_match(trusted):
    _media, payload, signature = dir_signature("dir-img-cosign-valid-with-tag", "signature-1")
    key, reason = cosign.check_signature(
        payload, signature, [trusted], SIGNED_DIGEST, "192.168.64.2:5000/skopeo-signed:othertag"
    )
    assert key is None
    assert (
        reason
        == "the signature names 192.168.64.2:5000/skopeo-signed:tag, not the repository 192.168.64.2:5000/skopeo-signed:othertag"
    )


def test_another_repository_is_refused(trusted):
    _media, payload, signature = dir_signature("dir-img-cosign-valid", "signature-1")
    assert cosign.check_signature(payload, signature, [trusted], SIGNED_DIGEST, "this/does-not") == (
        None,
        "the signature names %s, not the repository this/does-not" % IDENTITY,
    )


def test_manifest_digest_error_names_another_digest(trusted):
    digest = image_digest("dir-img-cosign-manifest-digest-error")
    _media, payload, signature = dir_signature("dir-img-cosign-manifest-digest-error", "signature-1")
    assert cosign.check_signature(payload, signature, [trusted], digest, IDENTITY) == (
        None,
        "the signature names digest %s, not %s" % (SIGNED_DIGEST, digest),
    )


def test_modified_manifest_does_not_match_the_signed_digest(trusted):
    digest = image_digest("dir-img-cosign-modified-manifest")
    assert digest != SIGNED_DIGEST
    _media, payload, signature = dir_signature("dir-img-cosign-modified-manifest", "signature-1")
    key, reason = cosign.check_signature(payload, signature, [trusted], digest, IDENTITY)
    assert key is None and reason == "the signature names digest %s, not %s" % (SIGNED_DIGEST, digest)


def test_unknown_key_signature(trusted):
    _media, payload, signature = dir_signature("unknown-cosign-key.signature")
    assert cosign.check_signature(payload, signature, [trusted], SIGNED_DIGEST, IDENTITY) == (
        None,
        "no trusted key verifies the signature",
    )


def test_other_key_does_not_verify(other_key):
    _media, payload, signature = dir_signature("dir-img-cosign-valid", "signature-1")
    assert cosign.check_signature(payload, signature, [other_key], SIGNED_DIGEST, IDENTITY) == (
        None,
        "no trusted key verifies the signature",
    )
    assert cosign.check_signature(payload, signature, [], SIGNED_DIGEST, IDENTITY)[0] is None


def test_mixed_one_unknown_then_one_valid(trusted):
    results = [
        cosign.check_signature(*dir_signature("dir-img-cosign-mixed", name)[1:], [trusted], SIGNED_DIGEST, IDENTITY)
        for name in signatures("dir-img-cosign-mixed")
    ]
    assert results == [(None, "no trusted key verifies the signature"), (trusted, "")]


def test_other_attachment_is_not_a_signature(trusted):
    media_type, payload, signature = dir_signature("dir-img-cosign-other-attachment", "signature-1")
    assert media_type == "text/plain"
    key, reason = cosign.check_signature(payload, signature, [trusted], SIGNED_DIGEST, IDENTITY)
    assert key is None and reason == "payload is not a cosign simple signing payload (not JSON)"
    # in a signature manifest, such a layer is skipped
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": cosign.OCI_MANIFEST_TYPE,
            "layers": [
                {
                    "mediaType": media_type,
                    "size": len(payload),
                    "digest": "sha256:" + hashlib.sha256(payload).hexdigest(),
                    "annotations": {cosign.SIGNATURE_ANNOTATION: signature},
                },
                {"mediaType": cosign.SIMPLE_SIGNING_TYPE, "size": 1, "digest": "sha256:" + "0" * 64},
            ],
        }
    ).encode()
    assert cosign.parse_signature_manifest(manifest) == []


def test_no_manifest_signature_still_names_the_signed_digest(trusted):
    # the image's manifest is missing: the signature itself verifies, and names the digest it was made for
    assert not os.path.exists(vector("dir-img-cosign-no-manifest", "manifest.json"))
    _media, payload, signature = dir_signature("dir-img-cosign-no-manifest", "signature-1")
    assert cosign.check_signature(payload, signature, [trusted], SIGNED_DIGEST, IDENTITY) == (trusted, "")


@pytest.mark.parametrize(
    "payload,signature,reason",
    [
        (
            b"x" * (1024 * 1024 + 1),
            "AAAA",
            "payload is not a cosign simple signing payload (1048577 bytes, over the limit of 1048576)",
        ),
        (b"[]", "AAAA", "payload is not a cosign simple signing payload (no critical object)"),
        (
            b'{"critical":{"type":"atomic container signature","image":{},"identity":{}}}',
            "AAAA",
            "payload is not a cosign simple signing payload (critical.type is 'atomic container signature', "
            "not 'cosign container image signature')",
        ),
        (
            b'{"critical":{"type":"cosign container image signature","identity":{"docker-reference":"x"}}}',
            "AAAA",
            "payload is not a cosign simple signing payload (no critical.image.docker-manifest-digest)",
        ),
        (cosign.simple_signing_payload("x", SIGNED_DIGEST), "not base64!", "the signature annotation is not base64"),
    ],
    ids=["oversized", "array", "type", "no-digest", "not-base64"],
)
def test_malformed_payloads_and_signatures(trusted, payload, signature, reason):
    assert cosign.check_signature(payload, signature, [trusted], SIGNED_DIGEST, None) == (None, reason)


def test_signature_tag():
    assert cosign.signature_tag(SIGNED_DIGEST) == "sha256-%s.sig" % SIGNED_DIGEST.split(":")[1]
    for bad in ("latest", "sha256:abc", "sha512:" + "a" * 64, None):
        with pytest.raises(ValueError):
            cosign.signature_tag(bad)


def test_signature_spec_tag_example():
    """cosign's specs/SIGNATURE_SPEC.md (vendored): its digest -> tag example."""
    with open(os.path.join(FIXTURES, "sigstore-cosign", "SIGNATURE_SPEC.md"), encoding="utf-8") as handle:
        spec = handle.read()
    digest = re.search(r"Resolve this to a digest: `(sha256:[0-9a-f]{64})`", spec).group(1)
    tag = re.search(r"Follow the encoding rules: `(sha256-[0-9a-f]{64}\.sig)`", spec).group(1)
    assert cosign.signature_tag(digest) == tag
    assert "`%s`" % cosign.SIGNATURE_ANNOTATION in spec
    assert "`%s`" % cosign.SIMPLE_SIGNING_TYPE in spec and "`%s`" % cosign.SIGNATURE_TYPE in spec


@pytest.fixture(scope="module")
def signer():
    return keys.PrivateKey(ec.generate_private_key(ec.SECP256R1()))


def test_signature_manifest_round_trip_and_cosigns_reading(signer):
    image = "registry.example:5000/team/app"
    digest = "sha256:" + "ab" * 32
    payloads = [cosign.simple_signing_payload(image, digest), cosign.simple_signing_payload(image + ":v1", digest)]
    entries = [{"payload": p, "signature": cosign.sign_payload(signer, p)} for p in payloads]
    written = cosign.signature_manifest(entries)
    assert written == cosign.signature_manifest(entries)  # deterministic
    assert written["digest"] == "sha256:" + hashlib.sha256(written["manifest"]).hexdigest()
    parsed = cosign.parse_signature_manifest(written["manifest"])
    assert [layer["signature"] for layer in parsed] == [entry["signature"] for entry in entries]
    # as cosign reads it: an OCI manifest, the config and layers by digest, the signature annotation
    manifest = json.loads(written["manifest"])
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    config = written["blobs"][manifest["config"]["digest"]]
    assert config == written["config"] and manifest["config"]["size"] == len(config)
    assert json.loads(config)["rootfs"] == {
        "type": "layers",
        "diff_ids": [layer["digest"] for layer in manifest["layers"]],
    }
    assert cosign.signature_tag(digest) == "sha256-" + "ab" * 32 + ".sig"
    public = signer.crypto_key.public_key()
    for layer, payload in zip(manifest["layers"], payloads):
        assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
        blob = written["blobs"][layer["digest"]]
        assert blob == payload and layer["size"] == len(blob)
        assert layer["digest"] == "sha256:" + hashlib.sha256(blob).hexdigest()
        # verified independently: cryptography on the blob and the annotation, not PublicKey.verify
        raw = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
        public.verify(raw, blob, ec.ECDSA(hashes.SHA256()))
        with pytest.raises(InvalidSignature):
            public.verify(raw, blob + b" ", ec.ECDSA(hashes.SHA256()))
        claimed = json.loads(blob)["critical"]
        assert claimed["image"]["docker-manifest-digest"] == digest
        assert claimed["type"] == "cosign container image signature"
    assert cosign.check_signature(payloads[1], entries[1]["signature"], [signer.public_key], digest, image) == (
        signer.public_key,
        "",
    )


def test_ed25519_signatures_verify_independently():
    key = keys.PrivateKey(keys.generate_private_key("ed25519").crypto_key)
    payload = cosign.simple_signing_payload("x/y", "sha256:" + "1" * 64)
    signature = cosign.sign_payload(key, payload)
    serialization.load_pem_public_key(key.public_key.pem()).verify(base64.b64decode(signature), payload)
    assert cosign.check_signature(payload, signature, [key.public_key], "sha256:" + "1" * 64, "docker.io/x/y")[1] == ""


@pytest.mark.parametrize(
    "data,fragment",
    [
        (b" " * (4 * 1024 * 1024 + 1), "over the limit"),
        (b"{not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"mediaType":"application/vnd.oci.image.index.v1+json","layers":[{}]}', "media type"),
        (b'{"schemaVersion":2,"layers":[{}]}', "media type"),
        (b'{"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}', "no layers"),
        (
            json.dumps({"mediaType": cosign.OCI_MANIFEST_TYPE, "layers": [{}] * 33}).encode(),
            "more than 32",
        ),
    ],
    ids=["oversized", "not-json", "array", "index", "no-media-type", "no-layers", "too-many"],
)
def test_parse_limits(data, fragment):
    with pytest.raises(ValueError, match=fragment):
        cosign.parse_signature_manifest(data)


def test_docker_schema2_manifest_accepted(signer):
    payload = cosign.simple_signing_payload("a/b", "sha256:" + "2" * 64)
    manifest = json.loads(
        cosign.signature_manifest([{"payload": payload, "signature": cosign.sign_payload(signer, payload)}])["manifest"]
    )
    manifest["mediaType"] = "application/vnd.docker.distribution.manifest.v2+json"
    assert len(cosign.parse_signature_manifest(json.dumps(manifest).encode())) == 1


@pytest.mark.parametrize(
    "reference,identity,ok",
    [
        ("192.168.64.2:5000/x", "192.168.64.2:5000/x", True),
        ("192.168.64.2:5000/x:tag", "192.168.64.2:5000/x", True),
        ("192.168.64.2:5000/x@sha256:" + "a" * 64, "192.168.64.2:5000/x", True),
        ("docker.io/library/nginx", "nginx", True),
        ("nginx:1.25", "docker.io/nginx", True),
        ("index.docker.io/library/nginx", "nginx", True),
        ("registry-1.docker.io/nginx", "docker.io/library/nginx", True),
        ("192.168.64.2:5000/x", "192.168.64.2:5000/xy", False),
        ("192.168.64.2:5000/x/y", "192.168.64.2:5000/x", False),
        ("other:5000/x", "192.168.64.2:5000/x", False),
        ("NOT A REF", "x", False),
    ],
)
def test_identity_matches(reference, identity, ok):
    assert cosign.identity_matches(reference, identity) is ok
