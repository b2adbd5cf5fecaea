# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Semantic rules of the release input that the JSON Schema cannot say (pure, stdlib only).

Each check raises ``StellaError(release_invalid)`` whose reason names the field
(``release input field components[0].ports[0] ...``) and whose evidence carries ``field``, so a bad
value is refused at planning, before a revision is retained or a lock is staged on a target:

* :func:`check_values`: integers outside the IEEE 754 safe range (the canonical JSON used for
  hashes cannot represent them), non-finite numbers, lone surrogates and NUL characters, anywhere;
* :func:`check_port`: Compose short-syntax port numbers in 1..65535, ranges in order and matching,
  a valid IP address;
* :func:`check_hook`: an ``interpreter`` that splits into words as the target will split it, and a
  name and command that are not blank.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import shlex

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

MAX_SAFE_INTEGER = 2**53 - 1
PORT_MIN, PORT_MAX = 1, 65535


def field_path(parts):
    """Render a JSON path as ``components[1].config["env.A"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += "[%d]" % part
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += ("." if out else "") + part
        else:
            out += "[%s]" % json.dumps(part)
    return out or "(root)"


def fail(parts, message):
    field = field_path(parts)
    raise StellaError(
        "release_invalid", "release input field %s %s" % (field, message), phase="plan", evidence={"field": field}
    )


def _string_problem(text):
    if "\x00" in text:
        return "must not contain NUL characters"
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        return "must not contain lone surrogates (U+D800..U+DFFF); use valid Unicode text"
    return None


def check_values(instance, path=()):
    """Refuse values that cannot be hashed, rendered or passed to a process, wherever they are."""
    if isinstance(instance, bool) or instance is None:
        return
    if isinstance(instance, int):
        if not -MAX_SAFE_INTEGER <= instance <= MAX_SAFE_INTEGER:
            fail(
                path,
                "must be an integer from -%d to %d (2^53-1), got a %d-bit integer; quote it as a string"
                % (MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, instance.bit_length()),
            )
    elif isinstance(instance, float):
        if not math.isfinite(instance):
            fail(path, "must be a finite number, got %r" % instance)
    elif isinstance(instance, str):
        problem = _string_problem(instance)
        if problem:
            fail(path, problem)
    elif isinstance(instance, dict):
        for key in sorted(instance, key=str):
            if isinstance(key, str):
                problem = _string_problem(key)
                if problem:
                    fail(path + (key,), "property name " + problem)
            check_values(instance[key], path + (key,))
    elif isinstance(instance, list):
        for index, item in enumerate(instance):
            check_values(item, path + (index,))


def _port_range(text, parts, what):
    first, _sep, last = text.partition("-")
    low = int(first)
    high = int(last) if last else low
    for number in (low, high):
        if not PORT_MIN <= number <= PORT_MAX:
            fail(parts, "%s port %d is out of range %d..%d" % (what, number, PORT_MIN, PORT_MAX))
    if low > high:
        fail(parts, "%s port range %s is reversed" % (what, text))
    return low, high


def split_port(spec):
    """A Compose short-syntax port ``[ip:][host[-end]:]container[-end][/proto]`` as
    ``(address or None, host or "", container, protocol)``, all strings (pure, no range checks)."""
    text, _sep, protocol = str(spec).partition("/")
    address = None
    if text.startswith("["):
        address, _sep, text = text[1:].partition("]:")
    elif text.count(":") == 2:
        address, _sep, text = text.partition(":")
    host, _sep, container = text.rpartition(":")
    return address, host, container, protocol or "tcp"


def check_port(spec, parts):
    """A Compose short-syntax port (``[ip:][host[-end]:]container[-end][/proto]``) already matching
    the schema pattern: every number in 1..65535, ranges ordered, a container range only mapped to
    a host range of the same size, a valid IP address."""
    if isinstance(spec, int):
        if not PORT_MIN <= spec <= PORT_MAX:
            fail(parts, "must be %d..%d" % (PORT_MIN, PORT_MAX))
        return
    address, host, container, _protocol = split_port(spec)
    if address is not None:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            fail(parts, "has an invalid IP address %r" % address)
    container_low, container_high = _port_range(container, parts, "container")
    if host:
        host_low, host_high = _port_range(host, parts, "host")
        if container_high != container_low and host_high - host_low != container_high - container_low:
            fail(parts, "host port range %s does not match container port range %s" % (host, container))


def check_hook(hook, index):
    """A hook the target can run: interpreter words as the target splits them, non-blank name and command."""
    for key in ("name", "command"):
        if not hook[key].strip():
            fail(("hooks", index, key), "must not be blank")
    if "interpreter" in hook:
        try:
            words = shlex.split(hook["interpreter"])
        except ValueError as exc:
            fail(("hooks", index, "interpreter"), "cannot be split into words (%s)" % exc)
        if not words:
            fail(("hooks", index, "interpreter"), "must name a program")
