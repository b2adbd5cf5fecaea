# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""OCI distribution API on targets (preflight) and the pure pieces planning on the controller shares.

Target side, standard library only (targets need only Python 3 and the Docker CLI):
:class:`RegistryClient` checks reachability (``/v2/``), reads manifests and the platforms an image
offers, with Basic and Bearer token auth. Its network I/O goes through one injectable
``transport(method, url, headers, timeout)`` returning ``(status, headers, body)`` with lower-cased
header names (default :func:`urllib_transport`), so unit tests replay captured answers.

Shared with the controller's digest resolver (it imports them, nothing is copied): the
``Accept`` list and media types, :func:`parse_challenge`, :func:`basic_authorization`,
:func:`token_url`, :func:`read_token`, :func:`read_manifest`, :func:`index_platforms`, and the
transport-agnostic auth negotiation of :class:`RegistryApi`.

Credentials never leave this module: errors and evidence carry URLs without userinfo.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_base_url

MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_ACCEPT = ", ".join((MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST, MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST))
INDEX_TYPES = (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
REDIRECTS = (301, 302, 303, 307, 308)

_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


# -- pure helpers (both sides) ------------------------------------------------------------------

def parse_challenge(header):
    """``Bearer realm="...",service="..."`` -> ``("bearer", {"realm": ..., ...})``."""
    if not header:
        return None, {}
    scheme, dummy, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM.findall(rest))


def basic_authorization(username, password):
    """The ``Authorization`` header value of HTTP Basic auth."""
    raw = ("%s:%s" % (username, password or "")).encode("utf-8")
    return "Basic " + base64.b64encode(raw).decode("ascii")


def token_url(params, scope=None):
    """The token service URL of a Bearer challenge: ``realm?service=...&scope=...``.

    ``scope`` (``repository:<repo>:pull``) wins over the challenge's own. Raises
    ``StellaError("registry_auth_failed")`` when the challenge names no realm.
    """
    realm = params.get("realm")
    if not realm:
        raise StellaError("registry_auth_failed", "registry asked for a Bearer token without a realm")
    query = {k: v for k, v in (("service", params.get("service")), ("scope", scope or params.get("scope"))) if v}
    return realm + ("?" + urllib.parse.urlencode(query) if query else "")


def read_token(status, body, url):
    """The token of a token service answer; ``StellaError("registry_auth_failed")`` otherwise."""
    realm = redact_url(url.split("?")[0])
    if status != 200:
        raise StellaError("registry_auth_failed", "token service %s answered HTTP %d" % (realm, status))
    try:
        data = json.loads(body.decode("utf-8"))
    except ValueError:
        raise StellaError("registry_auth_failed", "token service %s returned no JSON" % realm)
    token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
    if not token:
        raise StellaError("registry_auth_failed", "token service %s returned no token" % realm)
    return token


def read_manifest(body, headers):
    """``(document, digest, media type)`` of a manifest GET answer.

    The digest is computed from the bytes; ``ValueError`` (with the reason) when the body is too
    large, is not a JSON object, or disagrees with ``Docker-Content-Digest``.
    """
    if len(body) > MAX_MANIFEST_BYTES:
        raise ValueError("manifest larger than %d bytes" % MAX_MANIFEST_BYTES)
    computed = "sha256:" + hashlib.sha256(body).hexdigest()
    header = headers.get("docker-content-digest")
    if header and header != computed:
        raise ValueError("Docker-Content-Digest %s does not match the manifest bytes (%s)" % (header, computed))
    try:
        document = json.loads(body.decode("utf-8"))
    except ValueError:
        raise ValueError("manifest is not JSON")
    if not isinstance(document, dict):
        raise ValueError("manifest is not a JSON object")
    media_type = document.get("mediaType") or (headers.get("content-type") or "").split(";")[0].strip()
    return document, computed, media_type


def index_platforms(index):
    """Platform dicts (``os``, ``architecture``, ``variant``) an index offers; attestation entries
    (architecture ``unknown``) are left out."""
    found = []
    for entry in (index or {}).get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("architecture") in (None, "unknown"):
            continue
        found.append({k: v for k, v in platform.items() if k in ("os", "architecture", "variant")})
    return found


# -- target transport (stdlib) ------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 - urllib API
        return None


def urllib_transport(method, url, headers, timeout):
    """Default transport: one HTTP request with urllib, no redirects followed implicitly."""
    request = urllib.request.Request(url, method=method, headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read() if exc.fp else b""
        return exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, body
    except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StellaError("registry_unreachable", "%s: %s" % (redact_url(url), reason))


# -- auth negotiation (transport-agnostic, both sides) ------------------------------------------

class RegistryApi:
    """Registry API calls with Basic / Bearer negotiation over any ``transport``.

    Targets use it through :class:`RegistryClient` with :func:`urllib_transport`; planning on the
    controller gives it its ``requests`` transport.
    """

    def __init__(self, username=None, password=None, insecure_registries=(), timeout=10.0, transport=None):
        self._username = username or None
        self._password = password or None
        self.insecure_registries = tuple(insecure_registries or ())
        self.timeout = timeout
        self.transport = transport or urllib_transport
        self._tokens = {}

    @property
    def has_credentials(self):
        return bool(self._username)

    def secrets(self):
        """Every secret value this client holds or obtained (for redaction)."""
        found = list(self._tokens.values())
        if self._username or self._password:
            found.extend([self._password, basic_authorization(self._username or "", self._password).split(" ", 1)[1]])
        return [s for s in found if s]

    def base_url(self, registry):
        return registry_base_url(registry, self.insecure_registries)

    def _basic(self):
        return basic_authorization(self._username, self._password)

    def _token(self, params, scope):
        url = token_url(params, scope)
        if url not in self._tokens:
            headers = {"Authorization": self._basic()} if self._username else {}
            status, dummy, body = self.transport("GET", url, headers, self.timeout)
            self._tokens[url] = read_token(status, body, url)
        return self._tokens[url]

    def request(self, method, registry, path, headers=None, scope=None):
        """One API call with auth negotiation. Returns ``(status, headers, body, auth)``.

        ``auth`` is ``None`` (none needed), ``"basic"`` or ``"bearer"``. A 401 after offering
        credentials is returned as is, so callers can say "auth" in their reason.
        """
        url = self.base_url(registry) + path
        headers = dict(headers or {})
        status, resp_headers, body = self.transport(method, url, headers, self.timeout)
        if status != 401:
            return status, resp_headers, body, None
        scheme, params = parse_challenge(resp_headers.get("www-authenticate"))
        if scheme == "basic":
            if not self._username:
                return status, resp_headers, body, "basic"
            headers["Authorization"] = self._basic()
        elif scheme == "bearer":
            if "scope" not in params and not scope and not self._username:
                return status, resp_headers, body, "bearer"
            try:
                headers["Authorization"] = "Bearer " + self._token(params, scope)
            except StellaError:
                return status, resp_headers, body, "bearer"
        else:
            return status, resp_headers, body, scheme
        status, resp_headers, body = self.transport(method, url, headers, self.timeout)
        return status, resp_headers, body, scheme


# -- preflight on the target --------------------------------------------------------------------

class RegistryClient(RegistryApi):
    """What preflight asks a registry: reachability, manifests, platforms."""

    def ping(self, registry, mode="http"):
        """Reachability evidence for ``registry``: ``{url, reachable, httpStatus, authRequired, authenticated, reason}``."""
        url = self.base_url(registry) + "/v2/"
        if mode == "tcp":
            host, port = _host_port(url)
            try:
                with socket.create_connection((host, port), timeout=self.timeout):
                    return {"url": url, "reachable": True}
            except OSError as exc:
                return {"url": url, "reachable": False, "reason": "TCP connect to %s:%d failed: %s" % (host, port, exc.strerror or exc)}
        try:
            status, dummy, body, auth = self.request("GET", registry, "/v2/")
        except StellaError as exc:
            return {"url": url, "reachable": False, "reason": exc.reason}
        result = {"url": url, "httpStatus": status, "authRequired": auth is not None}
        if status == 200:
            result.update(reachable=True, authenticated=auth is not None)
        elif status == 401:
            why = "auth required and credentials were refused" if self._username else "auth required and no credentials were given"
            result.update(reachable=False, authenticated=False, reason="%s (HTTP 401)" % why)
        else:
            result.update(reachable=False, reason="unexpected HTTP %d from /v2/" % status)
        return result

    def manifest(self, image):
        """Fetch ``image``'s manifest by digest (if pinned) or tag.

        Returns ``{"digest", "mediaType", "body"}`` (``body`` is the parsed JSON object).
        Raises ``StellaError`` with code ``image_unresolved`` (unknown tag/digest, bad manifest) or
        ``registry_unreachable`` / ``registry_auth_failed``.
        """
        reference = image.digest or image.tag or "latest"
        path = "/v2/%s/manifests/%s" % (image.repository, reference)
        scope = "repository:%s:pull" % image.repository
        status, headers, body, auth = self.request("GET", image.registry, path, {"Accept": MANIFEST_ACCEPT}, scope=scope)
        if status == 401:
            raise StellaError("registry_auth_failed", "registry %s refused access to %s (auth required%s)" % (
                image.registry, image.repository, ", credentials refused" if self._username else ", no credentials given"))
        if status == 404:
            raise StellaError("image_unresolved", "%s not found in registry %s (HTTP 404)" % (image.render(), image.registry))
        if status != 200:
            raise StellaError("image_unresolved", "registry %s answered HTTP %d for %s" % (image.registry, status, image.render()))
        try:
            document, digest, media_type = read_manifest(body, headers)
        except ValueError as exc:
            raise StellaError("image_unresolved", "registry %s: %s for %s" % (image.registry, exc, image.render()))
        return {"digest": digest, "mediaType": media_type, "body": document}

    def blob_json(self, image, digest):
        path = "/v2/%s/blobs/%s" % (image.repository, digest)
        status, headers, body, auth = self.request("GET", image.registry, path, scope="repository:%s:pull" % image.repository)
        if status in REDIRECTS and headers.get("location"):
            status, headers, body = self.transport("GET", urllib.parse.urljoin(self.base_url(image.registry) + path, headers["location"]), {}, self.timeout)
        if status != 200:
            raise StellaError("image_unresolved", "blob %s of %s: HTTP %d" % (digest, image.name, status))
        return json.loads(body.decode("utf-8"))

    def platforms(self, image):
        """Platforms ``image`` offers: from its index, or from its single manifest's config blob."""
        found = self.manifest(image)
        body = found["body"] or {}
        if found["mediaType"] in INDEX_TYPES or "manifests" in body:
            return index_platforms(body)
        config = (body.get("config") or {}).get("digest")
        if not config:
            raise StellaError("image_unresolved", "manifest of %s has no config" % image.render())
        data = self.blob_json(image, config)
        plat = {"os": data.get("os"), "architecture": data.get("architecture")}
        if data.get("variant"):
            plat["variant"] = data["variant"]
        return [plat]


def _host_port(url):
    parsed = urllib.parse.urlsplit(url)
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
