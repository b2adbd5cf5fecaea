# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""The request of a managed runtime install (contract: "Runtime Modes"): the options validated into a
request (the mode, the one configured package source, the packages, the version gates), the apt
source files that source needs, and the source as the evidence records it (never a credential).

Every refusal happens in :func:`parse_request`, before the host is touched; ``engine.install`` runs
the request. Pure and standard library only.
"""

from __future__ import annotations

import os
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    RUNTIME_INSTALL_BUNDLE_DIR,
    RUNTIME_INSTALL_CODES,
    RUNTIME_INSTALL_EVIDENCE,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
    parse_version,
)

EVIDENCE_PATH = RUNTIME_INSTALL_EVIDENCE
BUNDLE_TARGET_DIR = RUNTIME_INSTALL_BUNDLE_DIR
SOURCES_DIR = "/etc/apt/sources.list.d"
AUTH_DIR = "/etc/apt/auth.conf.d"
KEYRING_DIR = "/etc/apt/keyrings"
MODES = ("production", "offline", "lab", "development")
SOURCE_TYPES = ("apt", "bundle")
# Which source types each mode accepts. A missing source is an error in every mode, never a fallback to
# the host's own repositories; lab and development also accept unsigned apt repositories (apt_trusted).
ALLOWED_SOURCES = {"production": SOURCE_TYPES, "offline": ("bundle",), "lab": SOURCE_TYPES, "development": SOURCE_TYPES}
DEFAULT_ENGINE_PACKAGES = ("docker.io", "docker-cli")
DEFAULT_COMPOSE_PACKAGES = ("docker-compose-plugin",)
DEFAULT_START_TIMEOUT = 60
DEFAULT_INSTALL_TIMEOUT = 900
ENGINE_STARTS = ("auto", "systemd", "init-script", "daemon", "none")
# Stable failure codes (docs/runtime-install.md says when each is raised).
CODES = RUNTIME_INSTALL_CODES
PHASE = "runtime_install"


def install_error(code, reason):
    """A failure of the install, in its one phase."""
    return StellaError(code, reason, phase=PHASE)


def split_credentials(url):
    """``http://u:p%21@host:1/x`` -> ``("http://host:1/x", "u", "p!", ["p!", "p%21"])``: the URL without
    userinfo, the user and password percent-decoded, and every form of the password (for masking)."""
    parts = urllib.parse.urlsplit(url or "")
    if parts.password is None:
        return redact_url(url), urllib.parse.unquote(parts.username) if parts.username else None, None, []
    raw = parts.netloc.rsplit("@", 1)[0].split(":", 1)[1]
    password = urllib.parse.unquote(raw)
    return redact_url(url), urllib.parse.unquote(parts.username or ""), password, sorted({raw, password} - {""})


def parse_request(params):
    """Validate the options into a request; every refusal happens here, before the host is touched."""
    mode = params.get("mode") or "production"
    stype = params.get("source_type")
    if not stype:
        raise install_error(
            "runtime_install_source_missing",
            "no package source configured for a managed install in %s "
            "mode (set source_type to apt or bundle); the host's default repositories are never used "
            "as a fallback" % mode,
        )
    if stype not in ALLOWED_SOURCES[mode]:
        raise install_error(
            "runtime_install_source_not_allowed",
            "source type %s is not allowed in %s mode (allowed: %s)" % (stype, mode, ", ".join(ALLOWED_SOURCES[mode])),
        )
    name = params.get("source_name") or "runtime"
    if not name.replace("-", "").replace("_", "").isalnum():
        raise install_error("runtime_install_source_invalid", "source_name must be letters, digits, '-' or '_'")
    req = {
        "mode": mode,
        "source_type": stype,
        "source_name": name,
        "secrets": [],
        "engine_packages": list(params.get("engine_packages") or DEFAULT_ENGINE_PACKAGES),
        "compose_packages": list(params.get("compose_packages") or DEFAULT_COMPOSE_PACKAGES),
        "install_recommends": bool(params.get("install_recommends")),
        "min_engine_version": params.get("min_engine_version") or DEFAULT_MIN_ENGINE,
        "min_compose_version": params.get("min_compose_version") or DEFAULT_MIN_COMPOSE,
        "engine_start": params.get("engine_start") or "auto",
        "start_timeout": int(params.get("start_timeout") or DEFAULT_START_TIMEOUT),
        "install_timeout": int(params.get("install_timeout") or DEFAULT_INSTALL_TIMEOUT),
        "evidence_path": params.get("evidence_path") or EVIDENCE_PATH,
    }
    for gate in ("min_engine_version", "min_compose_version"):
        if parse_version(req[gate]) is None:
            raise install_error("runtime_install_source_invalid", "%s %r is not a version" % (gate, req[gate]))
    if stype == "apt":
        req["apt"] = _parse_apt(params, mode, req["secrets"])
    elif stype == "bundle":
        req["bundle"] = _parse_bundle(params)
    return req


def _parse_apt(params, mode, secrets):
    url = (params.get("apt_url") or "").strip()
    if not url:
        raise install_error("runtime_install_source_missing", "source_type apt needs apt_url (the repository URL)")
    clean, user, password, embedded = split_credentials(url)
    secrets.extend(embedded)
    parts = urllib.parse.urlsplit(clean)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise install_error(
            "runtime_install_source_invalid", "apt_url must be an http:// or https:// URL, got %r" % clean
        )
    if params.get("apt_password") or params.get("apt_username"):
        if user or password:
            raise install_error(
                "runtime_install_source_invalid",
                "give the repository credentials either in apt_url or as apt_username/apt_password, not both",
            )
        user, password = params.get("apt_username"), params.get("apt_password")
        if password:
            secrets.append(password)
    if bool(user) != bool(password):
        raise install_error(
            "runtime_install_source_invalid", "repository credentials need both a user name and a password"
        )
    suite = params.get("apt_suite") or "./"
    components = list(params.get("apt_components") or [])
    if suite.endswith("/") == bool(components):
        raise install_error(
            "runtime_install_source_invalid",
            "a flat repository (apt_suite ending in '/') takes no "
            "apt_components; a suite without '/' needs at least one",
        )
    for word in [suite] + components:
        if not word or any(c.isspace() or c in "[]#" for c in word):
            raise install_error("runtime_install_source_invalid", "invalid apt suite or component %r" % word)
    key, signed_by, trusted = (
        params.get("apt_signing_key"),
        params.get("apt_signed_by"),
        bool(params.get("apt_trusted")),
    )
    if key and signed_by:
        raise install_error("runtime_install_source_invalid", "give apt_signing_key or apt_signed_by, not both")
    if key and "BEGIN PGP PUBLIC KEY BLOCK" not in key:
        raise install_error(
            "runtime_install_source_invalid", "apt_signing_key must be an ASCII-armored OpenPGP public key"
        )
    if not (key or signed_by or trusted):
        raise install_error(
            "runtime_install_source_invalid",
            "an apt repository needs apt_signing_key or apt_signed_by (or apt_trusted=true for an unsigned one)",
        )
    if trusted and not (key or signed_by) and mode == "production":
        raise install_error(
            "runtime_install_source_not_allowed",
            "production mode installs only from signed repositories (apt_trusted=true is for lab and development)",
        )
    return {
        "url": clean.rstrip("/"),
        "username": user,
        "password": password,
        "suite": suite,
        "components": components,
        "signing_key": key,
        "signed_by": signed_by,
        "trusted": trusted,
    }


def _parse_bundle(params):
    path = params.get("bundle_path") or BUNDLE_TARGET_DIR
    files = params.get("bundle_files")
    checksums = params.get("bundle_checksums") or {}
    if files is not None:
        files = list(files)
        if not files:
            raise install_error("runtime_install_source_missing", "the offline bundle has no .deb files")
        for name in files:
            if "/" in name or not name.endswith(".deb") or name.startswith("."):
                raise install_error("runtime_install_source_invalid", "bundle file %r is not a .deb file name" % name)
    for name, digest in checksums.items():
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise install_error(
                "runtime_install_source_invalid", "bundle_checksums[%r] is not a SHA-256 hex digest" % name
            )
    return {"path": path, "files": files, "checksums": dict(checksums)}


def apt_source_files(request):
    """``{path: (content, mode)}`` the apt source needs; ``None`` content means "remove our file"."""
    apt, name = request["apt"], request["source_name"]
    base = "stella-%s" % name
    key_path = os.path.join(KEYRING_DIR, base + ".asc")
    keyring = key_path if apt["signing_key"] else apt["signed_by"]
    option = ("signed-by=" + keyring) if keyring else "trusted=yes"
    line = "deb [%s] %s %s" % (option, apt["url"], " ".join([apt["suite"]] + apt["components"]))
    files = {
        os.path.join(SOURCES_DIR, base + ".list"): (
            "# Managed by stellaops.runtime (stella_runtime_install): the configured runtime package source.\n"
            + line.rstrip()
            + "\n",
            0o644,
        )
    }
    if apt["signing_key"]:
        files[key_path] = (apt["signing_key"].strip() + "\n", 0o644)
    # apt uses credentials for plain http only when the machine entry names the scheme (apt_auth.conf(5)).
    auth = (
        "machine %s\nlogin %s\npassword %s\n" % (apt["url"], apt["username"], apt["password"])
        if apt["password"]
        else None
    )
    files[os.path.join(AUTH_DIR, base + ".conf")] = (auth, 0o600)
    return files


def source_evidence(request, bundle_files=None):
    """The source as recorded: never a credential, only whether one was configured."""
    src = {"type": request["source_type"]}
    if request["source_type"] == "apt":
        apt = request["apt"]
        src.update(
            url=redact_url(apt["url"]),
            suite=apt["suite"],
            components=apt["components"],
            credentials=bool(apt["password"]),
            signedBy=(
                os.path.join(KEYRING_DIR, "stella-%s.asc" % request["source_name"])
                if apt["signing_key"]
                else apt["signed_by"]
            ),
            trusted=apt["trusted"],
        )
    elif request["source_type"] == "bundle":
        src.update(path=request["bundle"]["path"], files=bundle_files or [])
    return src
