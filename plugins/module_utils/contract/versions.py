# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Version strings of Docker Engine and Compose, and the contract's version gates."""

from __future__ import annotations

import re

DEFAULT_MIN_ENGINE = "24.0.0"
DEFAULT_MIN_COMPOSE = "2.20.0"

_VERSION_RE = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_version(text):
    """``"v2.40.3"``, ``"20.10.24+dfsg1"``, ``"28.2.2"`` -> ``(major, minor, patch)``; ``None`` if unparsable."""
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.match(text.strip())
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def version_at_least(actual, minimum):
    """True when ``actual`` >= ``minimum``; False when ``actual`` cannot be parsed."""
    have, want = parse_version(actual), parse_version(minimum)
    if want is None:
        raise ValueError("invalid minimum version %r" % (minimum,))
    return have is not None and have >= want


def normalize_version(text):
    """Render a parsed version as ``X.Y.Z`` (or ``None``)."""
    parsed = parse_version(text)
    return None if parsed is None else "%d.%d.%d" % parsed
