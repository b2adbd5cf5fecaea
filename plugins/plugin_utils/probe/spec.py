# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Post-deploy health probe configuration (pure, stdlib only): :func:`parse_probe_specs` turns component
config (flat ``healthProbe.*`` keys) and the target identity into :class:`ProbeSpec` objects, failing
closed with ``Post-deploy health probe configuration invalid: <detail>``. The same parser validates the
release at planning time (:func:`validate_probe_config`), before anything touches a target.

Host precedence: ``healthProbe.url`` > ``healthProbe.host`` > the probe's host override > the host of the
target endpoint (:func:`target_host`).
"""

from __future__ import annotations

import ipaddress
import math
import re
from urllib.parse import urlsplit

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    LOCAL_ENDPOINTS,
    endpoint_host,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.runner import UNSAFE_URL_CHARS, unsendable_reason

PREFIX = "healthProbe."
KEY_TYPE = "healthProbe.type"
KEY_URL = "healthProbe.url"
KEY_HOST = "healthProbe.host"
KEY_PORT = "healthProbe.port"
KEY_PATH = "healthProbe.path"
KEY_SCHEME = "healthProbe.scheme"
KEY_TCP_PORT = "healthProbe.tcp.port"
KEY_EXPECTED_STATUS = "healthProbe.expectedStatus"
KEY_TIMEOUT = "healthProbe.timeoutSeconds"
KEY_ATTEMPTS = "healthProbe.attempts"
KEY_INTERVAL = "healthProbe.intervalSeconds"
KNOWN_KEYS = (
    KEY_TYPE,
    KEY_URL,
    KEY_HOST,
    KEY_PORT,
    KEY_PATH,
    KEY_SCHEME,
    KEY_TCP_PORT,
    KEY_EXPECTED_STATUS,
    KEY_TIMEOUT,
    KEY_ATTEMPTS,
    KEY_INTERVAL,
)
HTTP_ONLY_KEYS = (KEY_URL, KEY_PORT, KEY_PATH, KEY_SCHEME, KEY_EXPECTED_STATUS)
TCP_ONLY_KEYS = (KEY_TCP_PORT,)

TYPES = ("http", "tcp")
SCHEMES = ("http", "https")
DEFAULT_TYPE = "http"
DEFAULT_EXPECTED_STATUS = 200
DEFAULT_TIMEOUT_SECONDS = 5.0
DEFAULT_ATTEMPTS = 3
DEFAULT_INTERVAL_SECONDS = 2.0
MAX_TIMEOUT_SECONDS = 300.0
MAX_INTERVAL_SECONDS = 300.0
MAX_ATTEMPTS = 100
LOOPBACK = "127.0.0.1"

CONFIG_INVALID = "health_probe_config_invalid"
CONFIG_INVALID_PREFIX = "Post-deploy health probe configuration invalid: "
# Planning does not know the host a probe will use (stella_probe's host_override may supply it), so
# host resolution is checked when the probe runs; every healthProbe.* key is checked at planning.
PLANNING_HOST = "probe-host.invalid"


def _invalid(detail, key=None):
    evidence = {"key": key} if key else None
    return StellaError(CONFIG_INVALID, CONFIG_INVALID_PREFIX + detail, phase="verify", evidence=evidence)


class ProbeSpec:
    """One component's probe, fully resolved (no defaults left to apply)."""

    __slots__ = (
        "component",
        "type",
        "url",
        "host",
        "port",
        "expected_status",
        "timeout_seconds",
        "attempts",
        "interval_seconds",
    )

    def __init__(
        self,
        component,
        type,
        host,
        port=None,
        url=None,
        expected_status=None,  # noqa: A002
        timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
        attempts=DEFAULT_ATTEMPTS,
        interval_seconds=DEFAULT_INTERVAL_SECONDS,
    ):
        self.component = component
        self.type = type
        self.url = url
        self.host = host
        self.port = port
        self.expected_status = expected_status
        self.timeout_seconds = timeout_seconds
        self.attempts = attempts
        self.interval_seconds = interval_seconds

    @property
    def endpoint(self):
        """What evidence shows: the URL for http, ``tcp://host:port`` for tcp."""
        if self.type == "http":
            return redact_url(self.url)
        return "tcp://%s:%d" % (_host_for_url(self.host), self.port)

    @property
    def expectation(self):
        if self.type == "http":
            return "HTTP %d" % self.expected_status
        return "TCP connect"

    def as_dict(self):
        data = {
            "component": self.component,
            "type": self.type,
            "endpoint": self.endpoint,
            "host": self.host,
            "port": self.port,
            "timeoutSeconds": self.timeout_seconds,
            "attempts": self.attempts,
            "intervalSeconds": self.interval_seconds,
        }
        if self.type == "http":
            data["expectedStatus"] = self.expected_status
        return data

    def __eq__(self, other):
        return isinstance(other, ProbeSpec) and self.as_dict() == other.as_dict()

    def __repr__(self):
        return "ProbeSpec(%r)" % (self.as_dict(),)


def _host_for_url(host):
    return "[%s]" % host if ":" in host else host


def target_host(endpoint):
    """Host part of a target endpoint, or ``None`` when it names no host.

    ``ssh://root@10.0.0.5:22`` -> ``10.0.0.5``; ``tcp://host:2376`` -> ``host``; ``host`` and
    ``host:22`` -> ``host``; ``local`` / ``localhost`` -> ``127.0.0.1``;
    ``unix:///var/run/docker.sock`` -> ``None``.
    """
    if not isinstance(endpoint, str) or not endpoint.strip():
        return None
    text = endpoint.strip()
    if text.startswith(("unix://", "npipe://")):
        return None
    try:
        urlsplit(text if "://" in text else "//" + text)
    except ValueError:
        return None
    host = endpoint_host(text)
    return LOOPBACK if host in LOCAL_ENDPOINTS or host == "localhost" else (host or None)


def target_endpoint(target):
    """The endpoint of a target identity dict (``endpoint`` or ``targetEndpoint``)."""
    if not isinstance(target, dict):
        return None
    return target.get("endpoint") or target.get("targetEndpoint")


def probe_keys(config):
    """The ``healthProbe.*`` keys of one component config (sorted)."""
    if not isinstance(config, dict):
        return []
    return sorted(key for key in config if isinstance(key, str) and key.startswith(PREFIX))


def _text(config, key, where):
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _invalid("%s: %s must be a non-empty string" % (where, key), key)
    return value.strip()


def _integer(config, key, where, default, low, high):
    value = config.get(key)
    if value is None:
        return default
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        number = int(value.strip())
    if number is None or not low <= number <= high:
        raise _invalid("%s: %s must be an integer from %d to %d, got %r" % (where, key, low, high, value), key)
    return number


def _seconds(config, key, where, default, low_exclusive, high):
    value = config.get(key)
    if value is None:
        return default
    number = None
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and value.strip().isascii():
            number = float(value.strip())
    except (ValueError, OverflowError):
        number = None
    ok = number is not None and not math.isnan(number) and number <= high
    ok = ok and (number > 0 if low_exclusive else number >= 0)
    if not ok:
        bound = "greater than 0" if low_exclusive else "from 0"
        raise _invalid("%s: %s must be a number of seconds %s up to %g, got %r" % (where, key, bound, high, value), key)
    return number


_DIGITS = re.compile(r"[0-9]{1,18}")
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def valid_host(host):
    """``True`` for an IP address (IPv6 with or without brackets) or a DNS name of valid labels."""
    if not isinstance(host, str) or not host:
        return False
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
        return True
    except ValueError:
        pass
    if ":" in bare or re.fullmatch(r"[0-9.]+", bare):
        return False  # not an IP address, and not a name either (1.2.3.999, ::zz)
    try:
        ascii_name = bare.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        return False
    labels = ascii_name[:-1].split(".") if ascii_name.endswith(".") else ascii_name.split(".")
    return len(ascii_name) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def parse_probe_spec(name, config, default_host=None, endpoint=None):
    """Parse one component's ``healthProbe.*`` keys; ``None`` when it has none.

    ``default_host`` is used when neither ``healthProbe.url`` nor ``healthProbe.host`` is set;
    ``endpoint`` only improves the error message when no host can be resolved.
    """
    keys = probe_keys(config)
    if not keys:
        return None
    where = "component '%s'" % name
    unknown = [key for key in keys if key not in KNOWN_KEYS]
    if unknown:
        raise _invalid(
            "%s: unknown key %s (supported: %s)" % (where, ", ".join(unknown), ", ".join(KNOWN_KEYS)), unknown[0]
        )

    raw_type = config.get(KEY_TYPE, DEFAULT_TYPE)
    probe_type = raw_type.strip().lower() if isinstance(raw_type, str) else raw_type
    if probe_type not in TYPES:
        raise _invalid("%s: unsupported healthProbe.type %r (supported: http, tcp)" % (where, raw_type), KEY_TYPE)
    foreign = [key for key in (TCP_ONLY_KEYS if probe_type == "http" else HTTP_ONLY_KEYS) if key in config]
    if foreign:
        hint = " (use healthProbe.tcp.port)" if KEY_PORT in foreign else ""
        raise _invalid(
            "%s: %s does not apply to %s probes%s" % (where, ", ".join(foreign), probe_type, hint), foreign[0]
        )

    timeout = _seconds(config, KEY_TIMEOUT, where, DEFAULT_TIMEOUT_SECONDS, True, MAX_TIMEOUT_SECONDS)
    attempts = _integer(config, KEY_ATTEMPTS, where, DEFAULT_ATTEMPTS, 1, MAX_ATTEMPTS)
    interval = _seconds(config, KEY_INTERVAL, where, DEFAULT_INTERVAL_SECONDS, False, MAX_INTERVAL_SECONDS)
    common = dict(timeout_seconds=timeout, attempts=attempts, interval_seconds=interval)

    url = _text(config, KEY_URL, where)
    if url is not None:
        combined = [key for key in (KEY_HOST, KEY_PORT, KEY_PATH, KEY_SCHEME) if key in config]
        if combined:
            raise _invalid("%s: healthProbe.url cannot be combined with %s" % (where, ", ".join(combined)), KEY_URL)
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            host = port = None
            parts = None
        if parts is None or parts.scheme.lower() not in SCHEMES or not host:
            raise _invalid(
                "%s: healthProbe.url %r must be an absolute http:// or https:// URL with a host"
                % (where, redact_url(url)),
                KEY_URL,
            )
        if parts.username is not None or parts.password is not None:
            raise _invalid("%s: healthProbe.url must not carry credentials" % where, KEY_URL)
        why = None if valid_host(host) else "has an invalid host"
        why = why or ("has port 0" if port == 0 else None) or unsendable_reason(url)
        if why:
            raise _invalid("%s: healthProbe.url %r %s" % (where, redact_url(url), why), KEY_URL)
        expected = _integer(config, KEY_EXPECTED_STATUS, where, DEFAULT_EXPECTED_STATUS, 100, 599)
        return ProbeSpec(
            name,
            "http",
            host,
            port=port or (443 if parts.scheme.lower() == "https" else 80),
            url=url,
            expected_status=expected,
            **common,
        )

    host = _text(config, KEY_HOST, where)
    if host is not None and not valid_host(host):
        raise _invalid("%s: healthProbe.host %r is not a host name or IP address" % (where, host), KEY_HOST)
    host = host or default_host
    if not host:
        if isinstance(endpoint, str) and endpoint.strip():
            why = "target endpoint %r has no host" % redact_url(endpoint.strip())
        else:
            why = "the target has no endpoint"
        raise _invalid("%s: no resolvable host (%s; set healthProbe.host or healthProbe.url)" % (where, why), KEY_HOST)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]

    if probe_type == "tcp":
        if KEY_TCP_PORT not in config:
            raise _invalid("%s: healthProbe.tcp.port is required for tcp probes" % where, KEY_TCP_PORT)
        port = _integer(config, KEY_TCP_PORT, where, None, 1, 65535)
        return ProbeSpec(name, "tcp", host, port=port, **common)

    scheme = (_text(config, KEY_SCHEME, where) or "http").lower()
    if scheme not in SCHEMES:
        raise _invalid(
            "%s: unsupported healthProbe.scheme %r (supported: http, https)" % (where, config[KEY_SCHEME]), KEY_SCHEME
        )
    port = _integer(config, KEY_PORT, where, None, 1, 65535)
    path = _text(config, KEY_PATH, where) or "/"
    if UNSAFE_URL_CHARS.search(path):
        raise _invalid("%s: healthProbe.path %r contains whitespace or control characters" % (where, path), KEY_PATH)
    if not path.startswith("/"):
        path = "/" + path
    netloc = _host_for_url(host) + (":%d" % port if port is not None else "")
    url = "%s://%s%s" % (scheme, netloc, path)
    why = unsendable_reason(url)
    if why:
        raise _invalid("%s: probe URL %r built from the probe host %s" % (where, redact_url(url), why), KEY_HOST)
    expected = _integer(config, KEY_EXPECTED_STATUS, where, DEFAULT_EXPECTED_STATUS, 100, 599)
    return ProbeSpec(
        name, "http", host, port=port or (443 if scheme == "https" else 80), url=url, expected_status=expected, **common
    )


def _components(components):
    if components is None:
        return []
    if not isinstance(components, (list, tuple)):
        raise _invalid("components must be a list")
    seen = set()
    out = []
    for index, component in enumerate(components):
        if not isinstance(component, dict):
            raise _invalid("component at index %d must be a mapping with name and config" % index)
        name = component.get("name")
        if not isinstance(name, str) or not name.strip():
            raise _invalid("component at index %d has no name" % index)
        name = name.strip()
        if name in seen:
            raise _invalid("duplicate component name '%s'" % name)
        seen.add(name)
        config = component.get("config")
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise _invalid("component '%s': config must be a mapping" % name)
        out.append((name, config))
    return out


def probe_components(components):
    """Names of the components that opt in to probing (have ``healthProbe.*`` keys)."""
    return [name for name, config in _components(components) if probe_keys(config)]


def parse_probe_specs(components, target=None, host_override=None):
    """Parse every component; returns the specs of those that opt in, in component order.

    Host precedence: ``healthProbe.url`` > ``healthProbe.host`` > ``host_override`` > the host
    of the target endpoint. Raises :class:`StellaError` (``health_probe_config_invalid``).
    """
    endpoint = target_endpoint(target)
    default_host = host_override.strip() if isinstance(host_override, str) and host_override.strip() else None
    default_host = default_host or target_host(endpoint)
    specs = []
    for name, config in _components(components):
        spec = parse_probe_spec(name, config, default_host=default_host, endpoint=endpoint)
        if spec is not None:
            specs.append(spec)
    return specs


def _config_field(index, key):
    field = "components[%d].config" % index
    return field + ('["%s"]' % key if key else "")


def validate_probe_config(components):
    """Planning-time validation of every component's ``healthProbe.*`` keys with the probe parser.

    The probe host may only be known when the probe runs (``host_override``), so a placeholder host
    stands in for it; everything else (type, URL, ports, path, scheme, numbers, unknown keys) is
    checked. Raises :class:`StellaError` ``health_probe_config_invalid`` in phase ``plan`` with
    ``field`` (``components[0].config["healthProbe.type"]``), ``component`` and ``key`` in evidence.
    """
    for index, (name, config) in enumerate(_components(components)):
        try:
            parse_probe_spec(name, config, default_host=PLANNING_HOST)
        except StellaError as err:
            key = err.evidence.get("key")
            raise StellaError(
                CONFIG_INVALID,
                err.reason,
                phase="plan",
                evidence={"field": _config_field(index, key), "component": name, "key": key},
            )
