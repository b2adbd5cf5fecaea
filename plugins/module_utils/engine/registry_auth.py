# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Registry auth, pure (both sides): ``WWW-Authenticate`` challenges, token requests and answers, and
per-registry credentials.

Import these through :mod:`engine.registry`, which re-exports them (the controller takes the registry
API from there). Standard library only; nothing here does I/O.
"""

from __future__ import annotations

import base64
import json
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_key

# Answers that refuse access: a registry asks for (other) credentials with 401, or denies with 403.
REFUSED = (401, 403)
RATE_LIMITED = 429
# ``client_id`` of the OAuth2 refresh-token grant (Docker's identity tokens).
OAUTH_CLIENT_ID = "stellaops.runtime"
# Label of credentials given without one (the controller's explicit ``registry_credentials``).
SOURCE_EXPLICIT = "registry_credentials"
CREDENTIAL_KEYS = ("username", "password", "identitytoken", "source")

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _read_token_chars(text, start):
    end = start
    while end < len(text) and text[end] in _TOKEN_CHARS:
        end += 1
    return text[start:end], end


def _skip(text, start, chars):
    while start < len(text) and text[start] in chars:
        start += 1
    return start


def _read_quoted(text, start):
    """The quoted-string value starting after its opening quote: ``(value, end, closed)``."""
    out = []
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index + 1])
            index += 2
            continue
        if char == '"':
            return "".join(out), index + 1, True
        out.append(char)
        index += 1
    return "".join(out), index, False


def parse_challenge(header):
    """``Bearer realm="...",service="..."`` -> ``("bearer", {"realm": ..., ...})``.

    The first challenge of a ``WWW-Authenticate`` value (RFC 9110 syntax): the scheme lower-cased,
    parameter names lower-cased, values as tokens or quoted strings (which may hold commas and
    backslash-escaped quotes). Parsing stops at the next challenge or at a malformed parameter (an
    unterminated quote drops that parameter). ``(None, {})`` for an empty header.
    """
    text = (header or "").strip()
    scheme, index = _read_token_chars(text, 0)
    if not scheme:
        return None, {}
    params = {}
    while index < len(text):
        index = _skip(text, index, " \t,")
        name, after = _read_token_chars(text, index)
        if not name:
            break
        equals = _skip(text, after, " \t")
        if equals >= len(text) or text[equals] != "=":
            break  # the scheme of a next challenge (or a token68), not a parameter
        value_at = _skip(text, equals + 1, " \t")
        if value_at < len(text) and text[value_at] == '"':
            value, index, closed = _read_quoted(text, value_at + 1)
            if not closed:
                break
        else:
            value, index = _read_token_chars(text, value_at)
        params[name.lower()] = value
    return scheme.lower(), params


def read_challenge(header):
    """What a 401's ``WWW-Authenticate`` asks for, judged as a registry API challenge.

    ``({"scheme", "realm"[, "service"][, "scope"]}, None)`` for a well-formed one (Basic; Bearer with an
    http(s) realm), else ``(None, problem)`` where ``problem`` says what is wrong ("no WWW-Authenticate
    challenge", "a Bearer challenge without a realm", "an unsupported ... challenge"). The realm is
    returned without userinfo. Carries no credentials or tokens.
    """
    scheme, params = parse_challenge(header)
    if scheme is None:
        return None, "no WWW-Authenticate challenge"
    if scheme == "bearer":
        realm = params.get("realm")
        if not realm:
            return None, "a Bearer challenge without a realm"
        if urllib.parse.urlsplit(realm).scheme not in ("http", "https"):
            return None, "a Bearer challenge whose realm %r is not an http(s) URL" % redact_url(realm)[:200]
    elif scheme != "basic":
        return None, "an unsupported %r challenge" % scheme[:40]
    challenge = {"scheme": scheme}
    for key in ("realm", "service", "scope"):
        if params.get(key):
            challenge[key] = redact_url(params[key]) if key == "realm" else params[key]
    return challenge, None


def retry_after(headers):
    """The ``Retry-After`` of an answer (seconds or an HTTP date, as sent), or ``None``."""
    value = str((headers or {}).get("retry-after") or "").strip()
    return value or None


def pull_scope(repository):
    """``repository:<repository>:pull``: the token scope of pulling ``repository``."""
    return "repository:%s:pull" % repository


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


def token_request(params, scope=None, entry=None):
    """``(method, url, headers, body)`` of the token request for a Bearer challenge's ``params`` (pure).

    Without ``entry``: an anonymous ``GET realm?service=...&scope=...``. With ``{username, password}``:
    the same ``GET`` with HTTP Basic credentials. With ``{identitytoken}`` (an OAuth2 refresh token, as
    Docker's client config keeps it): ``POST realm`` with the form
    ``grant_type=refresh_token&refresh_token=...&service=...&scope=...&client_id=stellaops.runtime``.
    """
    if entry and entry.get("identitytoken"):
        realm = params.get("realm")
        if not realm:
            raise StellaError("registry_auth_failed", "registry asked for a Bearer token without a realm")
        form = [("grant_type", "refresh_token"), ("refresh_token", entry["identitytoken"])]
        form += [(k, v) for k, v in (("service", params.get("service")), ("scope", scope or params.get("scope"))) if v]
        form.append(("client_id", OAUTH_CLIENT_ID))
        return (
            "POST",
            realm,
            {"Content-Type": "application/x-www-form-urlencoded"},
            urllib.parse.urlencode(form).encode("ascii"),
        )
    headers = {}
    if entry and entry.get("username"):
        headers["Authorization"] = basic_authorization(entry["username"], entry.get("password"))
    return "GET", token_url(params, scope), headers, None


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
    if not token or not isinstance(token, str):
        raise StellaError("registry_auth_failed", "token service %s returned no token" % realm)
    return token


def credential_entry(registry, entry):
    """One registry's credentials checked: ``{"username", "password", "source"}`` or
    ``{"identitytoken", "source"}`` (``source``, a non-secret label, defaults to
    ``registry_credentials``). Raises ``StellaError("invalid_request")`` naming ``registry`` only."""
    if not isinstance(entry, dict):
        raise StellaError("invalid_request", "registry_credentials[%s] must be a mapping" % registry)
    unknown = sorted(str(k) for k in entry if k not in CREDENTIAL_KEYS)
    if unknown:
        raise StellaError(
            "invalid_request",
            "registry_credentials[%s] has unknown key(s) %s (allowed: %s)"
            % (registry, ", ".join(unknown), ", ".join(CREDENTIAL_KEYS)),
        )
    source = entry.get("source")
    if source is not None and not isinstance(source, str):
        raise StellaError("invalid_request", "registry_credentials[%s].source must be a string" % registry)
    if entry.get("identitytoken"):
        if entry.get("password"):
            raise StellaError(
                "invalid_request", "registry_credentials[%s] gives both password and identitytoken; give one" % registry
            )
        found = {"identitytoken": str(entry["identitytoken"])}
    elif entry.get("username"):
        found = {"username": str(entry["username"]), "password": str(entry.get("password") or "")}
    else:
        raise StellaError(
            "invalid_request", "registry_credentials[%s] needs username and password, or identitytoken" % registry
        )
    found["source"] = source or SOURCE_EXPLICIT
    return found


def credential_entries(mapping):
    """``{registry: entry}`` with keys normalised by :func:`registry_key` (``index.docker.io`` and
    ``https://index.docker.io/v1/`` are ``docker.io``) and entries checked by :func:`credential_entry`.
    Two names of one registry must give the same credentials."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise StellaError("invalid_request", "registry_credentials must map registry hosts to credentials")
    found = {}
    for name, entry in mapping.items():
        key = registry_key(name)
        if not key:
            raise StellaError("invalid_request", "registry_credentials has an empty registry name")
        checked = credential_entry(key, entry)
        if key in found and found[key] != checked:
            raise StellaError(
                "invalid_request", "registry_credentials names registry %s twice with different credentials" % key
            )
        found[key] = checked
    return found


def credential_secrets(entries):
    """Every secret value of credential entries (for redaction): passwords, identity tokens and the
    Basic header values user names and passwords make."""
    found = []
    for entry in entries or ():
        if not isinstance(entry, dict):
            continue
        for key in ("password", "identitytoken"):
            if entry.get(key):
                found.append(str(entry[key]))
        if entry.get("username") or entry.get("password"):
            found.append(basic_authorization(entry.get("username") or "", entry.get("password")).split(" ", 1)[1])
    return found
