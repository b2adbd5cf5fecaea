"""release/signatures.py and inputs.resolve_and_verify: cosign signatures found by referrers, by tag and in
an offline directory, verified with the policy's keys for the pinned digest and identity, over planning's
one resolver; every refusal with its code, bounded reads, no key material or credential in any answer."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_manifest, minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import LOCAL_IMAGE_KEY  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.signatures import (  # noqa: E402
    SIGNATURE_ARTIFACT_TYPE,
    check_image,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import generate_private_key  # noqa: E402

HOST = "registry.example.com"
REPO = "shop/web"
IMAGE = HOST + "/" + REPO + ":1.0"
OCI = "application/vnd.oci.image.manifest.v1+json"


def _sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


@pytest.fixture(name="key")
def _key(tmp_path):
    key = generate_private_key()
    path = tmp_path / "trusted.pub"
    path.write_bytes(key.public_key.pem())
    return str(path), key


@pytest.fixture(name="other")
def _other(tmp_path):
    key = generate_private_key()
    path = tmp_path / "other.pub"
    path.write_bytes(key.public_key.pem())
    return str(path), key


def _registry(**kwargs):
    registry = FakeRegistry(HOST, **kwargs)
    digest = registry.push(REPO, "1.0", image_manifest("1"), OCI)
    return registry, digest


def _signature_image(key, digest, identity=HOST + "/" + REPO, payload=None):
    payload = payload or cosign.simple_signing_payload(identity, digest)
    return cosign.signature_manifest([{"payload": payload, "signature": cosign.sign_payload(key, payload)}])


def _put(registry, image, reference, repo=REPO, media=OCI):
    registry.manifests[(repo, reference)] = (image["manifest"], media, image["digest"])
    registry.manifests[(repo, image["digest"])] = (image["manifest"], media, image["digest"])
    for digest, blob in image["blobs"].items():
        registry.blobs[(repo, digest)] = blob


def _sign(registry, key, digest, **kwargs):
    image = _signature_image(key, digest, **kwargs)
    _put(registry, image, cosign.signature_tag(digest))
    return image


def _release(policy, image=IMAGE, **component):
    release = minimal_release(components=[dict({"name": "web", "image": image}, **component)])
    release["imagePolicy"] = policy
    return release


def _verify(registry, policy, release=None, job_policy=None):
    return inputs.resolve_and_verify(
        release or _release(policy), {}, (), {}, True, 5.0, job_policy=job_policy, transport=registry
    )


def test_a_signed_image_verifies_by_tag_with_the_key_path_and_fingerprint(key):
    path, private = key
    registry, digest = _registry()
    signed = _sign(registry, private, digest)
    resolved, _evidence, verdicts = _verify(registry, {"keys": [path]})
    assert resolved[IMAGE] == digest
    assert verdicts == {
        IMAGE: {
            "image": "%s@%s" % (IMAGE, digest),
            "digest": digest,
            "status": "verified",
            "keyFingerprint": private.public_key.fingerprint,
            "keyPath": path,
            "signatureDigest": signed["digest"],
            "source": "tag",
            "identity": HOST + "/" + REPO,
        }
    }
    urls = [url for _method, url, _headers in registry.calls]
    assert urls[1].endswith("/v2/%s/referrers/%s" % (REPO, digest))
    assert urls[2].endswith("/v2/%s/manifests/%s" % (REPO, cosign.signature_tag(digest)))
    assert "BEGIN" not in json.dumps(verdicts)


def test_a_registry_without_the_referrers_api_is_asked_for_referrers_once_per_planning(key):
    """Its 404 says it has no such API (the spec's answer for a digest without referrers is an empty index):
    the next image of that registry goes to its signature tag directly."""
    path, private = key
    registry, digest = _registry()
    other = registry.push("shop/api", "1.0", image_manifest("2"), OCI)
    _sign(registry, private, digest)
    api = _signature_image(private, other, identity=HOST + "/shop/api")
    _put(registry, api, cosign.signature_tag(other), repo="shop/api")
    release = minimal_release(
        components=[{"name": "web", "image": IMAGE}, {"name": "api", "image": HOST + "/shop/api:1.0"}]
    )
    release["imagePolicy"] = {"keys": [path]}
    _resolved, _evidence, verdicts = _verify(registry, None, release=release)
    assert sorted(v["status"] for v in verdicts.values()) == ["verified", "verified"]
    referrers = [url for _method, url, _headers in registry.calls if "/referrers/" in url]
    assert len(referrers) == 1, referrers


def test_no_policy_adds_nothing_and_asks_nothing_more():
    registry, _digest = _registry()
    _resolved, _evidence, verdicts = _verify(registry, None, release=minimal_release())
    assert verdicts == {} and [c[0] for c in registry.calls] == ["HEAD"]
    assert inputs.resolve_digests(minimal_release(), {}, (), {}, True, 5.0, transport=registry)[0]


def test_not_required_components_are_named_without_a_request(key):
    path, _private = key
    registry, digest = _registry()
    _resolved, _evidence, verdicts = _verify(registry, {"keys": [path], "require": False})
    assert verdicts[IMAGE] == {"image": "%s@%s" % (IMAGE, digest), "digest": digest, "status": "not_required"}
    assert len(registry.calls) == 1


def test_an_unsigned_image_is_image_unsigned(key):
    path, _private = key
    registry, digest = _registry()
    with pytest.raises(StellaError) as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_unsigned" and info.value.phase == "plan"
    assert digest in info.value.reason and info.value.evidence["image"].endswith(digest)


def test_another_key_is_image_signature_invalid(key, other):
    path, _private = key
    _other_path, other_private = other
    registry, digest = _registry()
    _sign(registry, other_private, digest)
    with pytest.raises(StellaError, match="no trusted key verifies") as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"
    assert info.value.evidence["reasons"] == ["no trusted key verifies the signature"]


def test_a_signature_of_another_digest_copied_under_this_tag_is_refused(key):
    path, private = key
    registry, digest = _registry()
    other_digest = registry.push(REPO, "2.0", image_manifest("2"), OCI)
    image = _signature_image(private, other_digest)
    _put(registry, image, cosign.signature_tag(digest))
    with pytest.raises(StellaError, match="names digest %s" % other_digest) as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"


def test_another_identity_is_refused_and_an_explicit_identity_accepted(key):
    path, private = key
    registry, digest = _registry()
    _sign(registry, private, digest, identity=HOST + "/elsewhere/web")
    with pytest.raises(StellaError, match="not the repository") as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"
    _r, _e, verdicts = _verify(registry, {"keys": [path], "identity": HOST + "/elsewhere/web"})
    assert verdicts[IMAGE]["identity"] == HOST + "/elsewhere/web"


def test_a_payload_edited_after_signing_is_refused(key):
    path, private = key
    registry, digest = _registry()
    signed = _sign(registry, private, digest)
    payload_digest = next(d for d, b in signed["blobs"].items() if b"critical" in b)
    registry.blobs[(REPO, payload_digest)] = signed["blobs"][payload_digest].replace(b"null", b"{}")
    with pytest.raises(StellaError, match="edited after signing") as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"


def test_a_payload_edited_with_its_digest_does_not_verify(key):
    path, private = key
    registry, digest = _registry()
    payload = cosign.simple_signing_payload(HOST + "/" + REPO, digest)
    signature = cosign.sign_payload(private, payload)
    edited = payload.replace(b'"optional":null', b'"optional":{"x":"y"}')
    _put(
        registry, cosign.signature_manifest([{"payload": edited, "signature": signature}]), cosign.signature_tag(digest)
    )
    with pytest.raises(StellaError, match="no trusted key verifies") as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"


@pytest.mark.parametrize(
    "body, match",
    [(b"{not json", "not JSON"), (json.dumps(image_manifest("3")).encode(), "no layers"), (b"[]", "JSON object")],
)
def test_a_signature_tag_that_is_not_a_signature_is_refused(key, body, match):
    path, _private = key
    registry, digest = _registry()
    registry.manifests[(REPO, cosign.signature_tag(digest))] = (body, OCI, _sha(body))
    with pytest.raises(StellaError, match=match) as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"


def test_a_payload_announced_over_the_limit_is_never_fetched(key):
    path, private = key
    registry, digest = _registry()
    signed = _signature_image(private, digest)
    manifest = json.loads(signed["manifest"])
    manifest["layers"][0]["size"] = 50 * 1024 * 1024
    body = json.dumps(manifest).encode()
    registry.manifests[(REPO, cosign.signature_tag(digest))] = (body, OCI, _sha(body))
    with pytest.raises(StellaError, match="payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES) as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "image_signature_invalid"
    assert not any("/blobs/" in url for _m, url, _h in registry.calls)


def test_one_good_signature_among_bad_ones_verifies_and_reasons_are_bounded(key, other):
    path, private = key
    registry, digest = _registry()
    entries = []
    for _entry in range(4):
        payload = cosign.simple_signing_payload(HOST + "/" + REPO, digest) + b" " * len(entries)
        entries.append({"payload": payload, "signature": cosign.sign_payload(other[1], payload)})
    _put(registry, cosign.signature_manifest(entries), cosign.signature_tag(digest))
    with pytest.raises(StellaError) as info:
        _verify(registry, {"keys": [path]})
    assert len(info.value.evidence["reasons"]) == 3
    good = cosign.simple_signing_payload(HOST + "/" + REPO, digest)
    entries.append({"payload": good, "signature": cosign.sign_payload(private, good)})
    _put(registry, cosign.signature_manifest(entries), cosign.signature_tag(digest))
    assert _verify(registry, {"keys": [path]})[2][IMAGE]["status"] == "verified"


def test_a_referrer_is_read_first(key):
    path, private = key
    registry, digest = _registry()
    signed = _signature_image(private, digest)
    _put(registry, signed, "unused-tag")
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": OCI, "digest": "sha256:" + "9" * 64, "size": 1, "artifactType": "application/other"},
            {"mediaType": OCI, "digest": signed["digest"], "size": 1, "artifactType": SIGNATURE_ARTIFACT_TYPE},
        ],
    }
    url = "https://%s/v2/%s/referrers/%s" % (HOST, REPO, digest)
    registry.answers[url] = (
        200,
        {"content-type": "application/vnd.oci.image.index.v1+json"},
        json.dumps(index).encode(),
    )
    verdict = _verify(registry, {"keys": [path]})[2][IMAGE]
    assert verdict["source"] == "referrers" and verdict["signatureDigest"] == signed["digest"]
    assert not any(cosign.signature_tag(digest) in u for _m, u, _h in registry.calls)


def test_a_referrers_answer_that_is_no_index_falls_back_to_the_tag(key):
    path, private = key
    registry, digest = _registry()
    _sign(registry, private, digest)
    url = "https://%s/v2/%s/referrers/%s" % (HOST, REPO, digest)
    registry.answers[url] = (200, {"content-type": "text/html"}, b"<html>hello</html>")
    assert _verify(registry, {"keys": [path]})[2][IMAGE]["source"] == "tag"


def test_a_registry_failing_during_the_check_is_registry_unreachable(key):
    path, _private = key
    registry, digest = _registry()
    url = "https://%s/v2/%s/manifests/%s" % (HOST, REPO, cosign.signature_tag(digest))
    registry.answers[url] = (503, {}, b"")
    with pytest.raises(StellaError) as info:
        _verify(registry, {"keys": [path]})
    assert info.value.code == "registry_unreachable" and info.value.phase == "plan"


def test_refused_reads_are_registry_auth_failed_and_carry_no_credential(key):
    path, private = key
    registry, digest = _registry(auth=("basic", "u", "pw-PLANTED-91"))
    _sign(registry, private, digest)
    creds = {HOST: {"username": "u", "password": "pw-PLANTED-91"}}
    release = _release({"keys": [path]}, image="%s/%s@%s" % (HOST, REPO, digest))
    verdicts = inputs.resolve_and_verify(release, creds, (), {}, True, 5.0, transport=registry)[2]
    assert verdicts[release["components"][0]["image"]]["status"] == "verified"
    registry.forbidden.add(REPO)
    with pytest.raises(StellaError) as info:
        inputs.resolve_and_verify(release, creds, (), {}, True, 5.0, transport=registry)
    assert info.value.code == "registry_auth_failed" and "pw-PLANTED-91" not in str(info.value.as_dict())


def test_a_locally_loaded_image_under_a_requiring_policy_is_unsigned(key):
    path, _private = key
    registry, _digest = _registry()
    release = _release({"keys": [path]}, config={LOCAL_IMAGE_KEY: "sha256:" + "c" * 64})
    with pytest.raises(StellaError, match="locally loaded image carries no registry signature") as info:
        _verify(registry, None, release=release)
    assert info.value.code == "image_unsigned" and registry.calls == []


def test_the_policy_is_checked_before_any_request():
    registry, _digest = _registry()
    with pytest.raises(StellaError) as info:
        _verify(registry, {"keys": ["/nonexistent.pub"]})
    assert info.value.code == "image_policy_invalid" and registry.calls == []


# --------------------------------------------------------------------------- offline directory


def _write_directory(tmp_path, private, digest, payload=None):
    payload = payload or cosign.simple_signing_payload(HOST + "/" + REPO, digest)
    stem = tmp_path / cosign.signature_tag(digest)[: -len(".sig")]
    signature = cosign.sign_payload(private, payload).encode() + b"\n"
    (tmp_path / (stem.name + ".sig")).write_bytes(signature)
    (tmp_path / (stem.name + ".payload")).write_bytes(payload)
    return signature


def test_a_signature_directory_replaces_the_registry(tmp_path, key):
    path, private = key
    registry, digest = _registry()
    signature = _write_directory(tmp_path, private, digest)
    verdict = _verify(registry, {"keys": [path], "signatureDirectory": str(tmp_path)})[2][IMAGE]
    assert verdict["source"] == "directory" and verdict["signatureDigest"] == _sha(signature)
    assert [c[0] for c in registry.calls] == ["HEAD"]


def test_a_directory_without_the_files_is_unsigned_and_an_edited_payload_invalid(tmp_path, key):
    path, private = key
    registry, digest = _registry()
    policy = {"keys": [path], "signatureDirectory": str(tmp_path)}
    with pytest.raises(StellaError) as info:
        _verify(registry, policy)
    assert info.value.code == "image_unsigned"
    _write_directory(tmp_path, private, digest)
    payload_file = tmp_path / (cosign.signature_tag(digest)[: -len(".sig")] + ".payload")
    payload_file.write_bytes(payload_file.read_bytes().replace(b"null", b"{}"))
    with pytest.raises(StellaError) as info:
        _verify(registry, policy)
    assert info.value.code == "image_signature_invalid"
    payload_file.write_bytes(b"x" * (cosign.MAX_PAYLOAD_BYTES + 10))
    with pytest.raises(StellaError, match="payload over") as info:
        _verify(registry, policy)


# --------------------------------------------------------------------------- bounded reads over requests


class _HugeBlobRegistry(http.server.BaseHTTPRequestHandler):
    """A registry whose signature manifest announces a small payload and whose blob is 50 MiB."""

    manifest = b""
    sent = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server API
        if "/manifests/" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", OCI)
            self.send_header("Content-Length", str(len(self.manifest)))
            self.end_headers()
            self.wfile.write(self.manifest)
            return
        if "/blobs/" not in self.path:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(50 * 1024 * 1024))
        self.end_headers()
        chunk = b"\0" * (256 * 1024)
        try:
            for _chunk in range(200):
                self.wfile.write(chunk)
                self.sent.append(len(chunk))
        except OSError:
            pass


def test_a_50_mib_payload_is_refused_after_a_bounded_read(key):
    path, private = key
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HugeBlobRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = "127.0.0.1:%d" % server.server_address[1]
    digest = "sha256:" + "d" * 64
    payload = cosign.simple_signing_payload(host + "/" + REPO, digest)
    signed = cosign.signature_manifest([{"payload": payload, "signature": cosign.sign_payload(private, payload)}])
    _HugeBlobRegistry.manifest = signed["manifest"]
    try:
        started = time.monotonic()
        with DigestResolver(timeout=20.0) as resolver:
            with pytest.raises(StellaError, match="payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES) as info:
                check_image(resolver, "%s/%s@%s" % (host, REPO, digest), digest, [(path, private.public_key)], None)
            assert resolver.transport.max_body == resolver.transport.__class__(resolver.transport.session).max_body
        elapsed = time.monotonic() - started
        assert info.value.code == "image_signature_invalid"
        time.sleep(0.2)
        assert sum(_HugeBlobRegistry.sent) < 16 * 1024 * 1024, sum(_HugeBlobRegistry.sent)
        assert elapsed < 10
    finally:
        server.shutdown()
        server.server_close()
