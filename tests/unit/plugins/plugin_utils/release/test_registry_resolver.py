"""release/registry.py: DigestResolver (HEAD/GET, indexes, Basic and Bearer auth, failures, redaction)
with a fake transport, and its requests transport against loopback registries (one session, connection
reuse, no redirects, no ~/.netrc, timeouts, body limit, missing requests)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index, image_manifest  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    MANIFEST_ACCEPT,
    MAX_MANIFEST_BYTES,
)  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import registry as _registry_mod  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import (  # noqa: E402
    CHUNK_BYTES,
    DigestResolver,
    RequestsTransport,
    platform_strings,
)

HOST = "registry.example.com"
PASSWORD = "pw-Zq9!x"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _registry(**kwargs):
    registry = FakeRegistry(HOST, **kwargs)
    digest = registry.push("shop/web", "1.0", image_manifest("1"), OCI_MANIFEST)
    return registry, digest


# --------------------------------------------------------------------------- resolution logic (fake transport)


def test_head_resolves_tag_and_keeps_full_identity():
    registry, digest = _registry()
    result = DigestResolver(transport=registry).resolve(HOST + "/shop/web:1.0")
    assert result["digest"] == digest and result["image"] == HOST + "/shop/web:1.0@" + digest
    assert [c[0] for c in registry.calls] == ["HEAD"]
    assert registry.calls[0][2]["Accept"] == MANIFEST_ACCEPT
    for media in (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ):
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
    amd = registry.push("shop/web", "amd", image_manifest("1"), OCI_MANIFEST)
    arm = registry.push("shop/web", "arm", image_manifest("2"), OCI_MANIFEST)
    index = registry.push(
        "shop/web",
        "multi",
        image_index(
            [
                (amd, {"os": "linux", "architecture": "amd64"}),
                (arm, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
                ("sha256:" + "3" * 64, {"os": "unknown", "architecture": "unknown"}),
            ]
        ),
        "application/vnd.oci.image.index.v1+json",
    )
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


@pytest.mark.parametrize(
    "creds,kind",
    [
        ({}, "basic"),
        ({HOST: {"username": "stella", "password": "wrong-" + PASSWORD}}, "basic"),
        ({}, "bearer"),
        ({HOST: {"username": "stella", "password": "wrong-" + PASSWORD}}, "bearer"),
    ],
    ids=["basic-none", "basic-wrong", "bearer-none", "bearer-wrong"],
)
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
    assert (
        info.value.code == "image_unresolved" and PASSWORD not in info.value.reason and "bob:" not in info.value.reason
    )


def test_plain_http_for_loopback_and_insecure_registries():
    seen = []

    def transport(method, url, headers, timeout):
        seen.append(url)
        return 404, {}, b""

    for image, insecure in (
        ("127.0.0.1:5000/x/y:1", ()),
        ("localhost:5000/x/y:1", ()),
        ("registry.lab:5001/x/y:1", ("registry.lab:5001",)),
        ("r.example.com/x/y:1", ()),
    ):
        with pytest.raises(StellaError):
            DigestResolver(insecure_registries=insecure, transport=transport).resolve(image)
    assert [u.split("://")[0] for u in seen] == ["http", "http", "http", "https"]


def test_resolve_all_resolves_each_reference_once():
    registry, digest = _registry()
    result = DigestResolver(transport=registry).resolve_all([HOST + "/shop/web:1.0"] * 3)
    assert list(result) == [HOST + "/shop/web:1.0"] and len(registry.calls) == 1


def test_platform_strings_ignores_attestations():
    assert platform_strings(
        {
            "manifests": [
                {"platform": {"os": "unknown", "architecture": "unknown"}},
                {"platform": {"os": "linux", "architecture": "amd64"}},
                {},
            ]
        }
    ) == ["linux/amd64"]


def test_platform_strings_need_an_os():
    index = {
        "manifests": [
            {"platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"platform": {"os": "unknown", "architecture": "unknown"}},
            {"platform": {"architecture": "amd64"}},
            {"platform": {"os": "linux", "architecture": "amd64", "os.version": "x"}},
        ]
    }
    assert platform_strings(index) == ["linux/amd64", "linux/arm64/v8"]


# --------------------------------------------------------------------------- requests transport (loopback registries)


class _RegistryHandler(http.server.BaseHTTPRequestHandler):
    """A minimal HTTP/1.1 (keep-alive) registry: manifests, Bearer or Basic auth, a /token service."""

    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.server.connections += 1

    def _send(self, status, headers=None, body=b"", send_body=True):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _authorized(self):
        auth = self.server.auth
        value = self.headers.get("Authorization") or ""
        if auth == "bearer":
            return value == "Bearer " + self.server.token
        if auth == "basic":
            return value == "Basic " + base64.b64encode(("stella:" + PASSWORD).encode()).decode()
        return True

    def _answer(self, send_body):
        path, _sep, query = self.path.partition("?")
        self.server.seen.append((self.command, path, self.headers.get("Authorization")))
        if path == "/token":
            ok = (
                self.headers.get("Authorization")
                == "Basic " + base64.b64encode(("stella:" + PASSWORD).encode()).decode()
            )
            body = (
                json.dumps({"token": self.server.token, "query": urllib.parse.parse_qs(query)}).encode() if ok else b""
            )
            return self._send(200 if ok else 401, {"Content-Type": "application/json"}, body, send_body)
        if not self._authorized():
            challenge = (
                'Bearer realm="http://%s:%d/token",service="loop"' % self.server.server_address
                if self.server.auth == "bearer"
                else 'Basic realm="loop"'
            )
            return self._send(401, {"WWW-Authenticate": challenge}, b'{"errors":[]}', send_body)
        repository, _sep, reference = path[len("/v2/") :].rpartition("/manifests/")
        special = self.server.special.get(reference)
        if special:
            return special(self, send_body)
        found = self.server.manifests.get((repository, reference))
        if not found:
            return self._send(404, {"Content-Type": "application/json"}, b'{"errors":[]}', send_body)
        body, digest = found
        return self._send(200, {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest}, body, send_body)

    def do_HEAD(self):  # noqa: N802 (http.server API)
        self._answer(send_body=False)

    def do_GET(self):  # noqa: N802 (http.server API)
        self._answer(send_body=True)

    def log_message(self, *args):
        pass


def _start(auth=None):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RegistryHandler)
    server.daemon_threads = True
    server.handle_error = lambda request, client_address: None  # a client closing early is expected here
    server.auth, server.token, server.connections = auth, "tok-loop-123", 0
    server.seen, server.manifests, server.special = [], {}, {}
    server.address = "127.0.0.1:%d" % server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def _push(server, repository, tag, seed):
    body = json.dumps(image_manifest(seed), sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    server.manifests[(repository, tag)] = (body, digest)
    return digest


@pytest.fixture
def loop():
    servers = []

    def make(auth=None):
        servers.append(_start(auth))
        return servers[-1]

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()


def test_one_session_reuses_connections_across_images_and_registries(loop, monkeypatch):
    plain, bearer = loop(), loop("bearer")
    refs = {}
    for tag, seed in (("1", "1"), ("2", "2"), ("3", "3")):
        refs["%s/shop/web:%s" % (plain.address, tag)] = _push(plain, "shop/web", tag, seed)
    for tag, seed in (("a", "4"), ("b", "5")):
        refs["%s/shop/api:%s" % (bearer.address, tag)] = _push(bearer, "shop/api", tag, seed)
    sessions = []
    real_session = requests.Session
    monkeypatch.setattr(requests, "Session", lambda: sessions.append(real_session()) or sessions[-1])
    creds = {bearer.address: {"username": "stella", "password": PASSWORD}}
    with DigestResolver(creds) as resolver:
        result = resolver.resolve_all(refs)
    assert {ref: info["digest"] for ref, info in result.items()} == refs
    assert len(sessions) == 1
    assert (plain.connections, bearer.connections) == (1, 1)
    assert [s[0] for s in plain.seen] == ["HEAD"] * 3
    token_requests = [s for s in bearer.seen if s[1] == "/token"]
    assert len(token_requests) == 1 and token_requests[0][2].startswith("Basic ")
    assert all(s[2] == "Bearer " + bearer.token for s in bearer.seen if s[1] != "/token" and s[2])


def test_basic_auth_and_missing_credentials_over_requests(loop):
    server = loop("basic")
    ref = "%s/shop/web:1" % server.address
    digest = _push(server, "shop/web", "1", "1")
    assert (
        DigestResolver({server.address: {"username": "stella", "password": PASSWORD}}).resolve(ref)["digest"] == digest
    )
    with pytest.raises(StellaError, match=r"requires authentication \(basic\) and no credentials"):
        DigestResolver().resolve(ref)


def test_redirects_are_returned_not_followed(loop):
    server = loop()

    def moved(handler, send_body):
        handler._send(307, {"Location": "http://example.invalid/"}, b"", send_body)

    server.special["moved"] = moved
    with pytest.raises(StellaError, match="answered HTTP 307") as info:
        DigestResolver().resolve("%s/shop/web:moved" % server.address)
    assert info.value.code == "image_unresolved"


def test_netrc_never_replaces_the_negotiated_authorization(loop, tmp_path, monkeypatch):
    server = loop()
    digest = _push(server, "shop/web", "1", "1")
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login netrc-user password netrc-secret\n")
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert DigestResolver().resolve("%s/shop/web:1" % server.address)["digest"] == digest
    assert [s[2] for s in server.seen] == [None]


def test_unreachable_registry_has_a_short_reason(loop):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(StellaError) as info:
        DigestResolver().resolve("127.0.0.1:%d/shop/web:1" % port)
    assert info.value.code == "image_unresolved" and info.value.evidence["cause"] == "registry_unreachable"
    assert "Connection refused" in info.value.reason and "object at 0x" not in info.value.reason


def test_requests_errors_never_carry_credentials():
    session = requests.Session()

    class Failing(requests.adapters.BaseAdapter):
        def send(self, request, **kwargs):
            raise requests.ConnectionError("cannot reach https://bob:%s@%s/v2/ (%s)" % (PASSWORD, HOST, PASSWORD))

        def close(self):
            pass

    session.mount("https://", Failing())
    resolver = DigestResolver({HOST: {"username": "bob", "password": PASSWORD}}, session=session)
    with pytest.raises(StellaError) as info:
        resolver.resolve(HOST + "/shop/web:1.0")
    text = info.value.reason + repr(info.value.evidence)
    assert info.value.code == "image_unresolved" and PASSWORD not in text and "bob:" not in text
    resolver.close()
    assert session.adapters["https://"].__class__ is Failing  # an injected session is left to its owner


def test_read_timeout_and_overall_deadline(loop):
    server = loop()

    def stall(handler, send_body):
        time.sleep(0.6)
        handler._send(200, {}, b"{}", send_body)

    def drip(handler, send_body):
        handler.send_response(200)
        handler.send_header("Content-Length", str(3 * CHUNK_BYTES))
        handler.send_header("Content-Type", OCI_MANIFEST)
        handler.end_headers()
        for dummy in range(3):
            handler.wfile.write(b" " * CHUNK_BYTES)
            handler.wfile.flush()
            time.sleep(0.25)

    server.special.update(stall=stall, drip=drip)
    with pytest.raises(StellaError, match="timed out after 0.3 s") as info:
        DigestResolver(timeout=0.3).resolve("%s/shop/web:stall" % server.address)
    assert info.value.evidence["cause"] == "registry_unreachable"
    transport = RequestsTransport()
    with pytest.raises(StellaError, match="took longer than 0.4 s"):
        transport("GET", "http://%s/v2/shop/web/manifests/drip" % server.address, {}, 0.4)
    transport.close()


def test_bodies_are_read_only_up_to_the_limit(loop):
    server = loop()

    def sized(size):
        return lambda handler, send_body: handler._send(200, {"Content-Type": OCI_MANIFEST}, b" " * size, send_body)

    server.special.update(big=sized(5 * CHUNK_BYTES), huge=sized(MAX_MANIFEST_BYTES + CHUNK_BYTES))
    transport = RequestsTransport(max_body=CHUNK_BYTES)
    status, _headers, body = transport("GET", "http://%s/v2/shop/web/manifests/big" % server.address, {}, 5)
    assert status == 200 and len(body) == CHUNK_BYTES + 1
    transport.close()
    with pytest.raises(StellaError, match="manifest larger than %d bytes" % MAX_MANIFEST_BYTES):
        DigestResolver().resolve("%s/shop/web:huge" % server.address)


def test_missing_requests_fails_clearly_at_use_only(monkeypatch):
    monkeypatch.setattr(
        _requests,
        "_STATE",
        {"module": None, "error": "Traceback...\nModuleNotFoundError: No module named 'requests'\n"},
    )
    pinned = HOST + "/shop/web:1.0@sha256:" + "9" * 64
    with DigestResolver() as resolver:
        assert resolver.resolve(pinned)["resolved"] is False
        with pytest.raises(StellaError, match="requests is required on the controller") as info:
            resolver.resolve(HOST + "/shop/web:1.0")
    assert info.value.code == "image_unresolved" and info.value.evidence["cause"] == "requests_missing"
    assert "No module named 'requests'" in info.value.reason


# --------------------------------------------------------------------------- retries (real session, loopback)


def _flaky(answers):
    """A ``special`` manifest answer: the statuses in ``answers`` first (``(status, retry_after)``), then
    the pushed manifest; counts every call."""
    calls = []

    def answer(handler, send_body):
        calls.append(handler.command)
        if len(calls) <= len(answers):
            status, retry_after = answers[len(calls) - 1]
            headers = {"Content-Type": "application/json"}
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit."}]}'
            return handler._send(status, headers, body, send_body)
        body, digest = handler.server.manifests[("shop/web", "1")]
        return handler._send(200, {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": digest}, body, send_body)

    answer.calls = calls
    return answer


def test_a_rate_limit_is_waited_out_as_retry_after_asks_and_recorded(loop):
    server = loop()
    digest = _push(server, "shop/web", "1", "1")
    server.special["1"] = flaky = _flaky([(429, 1)])
    started = time.monotonic()
    result = DigestResolver().resolve("%s/shop/web:1" % server.address)
    elapsed = time.monotonic() - started
    assert result["digest"] == digest and flaky.calls == ["HEAD", "HEAD"]
    assert elapsed >= 1.0
    [wait] = result["registryWaits"]
    assert (
        wait["status"] == 429 and wait["url"].endswith("/v2/shop/web/manifests/1") and 1.0 <= wait["waitedSeconds"] < 3
    )


def test_retry_after_beyond_the_bound_is_capped(loop, monkeypatch):
    monkeypatch.setattr(_registry_mod, "RETRY_AFTER_MAX", 0.2)
    server = loop()
    _push(server, "shop/web", "1", "1")
    server.special["1"] = _flaky([(429, 21600)])
    started = time.monotonic()
    result = DigestResolver().resolve("%s/shop/web:1" % server.address)
    assert time.monotonic() - started < 5 and result["registryWaits"][0]["waitedSeconds"] < 1


def test_a_registry_that_keeps_answering_503_fails_after_the_bounded_tries(loop, monkeypatch):
    monkeypatch.setattr(_registry_mod, "BACKOFF_FACTOR", 0.05)
    server = loop()
    _push(server, "shop/web", "1", "1")
    server.special["1"] = flaky = _flaky([(503, None)] * 50)
    with pytest.raises(StellaError) as info:
        DigestResolver().resolve("%s/shop/web:1" % server.address)
    # HEAD tried 1 + RETRIES times; no GET fallback for an answer that says "later"
    assert flaky.calls == ["HEAD"] * (_registry_mod.RETRIES + 1)
    reason = info.value.reason
    assert info.value.code == "image_unresolved" and info.value.evidence["cause"] == "registry_unavailable"
    assert (
        server.address in reason
        and "HTTP 503" in reason
        and "after %d tries over" % (_registry_mod.RETRIES + 1) in reason
    )
    waits = [wait["waitedSeconds"] for wait in info.value.evidence["waits"]]
    assert len(waits) == _registry_mod.RETRIES and waits[0] >= 0.05 and waits[-1] >= 0.4  # 0.05 * 2 ** 3


def test_a_rate_limit_that_does_not_end_says_to_log_in(loop, monkeypatch):
    monkeypatch.setattr(_registry_mod, "RETRY_AFTER_MAX", 0.05)
    server = loop()
    _push(server, "shop/web", "1", "1")
    server.special["1"] = _flaky([(429, 60)] * 50)
    with pytest.raises(StellaError, match=r"rate limit \(HTTP 429\) after 5 tries over .*log in") as info:
        DigestResolver().resolve("%s/shop/web:1" % server.address)
    assert info.value.evidence["cause"] == "registry_rate_limited"


def test_an_injected_session_keeps_its_own_adapters(loop):
    server = loop()
    _push(server, "shop/web", "1", "1")
    server.special["1"] = flaky = _flaky([(429, 0)])
    session = requests.Session()
    with pytest.raises(StellaError, match="HTTP 429"):
        DigestResolver(session=session).resolve("%s/shop/web:1" % server.address)
    assert flaky.calls == ["HEAD"]


@pytest.mark.parametrize("retry_after", ["soon", "-5", "1.5", "Wed, 99 Foo 2026 99:00:00 GMT", ""])
def test_a_rate_limit_with_a_retry_after_that_is_no_wait_is_retried_with_the_backoff(loop, monkeypatch, retry_after):
    # a Retry-After that is not a count of seconds or an HTTP date, or is negative, is not the registry
    # being unreachable: the default back-off, then the manifest
    monkeypatch.setattr(_registry_mod, "BACKOFF_FACTOR", 0.05)
    server = loop()
    digest = _push(server, "shop/web", "1", "1")
    server.special["1"] = flaky = _flaky([(429, retry_after), (429, retry_after)])
    result = DigestResolver().resolve("%s/shop/web:1" % server.address)
    assert result["digest"] == digest and flaky.calls == ["HEAD"] * 3
    assert [wait["status"] for wait in result["registryWaits"]] == [429, 429]
    assert all(wait["waitedSeconds"] < 1 for wait in result["registryWaits"])


@pytest.mark.parametrize("retry_after", ["soon", "-5"])
def test_a_rate_limit_with_a_bad_retry_after_that_does_not_end_is_registry_rate_limited(loop, monkeypatch, retry_after):
    monkeypatch.setattr(_registry_mod, "BACKOFF_FACTOR", 0.01)
    server = loop()
    _push(server, "shop/web", "1", "1")
    server.special["1"] = flaky = _flaky([(429, retry_after)] * 50)
    with pytest.raises(StellaError, match=r"rate limit \(HTTP 429\) after 5 tries over") as info:
        DigestResolver().resolve("%s/shop/web:1" % server.address)
    assert info.value.evidence["cause"] == "registry_rate_limited" and info.value.evidence["status"] == 429
    assert flaky.calls == ["HEAD"] * (_registry_mod.RETRIES + 1)
