"""module_utils/engine/registry: the target-side client (reachability, pull access, manifests, platforms,
Basic and Bearer auth, identity tokens) and the pure helpers planning on the controller shares (fake
transports replaying the answers real registries send)."""

from __future__ import annotations

import ast
import base64
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_index, image_manifest  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import registry as _registry  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (  # noqa: E402
    parse_image_ref,
    registry_base_url,
    registry_key,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import registry_auth as _registry_auth  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import registry_client as _registry_client  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (  # noqa: E402
    MANIFEST_ACCEPT,
    RegistryApi,
    basic_authorization,
    credential_entries,
    credential_secrets,
    index_platforms,
    parse_challenge,
    read_challenge,
    read_manifest,
    read_token,
    retry_after,
    token_request,
    token_url,
    urllib_transport,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_client import RegistryClient  # noqa: E402

HOST = "registry.example.com"
PASSWORD = "pw-Zq9!x"
IDENTITY_TOKEN = "idt-8f3c9b2e-refresh-Planted"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"

# ---------------------------------------------------------------------------- real registry answers
# The WWW-Authenticate challenges real registries send from GET /v2/ (verbatim).
HUB_CHALLENGE = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
GHCR_CHALLENGE = 'Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:user/image:pull"'
QUAY_CHALLENGE = 'Bearer realm="https://quay.io/v2/auth",service="quay.io"'
BASIC_CHALLENGE = 'Basic realm="Registry Realm"'
# Docker Hub's whole /v2/ answer: exactly 401 with the challenge and its UNAUTHORIZED body.
HUB_V2_ANSWER = (
    401,
    {
        "content-type": "application/json",
        "docker-distribution-api-version": "registry/2.0",
        "www-authenticate": HUB_CHALLENGE,
        "content-length": "87",
        "strict-transport-security": "max-age=31536000",
    },
    b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}\n',
)
# The shape of auth.docker.io/token's answer: the token twice, as token and access_token.
HUB_TOKEN_EXTRAS = {"access_token": None, "expires_in": 300, "issued_at": "2025-06-02T09:14:03.535843893Z"}
# Docker Hub's answer over its pull rate limit, and the rate limit headers of its manifest answers.
HUB_429_BODY = (
    b'{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your unauthenticated pull rate limit. '
    b'https://www.docker.com/increase-rate-limit"}]}\n'
)
HUB_RATELIMIT_HEADERS = {
    "ratelimit-limit": "100;w=21600",
    "ratelimit-remaining": "76;w=21600",
    "docker-ratelimit-source": "203.0.113.7",
}
HUB_API = "https://registry-1.docker.io"
HUB_TOKEN = "https://auth.docker.io/token"


def test_read_manifest_computes_the_digest_and_checks_the_header():
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    document, computed, media_type = read_manifest(body, {"docker-content-digest": digest})
    assert (computed, media_type, document["schemaVersion"]) == (
        digest,
        "application/vnd.oci.image.manifest.v1+json",
        2,
    )
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
    index = {
        "manifests": [
            {"platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"platform": {"os": "unknown", "architecture": "unknown"}},
            {"platform": {"architecture": "amd64"}},
            {"platform": {"os": "linux", "architecture": "amd64", "os.version": "x"}},
        ]
    }
    assert index_platforms(index) == [
        {"os": "linux", "architecture": "arm64", "variant": "v8"},
        {"architecture": "amd64"},
        {"os": "linux", "architecture": "amd64"},
    ]


def test_parse_challenge_and_token_url():
    scheme, params = parse_challenge('Bearer realm="https://auth.example.com/token",service="reg",scope="x"')
    assert scheme == "bearer" and params == {"realm": "https://auth.example.com/token", "service": "reg", "scope": "x"}
    assert parse_challenge(None) == (None, {}) and parse_challenge('Basic realm="r"') == ("basic", {"realm": "r"})
    assert token_url(params) == "https://auth.example.com/token?service=reg&scope=x"
    assert (
        token_url(params, "repository:a/b:pull")
        == "https://auth.example.com/token?service=reg&scope=repository%3Aa%2Fb%3Apull"
    )
    assert token_url({"realm": "https://t"}) == "https://t"
    with pytest.raises(StellaError, match="without a realm") as info:
        token_url({"service": "reg"})
    assert info.value.code == "registry_auth_failed"


def test_read_token_accepts_token_or_access_token_and_never_echoes_userinfo():
    url = "https://bob:%s@auth.example.com/token?service=reg" % PASSWORD
    assert read_token(200, b'{"token": "t1"}', url) == "t1"
    assert read_token(200, b'{"access_token": "t2"}', url) == "t2"
    for status, body, why in (
        (401, b"", "answered HTTP 401"),
        (200, b"<html>", "returned no JSON"),
        (200, b"{}", "returned no token"),
        (200, b"[1]", "returned no token"),
    ):
        with pytest.raises(StellaError, match=why) as info:
            read_token(status, body, url)
        assert info.value.code == "registry_auth_failed"
        assert PASSWORD not in info.value.reason and "bob" not in info.value.reason


def test_basic_authorization_and_secrets():
    assert (
        basic_authorization("stella", PASSWORD) == "Basic " + base64.b64encode(b"stella:" + PASSWORD.encode()).decode()
    )
    api = RegistryApi("stella", PASSWORD)
    assert PASSWORD in api.secrets() and base64.b64encode(b"stella:" + PASSWORD.encode()).decode() in api.secrets()
    assert RegistryApi().secrets() == []


@pytest.mark.parametrize("kind", ["basic", "bearer"])
def test_request_negotiates_basic_and_bearer(kind):
    registry = FakeRegistry(HOST, auth=(kind, "stella", PASSWORD))
    digest = registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    api = RegistryApi("stella", PASSWORD, transport=registry)
    status, headers, _body, auth = api.request(
        "HEAD", HOST, "/v2/shop/web/manifests/1.0", {"Accept": MANIFEST_ACCEPT}, scope="repository:shop/web:pull"
    )
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
                "GET", HOST, "/v2/x/manifests/1", scope="repository:x:pull"
            )
            assert (status, auth) == (401, kind)


def test_platforms_from_an_index_and_from_a_config_blob():
    registry = FakeRegistry(HOST)
    amd = registry.push("shop/web", "amd", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    registry.push(
        "shop/web",
        "multi",
        image_index(
            [
                (amd, {"os": "linux", "architecture": "amd64"}),
                ("sha256:" + "3" * 64, {"os": "unknown", "architecture": "unknown"}),
            ]
        ),
        "application/vnd.oci.image.index.v1+json",
    )
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


@pytest.mark.parametrize("part", [_registry, _registry_auth, _registry_client], ids=["registry", "auth", "client"])
def test_target_side_module_imports_only_the_standard_library_and_module_utils(part):
    with open(part.__file__, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    outside = [
        n
        for n in names
        if n.split(".")[0] not in sys.stdlib_module_names
        and not n.startswith("ansible_collections.stellaops.runtime.plugins.module_utils.")
    ]
    assert outside == []


# ---------------------------------------------------------------------------- challenges


@pytest.mark.parametrize(
    "header, scheme, params",
    [
        (HUB_CHALLENGE, "bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io"}),
        (
            GHCR_CHALLENGE,
            "bearer",
            {"realm": "https://ghcr.io/token", "service": "ghcr.io", "scope": "repository:user/image:pull"},
        ),
        (QUAY_CHALLENGE, "bearer", {"realm": "https://quay.io/v2/auth", "service": "quay.io"}),
        (BASIC_CHALLENGE, "basic", {"realm": "Registry Realm"}),
        (
            'Bearer realm="https://r.example/token",service="r.example",scope="repository:a/b:pull,push"',
            "bearer",
            {"realm": "https://r.example/token", "service": "r.example", "scope": "repository:a/b:pull,push"},
        ),
        (
            'Bearer realm="https://r.example/token",scope="repository:a/b:pull,push",service="r.example"',
            "bearer",
            {"realm": "https://r.example/token", "scope": "repository:a/b:pull,push", "service": "r.example"},
        ),
        (
            'bearer Realm = "https://r.example/token" , Service=r.example',
            "bearer",
            {"realm": "https://r.example/token", "service": "r.example"},
        ),
        (
            'Bearer realm="https://r.example/token",error_description="say \\"hi\\", then go"',
            "bearer",
            {"realm": "https://r.example/token", "error_description": 'say "hi", then go'},
        ),
        (
            'Bearer realm="https://r.example/token",service="r.example", Basic realm="other"',
            "bearer",
            {"realm": "https://r.example/token", "service": "r.example"},
        ),
        ('Bearer service="registry.docker.io"', "bearer", {"service": "registry.docker.io"}),
        ('Bearer realm="https://auth.docker.io/token', "bearer", {}),
        ("Negotiate", "negotiate", {}),
        ("", None, {}),
        ("   ", None, {}),
        (None, None, {}),
    ],
    ids=[
        "docker-hub",
        "ghcr",
        "quay",
        "basic",
        "quoted-comma-last",
        "quoted-comma-middle",
        "case-spaces-token-value",
        "escaped-quote",
        "first-of-two-challenges",
        "no-realm",
        "unterminated-quote",
        "unknown-scheme",
        "empty",
        "blank",
        "none",
    ],
)
def test_parse_challenge_on_real_and_malformed_headers(header, scheme, params):
    assert parse_challenge(header) == (scheme, params)


@pytest.mark.parametrize(
    "header, challenge, problem",
    [
        (
            HUB_CHALLENGE,
            {"scheme": "bearer", "realm": "https://auth.docker.io/token", "service": "registry.docker.io"},
            None,
        ),
        (
            GHCR_CHALLENGE,
            {
                "scheme": "bearer",
                "realm": "https://ghcr.io/token",
                "service": "ghcr.io",
                "scope": "repository:user/image:pull",
            },
            None,
        ),
        (QUAY_CHALLENGE, {"scheme": "bearer", "realm": "https://quay.io/v2/auth", "service": "quay.io"}, None),
        (BASIC_CHALLENGE, {"scheme": "basic", "realm": "Registry Realm"}, None),
        ("Basic", {"scheme": "basic"}, None),
        ('Bearer service="registry.docker.io"', None, "a Bearer challenge without a realm"),
        ('Bearer realm="https://auth.docker.io/token', None, "a Bearer challenge without a realm"),
        ('Bearer realm="/token",service="r"', None, "a Bearer challenge whose realm '/token' is not an http(s) URL"),
        ("Negotiate", None, "an unsupported 'negotiate' challenge"),
        ("", None, "no WWW-Authenticate challenge"),
    ],
    ids=[
        "docker-hub",
        "ghcr",
        "quay",
        "basic",
        "basic-no-realm",
        "bearer-no-realm",
        "unterminated",
        "relative-realm",
        "unknown-scheme",
        "empty",
    ],
)
def test_read_challenge_says_what_a_registry_asks_for_or_what_is_wrong(header, challenge, problem):
    assert read_challenge(header) == (challenge, problem)


def test_token_requests_anonymous_with_a_password_and_with_an_identity_token():
    dummy, params = parse_challenge(
        'Bearer realm="https://r.example/token",service="r.example",scope="repository:a/b:pull,push"'
    )
    assert token_url(params) == "https://r.example/token?service=r.example&scope=repository%3Aa%2Fb%3Apull%2Cpush"
    assert token_request(params) == ("GET", token_url(params), {}, None)
    assert token_request(params, "repository:a/b:pull", {"username": "u", "password": PASSWORD}) == (
        "GET",
        "https://r.example/token?service=r.example&scope=repository%3Aa%2Fb%3Apull",
        {"Authorization": basic_authorization("u", PASSWORD)},
        None,
    )
    dummy, hub = parse_challenge(HUB_CHALLENGE)
    assert token_request(hub, "repository:acme/private:pull", {"identitytoken": IDENTITY_TOKEN}) == (
        "POST",
        HUB_TOKEN,
        {"Content-Type": "application/x-www-form-urlencoded"},
        (
            "grant_type=refresh_token&refresh_token=%s&service=registry.docker.io&scope=repository%%3Aacme%%2Fprivate"
            "%%3Apull&client_id=stellaops.runtime" % IDENTITY_TOKEN
        ).encode(),
    )


def test_read_token_of_docker_hubs_answer_shape():
    answer = json.dumps(
        {
            "token": "eyJhbGciOi.hub.token",
            "access_token": "eyJhbGciOi.hub.token",
            "expires_in": 300,
            "issued_at": "2025-06-02T09:14:03.535843893Z",
        }
    ).encode()
    assert read_token(200, answer, HUB_TOKEN + "?service=registry.docker.io") == "eyJhbGciOi.hub.token"
    assert (
        read_token(200, b'{"access_token": "oauth-answer", "scope": "", "expires_in": 300}', HUB_TOKEN)
        == "oauth-answer"
    )


def test_retry_after():
    assert retry_after({"retry-after": " 3600 "}) == "3600"
    assert retry_after({"retry-after": "Wed, 21 Oct 2025 07:28:00 GMT"}) == "Wed, 21 Oct 2025 07:28:00 GMT"
    assert retry_after({}) is None and retry_after({"retry-after": ""}) is None and retry_after(None) is None


# ---------------------------------------------------------------------------- registry names and credentials


@pytest.mark.parametrize(
    "name, key",
    [
        ("docker.io", "docker.io"),
        ("index.docker.io", "docker.io"),
        ("https://index.docker.io/v1/", "docker.io"),
        ("registry-1.docker.io", "docker.io"),
        ("registry.hub.docker.com", "docker.io"),
        ("HTTPS://Index.Docker.IO/v1/", "docker.io"),
        ("127.0.0.1:5002", "127.0.0.1:5002"),
        ("http://127.0.0.1:5002/", "127.0.0.1:5002"),
        ("Registry.Example.com:5000", "registry.example.com:5000"),
        ("https://bob:pw@ghcr.io/v2/", "ghcr.io"),
        ("[::1]:5000", "[::1]:5000"),
        ("", ""),
        (None, ""),
    ],
)
def test_registry_key_gives_one_name_per_registry(name, key):
    assert registry_key(name) == key


def test_docker_hub_is_read_at_registry_1_under_any_of_its_names():
    for name in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        assert registry_base_url(name) == HUB_API
    assert registry_base_url(parse_image_ref("nginx:1.27").registry) == HUB_API
    assert (
        registry_base_url("ghcr.io") == "https://ghcr.io"
        and registry_base_url("127.0.0.1:5002") == "http://127.0.0.1:5002"
    )


def test_credential_entries_normalise_registry_names_and_label_the_source():
    hub = {"username": "acme", "password": PASSWORD, "source": "docker-config:auths"}
    found = credential_entries(
        {
            "https://index.docker.io/v1/": hub,
            "docker.io": dict(hub),
            "ECR.example:443": {"identitytoken": IDENTITY_TOKEN},
        }
    )
    assert found == {
        "docker.io": hub,
        "ecr.example:443": {"identitytoken": IDENTITY_TOKEN, "source": "registry_credentials"},
    }
    assert credential_entries(None) == {}
    secrets = credential_secrets(found.values())
    assert PASSWORD in secrets and IDENTITY_TOKEN in secrets
    assert basic_authorization("acme", PASSWORD).split(" ", 1)[1] in secrets


@pytest.mark.parametrize(
    "mapping, fragment",
    [
        ({HOST: "acme:" + PASSWORD}, "registry_credentials[registry.example.com] must be a mapping"),
        ({HOST: {"username": "acme", "pasword": PASSWORD}}, "unknown key(s) pasword"),
        ({HOST: {"password": PASSWORD}}, "needs username and password, or identitytoken"),
        ({HOST: {"identitytoken": IDENTITY_TOKEN, "password": PASSWORD}}, "both password and identitytoken"),
        (
            {
                "docker.io": {"username": "a", "password": PASSWORD},
                "index.docker.io": {"username": "b", "password": PASSWORD},
            },
            "names registry docker.io twice",
        ),
        ({HOST: {"username": "acme", "password": PASSWORD, "source": 3}}, "source must be a string"),
        ([HOST], "must map registry hosts to credentials"),
    ],
    ids=["string", "typo", "no-user", "both", "hub-twice", "source-type", "list"],
)
def test_credential_entries_refuse_bad_input_without_echoing_secrets(mapping, fragment):
    with pytest.raises(StellaError) as info:
        credential_entries(mapping)
    assert info.value.code == "invalid_request" and fragment in info.value.reason
    assert PASSWORD not in info.value.reason and IDENTITY_TOKEN not in info.value.reason


# ---------------------------------------------------------------------------- reachability


def scripted(*answers):
    """A transport answering ``answers`` in order (an exception is raised); ``.calls`` records the calls."""
    queue = list(answers)
    calls = []

    def transport(method, url, headers, timeout, body=None):  # pylint: disable=unused-argument
        calls.append((method, url, dict(headers)))
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    transport.calls = calls
    return transport


@pytest.mark.parametrize(
    "registry, answer, expected",
    [
        (
            "127.0.0.1:5000",
            (200, {"docker-distribution-api-version": "registry/2.0"}, b"{}"),
            {"url": "http://127.0.0.1:5000/v2/", "httpStatus": 200, "reachable": True, "authRequired": False},
        ),
        (
            "docker.io",
            HUB_V2_ANSWER,
            {
                "url": HUB_API + "/v2/",
                "httpStatus": 401,
                "reachable": True,
                "authRequired": True,
                "challenge": {"scheme": "bearer", "realm": HUB_TOKEN, "service": "registry.docker.io"},
            },
        ),
        (
            "ghcr.io",
            (401, {"www-authenticate": GHCR_CHALLENGE}, b'{"errors":[{"code":"UNAUTHORIZED"}]}'),
            {
                "url": "https://ghcr.io/v2/",
                "httpStatus": 401,
                "reachable": True,
                "authRequired": True,
                "challenge": {
                    "scheme": "bearer",
                    "realm": "https://ghcr.io/token",
                    "service": "ghcr.io",
                    "scope": "repository:user/image:pull",
                },
            },
        ),
        (
            "quay.io",
            (401, {"www-authenticate": QUAY_CHALLENGE}, b""),
            {
                "url": "https://quay.io/v2/",
                "httpStatus": 401,
                "reachable": True,
                "authRequired": True,
                "challenge": {"scheme": "bearer", "realm": "https://quay.io/v2/auth", "service": "quay.io"},
            },
        ),
        (
            HOST,
            (401, {"www-authenticate": BASIC_CHALLENGE}, b""),
            {
                "url": "https://registry.example.com/v2/",
                "httpStatus": 401,
                "reachable": True,
                "authRequired": True,
                "challenge": {"scheme": "basic", "realm": "Registry Realm"},
            },
        ),
        (
            "docker.io",
            (429, {"content-type": "application/json", "retry-after": "3600"}, HUB_429_BODY),
            {"url": HUB_API + "/v2/", "httpStatus": 429, "reachable": True, "rateLimited": True, "retryAfter": "3600"},
        ),
        (
            HOST,
            (429, {}, b""),
            {"url": "https://registry.example.com/v2/", "httpStatus": 429, "reachable": True, "rateLimited": True},
        ),
    ],
    ids=["200", "docker-hub-401", "ghcr-401", "quay-401", "basic-401", "docker-hub-429", "429-no-retry-after"],
)
def test_a_registry_that_answers_is_reachable_and_nothing_is_offered(registry, answer, expected):
    transport = scripted(answer)
    assert RegistryClient(transport=transport).ping(registry) == expected
    assert [(m, h) for m, dummy, h in transport.calls] == [("GET", {})]  # one request, no token asked


@pytest.mark.parametrize(
    "answer, fragment",
    [
        (
            (404, {"content-type": "text/html"}, b"<html>Not Found</html>"),
            "unexpected HTTP 404 from /v2/ (not a registry API answer)",
        ),
        ((500, {}, b""), "unexpected HTTP 500 from /v2/"),
        ((502, {}, b"Bad Gateway"), "unexpected HTTP 502 from /v2/"),
        (
            (401, {"www-authenticate": 'Bearer service="registry.docker.io"'}, b""),
            "HTTP 401 from /v2/ with a Bearer challenge without a realm: not a registry API answer",
        ),
        ((401, {"www-authenticate": "Negotiate"}, b""), "HTTP 401 from /v2/ with an unsupported 'negotiate' challenge"),
        ((401, {}, b""), "HTTP 401 from /v2/ with no WWW-Authenticate challenge"),
        ((401, {"www-authenticate": ""}, b""), "HTTP 401 from /v2/ with no WWW-Authenticate challenge"),
        (
            StellaError("registry_unreachable", "https://registry.example.com/v2/: [Errno 111] Connection refused"),
            "[Errno 111] Connection refused",
        ),
    ],
    ids=["404", "500", "502", "401-no-realm", "401-unknown-scheme", "401-no-header", "401-empty-header", "refused"],
)
def test_unreachable_only_when_nothing_or_no_registry_api_answers(answer, fragment):
    result = RegistryClient(transport=scripted(answer)).ping(HOST)
    assert result["reachable"] is False and fragment in result["reason"]
    assert "challenge" not in result


class _Server:
    """A loopback TCP server whose ``handle(conn)`` runs for each connection (on a thread)."""

    def __init__(self, handle, host="127.0.0.1"):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.handle = handle
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            while True:
                conn, dummy = self.sock.accept()
                self.handle(conn)
        except OSError:
            return

    def close(self):
        self.sock.close()


def test_nothing_answering_is_unreachable_through_the_real_transport():
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()
    refused = RegistryClient(timeout=2).ping("127.0.0.1:%d" % port)
    assert refused["reachable"] is False and "Connection refused" in refused["reason"]

    held = []
    silent = _Server(held.append)  # accepts, never answers
    try:
        timed_out = RegistryClient(timeout=0.3).ping("127.0.0.1:%d" % silent.port)
    finally:
        silent.close()
    assert timed_out["reachable"] is False and "timed out" in timed_out["reason"]

    def plain_http(conn):
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        conn.close()

    plain = _Server(plain_http, host="127.0.0.2")  # not a loopback name: reached over https
    try:
        tls = RegistryClient(timeout=2).ping("127.0.0.2:%d" % plain.port)
    finally:
        plain.close()
    assert tls["url"].startswith("https://") and tls["reachable"] is False and "SSL" in tls["reason"]


def test_the_real_transport_posts_a_form_body():
    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_POST(self):  # noqa: N802 - http.server API
            seen["type"] = self.headers.get("Content-Type")
            seen["body"] = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            answer = json.dumps({"access_token": "t-1", "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dummy, params = parse_challenge('Bearer realm="http://127.0.0.1:%d/token",service="lab"' % server.server_port)
        method, url, headers, body = token_request(params, "repository:a/b:pull", {"identitytoken": IDENTITY_TOKEN})
        status, dummy, answer = urllib_transport(method, url, headers, 5, body)
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200 and read_token(status, answer, url) == "t-1"
    assert seen["type"] == "application/x-www-form-urlencoded"
    assert urllib.parse.parse_qs(seen["body"].decode()) == {
        "grant_type": ["refresh_token"],
        "refresh_token": [IDENTITY_TOKEN],
        "service": ["lab"],
        "scope": ["repository:a/b:pull"],
        "client_id": ["stellaops.runtime"],
    }


def test_credentials_given_for_a_registry_are_tried_on_v2():
    basic = {HOST: {"username": "stella", "password": PASSWORD, "source": "vault:lab"}}
    accepted = RegistryClient(
        transport=FakeRegistry(HOST, auth=("basic", "stella", PASSWORD), challenge=BASIC_CHALLENGE), credentials=basic
    ).ping(HOST)
    assert (
        accepted["reachable"] is True
        and accepted["authenticated"] is True
        and accepted["credentialSource"] == "vault:lab"
    )
    refused = RegistryClient(transport=FakeRegistry(HOST, auth=("basic", "stella", "other")), credentials=basic).ping(
        HOST
    )
    assert refused["reachable"] is True and refused["authenticated"] is False
    assert refused["authError"] == "registry refused the credentials from vault:lab on /v2/ (HTTP 401)"

    hub = hub_registry()
    ok = RegistryClient(
        transport=hub, credentials={"index.docker.io": {"username": "acme", "password": PASSWORD}}
    ).ping("docker.io")
    assert ok["authenticated"] is True and ok["challenge"]["realm"] == HUB_TOKEN
    assert [(m, u) for m, u, dummy in hub.calls] == [
        ("GET", HUB_API + "/v2/"),
        ("GET", HUB_TOKEN + "?service=registry.docker.io"),
        ("GET", HUB_API + "/v2/"),
    ]
    wrong = RegistryClient(
        transport=hub_registry(), credentials={"docker.io": {"username": "acme", "password": "x"}}
    ).ping("docker.io")
    assert wrong["authenticated"] is False
    assert (
        wrong["authError"]
        == "token service %s refused the credentials from registry_credentials (HTTP 401)" % HUB_TOKEN
    )


# ---------------------------------------------------------------------------- pull access


def hub_registry(**kwargs):
    """Docker Hub: anonymous tokens for public repositories (library/nginx), credentials for acme/private."""
    options = dict(
        auth=("bearer", "acme", PASSWORD),
        anonymous={"library/nginx"},
        realm=HUB_TOKEN,
        service="registry.docker.io",
        challenge=HUB_CHALLENGE,
        token_answer=HUB_TOKEN_EXTRAS,
    )
    options.update(kwargs)
    registry = FakeRegistry("registry-1.docker.io", **options)
    amd = registry.push("library/nginx", "amd", image_manifest("1"), OCI_MANIFEST)
    registry.push(
        "library/nginx",
        "1.27",
        image_index(
            [
                (amd, {"os": "linux", "architecture": "amd64"}),
                (amd, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
            ]
        ),
        OCI_INDEX,
    )
    registry.push("acme/private", "2.0", image_manifest("2"), OCI_MANIFEST)
    registry.blobs[("acme/private", "sha256:" + "2" * 64)] = json.dumps(
        {"os": "linux", "architecture": "amd64"}
    ).encode()
    return registry


def steps(registry):
    """``(method, URL without query, auth scheme sent)`` of each call."""
    return [(m, u.split("?")[0], (h.get("Authorization") or " ").split(" ")[0] or None) for m, u, h in registry.calls]


NGINX = parse_image_ref("nginx:1.27")
PRIVATE = parse_image_ref("docker.io/acme/private:2.0")
NGINX_MANIFEST = HUB_API + "/v2/library/nginx/manifests/1.27"
PRIVATE_MANIFEST = HUB_API + "/v2/acme/private/manifests/2.0"
PRIVATE_CONFIG = HUB_API + "/v2/acme/private/blobs/sha256:" + "2" * 64


def test_a_public_docker_hub_image_is_pulled_anonymously_and_credentials_are_not_sent():
    registry = hub_registry()
    client = RegistryClient(transport=registry, credentials={"docker.io": {"username": "acme", "password": PASSWORD}})
    assert client.platforms(NGINX) == [
        {"os": "linux", "architecture": "amd64"},
        {"os": "linux", "architecture": "arm64", "variant": "v8"},
    ]
    assert client.image_access(NGINX) == {
        "pullAccess": "anonymous",
        "auth": "bearer",
        "scope": "repository:library/nginx:pull",
    }
    assert steps(registry) == [
        ("GET", NGINX_MANIFEST, None),
        ("GET", HUB_TOKEN, None),
        ("GET", NGINX_MANIFEST, "Bearer"),
    ]
    assert registry.calls[1][1] == HUB_TOKEN + "?service=registry.docker.io&scope=repository%3Alibrary%2Fnginx%3Apull"


def test_a_private_docker_hub_image_is_pulled_with_credentials_after_anonymous_is_refused():
    registry = hub_registry(manifest_headers=HUB_RATELIMIT_HEADERS)
    client = RegistryClient(
        transport=registry,
        credentials={
            "https://index.docker.io/v1/": {
                "username": "acme",
                "password": PASSWORD,
                "source": "docker-config:credsStore:desktop",
            }
        },
    )
    assert client.platforms(PRIVATE) == [{"os": "linux", "architecture": "amd64"}]
    assert client.image_access(PRIVATE) == {
        "pullAccess": "credentials",
        "auth": "bearer",
        "scope": "repository:acme/private:pull",
        "credentialSource": "docker-config:credsStore:desktop",
        "anonymousRefused": "the registry refused an anonymous token (HTTP 401)",
        "rateLimit": {"limit": "100;w=21600", "remaining": "76;w=21600"},
    }
    # the config blob is read with the token the manifest negotiated: no third token request
    assert steps(registry) == [
        ("GET", PRIVATE_MANIFEST, None),
        ("GET", HUB_TOKEN, None),
        ("GET", PRIVATE_MANIFEST, "Bearer"),
        ("GET", HUB_TOKEN, "Basic"),
        ("GET", PRIVATE_MANIFEST, "Bearer"),
        ("GET", PRIVATE_CONFIG, "Bearer"),
    ]
    assert registry.calls[-1][2]["Authorization"] == "Bearer " + registry.token
    for secret in (
        PASSWORD,
        registry.token,
        registry.anonymous_token,
        basic_authorization("acme", PASSWORD).split()[1],
    ):
        assert secret in client.secrets()


def test_a_private_image_without_credentials_asks_for_them():
    registry = hub_registry()
    with pytest.raises(StellaError) as info:
        RegistryClient(transport=registry, credentials={"ghcr.io": {"username": "x", "password": PASSWORD}}).platforms(
            PRIVATE
        )
    assert info.value.code == "registry_auth_failed"
    assert info.value.reason == (
        "registry docker.io refused anonymous pull of acme/private (the registry refused an anonymous "
        "token (HTTP 401)): give credentials for docker.io (registry_credentials)"
    )
    assert info.value.evidence == {"pullScope": "repository:acme/private:pull"}
    assert all(auth != "Basic" for dummy, dummy, auth in steps(registry))  # ghcr.io's credentials are not offered


@pytest.mark.parametrize(
    "entry, forbidden, why",
    [
        (
            {"username": "acme", "password": "wrong-" + PASSWORD},
            (),
            "token service https://auth.docker.io/token refused the credentials (HTTP 401)",
        ),
        ({"username": "acme", "password": PASSWORD}, ("acme/private",), "the registry refused them (HTTP 401)"),
        (
            {"identitytoken": "revoked-" + IDENTITY_TOKEN},
            (),
            "token service https://auth.docker.io/token refused the credentials (HTTP 401)",
        ),
    ],
    ids=["token-service-refuses", "registry-refuses-the-token", "identity-token-refused"],
)
def test_refused_credentials_are_registry_auth_failed(entry, forbidden, why):
    registry = hub_registry(forbidden=forbidden, identitytoken=IDENTITY_TOKEN)
    client = RegistryClient(transport=registry, credentials={"docker.io": dict(entry, source="vault:hub")})
    with pytest.raises(StellaError) as info:
        client.manifest(PRIVATE)
    assert info.value.code == "registry_auth_failed"
    assert (
        info.value.reason
        == "registry docker.io refused pull of acme/private with the credentials from vault:hub: " + why
    )
    assert info.value.evidence == {"pullScope": "repository:acme/private:pull", "credentialSource": "vault:hub"}
    assert client.image_access(PRIVATE) is None


def test_an_identity_token_is_exchanged_with_the_oauth2_refresh_grant():
    registry = hub_registry(identitytoken=IDENTITY_TOKEN)
    client = RegistryClient(
        transport=registry,
        credentials={"docker.io": {"identitytoken": IDENTITY_TOKEN, "source": "docker-config:auths"}},
    )
    assert client.manifest(PRIVATE)["digest"].startswith("sha256:")
    assert client.image_access(PRIVATE)["pullAccess"] == "credentials"
    assert steps(registry)[3] == ("POST", HUB_TOKEN, None)
    assert urllib.parse.parse_qs(registry.bodies[3].decode()) == {
        "grant_type": ["refresh_token"],
        "refresh_token": [IDENTITY_TOKEN],
        "service": ["registry.docker.io"],
        "scope": ["repository:acme/private:pull"],
        "client_id": ["stellaops.runtime"],
    }
    assert IDENTITY_TOKEN in client.secrets() and registry.token in client.secrets()
    # the controller's RegistryApi takes an identity token too
    api = RegistryApi(identitytoken=IDENTITY_TOKEN, transport=hub_registry(identitytoken=IDENTITY_TOKEN))
    status, dummy, dummy, auth = api.request(
        "GET", "docker.io", "/v2/acme/private/manifests/2.0", scope="repository:acme/private:pull"
    )
    assert (status, auth) == (200, "bearer") and IDENTITY_TOKEN in api.secrets()


def test_a_basic_registry_gets_the_credentials_at_once():
    registry = FakeRegistry(HOST, auth=("basic", "stella", PASSWORD), challenge=BASIC_CHALLENGE)
    registry.push("shop/web", "1.0", image_manifest("1"), OCI_MANIFEST)
    image = parse_image_ref(HOST + "/shop/web:1.0")
    client = RegistryClient(transport=registry, credentials={HOST: {"username": "stella", "password": PASSWORD}})
    client.manifest(image)
    assert client.image_access(image) == {
        "pullAccess": "credentials",
        "auth": "basic",
        "scope": "repository:shop/web:pull",
        "credentialSource": "registry_credentials",
        "anonymousRefused": "the registry asks for Basic credentials",
    }
    assert steps(registry) == [
        ("GET", "https://%s/v2/shop/web/manifests/1.0" % HOST, None),
        ("GET", "https://%s/v2/shop/web/manifests/1.0" % HOST, "Basic"),
    ]
    for credentials, fragment in (
        (None, "give credentials for registry.example.com"),
        ({HOST: {"identitytoken": IDENTITY_TOKEN}}, "which an identity token cannot answer"),
    ):
        with pytest.raises(StellaError, match=fragment) as info:
            RegistryClient(transport=registry, credentials=credentials).manifest(image)
        assert info.value.code == "registry_auth_failed"


def test_the_pull_scope_wins_over_the_challenge_scope_and_a_refusing_token_service_is_asked_with_credentials():
    ghcr = FakeRegistry(
        "ghcr.io",
        auth=("bearer", "octo", PASSWORD),
        anonymous={"acme/tool"},
        realm="https://ghcr.io/token",
        challenge=GHCR_CHALLENGE,
    )
    ghcr.push("acme/tool", "1", image_manifest("1"), OCI_MANIFEST)
    RegistryClient(transport=ghcr).manifest(parse_image_ref("ghcr.io/acme/tool:1"))
    assert ghcr.calls[1][1] == "https://ghcr.io/token?service=ghcr.io&scope=repository%3Aacme%2Ftool%3Apull"

    quay = FakeRegistry(
        "quay.io", auth=("bearer", "robot", PASSWORD), realm="https://quay.io/v2/auth", challenge=QUAY_CHALLENGE
    )
    quay.push("acme/api", "3", image_manifest("3"), OCI_MANIFEST)
    image = parse_image_ref("quay.io/acme/api:3")
    client = RegistryClient(transport=quay, credentials={"quay.io": {"username": "robot", "password": PASSWORD}})
    client.manifest(image)
    assert (
        client.image_access(image)["anonymousRefused"]
        == "token service https://quay.io/v2/auth refused an anonymous token (HTTP 401)"
    )
    assert steps(quay) == [
        ("GET", "https://quay.io/v2/acme/api/manifests/3", None),
        ("GET", "https://quay.io/v2/auth", None),
        ("GET", "https://quay.io/v2/auth", "Basic"),
        ("GET", "https://quay.io/v2/acme/api/manifests/3", "Bearer"),
    ]


def test_a_kept_token_is_reused_and_negotiated_again_once_refused():
    registry = hub_registry()
    client = RegistryClient(transport=registry, credentials={"docker.io": {"username": "acme", "password": PASSWORD}})
    client.manifest(PRIVATE)
    client.manifest(PRIVATE)
    assert [u for dummy, u, dummy in steps(registry)].count(HUB_TOKEN) == 2  # anonymous, then with credentials: once
    registry.token = "tok-rotated"  # the kept token expired
    client.manifest(PRIVATE)
    assert steps(registry)[6:] == [
        ("GET", PRIVATE_MANIFEST, "Bearer"),
        ("GET", PRIVATE_MANIFEST, None),
        ("GET", HUB_TOKEN, None),
        ("GET", PRIVATE_MANIFEST, "Bearer"),
        ("GET", HUB_TOKEN, "Basic"),
        ("GET", PRIVATE_MANIFEST, "Bearer"),
    ]


@pytest.mark.parametrize(
    "url, headers, retry",
    [
        (NGINX_MANIFEST, {"content-type": "application/json", "retry-after": "3600"}, "3600"),
        (HUB_TOKEN + "?service=registry.docker.io&scope=repository%3Alibrary%2Fnginx%3Apull", {}, None),
    ],
    ids=["manifest", "token-service"],
)
def test_a_rate_limited_pull_says_so(url, headers, retry):
    registry = hub_registry(answers={url: (429, headers, HUB_429_BODY)})
    client = RegistryClient(transport=registry)
    with pytest.raises(StellaError) as info:
        client.platforms(NGINX)
    assert info.value.code == "registry_rate_limited"
    assert (
        info.value.reason
        == "registry docker.io answered HTTP 429 (rate limit%s) for docker.io/library/nginx:1.27"
        % ("; Retry-After: 3600" if retry else "")
    )
    assert info.value.evidence == ({"retryAfter": retry} if retry else {})
    assert client.image_access(NGINX) is None


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        (
            {"challenge": 'Bearer service="registry.docker.io"'},
            "answered HTTP 401 for library/nginx with a Bearer challenge without a realm",
        ),
        (
            {
                "answers": {
                    HUB_TOKEN + "?service=registry.docker.io&scope=repository%3Alibrary%2Fnginx%3Apull": (503, {}, b"")
                }
            },
            "token service https://auth.docker.io/token answered HTTP 503 for repository:library/nginx:pull",
        ),
        (
            {"answers": {NGINX_MANIFEST: (403, {}, b"")}},
            "refused pull of library/nginx (HTTP 403, no challenge to answer)",
        ),
    ],
    ids=["malformed-challenge", "token-service-5xx", "403"],
)
def test_broken_auth_is_registry_auth_failed(kwargs, fragment):
    with pytest.raises(StellaError) as info:
        RegistryClient(transport=hub_registry(**kwargs)).manifest(NGINX)
    assert info.value.code == "registry_auth_failed" and fragment in info.value.reason


def test_a_token_service_that_does_not_answer_is_unreachable():
    def transport(method, url, headers, timeout, body=None):
        if url.startswith(HUB_TOKEN):
            raise StellaError("registry_unreachable", "%s: [Errno -2] Name or service not known" % HUB_TOKEN)
        return hub_registry()(method, url, headers, timeout, body)

    with pytest.raises(StellaError) as info:
        RegistryClient(transport=transport).manifest(NGINX)
    assert info.value.code == "registry_unreachable" and "Name or service not known" in info.value.reason


def test_request_asks_an_anonymous_token_for_a_challenge_without_scope():
    """Docker Hub's /v2/ challenge names no scope: without credentials, request() still asks the token
    service (anonymously) and gets through."""
    registry = hub_registry()
    status, dummy, dummy, auth = RegistryApi(transport=registry).request("GET", "docker.io", "/v2/")
    assert (status, auth) == (200, "bearer")
    assert steps(registry) == [
        ("GET", HUB_API + "/v2/", None),
        ("GET", HUB_TOKEN, None),
        ("GET", HUB_API + "/v2/", "Bearer"),
    ]
