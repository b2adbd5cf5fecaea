# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The preflight's registry part: the credentials of a request, the image's pull access and platforms
as observed, the ``registry_access`` check, the ``registry`` evidence, and keeping secrets out of the
result (:func:`redacted`, :func:`mask_credentials`). Standard library only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import registry_key
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    basic_authorization,
    credential_entries,
    credential_secrets,
)

AUTH_FAILED = "registry_auth_failed"  # one of contract.vocabulary.PREFLIGHT_CODES


def request_credentials(req, source="registry_username"):
    """``{registry: entry}`` of a preflight request: its ``registry_credentials`` (keys normalised), and
    ``registry_username``/``registry_password`` (or ``registry_url``'s userinfo; ``source`` says which)
    for their registry, the one of ``registry_url``, else the image's, where they win."""
    found = credential_entries(req.get("registry_credentials"))
    own = req.get("registry") or (req["image"].registry if req.get("image") else None)
    if req.get("registry_username") and own:
        found[registry_key(own)] = {
            "username": req["registry_username"],
            "password": req.get("registry_password") or "",
            "source": source,
        }
    return found


def observe_image(registry, image):
    """``(pull, platform)`` observations of ``image`` through ``registry`` (a ``RegistryClient``): one
    manifest request, under the pull access it negotiates (anonymous first, then the registry's
    credentials), answers both. ``pull`` is the access (``pullAccess``, ``auth``, ``scope``,
    ``credentialSource``, ...), or ``{error, code}`` when refused, ``{rateLimited, retryAfter, reason}``
    on a 429, ``{skipped: <code>}`` when the registry did not answer; ``platform`` is ``{platforms}``,
    ``{error}`` or ``{skipped}``."""
    if image is None:
        return {"skipped": "no image_reference"}, {"skipped": "no image_reference"}
    try:
        platforms = registry.platforms(image)
    except StellaError as exc:
        access = registry.image_access(image)
        if access:  # access was granted; the manifest itself is the problem
            return dict(access, registry=image.registry), {"error": exc.reason}
        if exc.code == AUTH_FAILED:
            return dict(exc.evidence or {}, registry=image.registry, error=exc.reason, code=exc.code), {
                "skipped": AUTH_FAILED
            }
        if exc.code == "registry_rate_limited":
            limited = {"registry": image.registry, "rateLimited": True, "reason": exc.reason}
            if (exc.evidence or {}).get("retryAfter"):
                limited["retryAfter"] = exc.evidence["retryAfter"]
            return limited, {"skipped": "registry rate-limited: %s" % exc.reason}
        return {"registry": image.registry, "skipped": exc.code}, {"error": exc.reason}
    return dict(registry.image_access(image) or {}, registry=image.registry), {"platforms": platforms}


def registry_access(registry, pull):
    """The ``registry_access`` check from the ``registry`` (``/v2/``) and ``pull`` observations:
    ``(status, code, reason)`` with status ``passed``, ``failed`` (credentials refused on ``/v2/`` or the
    pull refused; ``registry_auth_failed`` unless nothing answered) or ``skipped`` (no image, a rate
    limit, a registry that did not answer)."""
    refused = []
    if registry.get("authenticated") is False:
        refused.append(
            (
                registry.get("authErrorCode") or AUTH_FAILED,
                "registry %s: %s" % (registry.get("registry"), registry.get("authError")),
            )
        )
    if pull.get("error"):
        refused.append((pull.get("code") or AUTH_FAILED, pull["error"]))
    if refused:
        return "failed", refused[0][0], "; ".join(why for dummy, why in refused)
    if pull.get("pullAccess") or registry.get("authenticated"):
        return "passed", AUTH_FAILED, ""
    if pull.get("rateLimited"):
        return "skipped", None, pull.get("reason") or "registry rate-limited"
    return "skipped", None, pull.get("skipped") or "no image_reference"


def registry_evidence(req, registry, pull):
    """The ``registry`` evidence: reachability of the registry checked, then pull access to the image.

    ``challenge`` (scheme, realm, service of the ``/v2/`` challenge), ``authenticated`` (credentials given
    for the registry, tried on ``/v2/``), ``rateLimited``/``retryAfter`` (a 429), ``pullAccess``
    (``anonymous``, ``credentials``, or ``None`` when refused), ``credentialSource`` (label of the
    credentials used), ``pullScope``, ``pullRegistry`` (when the image's registry is not the one checked),
    ``rateLimit`` (the registry's ``RateLimit-*`` headers). Never a credential or token.
    """
    keep = (
        "registry",
        "url",
        "reachable",
        "httpStatus",
        "authRequired",
        "challenge",
        "authenticated",
        "authError",
        "rateLimited",
        "retryAfter",
        "reason",
        "skipped",
    )
    data = {k: registry.get(k) for k in keep if k in registry}
    if "url" in data:
        data["url"] = redact_url(data["url"])
    data["mode"] = req["registry_reachability_mode"]
    credentials = req.get("credentials") or {}
    names = [n for n in (req.get("registry"), req["image"].registry if req.get("image") else None) if n]
    data["credentialsSupplied"] = any(registry_key(n) in credentials for n in names)
    if "pullAccess" in pull or "error" in pull:
        data["pullAccess"] = pull.get("pullAccess")
        if pull.get("scope") or pull.get("pullScope"):
            data["pullScope"] = pull.get("scope") or pull.get("pullScope")
        if pull.get("registry") and registry_key(pull["registry"]) != registry_key(data.get("registry") or ""):
            data["pullRegistry"] = pull["registry"]
    if pull.get("rateLimit"):
        data["rateLimit"] = pull["rateLimit"]
    if pull.get("rateLimited"):
        data["rateLimited"] = True
        if pull.get("retryAfter"):
            data.setdefault("retryAfter", pull["retryAfter"])
    source = pull.get("credentialSource") or registry.get("credentialSource")
    if source:
        data["credentialSource"] = source
    return data


def secrets_of(credentials, registry):
    """Every secret of a preflight: those of its ``credentials`` and those ``registry`` (a
    ``RegistryClient``, or a stand-in without ``secrets()``) held or obtained."""
    held = getattr(registry, "secrets", None)
    return credential_secrets(credentials.values()) + (list(held()) if callable(held) else [])


def redacted(data, secrets):
    """``data`` (dicts, lists, strings) with every secret value replaced by ``********`` (pure)."""
    if isinstance(data, str):
        return redact_text(data, secrets)
    if isinstance(data, dict):
        return {k: redacted(v, secrets) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redacted(v, secrets) for v in data]
    return data


def credential_log_values(mapping, other_secrets=()):
    """``(public, secret)`` strings of a raw ``registry_credentials`` option (pure).

    ``public``: its user names and ``source`` labels, which are not secrets. The option is ``no_log``, so
    Ansible would mask each of them wherever it appears in the module's output (a Docker Hub user name
    is often the namespace of its images); a module drops them from its no_log values. A value that is
    also a secret (a password or identity token of the mapping, or a string in ``other_secrets``, the
    values of the module's other no_log options) stays masked.
    ``secret``: the Basic header values its user names and passwords make, for the module to register.
    """
    public, secret, entries = set(), set(), []
    for entry in (mapping or {}).values() if isinstance(mapping, dict) else ():
        if isinstance(entry, dict):
            entries.append(entry)
            public.update(str(entry[k]) for k in ("username", "source") if isinstance(entry.get(k), str) and entry[k])
            if entry.get("username"):
                secret.add(
                    basic_authorization(str(entry["username"]), str(entry.get("password") or "")).split(" ", 1)[1]
                )
    masked = set(_strings(other_secrets)) | {
        str(e[k]) for e in entries for k in ("password", "identitytoken") if e.get(k)
    }
    return public - masked, secret


def mask_credentials(no_log_values, mapping, other_secrets=()):
    """Adjust a module's ``no_log_values`` set for a raw ``registry_credentials`` option: unmask its user
    names and source labels, mask the Basic header values it makes (see :func:`credential_log_values`)."""
    public, secret = credential_log_values(mapping, other_secrets)
    no_log_values.difference_update(public)
    no_log_values.update(secret)


def _strings(value):
    """Every string in a parameter value (mappings: their values), as Ansible lists no_log values."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, (list, tuple, set)):
        return [s for item in value for s in _strings(item)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]
