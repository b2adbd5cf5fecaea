# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""OCI distribution API on targets (preflight) and the pieces planning on the controller shares.

:class:`RegistryApi` makes registry API calls with Basic / Bearer negotiation over one injectable
``transport(method, url, headers, timeout[, body])`` returning ``(status, headers, body)`` with
lower-cased header names (default :func:`urllib_transport`, standard library; ``body`` is given only for
the identity-token ``POST``), so unit tests replay real registry answers. :meth:`RegistryApi.request`
offers the credentials at once for a caller that passes the token scope; :meth:`RegistryApi.pull` asks
a repository's pull scope anonymously first and uses the credentials only when that is refused.

Shared with the controller's digest resolver (it imports them from here, nothing is copied): the
``Accept`` list and media types, :func:`read_manifest`, :func:`index_platforms`, :class:`RegistryApi`,
and the pure auth helpers of :mod:`engine.registry_auth` re-exported here (:func:`parse_challenge`,
:func:`read_challenge`, :func:`basic_authorization`, :func:`token_url`, :func:`token_request`,
:func:`read_token`, :func:`retry_after`, :func:`pull_scope`, :func:`credential_entry`,
:func:`credential_entries`, :func:`credential_secrets`). The preflight's client is
:class:`engine.registry_client.RegistryClient`.

Credentials never leave this module: errors and evidence carry URLs without userinfo, and
:meth:`RegistryApi.secrets` lists every password, identity token, Basic header value and token it held
or obtained, for redaction.
"""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_base_url, registry_key
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_auth import (
    CREDENTIAL_KEYS,
    OAUTH_CLIENT_ID,
    RATE_LIMITED,
    REFUSED,
    SOURCE_EXPLICIT,
    basic_authorization,
    credential_entries,
    credential_entry,
    credential_secrets,
    parse_challenge,
    pull_scope,
    read_challenge,
    read_token,
    retry_after,
    token_request,
    token_url,
)

# what the controller imports from here, the pure auth helpers of engine.registry_auth included
__all__ = [
    "MEDIA_OCI_INDEX",
    "MEDIA_OCI_MANIFEST",
    "MEDIA_DOCKER_LIST",
    "MEDIA_DOCKER_MANIFEST",
    "MANIFEST_ACCEPT",
    "INDEX_TYPES",
    "MAX_MANIFEST_BYTES",
    "REDIRECTS",
    "read_manifest",
    "index_platforms",
    "urllib_transport",
    "RegistryApi",
    "REFUSED",
    "RATE_LIMITED",
    "OAUTH_CLIENT_ID",
    "SOURCE_EXPLICIT",
    "CREDENTIAL_KEYS",
    "parse_challenge",
    "read_challenge",
    "retry_after",
    "pull_scope",
    "basic_authorization",
    "token_url",
    "token_request",
    "read_token",
    "credential_entry",
    "credential_entries",
    "credential_secrets",
]

MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MEDIA_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_ACCEPT = ", ".join((MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST, MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST))
INDEX_TYPES = (MEDIA_OCI_INDEX, MEDIA_DOCKER_LIST)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
REDIRECTS = (301, 302, 303, 307, 308)


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


def urllib_transport(method, url, headers, timeout, body=None):
    """Default transport: one HTTP request with urllib, no redirects followed implicitly."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        answer = exc.read() if exc.fp else b""
        return exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, answer
    except (urllib.error.URLError, socket.timeout, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StellaError("registry_unreachable", "%s: %s" % (redact_url(url), reason))


# -- auth negotiation (transport-agnostic, both sides) ------------------------------------------


class RegistryApi:
    """Registry API calls with Basic / Bearer negotiation over any ``transport``.

    Targets use it through :class:`engine.registry_client.RegistryClient` with :func:`urllib_transport`;
    planning on the controller gives it its ``requests`` transport. Credentials are ``username``/``password`` or an
    ``identitytoken`` (OAuth2 refresh token), with ``source`` a non-secret label of where they came from.

    :meth:`request` offers the credentials at once (for a caller that passes the token ``scope``);
    :meth:`pull` tries a repository's pull scope anonymously first and uses the credentials only when
    that is refused, keeping what worked for the next call under the same scope.
    """

    def __init__(
        self,
        username=None,
        password=None,
        insecure_registries=(),
        timeout=10.0,
        transport=None,
        identitytoken=None,
        source=None,
    ):
        self._username = username or None
        self._password = password or None
        self._entry = None
        if identitytoken:
            self._entry = {"identitytoken": identitytoken, "source": source or SOURCE_EXPLICIT}
        elif username:
            self._entry = {"username": username, "password": password or "", "source": source or SOURCE_EXPLICIT}
        self._extra_secrets = [identitytoken] if identitytoken else []
        self.insecure_registries = tuple(insecure_registries or ())
        self.timeout = timeout
        self.transport = transport or urllib_transport
        self._tokens = {}
        self._granted = {}

    @property
    def has_credentials(self):
        return self._entry is not None

    def credentials_for(self, registry):  # pylint: disable=unused-argument
        """The credentials used for ``registry``: ``{username, password, source}``, ``{identitytoken,
        source}`` or ``None``."""
        return self._entry

    def secrets(self):
        """Every secret value this client holds or obtained (for redaction)."""
        found = list(self._tokens.values()) + list(self._extra_secrets)
        if self._username or self._password:
            found.extend([self._password, basic_authorization(self._username or "", self._password).split(" ", 1)[1]])
        found.extend(v["authorization"].split(" ", 1)[1] for v in self._granted.values() if v["authorization"])
        return list(dict.fromkeys(s for s in found if s))

    def base_url(self, registry):
        return registry_base_url(registry, self.insecure_registries)

    def _fetch_token(self, params, scope, entry, fresh=False):
        """``(status, headers, token)`` of a token request (``token`` is ``None`` unless HTTP 200 with a
        token). Tokens are kept per request and identity; ``fresh`` asks again all the same. Raises
        ``StellaError``: ``registry_auth_failed`` for a 200 without a token, ``registry_unreachable``
        when the token service does not answer."""
        method, url, headers, body = token_request(params, scope, entry)
        key = (method, url, tuple(sorted((entry or {}).items())))
        if key in self._tokens and not fresh:
            return 200, {}, self._tokens[key]
        if body is None:
            status, answer_headers, answer = self.transport(method, url, headers, self.timeout)
        else:
            status, answer_headers, answer = self.transport(method, url, headers, self.timeout, body)
        if status != 200:
            return status, answer_headers, None
        if key in self._tokens:
            self._extra_secrets.append(self._tokens[key])
        self._tokens[key] = read_token(status, answer, url)
        return status, answer_headers, self._tokens[key]

    def _token(self, params, scope, entry=None):
        status, dummy, token = self._fetch_token(params, scope, entry)
        if token is None:
            raise StellaError(
                "registry_auth_failed",
                "token service %s answered HTTP %d" % (redact_url(str(params.get("realm"))), status),
            )
        return token

    def _send(self, method, url, headers, authorization):
        headers = dict(headers)
        if authorization:
            headers["Authorization"] = authorization
        return self.transport(method, url, headers, self.timeout)

    def request(self, method, registry, path, headers=None, scope=None):
        """One API call with auth negotiation. Returns ``(status, headers, body, auth)``.

        ``auth`` is ``None`` (none needed), ``"basic"`` or ``"bearer"``. A Bearer challenge with a realm
        gets a token for ``scope`` (else the challenge's own), with the credentials when there are some,
        anonymously otherwise. A 401 after that is returned as is, so callers can say "auth" in their
        reason.
        """
        url = self.base_url(registry) + path
        headers = dict(headers or {})
        status, resp_headers, body = self.transport(method, url, headers, self.timeout)
        if status != 401:
            return status, resp_headers, body, None
        scheme, params = parse_challenge(resp_headers.get("www-authenticate"))
        entry = self.credentials_for(registry)
        if scheme == "basic":
            if not (entry and entry.get("username")):
                return status, resp_headers, body, "basic"
            headers["Authorization"] = basic_authorization(entry["username"], entry.get("password"))
        elif scheme == "bearer":
            try:
                headers["Authorization"] = "Bearer " + self._token(params, scope, entry)
            except StellaError:
                return status, resp_headers, body, "bearer"
        else:
            return status, resp_headers, body, scheme
        status, resp_headers, body = self.transport(method, url, headers, self.timeout)
        return status, resp_headers, body, scheme

    def pull(self, method, registry, repository, path, headers=None):
        """One API call under ``repository``'s pull scope: anonymously first, then with the registry's
        credentials. Returns ``(status, headers, body, access)``.

        ``access`` says how the call was let through: ``{"pullAccess": "anonymous" | "credentials",
        "auth": None | "basic" | "bearer", "scope"[, "credentialSource"][, "anonymousRefused"]}``; it is
        ``None`` when the answer says nothing about access (HTTP 429 rate limit, 5xx). A Bearer challenge
        gets an anonymous token for the scope first; only when the token service or the registry refuses
        it (401/403) are the credentials offered (Basic registries: at once). What worked is kept and
        sent with the next call under the same scope (one token per scope); a kept token that is
        refused later is negotiated again.

        Raises ``StellaError("registry_auth_failed")`` when access is refused: anonymously with no
        credentials for the registry (the reason asks for them), or with the credentials given (token
        service 401/403, or the registry still 401/403), or the challenge is malformed;
        ``registry_unreachable`` when nothing answers. Errors carry ``credentialSource`` and
        ``pullScope`` in their evidence.
        """
        scope = pull_scope(repository)
        url = self.base_url(registry) + path
        headers = dict(headers or {})
        key = (registry_key(registry), scope)
        kept = self._granted.pop(key, None)
        if kept is not None:
            status, resp_headers, body = self._send(method, url, headers, kept["authorization"])
            if status not in REFUSED:
                self._granted[key] = kept
                return status, resp_headers, body, dict(kept["access"])
        fresh = kept is not None  # what was kept is refused now (an expired token): ask for new tokens
        status, resp_headers, body = self._send(method, url, headers, None)
        if status == 403:
            raise StellaError(
                "registry_auth_failed",
                "registry %s refused pull of %s (HTTP 403, no challenge to answer)" % (registry, repository),
                evidence={"pullScope": scope},
            )
        if status != 401:
            return status, resp_headers, body, self._grant(key, None, scope, None, None, status, resp_headers)
        challenge, problem = read_challenge(resp_headers.get("www-authenticate"))
        if problem:
            raise StellaError(
                "registry_auth_failed",
                "registry %s answered HTTP 401 for %s with %s" % (registry, repository, problem),
                evidence={"pullScope": scope},
            )
        scheme = challenge["scheme"]
        entry = self.credentials_for(registry)
        if scheme == "bearer":
            try:
                tstatus, theaders, token = self._fetch_token(challenge, scope, None, fresh)
            except StellaError as exc:
                if exc.code != "registry_auth_failed":
                    raise
                tstatus, theaders, token, why = None, {}, None, exc.reason
            if token:
                status, resp_headers, body = self._send(method, url, headers, "Bearer " + token)
                if status not in REFUSED:
                    return (
                        status,
                        resp_headers,
                        body,
                        self._grant(key, "Bearer " + token, scope, None, None, status, resp_headers),
                    )
                why = "the registry refused an anonymous token (HTTP %d)" % status
            elif tstatus == RATE_LIMITED:
                return tstatus, theaders, b"", None
            elif tstatus in REFUSED:
                why = "token service %s refused an anonymous token (HTTP %d)" % (challenge["realm"], tstatus)
            elif tstatus is not None:
                raise StellaError(
                    "registry_auth_failed",
                    "token service %s answered HTTP %d for %s" % (challenge["realm"], tstatus, scope),
                    evidence={"pullScope": scope},
                )
        else:
            why = "the registry asks for Basic credentials"
        if entry is None:
            raise self._refused(registry, repository, scope, None, why)
        source = entry.get("source") or SOURCE_EXPLICIT
        if scheme == "basic":
            if not entry.get("username"):
                raise self._refused(
                    registry,
                    repository,
                    scope,
                    source,
                    "the registry asks for Basic credentials, which an identity token cannot answer",
                )
            authorization = basic_authorization(entry["username"], entry.get("password"))
        else:
            try:
                tstatus, theaders, token = self._fetch_token(challenge, scope, entry, fresh)
            except StellaError as exc:
                exc.evidence = dict(exc.evidence or {}, credentialSource=source, pullScope=scope)
                raise
            if token is None:
                if tstatus == RATE_LIMITED:
                    return tstatus, theaders, b"", None
                verdict = "refused the credentials" if tstatus in REFUSED else "answered"
                raise self._refused(
                    registry,
                    repository,
                    scope,
                    source,
                    "token service %s %s (HTTP %d)" % (challenge["realm"], verdict, tstatus),
                )
            authorization = "Bearer " + token
        status, resp_headers, body = self._send(method, url, headers, authorization)
        if status in REFUSED:
            raise self._refused(registry, repository, scope, source, "the registry refused them (HTTP %d)" % status)
        return (
            status,
            resp_headers,
            body,
            self._grant(key, authorization, scope, scheme, source, status, resp_headers, anonymous_refused=why),
        )

    def _grant(self, key, authorization, scope, scheme, source, status, headers, anonymous_refused=None):
        """The ``access`` of an answer that let the call through (kept for the scope), ``None`` for one
        that says nothing about access (429, 5xx)."""
        if status == RATE_LIMITED or status >= 500:
            return None
        access = {
            "pullAccess": "credentials" if source else "anonymous",
            "auth": scheme or (authorization.split(" ", 1)[0].lower() if authorization else None),
            "scope": scope,
        }
        if source:
            access["credentialSource"] = source
        if anonymous_refused:
            access["anonymousRefused"] = anonymous_refused
        limits = {name: headers.get("ratelimit-" + name) for name in ("limit", "remaining")}
        if any(limits.values()):
            access["rateLimit"] = {k: v for k, v in limits.items() if v}
        self._granted[key] = {"authorization": authorization, "access": access}
        return dict(access)

    @staticmethod
    def _refused(registry, repository, scope, source, why):
        if source is None:
            reason = "registry %s refused anonymous pull of %s (%s): give credentials for %s (registry_credentials)" % (
                registry,
                repository,
                why,
                registry_key(registry),
            )
        else:
            reason = "registry %s refused pull of %s with the credentials from %s: %s" % (
                registry,
                repository,
                source,
                why,
            )
        evidence = {"pullScope": scope}
        if source:
            evidence["credentialSource"] = source
        return StellaError("registry_auth_failed", reason, evidence=evidence)

    def pull_access(self, registry, repository):
        """The ``access`` negotiated for pulling ``repository`` from ``registry`` (see :meth:`pull`), or ``None``."""
        kept = self._granted.get((registry_key(registry), pull_scope(repository)))
        return dict(kept["access"]) if kept else None
