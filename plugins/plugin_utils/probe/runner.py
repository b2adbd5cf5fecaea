# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Probe runners: the transport-agnostic :class:`ProbeRunner` and the direct :class:`HttpTcpProbeRunner`.

:class:`HttpTcpProbeRunner` sends HTTP GETs through one ``requests.Session`` per runner, so the
attempts of a probe (and the probes of one step) reuse their connections. The session never reads
``*_proxy``/``.netrc``/``REQUESTS_CA_BUNDLE`` from the environment, never follows a redirect, and
verifies HTTPS with the controller's system trust store, as the stdlib opener it replaced did. TCP
probes stay on plain sockets. ``requests`` is only needed for HTTP probes, and only imported when
one runs (execution/http.py ``load``): without it
:meth:`HttpTcpProbeRunner.check` fails with ``requests is required on the controller`` before any
probe runs.

Observations (``ProbeAttempt.observed``) are the HTTP status as text, ``connected``, or
``refused: <error>`` / ``timeout: <error>`` / ``error: <error>`` where ``<error>`` is the innermost
cause (``[Errno 111] Connection refused``, ``timed out``, ``[Errno -2] Name or service not known``).
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests

FAILED_TEMPLATE = "Post-deploy health probe failed for component '%s': %s"
OBSERVED_CONNECTED = "connected"
REQUESTS_MISSING = "requests_missing"
REQUESTS_MISSING_MSG = (
    "requests is required on the controller for HTTP health probes (install it into the Python "
    "that runs Ansible: %s -m pip install requests)"
)
DRAIN_LIMIT_BYTES = 64 * 1024
USER_AGENT = "stellaops.runtime-probe/1"
UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f\s]")


class ProbeAttempt:
    """One observation: ``observed`` is the HTTP status (as text), ``connected``, or
    ``refused: ...`` / ``timeout: ...`` / ``error: ...``."""

    __slots__ = ("observed", "healthy")

    def __init__(self, observed, healthy):
        self.observed = observed
        self.healthy = healthy


class ProbeResult:
    """The outcome of probing one spec (all attempts)."""

    __slots__ = ("spec", "healthy", "attempts", "observed", "history", "duration_ms")

    def __init__(self, spec, healthy, attempts, observed, history=None, duration_ms=None):
        self.spec = spec
        self.healthy = healthy
        self.attempts = attempts
        self.observed = observed
        self.history = list(history or [observed])
        self.duration_ms = duration_ms

    @property
    def detail(self):
        return "expected %s at %s, observed %s after %d attempt(s)" % (
            self.spec.expectation,
            self.spec.endpoint,
            self.observed,
            self.attempts,
        )

    def as_dict(self):
        data = {
            "component": self.spec.component,
            "type": self.spec.type,
            "endpoint": self.spec.endpoint,
            "expected": self.spec.expectation,
            "healthy": self.healthy,
            "attempts": self.attempts,
            "observed": self.observed,
            "history": list(self.history),
        }
        if self.duration_ms is not None:
            data["durationMs"] = self.duration_ms
        if not self.healthy:
            data["reason"] = FAILED_TEMPLATE % (self.spec.component, self.detail)
        return data


class ProbeRunner:
    """Transport-agnostic probe runner: ``run(spec) -> ProbeResult``.

    The default implementation retries :meth:`attempt` up to ``spec.attempts`` times with
    ``spec.interval_seconds`` between attempts (sleeping only between attempts). A runner that
    delegates to a target-side agent overrides :meth:`run` (or :meth:`attempt`). :meth:`check` runs
    once before any probe (raise :class:`StellaError` when the runner cannot probe these specs);
    :meth:`close` releases what the runner holds.
    """

    def __init__(self, clock=time.monotonic, sleep=time.sleep):
        self._clock = clock
        self._sleep = sleep

    def check(self, specs):
        """Raise :class:`StellaError` when this runner cannot run ``specs`` (default: it can)."""
        del specs

    def close(self):
        """Release connections and other resources (default: none)."""

    def attempt(self, spec):
        """One probe attempt for ``spec``; returns a ``ProbeAttempt`` (observed text, healthy flag).

        A runner must define this or override :meth:`run`; the base class probes nothing.
        """
        raise StellaError(
            "probe_runner_invalid", "probe runner %s defines neither attempt() nor run()" % type(self).__name__
        )

    def run(self, spec):
        started = self._clock()
        history = []
        result = None
        for number in range(1, spec.attempts + 1):
            result = self.attempt(spec)
            history.append(result.observed)
            if result.healthy:
                break
            if number < spec.attempts:
                self._sleep(spec.interval_seconds)
        duration_ms = int(round((self._clock() - started) * 1000))
        return ProbeResult(spec, result.healthy, len(history), result.observed, history, duration_ms)


def _describe(exc):
    """``refused: ...`` / ``timeout: ...`` / ``error: ...`` for an ``OSError`` (or its ``reason``)."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return "refused: %s" % reason
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timeout: %s" % (str(reason) or "timed out")
    return "error: %s" % (reason,)


def _next_cause(exc):
    """The exception ``exc`` wraps: an exception argument (requests, urllib3 ``ProtocolError``), a
    ``reason`` (urllib3 ``MaxRetryError``), else ``__cause__`` / ``__context__``."""
    for arg in reversed(getattr(exc, "args", ()) or ()):
        if isinstance(arg, BaseException):
            return arg
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    return exc.__cause__ or exc.__context__


def root_cause(exc):
    """The innermost exception of a wrapped chain (``ConnectionError`` -> ``MaxRetryError`` ->
    ``NewConnectionError`` -> ``ConnectionRefusedError``)."""
    seen = set()
    current = exc
    while id(current) not in seen:
        seen.add(id(current))
        cause = _next_cause(current)
        if cause is None:
            break
        current = cause
    return current


def describe_request_error(exc):
    """The observation for an exception raised while sending a probe request."""
    root = root_cause(exc)
    if isinstance(root, OSError):
        text = _describe(root)
        requests = _requests.load()
        if text.startswith("error: ") and requests is not None and isinstance(exc, requests.exceptions.Timeout):
            return "timeout: %s" % (str(root) or "timed out")
        return text
    if isinstance(root, ValueError):
        return "error: %s" % (root,)
    # http.client protocol errors (BadStatusLine, LineTooLong, ...) keep their type name
    return "error: %s: %s" % (type(root).__name__, root)


def unsendable_reason(url):
    """``None`` when :class:`HttpTcpProbeRunner` can send ``url`` as it is, else why not (whitespace or
    control characters, or what ``requests`` refuses to prepare). Used by the probe parser, so a URL
    that cannot be sent is invalid configuration, never a failed probe."""
    if UNSAFE_URL_CHARS.search(url):
        return "contains whitespace or control characters"
    requests = _requests.load()
    if requests is not None:
        try:
            requests.models.PreparedRequest().prepare_url(url, None)
        except Exception as exc:  # InvalidURL, MissingSchema, UnicodeError, LocationParseError, ...
            return "is not a valid URL (%s)" % type(exc).__name__
    return None


def _trust_store():
    """What the stdlib's default SSL context trusts: the OpenSSL default CA file, else its CA directory
    (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured), else the bundle ``requests`` ships."""
    paths = ssl.get_default_verify_paths()
    return paths.cafile or paths.capath or True


def new_session():
    """A ``requests.Session`` for probes: no environment (proxies, netrc, CA bundle variables), the
    probe User-Agent, the system trust store."""
    session = _requests.load().Session()
    session.trust_env = False
    session.proxies = {}
    session.headers["User-Agent"] = USER_AGENT
    session.verify = _trust_store()
    return session


def _drain(response, deadline):
    """Read a small body to the end so the connection can be reused; give up (and drop the
    connection) past ``DRAIN_LIMIT_BYTES`` or ``deadline``. Errors here change no observation."""
    try:
        total = 0
        for chunk in response.iter_content(4096):
            total += len(chunk)
            if total > DRAIN_LIMIT_BYTES or time.monotonic() > deadline:
                break
    except Exception:  # the status was already observed; the body is not part of the probe
        pass
    finally:
        response.close()


class HttpTcpProbeRunner(ProbeRunner):
    """Direct prober: HTTP GET (``requests``, no proxy, no redirects) or TCP connect from this process."""

    USER_AGENT = USER_AGENT

    def __init__(self, clock=time.monotonic, sleep=time.sleep, session=None, connect=socket.create_connection):
        super().__init__(clock=clock, sleep=sleep)
        self._session = session
        self._owns_session = session is None
        self._connect = connect

    def check(self, specs):
        if self._session is None and any(spec.type == "http" for spec in specs) and not _requests.available():
            raise StellaError(REQUESTS_MISSING, REQUESTS_MISSING_MSG % sys.executable, phase="verify")

    def close(self):
        if self._session is not None and self._owns_session:
            self._session.close()
            self._session = None

    @property
    def session(self):
        if self._session is None:
            if not _requests.available():
                raise StellaError(REQUESTS_MISSING, REQUESTS_MISSING_MSG % sys.executable, phase="verify")
            self._session = new_session()
        return self._session

    def attempt(self, spec):
        if spec.type == "tcp":
            return self._tcp(spec)
        return self._http(spec)

    def _tcp(self, spec):
        try:
            sock = self._connect((spec.host, spec.port), timeout=spec.timeout_seconds)
        except OSError as exc:
            return ProbeAttempt(_describe(exc), False)
        sock.close()
        return ProbeAttempt(OBSERVED_CONNECTED, True)

    def _http(self, spec):
        session = self.session
        try:
            response = session.get(spec.url, timeout=spec.timeout_seconds, allow_redirects=False, stream=True)
        except Exception as exc:  # connection, TLS, protocol errors are observations, not crashes
            return ProbeAttempt(describe_request_error(exc), False)
        status = response.status_code
        _drain(response, time.monotonic() + spec.timeout_seconds)
        return ProbeAttempt(str(status), status == spec.expected_status)
