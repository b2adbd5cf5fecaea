"""module_utils/_registry: the target-side client (reachability, manifests, platforms, Basic and
Bearer auth) and the pure helpers planning on the controller shares (fake transports)."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index, image_manifest  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import registry as _registry  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (  # noqa: E402
    MANIFEST_ACCEPT, RegistryApi, RegistryClient, basic_authorization, index_platforms, parse_challenge, read_manifest,
    read_token, token_url,
)

HOST = "registry.example.com"
PASSWORD = "pw-Zq9!x"


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


def test_read_manifest_refuses_oversized_bodies():
    with pytest.raises(ValueError, match="manifest larger than"):
        read_manifest(b" " * (_registry.MAX_MANIFEST_BYTES + 1), {})


def test_index_platforms_skip_attestations():
    index = {"manifests": [
        {"platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"platform": {"os": "unknown", "architecture": "unknown"}},
        {"platform": {"architecture": "amd64"}},
        {"platform": {"os": "linux", "architecture": "amd64", "os.version": "x"}},
    ]}
    assert index_platforms(index) == [{"os": "linux", "architecture": "arm64", "variant": "v8"},
                                      {"architecture": "amd64"}, {"os": "linux", "architecture": "amd64"}]


def test_parse_challenge_and_token_url():
    scheme, params = parse_challenge('Bearer realm="https://auth.example.com/token",service="reg",scope="x"')
    assert scheme == "bearer" and params == {"realm": "https://auth.example.com/token", "service": "reg", "scope": "x"}
    assert parse_challenge(None) == (None, {}) and parse_challenge('Basic realm="r"') == ("basic", {"realm": "r"})
    assert token_url(params) == "https://auth.example.com/token?service=reg&scope=x"
    assert token_url(params, "repository:a/b:pull") == \
        "https://auth.example.com/token?service=reg&scope=repository%3Aa%2Fb%3Apull"
    assert token_url({"realm": "https://t"}) == "https://t"
    with pytest.raises(StellaError, match="without a realm") as info:
        token_url({"service": "reg"})
    assert info.value.code == "registry_auth_failed"


def test_read_token_accepts_token_or_access_token_and_never_echoes_userinfo():
    url = "https://bob:%s@auth.example.com/token?service=reg" % PASSWORD
    assert read_token(200, b'{"token": "t1"}', url) == "t1"
    assert read_token(200, b'{"access_token": "t2"}', url) == "t2"
    for status, body, why in ((401, b"", "answered HTTP 401"), (200, b"<html>", "returned no JSON"),
                              (200, b"{}", "returned no token"), (200, b"[1]", "returned no token")):
        with pytest.raises(StellaError, match=why) as info:
            read_token(status, body, url)
        assert info.value.code == "registry_auth_failed"
        assert PASSWORD not in info.value.reason and "bob" not in info.value.reason


def test_basic_authorization_and_secrets():
    assert basic_authorization("stella", PASSWORD) == "Basic " + base64.b64encode(b"stella:" + PASSWORD.encode()).decode()
    api = RegistryApi("stella", PASSWORD)
    assert PASSWORD in api.secrets() and base64.b64encode(b"stella:" + PASSWORD.encode()).decode() in api.secrets()
    assert RegistryApi().secrets() == []


@pytest.mark.parametrize("kind", ["basic", "bearer"])
def test_request_negotiates_basic_and_bearer(kind):
    registry = FakeRegistry(HOST, auth=(kind, "stella", PASSWORD))
    digest = registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    api = RegistryApi("stella", PASSWORD, transport=registry)
    status, headers, _body, auth = api.request("HEAD", HOST, "/v2/shop/web/manifests/1.0", {"Accept": MANIFEST_ACCEPT},
                                               scope="repository:shop/web:pull")
    assert (status, headers["docker-content-digest"], auth) == (200, digest, kind)
    api.request("HEAD", HOST, "/v2/shop/web/manifests/1.0", scope="repository:shop/web:pull")
    token_calls = [c for c in registry.calls if c[1].startswith("https://auth.example.com/token")]
    assert len(token_calls) == (1 if kind == "bearer" else 0)  # one token per scope, then cached
    if kind == "bearer":
        assert registry.token in api.secrets()


def test_request_returns_401_without_or_with_refused_credentials():
    for creds in ((None, None), ("stella", "wrong")):
        for kind in ("basic", "bearer"):
            registry = FakeRegistry(HOST, auth=(kind, "stella", PASSWORD))
            status, _headers, _body, auth = RegistryApi(*creds, transport=registry).request(
                "GET", HOST, "/v2/x/manifests/1", scope="repository:x:pull")
            assert (status, auth) == (401, kind)


def test_ping_reports_reachability_and_auth():
    def transport(answers):
        return lambda method, url, headers, timeout: answers.pop(0)

    ok = RegistryClient(transport=transport([(200, {}, b"{}")])).ping("127.0.0.1:5000")
    assert ok == {"url": "http://127.0.0.1:5000/v2/", "httpStatus": 200, "authRequired": False, "reachable": True,
                  "authenticated": False}
    refused = RegistryClient(transport=transport([(401, {"www-authenticate": 'Basic realm="r"'}, b"")])).ping(HOST)
    assert refused["reachable"] is False and "no credentials were given" in refused["reason"]
    odd = RegistryClient(transport=transport([(500, {}, b"")])).ping(HOST)
    assert odd["reason"] == "unexpected HTTP 500 from /v2/"

    def down(method, url, headers, timeout):
        raise StellaError("registry_unreachable", "%s: connection refused" % url)

    assert RegistryClient(transport=down).ping(HOST)["reachable"] is False


def test_platforms_from_an_index_and_from_a_config_blob():
    registry = FakeRegistry(HOST)
    amd = registry.push("shop/web", "amd", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    registry.push("shop/web", "multi", image_index([(amd, {"os": "linux", "architecture": "amd64"}),
                                                    ("sha256:" + "3" * 64, {"os": "unknown", "architecture": "unknown"})]),
                  "application/vnd.oci.image.index.v1+json")
    client = RegistryClient(transport=registry)
    assert client.platforms(parse_image_ref(HOST + "/shop/web:multi")) == [{"os": "linux", "architecture": "amd64"}]

    def with_blob(method, url, headers, timeout):
        if "/blobs/" in url:
            return 200, {}, json.dumps({"os": "linux", "architecture": "arm64", "variant": "v8"}).encode()
        return registry(method, url, headers, timeout)

    single = RegistryClient(transport=with_blob).platforms(parse_image_ref(HOST + "/shop/web:amd"))
    assert single == [{"os": "linux", "architecture": "arm64", "variant": "v8"}]
    with pytest.raises(StellaError) as info:
        client.manifest(parse_image_ref(HOST + "/shop/web:nope"))
    assert info.value.code == "image_unresolved" and "HTTP 404" in info.value.reason


def test_target_side_module_imports_only_the_standard_library_and_module_utils():
    with open(_registry.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    outside = [n for n in names if n.split(".")[0] not in sys.stdlib_module_names
               and not n.startswith("ansible_collections.stellaops.runtime.plugins.module_utils.")]
    assert outside == []
