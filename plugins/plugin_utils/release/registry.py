# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This plugin_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Digest resolution for planning on the controller, over ``requests``.

:class:`DigestResolver` turns image tags into manifest digests across registries. It owns one
``requests.Session`` (created at the first request, closed by :meth:`DigestResolver.close` or the
``with`` block), so every image and every registry of a plan, and their token services, reuse the
same connection pool. Basic auth and the Bearer token flow are negotiated by ``RegistryApi`` of
module_utils/engine/registry.py (one definition for targets and controller); plain HTTP is used
for loopback and ``insecure_registries``; redirects are returned, not followed. Each request has
connect and read timeouts of ``timeout`` seconds, the body must arrive within that deadline too, and it
is never read beyond the manifest size limit. Credentials and tokens never reach an error, a log or
evidence; URLs are reported without userinfo, and ``~/.netrc`` is never consulted.

``requests`` is imported at the first request (``load`` of execution/http.py): a missing library fails
at first use with ``requests is required on the controller``, never at import.
"""

from __future__ import annotations

import re
import time
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DIGEST_RE
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import parse_image_ref
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    INDEX_TYPES,
    MANIFEST_ACCEPT,
    MAX_MANIFEST_BYTES,
    REDIRECTS,
    RegistryApi,
    index_platforms,
    read_manifest,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.credentials import RegistryCredentials

CHUNK_BYTES = 64 * 1024
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")

# Answers that mean "ask again later": a rate limit (Docker Hub's 429) and a gateway or registry that is
# briefly unavailable. Each request is tried at most RETRIES + 1 times; between tries planning waits what
# Retry-After asks (at most RETRY_AFTER_MAX seconds), else (no Retry-After, one in the past, or one that is
# neither seconds nor an HTTP date) an exponential backoff (0.5 s, 1 s, 2 s, ...).
RETRY_STATUSES = (429, 502, 503, 504)
RETRIES = 4
RETRY_AFTER_MAX = 30.0
BACKOFF_FACTOR = 0.5
_RETRY_CLASS: dict[str, type] = {}  # {"class": RegistryRetry}, defined at the first request


def retry_policy(waits, retries=None, retry_after_max=None, backoff_factor=None):
    """urllib3's ``Retry`` for registry requests: ``RETRY_STATUSES`` on GET, HEAD and POST (token
    requests), Retry-After honoured up to ``retry_after_max`` seconds, the last answer returned (not
    raised) when the tries are spent. Every wait is appended to ``waits`` as ``{url, status,
    waitedSeconds}`` (the URL without userinfo or query)."""
    require_requests()
    retries = RETRIES if retries is None else retries
    retry_after_max = RETRY_AFTER_MAX if retry_after_max is None else retry_after_max
    backoff_factor = BACKOFF_FACTOR if backoff_factor is None else backoff_factor
    if "class" not in _RETRY_CLASS:
        from urllib3.exceptions import InvalidHeader  # pylint: disable=import-outside-toplevel
        from urllib3.util.retry import Retry  # pylint: disable=import-outside-toplevel

        class RegistryRetry(Retry):
            """Retry that caps Retry-After and records each wait in a list shared by its copies."""

            waits = None
            retry_after_cap = RETRY_AFTER_MAX

            def new(self, **kw):
                copy = super().new(**kw)
                copy.waits, copy.retry_after_cap = self.waits, self.retry_after_cap
                return copy

            def get_backoff_time(self):
                # from the first retry on (urllib3 waits nothing before its second try): 0.5 s, 1 s, 2 s, ...
                tries = len(self.history)
                return min(self.backoff_max, self.backoff_factor * (2 ** (tries - 1))) if tries else 0

            def parse_retry_after(self, retry_after):
                return min(float(super().parse_retry_after(retry_after)), self.retry_after_cap)

            def get_retry_after(self, response):
                # a Retry-After that is neither a count of seconds nor an HTTP date (``soon``, ``-5``, ``1.5``)
                # asks for no particular wait: the default back-off, never "unreachable"
                try:
                    return super().get_retry_after(response)
                except (InvalidHeader, ValueError, OverflowError):
                    return None

            def sleep(self, response=None):
                started = time.monotonic()
                super().sleep(response)
                if self.waits is not None:
                    last = self.history[-1] if self.history else None
                    self.waits.append(
                        {
                            "url": redact_url((last.url if last else "") or "").split("?")[0],
                            "status": last.status if last else None,
                            "waitedSeconds": round(time.monotonic() - started, 2),
                        }
                    )

        _RETRY_CLASS["class"] = RegistryRetry
    policy = _RETRY_CLASS["class"](
        total=retries,
        connect=0,
        read=False,
        redirect=0,
        status=retries,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=("GET", "HEAD", "POST"),
        backoff_factor=backoff_factor,
        raise_on_status=False,
        respect_retry_after_header=True,
    )
    policy.waits, policy.retry_after_cap = waits, retry_after_max
    return policy


def describe_waits(waits):
    """``"after 5 tries over 7.5 s"`` for the waits of one request (``""`` when there were none)."""
    if not waits:
        return ""
    return " after %d tries over %g s" % (len(waits) + 1, round(sum(w["waitedSeconds"] for w in waits), 1))


def platform_strings(index):
    """``["linux/amd64", "linux/arm64/v8"]`` from an index / manifest list (sorted, unique)."""
    return sorted(
        {
            "/".join(p[k] for k in ("os", "architecture", "variant") if p.get(k))
            for p in index_platforms(index)
            if p.get("os")
        }
    )


def require_requests():
    """The ``requests`` module; ``StellaError("requests_missing")`` when it cannot be imported."""
    requests = _requests.load()
    if requests is None:
        raise StellaError(
            "requests_missing",
            "requests is required on the controller (pip install -r "
            "requirements.txt of stellaops.runtime, into the Python that runs ansible): %s"
            % (_requests.import_error() or "ImportError"),
        )
    return requests


def _describe(exc, timeout, requests):
    """A short, credential-free reason for a ``requests`` exception."""
    if isinstance(exc, requests.Timeout):
        return "timed out after %g s" % timeout
    text = str(exc)
    found = _ERRNO.search(text)
    if found:
        return found.group(0).strip()
    return "%s: %s" % (type(exc).__name__, text or "request failed")


class _KeepHeaders:
    """Request auth that changes nothing: the negotiated ``Authorization`` header is the only
    credential sent, and ``requests`` never substitutes one from ``~/.netrc`` (any callable is an
    ``auth`` for ``requests``; a set one turns the netrc lookup off)."""

    def __call__(self, request):
        return request


_KEEP_HEADERS = _KeepHeaders()


class RequestsTransport:
    """The transport ``RegistryApi`` (module_utils/engine/registry.py) calls, ``(method, url, headers, timeout)
    -> (status, headers, body)``, over one ``requests.Session``. Redirects are returned, not followed."""

    def __init__(self, session=None, max_body=MAX_MANIFEST_BYTES):
        self.requests = require_requests()
        self.owns_session = session is None
        self.session = session if session is not None else self.requests.Session()
        self.max_body = max_body
        # every wait between tries, in order (see retry_policy); a given session keeps its own adapters
        self.waits = []
        if self.owns_session:
            adapter = self.requests.adapters.HTTPAdapter(max_retries=retry_policy(self.waits))
            self.session.mount("http://", adapter)
            self.session.mount("https://", adapter)

    def __call__(self, method, url, headers, timeout, body=None):
        deadline = time.monotonic() + timeout
        try:
            response = self.session.request(
                method,
                url,
                headers=headers,
                data=body,
                auth=_KEEP_HEADERS,
                timeout=timeout,
                allow_redirects=False,
                stream=True,
            )
            with response:
                body = self._read(response, url, deadline, timeout)
        except self.requests.RequestException as exc:
            raise StellaError(
                "registry_unreachable", "%s: %s" % (redact_url(url), redact_url(_describe(exc, timeout, self.requests)))
            )
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, body

    def _read(self, response, url, deadline, timeout):
        """The body, at most ``max_body + 1`` bytes (so a caller can tell it was too large)."""
        chunks, size = [], 0
        for chunk in response.iter_content(CHUNK_BYTES):
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body:
                break
            if time.monotonic() > deadline:
                raise StellaError(
                    "registry_unreachable", "%s: the answer took longer than %g s" % (redact_url(url), timeout)
                )
        return b"".join(chunks)[: self.max_body + 1]

    def close(self):
        if self.owns_session:
            self.session.close()


class DigestResolver:
    """Resolve tags to manifest digests across registries (planning on the controller).

    ``credentials`` maps a registry host (``127.0.0.1:5002``) to ``{"username", "password"}``; each
    registry gets its own :class:`RegistryApi` (its own token cache) sharing one transport: by
    default a :class:`RequestsTransport` over ``session`` (or a new ``requests.Session``), or any
    ``transport`` callable (tests). Every failure is ``StellaError("image_unresolved")`` with a reason
    that never contains credentials; ``evidence["cause"]`` keeps the underlying code.
    """

    def __init__(self, credentials=None, insecure_registries=(), transport=None, timeout=15.0, session=None):
        if not isinstance(credentials, RegistryCredentials):
            credentials = RegistryCredentials(credentials, config_path=False)
        self.credentials = credentials
        self.insecure_registries = tuple(insecure_registries or ())
        self.transport = transport
        self.timeout = timeout
        self._session = session
        self._owned = None
        self._clients = {}
        self._sources = {}
        self._first_wait = 0
        # registries that answered a referrers request as a registry without the OCI 1.1 referrers API does
        # (release/signatures.py): not asked again by this resolver
        self.referrers_unsupported = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Close the session this resolver opened (an injected ``session`` stays open)."""
        if self._owned is not None:
            self._owned.close()
            self._owned, self.transport = None, None
        self._clients = {}

    def _transport(self):
        if self.transport is None:
            self._owned = self.transport = RequestsTransport(self._session)
        return self.transport

    def _client(self, registry):
        if registry not in self._clients:
            cred = self.credentials.get(registry) or {}
            self._clients[registry] = RegistryApi(
                cred.get("username"),
                cred.get("password"),
                self.insecure_registries,
                self.timeout,
                self._transport(),
                identitytoken=cred.get("identitytoken"),
                source=cred.get("source"),
            )
            self._sources[registry] = cred.get("source")
        return self._clients[registry]

    def _secrets(self):
        out = list(self.credentials.secrets())
        for client in self._clients.values():
            out.extend(client.secrets())
        return out

    def _waits(self):
        """The transport's list of waits between tries (``[]`` for a transport that does not retry)."""
        waits = getattr(self.transport, "waits", None)
        return waits if waits is not None else []

    def _fail(self, image, reason, cause=None, **evidence):
        reason = redact_text(redact_url(reason), self._secrets())
        evidence["image"] = image
        if cause:
            evidence["cause"] = cause
        raise StellaError(
            "image_unresolved", "cannot resolve image %s: %s" % (image, reason), phase="resolve", evidence=evidence
        )

    def _call(self, text, client, method, ref, path):
        try:
            return client.request(
                method, ref.registry, path, {"Accept": MANIFEST_ACCEPT}, scope="repository:%s:pull" % ref.repository
            )
        except StellaError as exc:
            self._fail(text, "%s (%s)" % (exc.reason, exc.code), cause=exc.code)
        except (OSError, ValueError) as exc:
            self._fail(text, "registry %s unreachable (%s)" % (ref.registry, exc), cause="registry_unreachable")

    def _check_status(self, text, client, ref, tag, status, auth):
        if status == 200:
            return
        if status == 404:
            self._fail(
                text, "tag %s not found in %s/%s (HTTP 404)" % (tag, ref.registry, ref.repository), status=status
            )
        if status in (401, 403):
            why = "credentials were refused" if client.has_credentials else "no credentials are configured"
            if not client.has_credentials and self.credentials.warning_for(ref.registry):
                why += " (%s)" % self.credentials.warning_for(ref.registry)
            self._fail(
                text,
                "registry %s requires authentication (%s) and %s (HTTP %d)"
                % (ref.registry, auth or "unknown scheme", why, status),
                cause="registry_auth_failed",
                status=status,
            )
        waits = self._waits()[self._first_wait :]
        if status in RETRY_STATUSES:
            what = "rate limit (HTTP 429)" if status == 429 else "HTTP %d" % status
            self._fail(
                text,
                "registry %s answered %s%s; try again later%s"
                % (
                    ref.registry,
                    what,
                    describe_waits(waits) or " and was not asked again",
                    ", or log in (docker login / registry_credentials): a registry's rate limit is often higher for "
                    "authenticated pulls"
                    if status == 429
                    else "",
                ),
                cause="registry_rate_limited" if status == 429 else "registry_unavailable",
                status=status,
                waits=waits,
            )
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
            return {
                "reference": text,
                "image": ref.render(),
                "digest": ref.digest,
                "mediaType": None,
                "platforms": [],
                "resolved": False,
            }
        tag = ref.tag or "latest"
        try:
            client = self._client(ref.registry)
        except StellaError as exc:
            self._fail(text, exc.reason, cause=exc.code)
        self._first_wait = len(self._waits())
        path = "/v2/%s/manifests/%s" % (ref.repository, urllib.parse.quote(tag, safe=""))
        status, headers, _body, auth = self._call(text, client, "HEAD", ref, path)
        digest, media_type, platforms = None, "", []
        if status == 200:
            digest = headers.get("docker-content-digest")
            media_type = (headers.get("content-type") or "").split(";")[0].strip()
        elif status in (401, 403, 404) + RETRY_STATUSES:
            # refused, unknown, or still unavailable after the tries: a GET would be answered the same
            self._check_status(text, client, ref, tag, status, auth)
        if not (digest and DIGEST_RE.match(digest)) or not media_type or media_type in INDEX_TYPES:
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
        found = {
            "reference": text,
            "image": ref.with_digest(digest).render(),
            "digest": digest,
            "mediaType": media_type or None,
            "platforms": platforms,
            "resolved": True,
        }
        if self._sources.get(ref.registry):
            found["credentialSource"] = self._sources[ref.registry]
        waits = self._waits()[self._first_wait :]
        if waits:
            found["registryWaits"] = waits
        return found

    def fetch(self, image, path, accept=None, max_bytes=None, phase="plan"):
        """``(status, headers, body)`` of one GET of ``path`` in ``image``'s registry under its repository's
        pull scope, over this resolver's session and token cache (signature discovery). The body is read
        at most to ``max_bytes`` + 1 (the transport's limit otherwise); one redirect (a blob on a storage
        service) is followed without credentials. Raises ``StellaError`` ``registry_auth_failed`` (HTTP
        401/403) or ``registry_unreachable`` (no answer, or 429/5xx after the tries), with ``phase``."""
        ref = parse_image_ref(image)
        headers = {"Accept": accept} if accept else {}
        transport = self._transport()
        saved = getattr(transport, "max_body", None)
        if max_bytes is not None and saved is not None:
            transport.max_body = max_bytes
        where, first = "%s/%s" % (ref.registry, ref.repository), len(self._waits())
        try:
            client = self._client(ref.registry)
            status, answer, body, _auth = client.request(
                "GET", ref.registry, path, headers, scope="repository:%s:pull" % ref.repository
            )
            if status in REDIRECTS and answer.get("location"):
                location = urllib.parse.urljoin(client.base_url(ref.registry) + path, answer["location"])
                status, answer, body = transport("GET", location, headers, self.timeout)
        except StellaError as exc:
            code = exc.code if exc.code == "registry_auth_failed" else "registry_unreachable"
            reason = redact_text(redact_url("registry %s: %s" % (where, exc.reason)), self._secrets())
            raise StellaError(code, reason, phase=phase, evidence={"image": image}) from None
        except (OSError, ValueError) as exc:
            reason = redact_text(redact_url("registry %s unreachable (%s)" % (where, exc)), self._secrets())
            raise StellaError("registry_unreachable", reason, phase=phase, evidence={"image": image}) from None
        finally:
            if max_bytes is not None and saved is not None:
                transport.max_body = saved
        if status in (401, 403):
            raise StellaError(
                "registry_auth_failed",
                "registry %s refused reading %s (HTTP %d): give credentials that may pull it"
                % (ref.registry, ref.repository, status),
                phase=phase,
                evidence={"image": image, "status": status},
            )
        if status in RETRY_STATUSES or status >= 500:
            raise StellaError(
                "registry_unreachable",
                "registry %s answered HTTP %d for %s%s"
                % (ref.registry, status, path, describe_waits(self._waits()[first:])),
                phase=phase,
                evidence={"image": image, "status": status},
            )
        return status, answer, body

    def resolve_all(self, images):
        """``{reference: resolution}`` for every distinct reference, in sorted order."""
        return {image: self.resolve(image) for image in sorted(set(images))}
