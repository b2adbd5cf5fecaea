"""DigestResolver: HEAD/GET, indexes, Basic and Bearer auth, failures, redaction (fake transport)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index, image_manifest  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils._registry import (  # noqa: E402
    MANIFEST_ACCEPT, DigestResolver, index_platforms, platform_strings, read_manifest,
)

HOST = "registry.example.com"
PASSWORD = "pw-Zq9!x"


def _registry(**kwargs):
    registry = FakeRegistry(HOST, **kwargs)
    digest = registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    return registry, digest


def test_head_resolves_tag_and_keeps_full_identity():
    registry, digest = _registry()
    result = DigestResolver(transport=registry).resolve(HOST + "/shop/web:1.0")
    assert result["digest"] == digest and result["image"] == HOST + "/shop/web:1.0@" + digest
    assert [c[0] for c in registry.calls] == ["HEAD"]
    assert registry.calls[0][2]["Accept"] == MANIFEST_ACCEPT
    for media in ("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.docker.distribution.manifest.v2+json"):
        assert media in MANIFEST_ACCEPT


def test_get_fallback_when_head_is_not_supported_and_body_is_hashed():
    registry, digest = _registry(head_supported=False)
    result = DigestResolver(transport=registry).resolve(HOST + "/shop/web:1.0")
    assert result["digest"] == digest and [c[0] for c in registry.calls] == ["HEAD", "GET"]


def test_get_body_must_match_docker_content_digest():
    registry, _digest = _registry(head_supported=False)
    body, media, _digest = registry.manifests[("shop/web", "1.0")]
    registry.manifests[("shop/web", "1.0")] = (body, media, "sha256:" + "0" * 64)
    with pytest.raises(StellaError, match="does not match the manifest bytes") as info:
        DigestResolver(transport=registry).resolve(HOST + "/shop/web:1.0")
    assert info.value.code == "image_unresolved"


def test_index_digest_is_pinned_and_platforms_reported():
    registry = FakeRegistry(HOST)
    amd = registry.push("shop/web", "amd", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    arm = registry.push("shop/web", "arm", image_manifest("2"), "application/vnd.oci.image.manifest.v1+json")
    index = registry.push("shop/web", "multi", image_index([
        (amd, {"os": "linux", "architecture": "amd64"}), (arm, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
        ("sha256:" + "3" * 64, {"os": "unknown", "architecture": "unknown"})]), "application/vnd.oci.image.index.v1+json")
    result = DigestResolver(transport=registry).resolve(HOST + "/shop/web:multi")
    assert result["digest"] == index and result["digest"] not in (amd, arm)
    assert result["platforms"] == ["linux/amd64", "linux/arm64/v8"]
    assert result["mediaType"] == "application/vnd.oci.image.index.v1+json"


def test_reference_with_digest_is_kept_without_requests():
    registry, _digest = _registry()
    ref = HOST + "/shop/web:1.0@sha256:" + "9" * 64
    result = DigestResolver(transport=registry).resolve(ref)
    assert result["image"] == ref and result["resolved"] is False and registry.calls == []


def test_basic_auth():
    registry, digest = _registry(auth=("basic", "stella", PASSWORD))
    creds = {HOST: {"username": "stella", "password": PASSWORD}}
    assert DigestResolver(creds, transport=registry).resolve(HOST + "/shop/web:1.0")["digest"] == digest


def test_bearer_token_flow_with_credentials():
    registry, digest = _registry(auth=("bearer", "stella", PASSWORD))
    creds = {HOST: {"username": "stella", "password": PASSWORD}}
    resolver = DigestResolver(creds, transport=registry)
    assert resolver.resolve(HOST + "/shop/web:1.0")["digest"] == digest
    token_calls = [c for c in registry.calls if c[1].startswith("https://auth.example.com/token")]
    assert token_calls and "service=registry.example.com" in token_calls[0][1]
    assert "scope=repository%3Ashop%2Fweb%3Apull" in token_calls[0][1]


@pytest.mark.parametrize("creds,kind", [
    ({}, "basic"), ({HOST: {"username": "stella", "password": "wrong-" + PASSWORD}}, "basic"),
    ({}, "bearer"), ({HOST: {"username": "stella", "password": "wrong-" + PASSWORD}}, "bearer"),
], ids=["basic-none", "basic-wrong", "bearer-none", "bearer-wrong"])
def test_auth_failures_are_image_unresolved_without_secrets(creds, kind):
    registry, _digest = _registry(auth=(kind, "stella", PASSWORD))
    with pytest.raises(StellaError) as info:
        DigestResolver(creds, transport=registry).resolve(HOST + "/shop/web:1.0")
    assert info.value.code == "image_unresolved" and "authentication" in info.value.reason
    assert ("no credentials" in info.value.reason) == (not creds)
    text = info.value.reason + repr(info.value.evidence)
    assert PASSWORD not in text and base64.b64encode(b"stella:wrong-" + PASSWORD.encode()).decode() not in text


def test_unknown_tag():
    registry, _digest = _registry()
    with pytest.raises(StellaError, match="tag nope not found") as info:
        DigestResolver(transport=registry).resolve(HOST + "/shop/web:nope")
    assert info.value.code == "image_unresolved" and info.value.evidence["status"] == 404


def test_unreachable_registry_and_userinfo_redaction():
    def transport(method, url, headers, timeout):
        raise OSError("connection refused to https://bob:%s@%s/" % (PASSWORD, HOST))

    resolver = DigestResolver({HOST: {"username": "bob", "password": PASSWORD}}, transport=transport)
    with pytest.raises(StellaError) as info:
        resolver.resolve(HOST + "/shop/web:1.0")
    assert info.value.code == "image_unresolved" and PASSWORD not in info.value.reason and "bob:" not in info.value.reason


def test_plain_http_for_loopback_and_insecure_registries():
    seen = []

    def transport(method, url, headers, timeout):
        seen.append(url)
        return 404, {}, b""

    for image, insecure in (("127.0.0.1:5000/x/y:1", ()), ("localhost:5000/x/y:1", ()),
                            ("registry.lab:5001/x/y:1", ("registry.lab:5001",)), ("r.example.com/x/y:1", ())):
        with pytest.raises(StellaError):
            DigestResolver(insecure_registries=insecure, transport=transport).resolve(image)
    assert [u.split("://")[0] for u in seen] == ["http", "http", "http", "https"]


def test_resolve_all_resolves_each_reference_once():
    registry, digest = _registry()
    result = DigestResolver(transport=registry).resolve_all([HOST + "/shop/web:1.0"] * 3)
    assert list(result) == [HOST + "/shop/web:1.0"] and len(registry.calls) == 1


def test_platform_strings_ignores_attestations():
    assert platform_strings({"manifests": [{"platform": {"os": "unknown", "architecture": "unknown"}},
                                           {"platform": {"os": "linux", "architecture": "amd64"}}, {}]}) == ["linux/amd64"]


def test_read_manifest_computes_the_digest_and_checks_the_header():
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    document, computed, media_type = read_manifest(body, {"docker-content-digest": digest})
    assert (computed, media_type, document["schemaVersion"]) == (digest, "application/vnd.oci.image.manifest.v1+json", 2)
    with pytest.raises(ValueError, match="does not match the manifest bytes"):
        read_manifest(body, {"docker-content-digest": "sha256:" + "0" * 64})
    with pytest.raises(ValueError, match="not a JSON object"):
        read_manifest(b"[1]", {})
    with pytest.raises(ValueError, match="not JSON"):
        read_manifest(b"<html>", {})


def test_index_platforms_skip_attestations_and_strings_need_an_os():
    index = {"manifests": [
        {"platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"platform": {"os": "unknown", "architecture": "unknown"}},
        {"platform": {"architecture": "amd64"}},
        {"platform": {"os": "linux", "architecture": "amd64", "os.version": "x"}},
    ]}
    assert index_platforms(index) == [{"os": "linux", "architecture": "arm64", "variant": "v8"},
                                      {"architecture": "amd64"}, {"os": "linux", "architecture": "amd64"}]
    assert platform_strings(index) == ["linux/amd64", "linux/arm64/v8"]
