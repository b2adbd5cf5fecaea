# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""``compose.stella.lock.yml``: a tiny deterministic YAML emitter and the lock document builder.

The emitter writes block style only; every string is double-quoted with JSON-style escapes, so no
YAML reader can re-type it (``yes``, ``on``, ``010``, ``3.8`` and the empty string stay strings);
integers and booleans are unquoted; mapping keys keep the order the builder gives them (the builder
sorts everything that comes from user input). No timestamps, no random ids, LF, trailing newline.

Compose interpolates ``$`` in every string of the file; the builder writes ``$$`` so values reach
containers and labels exactly as given.
"""

from __future__ import annotations

import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import ENV_FILE
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

COMPOSE_VERSION = "3.8"
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_YAML_RESERVED_KEYS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _needs_escape(code):
    # YAML 1.2 printable set, minus line-break-like characters and the BOM.
    if code < 0x20 or code == 0x7F:
        return True
    if code < 0x7F:
        return False
    if code in (0x85, 0x2028, 0x2029, 0xFEFF) or 0x80 <= code <= 0x9F:
        return True
    if 0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF):
        return True
    return False


def quote(text):
    """A YAML double-quoted scalar for ``text`` (JSON escapes; ``\\U`` for astral code points)."""
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
            continue
        code = ord(ch)
        if not _needs_escape(code):
            out.append(ch)
        elif 0xD800 <= code <= 0xDFFF:
            raise StellaError("lock_invalid", "string contains a lone surrogate U+%04X" % code, phase="plan")
        elif code > 0xFFFF:
            out.append("\\U%08X" % code)
        else:
            out.append("\\u%04X" % code)
    out.append('"')
    return "".join(out)


def _key(key):
    if not isinstance(key, str):
        raise TypeError("mapping keys must be strings, got %r" % (key,))
    if _PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML_RESERVED_KEYS and not re.match(r"^[0-9._-]", key):
        return key
    return quote(key)


def _scalar(value):
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError("cannot emit %s" % type(value).__name__)


def _emit(value, indent, out):
    pad = "  " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out.append("%s%s:\n" % (pad, _key(key)))
                _emit(item, indent + 1, out)
            else:
                out.append(
                    "%s%s: %s\n" % (pad, _key(key), _empty(item) if isinstance(item, (dict, list)) else _scalar(item))
                )
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                raise TypeError("nested collections inside lists are not used by the lock")
            out.append("%s- %s\n" % (pad, _empty(item) if isinstance(item, (dict, list)) else _scalar(item)))
    else:
        raise TypeError("top level must be a mapping or a list")


def _empty(value):
    return "{}" if isinstance(value, dict) else "[]"


def emit_yaml(document):
    """Deterministic block-style YAML text for dicts/lists of str, int and bool."""
    out = []
    _emit(document, 0, out)
    return "".join(out)


def compose_escape(text):
    """Escape Compose interpolation: ``$`` becomes ``$$``."""
    return text.replace("$", "$$")


def _str(value):
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def healthcheck(config):
    """The service healthcheck from ``healthcheck.*`` config keys (``None`` when there are none)."""
    keys = {key[len("healthcheck.") :]: value for key, value in config.items() if key.startswith("healthcheck.")}
    if not keys:
        return None
    result = {}
    if "test" in keys:
        test = keys["test"]
        items = ["CMD-SHELL", test] if isinstance(test, str) else list(test)
        result["test"] = [compose_escape(item) for item in items]
    for name in ("interval", "timeout", "start_period", "start_interval"):
        if name in keys:
            result[name] = keys[name]
    if "retries" in keys:
        result["retries"] = int(keys["retries"])
    if "disable" in keys:
        result["disable"] = bool(keys["disable"])
    return result


def environment(config):
    """``env.*`` keys without the prefix, values as strings, sorted by name."""
    env = {key[4:]: _str(value) for key, value in config.items() if key.startswith("env.")}
    return {name: env[name] for name in sorted(env)}


def build_lock_document(project_name, services, emit_version=False, env_file=False):
    """The lock as an ordered dict. ``services`` is a list of dicts with name, image (pinned),
    config, ports, labels (already complete); order does not matter."""
    document = {}
    if emit_version:
        document["version"] = COMPOSE_VERSION
    document["name"] = project_name
    rendered = {}
    for service in sorted(services, key=lambda item: item["name"]):
        entry = {"image": service["image"]}
        env = environment(service["config"])
        if env:
            entry["environment"] = {name: compose_escape(value) for name, value in env.items()}
        if env_file:
            entry["env_file"] = [ENV_FILE]
        check = healthcheck(service["config"])
        if check:
            entry["healthcheck"] = check
        labels = service["labels"]
        entry["labels"] = {key: compose_escape(labels[key]) for key in sorted(labels)}
        if service.get("ports"):
            entry["ports"] = [str(port) for port in service["ports"]]
        rendered[service["name"]] = entry
    document["services"] = rendered
    return document


def render_lock(project_name, services, emit_version=False, env_file=False):
    """The lock file bytes (UTF-8, LF, trailing newline)."""
    text = emit_yaml(build_lock_document(project_name, services, emit_version, env_file))
    return text.encode("utf-8")
