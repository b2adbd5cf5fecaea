# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What the preflight asks a registry on the target: reachability (``/v2/``), pull access to the
image's repository, its manifest and the platforms it offers (:class:`RegistryClient`). Standard
library only.
"""

from __future__ import annotations

import json
import socket
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_key
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    INDEX_TYPES,
    MANIFEST_ACCEPT,
    REDIRECTS,
    RegistryApi,
    index_platforms,
    read_manifest,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry_auth import (
    RATE_LIMITED,
    REFUSED,
    basic_authorization,
    credential_entries,
    credential_secrets,
    read_challenge,
    retry_after,
)


class RegistryClient(RegistryApi):
    """What preflight asks a registry: reachability, pull access, manifests, platforms.

    ``credentials`` maps registries (any name :func:`registry_key` knows) to credential entries (see
    :func:`credential_entries`); each registry is offered only its own.
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
        credentials=None,
    ):
        super().__init__(username, password, insecure_registries, timeout, transport, identitytoken, source)
        self._by_registry = {}
        self.credentials = credentials

    @property
    def credentials(self):
        return dict(self._by_registry)

    @credentials.setter
    def credentials(self, mapping):
        self._by_registry = credential_entries(mapping)

    def credentials_for(self, registry):
        return self._by_registry.get(registry_key(registry)) or super().credentials_for(registry)

    def secrets(self):
        return list(dict.fromkeys(super().secrets() + credential_secrets(self._by_registry.values())))

    def ping(self, registry, mode="http"):
        """Reachability evidence for ``registry``.

        ``{url, reachable, httpStatus, authRequired[, challenge][, authenticated, credentialSource,
        authError][, rateLimited, retryAfter][, reason]}``. Reachable: ``/v2/`` answers 200, 401 with a
        well-formed challenge (``challenge``: its scheme, realm, service), or 429 (``rateLimited``).
        Unreachable: nothing answers (refused, DNS, timeout, TLS), or the answer is not a registry
        API's (another status, a 401 without a usable challenge); ``reason`` says which.
        When the challenge asks for auth and there are credentials for the registry, they are tried on
        ``/v2/`` (``authenticated``). ``mode="tcp"`` only opens a connection.
        """
        url = self.base_url(registry) + "/v2/"
        if mode == "tcp":
            host, port = _host_port(url)
            try:
                with socket.create_connection((host, port), timeout=self.timeout):
                    return {"url": url, "reachable": True}
            except OSError as exc:
                return {
                    "url": url,
                    "reachable": False,
                    "reason": "TCP connect to %s:%d failed: %s" % (host, port, exc.strerror or exc),
                }
        try:
            status, headers, dummy = self.transport("GET", url, {}, self.timeout)
        except StellaError as exc:
            return {"url": url, "reachable": False, "reason": exc.reason}
        result = {"url": url, "httpStatus": status}
        if status == 200:
            result.update(reachable=True, authRequired=False)
        elif status == 401:
            challenge, problem = read_challenge(headers.get("www-authenticate"))
            if problem:
                result.update(reachable=False, reason="HTTP 401 from /v2/ with %s: not a registry API answer" % problem)
            else:
                result.update(reachable=True, authRequired=True, challenge=challenge)
                entry = self.credentials_for(registry)
                if entry:
                    result.update(self._try_credentials(url, challenge, entry))
        elif status == RATE_LIMITED:
            result.update(reachable=True, rateLimited=True)
            if retry_after(headers):
                result["retryAfter"] = retry_after(headers)
        else:
            result.update(reachable=False, reason="unexpected HTTP %d from /v2/ (not a registry API answer)" % status)
        return result

    def _try_credentials(self, url, challenge, entry):
        """``/v2/`` with the registry's credentials: ``{authenticated, credentialSource[, authError,
        authErrorCode]}`` (or ``{rateLimited[, retryAfter]}`` when the answer is a rate limit)."""
        source = entry.get("source")
        result = {"credentialSource": source}
        try:
            if challenge["scheme"] == "basic":
                if not entry.get("username"):
                    return dict(
                        result,
                        authenticated=False,
                        authError="registry asks for Basic credentials, which "
                        "the identity token from %s cannot answer" % source,
                    )
                authorization = basic_authorization(entry["username"], entry.get("password"))
            else:
                status, headers, token = self._fetch_token(challenge, None, entry)
                if token is None:
                    if status == RATE_LIMITED:
                        return {
                            "rateLimited": True,
                            **({"retryAfter": retry_after(headers)} if retry_after(headers) else {}),
                        }
                    verdict = "refused the credentials from" if status in REFUSED else "answered HTTP %d for" % status
                    return dict(
                        result,
                        authenticated=False,
                        authError="token service %s %s %s (HTTP %d)" % (challenge["realm"], verdict, source, status),
                    )
                authorization = "Bearer " + token
            status, headers, dummy = self._send("GET", url, {}, authorization)
        except StellaError as exc:
            return dict(result, authenticated=False, authError=exc.reason, authErrorCode=exc.code)
        if status == 200:
            return dict(result, authenticated=True)
        if status == RATE_LIMITED:
            return {"rateLimited": True, **({"retryAfter": retry_after(headers)} if retry_after(headers) else {})}
        return dict(
            result,
            authenticated=False,
            authError="registry refused the credentials from %s on /v2/ (HTTP %d)" % (source, status),
        )

    def manifest(self, image):
        """Fetch ``image``'s manifest by digest (if pinned) or tag, under its pull scope (:meth:`pull`).

        Returns ``{"digest", "mediaType", "body"}`` (``body`` is the parsed JSON object).
        Raises ``StellaError`` with code ``image_unresolved`` (unknown tag/digest, bad manifest),
        ``registry_rate_limited`` (HTTP 429; ``retryAfter`` in its evidence), ``registry_unreachable``
        or ``registry_auth_failed``.
        """
        reference = image.digest or image.tag or "latest"
        path = "/v2/%s/manifests/%s" % (image.repository, reference)
        status, headers, body, dummy = self.pull(
            "GET", image.registry, image.repository, path, {"Accept": MANIFEST_ACCEPT}
        )
        _raise_rate_limit(status, headers, image)
        if status == 404:
            raise StellaError(
                "image_unresolved", "%s not found in registry %s (HTTP 404)" % (image.render(), image.registry)
            )
        if status != 200:
            raise StellaError(
                "image_unresolved", "registry %s answered HTTP %d for %s" % (image.registry, status, image.render())
            )
        try:
            document, digest, media_type = read_manifest(body, headers)
        except ValueError as exc:
            raise StellaError("image_unresolved", "registry %s: %s for %s" % (image.registry, exc, image.render()))
        return {"digest": digest, "mediaType": media_type, "body": document}

    def blob_json(self, image, digest):
        path = "/v2/%s/blobs/%s" % (image.repository, digest)
        status, headers, body, dummy = self.pull("GET", image.registry, image.repository, path)
        if status in REDIRECTS and headers.get("location"):
            status, headers, body = self.transport(
                "GET", urllib.parse.urljoin(self.base_url(image.registry) + path, headers["location"]), {}, self.timeout
            )
        _raise_rate_limit(status, headers, image)
        if status != 200:
            raise StellaError("image_unresolved", "blob %s of %s: HTTP %d" % (digest, image.name, status))
        return json.loads(body.decode("utf-8"))

    def platforms(self, image):
        """Platforms ``image`` offers: from its index, or from its single manifest's config blob (with
        the access its manifest request negotiated)."""
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

    def image_access(self, image):
        """The access negotiated for pulling ``image`` (see :meth:`RegistryApi.pull`), or ``None``."""
        return self.pull_access(image.registry, image.repository)


def _raise_rate_limit(status, headers, image):
    if status == RATE_LIMITED:
        after = retry_after(headers)
        raise StellaError(
            "registry_rate_limited",
            "registry %s answered HTTP 429 (rate limit%s) for %s"
            % (image.registry, "; Retry-After: %s" % after if after else "", image.render()),
            evidence={"retryAfter": after} if after else {},
        )


def _host_port(url):
    parsed = urllib.parse.urlsplit(url)
    return parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
