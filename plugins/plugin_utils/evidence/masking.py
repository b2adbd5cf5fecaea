# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Values under secret-bearing keys (``secretEnv``, registry credentials, passwords, tokens, secrets,
headers, any spelling, any depth): :func:`masked` replaces them with :data:`MASK`, :func:`collect_secrets`
lists them. The one rule for the job record (its ``strategyConfig`` is masked when the job is created, so it
never reaches the job store or an evidence file) and for the report, which masks them again. Pure.
"""

from __future__ import annotations

import urllib.parse

SECRET_KEYS = (
    "secretenv",
    "registrycredentials",
    "registry_credentials",
    "credentials",
    "password",
    "passwd",
    "token",
    "secret",
    "headers",
    "authorization",
    "apikey",
    "api_key",
    "privatekey",
    "private_key",
)
MASK = "********"


def secret_key(key):
    """Whether a value under ``key`` is a secret (``password``, ``apiToken``, ``client_secret``, ...)."""
    text = str(key).lower().replace("-", "").replace(".", "")
    return any(word.replace("_", "") in text.replace("_", "") for word in SECRET_KEYS)


def masked(value):
    """``value`` (a copy) with the value of every secret-bearing key, at any depth, replaced by :data:`MASK`."""
    if isinstance(value, dict):
        return {k: (MASK if secret_key(k) else masked(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def collect_secrets(value, inside=False):
    """Every string under a secret-bearing key of ``value`` (any depth), and URL passwords."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(collect_secrets(item, inside or secret_key(key)))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(collect_secrets(item, inside))
    elif isinstance(value, str):
        text = value
        if inside and text:
            found.append(text)
            words = text.split()
            if len(words) == 2 and words[0].lower() in ("bearer", "basic", "token"):  # an Authorization value
                found.append(words[1])
        elif "://" in text and "@" in text:
            found.extend(p for p in (urllib.parse.urlsplit(text).password,) if p)
    return found
