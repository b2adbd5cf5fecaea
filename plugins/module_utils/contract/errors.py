# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Shared error type and small helpers used by every stellaops.runtime unit."""

from __future__ import annotations

import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import with_next


class StellaError(Exception):
    """A contract failure: a stable ``code``, a one-line ``reason`` and optional evidence.

    ``phase`` names the implementation phase that failed (``failurePhase`` in results).
    """

    def __init__(self, code, reason, phase=None, evidence=None):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.phase = phase
        self.evidence = evidence or {}

    def as_dict(self):
        data = {"code": self.code, "reason": self.reason}
        if self.phase:
            data["failurePhase"] = self.phase
        return with_next(data)


_USERINFO_RE = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]*@)")


def redact_url(url):
    """Return ``url`` with any ``user:password@`` userinfo removed.

    >>> redact_url("https://bob:s3cret@registry.example/v2/")
    'https://registry.example/v2/'
    """
    if not isinstance(url, str):
        return url
    return _USERINFO_RE.sub(lambda m: m.group("scheme"), url)


def redact_text(text, secrets):
    """Replace every occurrence of each non-empty secret in ``text`` with ``********``."""
    if not text:
        return text
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "********")
    return text


def first_line(text):
    """The first line of ``text`` without surrounding blanks, or ``None`` when there is none."""
    text = (text or "").strip()
    return text.splitlines()[0] if text else None


_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count):
    """``count`` bytes as an operator reads them: ``512 B``, ``1.5 KiB``, ``2 MiB``, ``1 GiB`` (binary units,
    at most one decimal, none when it is ``.0``).

    >>> human_bytes(1073741824), human_bytes(2 * 1024 * 1024 - 1024), human_bytes(999)
    ('1 GiB', '2 MiB', '999 B')
    """
    value = float(count)
    if abs(value) < 1024:
        return "%d B" % count
    for unit in _BYTE_UNITS:
        value /= 1024.0
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            text = "%.1f" % value
            return "%s %s" % (text[:-2] if text.endswith(".0") else text, unit)
    return "%d B" % count  # not reached
