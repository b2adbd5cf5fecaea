# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""OCI distribution API client: reachability, manifests, platforms; Basic and Bearer token auth.

Standard library only (it runs on targets for preflight and on the controller for planning).
All network I/O goes through one injectable ``transport(method, url, headers, timeout)`` returning
``(status, headers, body)`` with lower-cased header names, so unit tests replay captured answers.
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

from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError, redact_text, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils._imageref import parse_image_ref, registry_base_url

MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_ACCEPT = ", ".join((MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST, MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST))
INDEX_TYPES = (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)

_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


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


def parse_challenge(header):
    """``Bearer realm="...",service="..."`` -> ``("bearer", {"realm": ..., ...})``."""
    if not header:
        return None, {}
    scheme, dummy, rest = header.strip().partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM.findall(rest))


class RegistryClient:
    """Talks to one or more registries with optional credentials."""

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

    def base_url(self, registry):
        return registry_base_url(registry, self.insecure_registries)

    def _basic(self):
        raw = ("%s:%s" % (self._username, self._password or "")).encode("utf-8")
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def _token(self, params, scope):
        realm = params.get("realm")
        if not realm:
            raise StellaError("registry_auth_failed", "registry asked for a Bearer token without a realm")
        query = {k: v for k, v in (("service", params.get("service")), ("scope", scope or params.get("scope"))) if v}
        url = realm + ("?" + urllib.parse.urlencode(query) if query else "")
        key = url
        if key in self._tokens:
            return self._tokens[key]
        headers = {"Authorization": self._basic()} if self._username else {}
        status, dummy, body = self.transport("GET", url, headers, self.timeout)
        if status != 200:
            raise StellaError("registry_auth_failed", "token service %s answered HTTP %d" % (redact_url(realm), status))
        try:
            data = json.loads(body.decode("utf-8"))
        except ValueError:
            raise StellaError("registry_auth_failed", "token service %s returned no JSON" % redact_url(realm))
        token = data.get("token") or data.get("access_token")
        if not token:
            raise StellaError("registry_auth_failed", "token service %s returned no token" % redact_url(realm))
        self._tokens[key] = token
        return token

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

    # -- reachability -------------------------------------------------------------------------

    def ping(self, registry, mode="http"):
        """Reachability evidence for ``registry``: ``{url, reachable, httpStatus, authRequired, authenticated, reason}``."""
        url = self.base_url(registry) + "/v2/"
        if mode == "tcp":
            host, port = _host_port(registry, url)
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

    # -- manifests ----------------------------------------------------------------------------

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
        if status in (301, 302, 303, 307, 308) and headers.get("location"):
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


def _host_port(registry, url):
    parsed = urllib.parse.urlsplit(url)
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)


# -- digest resolution for planning (controller) ------------------------------------------------

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


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


def platform_strings(index):
    """``["linux/amd64", "linux/arm64/v8"]`` from an index / manifest list (sorted, unique)."""
    return sorted({"/".join(p[k] for k in ("os", "architecture", "variant") if p.get(k))
                   for p in index_platforms(index) if p.get("os")})


class DigestResolver:
    """Resolve tags to manifest digests across registries (planning on the controller).

    ``credentials`` maps a registry host (``127.0.0.1:5002``) to ``{"username", "password"}``; each
    registry gets its own :class:`RegistryClient` sharing one transport. Every failure is
    ``StellaError("image_unresolved")`` with a reason that never contains credentials.
    """

    def __init__(self, credentials=None, insecure_registries=(), transport=None, timeout=15.0):
        self.credentials = dict(credentials or {})
        self.insecure_registries = tuple(insecure_registries or ())
        self.transport = transport or urllib_transport
        self.timeout = timeout
        self._clients = {}

    def _client(self, registry):
        if registry not in self._clients:
            cred = self.credentials.get(registry) or {}
            self._clients[registry] = RegistryClient(cred.get("username"), cred.get("password"),
                                                     self.insecure_registries, self.timeout, self.transport)
        return self._clients[registry]

    def _secrets(self):
        out = []
        for cred in self.credentials.values():
            user, password = cred.get("username") or "", cred.get("password") or ""
            out.extend([password])
            if user or password:
                out.append(base64.b64encode(("%s:%s" % (user, password)).encode("utf-8")).decode("ascii"))
        for client in self._clients.values():
            out.extend(client._tokens.values())
        return out

    def _fail(self, image, reason, cause=None, **evidence):
        reason = redact_text(redact_url(reason), self._secrets())
        evidence["image"] = image
        if cause:
            evidence["cause"] = cause
        raise StellaError("image_unresolved", "cannot resolve image %s: %s" % (image, reason), phase="resolve",
                          evidence=evidence)

    def _call(self, text, client, method, ref, path):
        try:
            return client.request(method, ref.registry, path, {"Accept": MANIFEST_ACCEPT},
                                  scope="repository:%s:pull" % ref.repository)
        except StellaError as exc:
            self._fail(text, "%s (%s)" % (exc.reason, exc.code), cause=exc.code)
        except (OSError, ValueError) as exc:
            self._fail(text, "registry %s unreachable (%s)" % (ref.registry, exc), cause="registry_unreachable")

    def _check_status(self, text, client, ref, tag, status, auth):
        if status == 200:
            return
        if status == 404:
            self._fail(text, "tag %s not found in %s/%s (HTTP 404)" % (tag, ref.registry, ref.repository),
                       status=status)
        if status in (401, 403):
            why = "credentials were refused" if client.has_credentials else "no credentials are configured"
            self._fail(text, "registry %s requires authentication (%s) and %s (HTTP %d)"
                       % (ref.registry, auth or "unknown scheme", why, status), cause="registry_auth_failed",
                       status=status)
        self._fail(text, "registry %s answered HTTP %d" % (ref.registry, status), status=status)

    def resolve(self, text):
        """``{reference, image (pinned), digest, mediaType, platforms, resolved}`` for one reference.

        A reference with a digest is kept without any request. A tag is resolved by manifest HEAD
        (``Docker-Content-Digest``) with GET as fallback; for an index (OCI index or Docker manifest
        list) the pinned digest is the index's own digest and its platforms are reported. GET bodies
        are hashed and must match ``Docker-Content-Digest``.
        """
        ref = parse_image_ref(text)
        if ref.digest:
            return {"reference": text, "image": ref.render(), "digest": ref.digest, "mediaType": None,
                    "platforms": [], "resolved": False}
        tag = ref.tag or "latest"
        client = self._client(ref.registry)
        path = "/v2/%s/manifests/%s" % (ref.repository, urllib.parse.quote(tag, safe=""))
        status, headers, _body, auth = self._call(text, client, "HEAD", ref, path)
        digest, media_type, platforms = None, "", []
        if status == 200:
            digest = headers.get("docker-content-digest")
            media_type = (headers.get("content-type") or "").split(";")[0].strip()
        elif status in (401, 403, 404):
            self._check_status(text, client, ref, tag, status, auth)
        if not (digest and _DIGEST_RE.match(digest)) or not media_type or media_type in INDEX_TYPES:
            status, headers, body, auth = self._call(text, client, "GET", ref, path)
            self._check_status(text, client, ref, tag, status, auth)
            try:
                document, computed, media_type = read_manifest(body, headers)
            except ValueError as exc:
                self._fail(text, str(exc))
            if digest and digest != computed:
                self._fail(text, "HEAD digest %s differs from GET digest %s (tag moved?)" % (digest, computed))
            digest = computed
            if media_type in INDEX_TYPES or "manifests" in document:
                platforms = platform_strings(document)
        ref.tag = tag
        return {"reference": text, "image": ref.with_digest(digest).render(), "digest": digest,
                "mediaType": media_type or None, "platforms": platforms, "resolved": True}

    def resolve_all(self, images):
        """``{reference: resolution}`` for every distinct reference, in sorted order."""
        return {image: self.resolve(image) for image in sorted(set(images))}
