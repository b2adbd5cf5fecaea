# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Traffic adapters on the controller (contract: the traffic paragraphs of "Automatic rollback on
failed deployment" and "Strategy Evidence Boundary").

An adapter moves traffic between the active slot (control) and the slot a blue-green, canary or A/B
job deployed (treatment) and returns evidence with the contract's keys (``strategy.traffic.*``).
Without an adapter only standby-slot evidence is written, and nothing implies that traffic moved.

Pure parts: :func:`step_weights`, :func:`standby_evidence`, :func:`resolve`, the request bodies and
the checks of a controller's answer. The two adapters do I/O: ``local-file`` (an atomic write of
the route state, lab verification only) and ``webhook`` (``requests`` POSTs to an operator's router
controller). Register your own in :data:`ADAPTERS`.
"""

from __future__ import annotations

import abc
import json
import os
import re
import socket
import threading
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests

TRAFFIC_STRATEGIES = ("blue-green", "canary", "a-b")
PREFIX = "strategy.traffic."
ROLLBACK_PREFIX = "strategy.traffic.rollback."
MODE_STANDBY_ONLY = "standby_only"
MODE_SHIFT = "traffic_shift"
MODE_ROLLBACK = "traffic_rollback"
STATUS_NOT_SHIFTED = "not_shifted"
STATUS_SHIFTED = "shifted"
STATUS_FAILED = "failed"
STATUS_RESTORED = "restored"
REASON_MISSING = "traffic_adapter_missing"
REASON_EXECUTOR_MISSING = "traffic_adapter_executor_missing"
CODE_SHIFT_FAILED = "traffic_adapter_failed"
CODE_ROLLBACK_FAILED = "traffic_adapter_rollback_failed"
DEFAULT_CANARY_STEPS = (10, 50, 100)
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 300
# The largest controller answer read (the answer is a small JSON object).
MAX_ANSWER_BYTES = 64 * 1024


class TrafficError(StellaError):
    """An adapter failed closed; ``evidence`` holds what it observed (never a credential)."""


def _weight(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise StellaError(
            "traffic_config_invalid", "%s must be a number from 0 to 100, got %r" % (what, value), phase="plan"
        )
    return int(value)


def step_weights(strategy, config, batch, batches):
    """``(controlWeight, treatmentWeight)`` after batch ``batch`` (0-based) of ``batches`` (pure).

    - canary: ``strategyConfig.trafficSteps`` (default ``[10, 50, 100]``), one step per batch, the last
      step repeats, and the last batch always ends at 100;
    - blue-green: 0 until the treatment slot is verified, then 100 (one switch, after the last batch);
    - a-b: ``strategyConfig.trafficWeights`` ``{control, treatment}`` (default 50/50).
    """
    config = config or {}
    if strategy == "canary":
        steps = [
            _weight(v, "trafficSteps[%d]" % i) for i, v in enumerate(config.get("trafficSteps") or DEFAULT_CANARY_STEPS)
        ]
        if steps != sorted(steps):
            raise StellaError("traffic_config_invalid", "trafficSteps must not decrease: %s" % steps, phase="plan")
        treatment = 100 if batch >= batches - 1 else steps[min(batch, len(steps) - 1)]
    elif strategy == "blue-green":
        treatment = 100 if batch >= batches - 1 else 0
    elif strategy == "a-b":
        weights = config.get("trafficWeights") or {"control": 50, "treatment": 50}
        control = _weight(weights.get("control"), "trafficWeights.control")
        treatment = _weight(weights.get("treatment"), "trafficWeights.treatment")
        if control + treatment != 100:
            raise StellaError(
                "traffic_config_invalid",
                "trafficWeights must add up to 100, got %d + %d" % (control, treatment),
                phase="plan",
            )
        return control, treatment
    else:
        raise StellaError("traffic_config_invalid", "strategy %s moves no traffic" % strategy, phase="plan")
    return 100 - treatment, treatment


# Option names that carry credentials: they belong in the adapter options from variables (no_log), never
# in the release, which the job record, its evidence and the store keep verbatim.
_SECRET_OPTION = re.compile(r"(password|passwd|secret|token|credential|auth|headers|cookie|api[_-]?key)", re.I)


def check_traffic_config(strategy, config, batches):
    """The traffic part of a release checked once at planning (pure), so it fails the plan
    (``traffic_config_invalid``, nothing touched), never the traffic step of a running job:

    - every batch's weights of a traffic strategy (``trafficSteps``, ``trafficWeights``);
    - no credential in ``trafficAdapterOptions`` (an option named like one, or a URL with userinfo):
      credentials go in ``stella_traffic_adapter_options``, which is never logged or stored.
    """
    config = config or {}
    if strategy in TRAFFIC_STRATEGIES:
        for batch in range(max(batches, 1)):
            step_weights(strategy, config, batch, batches)
    for name, value in sorted((config.get("trafficAdapterOptions") or {}).items()):
        userinfo = isinstance(value, str) and "@" in value.split("://", 1)[-1].split("/", 1)[0]
        if _SECRET_OPTION.search(str(name)) or userinfo:
            raise StellaError(
                "traffic_config_invalid",
                "strategyConfig.trafficAdapterOptions.%s carries credentials, "
                "which the job record and its evidence would keep: give them in "
                "stella_traffic_adapter_options (never logged or stored) instead" % name,
                phase="plan",
            )


def standby_evidence(reason, slot):
    """Evidence when no adapter moved traffic: exactly the contract's standby-only keys (pure)."""
    return {
        PREFIX + "mode": MODE_STANDBY_ONLY,
        PREFIX + "status": STATUS_NOT_SHIFTED,
        PREFIX + "shifted": False,
        PREFIX + "reason": reason,
        PREFIX + "slot": slot,
    }


def no_adapter_evidence(reason, step):
    """Evidence of a step no adapter ran (pure): standby-only for a shift, ``not_shifted`` for a
    rollback; never a word that implies traffic moved."""
    if not step.get("rollback"):
        return standby_evidence(reason, step["treatmentSlot"])
    return {
        ROLLBACK_PREFIX + "mode": MODE_ROLLBACK,
        ROLLBACK_PREFIX + "status": STATUS_NOT_SHIFTED,
        ROLLBACK_PREFIX + "shifted": False,
        ROLLBACK_PREFIX + "reason": reason,
        ROLLBACK_PREFIX + "slot": step["controlSlot"],
    }


def failed_evidence(kind, reason, slot, control, treatment, extra=None, rollback=False):
    prefix = ROLLBACK_PREFIX if rollback else PREFIX
    evidence = {
        prefix + "mode": MODE_ROLLBACK if rollback else MODE_SHIFT,
        prefix + "status": STATUS_FAILED,
        prefix + "shifted": False,
        prefix + "reason": reason,
        prefix + "slot": slot,
        prefix + "adapter": kind,
    }
    if not rollback:
        evidence.update({prefix + "controlWeight": control, prefix + "treatmentWeight": treatment})
    evidence.update(extra or {})
    return evidence


def shift_request(job, step):
    """The JSON body of a shift (or, with ``step["rollback"]``, a rollback) request (pure)."""
    return {
        "action": "rollback" if step.get("rollback") else "shift",
        "jobId": job["jobId"],
        "release": job.get("release"),
        "strategy": job.get("strategy"),
        "application": job.get("application"),
        "environment": job.get("environment"),
        "controlSlot": step["controlSlot"],
        "treatmentSlot": step["treatmentSlot"],
        "controlWeight": step["controlWeight"],
        "treatmentWeight": step["treatmentWeight"],
        "batch": step.get("batch"),
    }


def check_answer(answer, step):
    """Problems (strings) of a controller's answer: JSON ``{"applied": {"controlWeight",
    "treatmentWeight"}}`` equal to what was asked (pure)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("applied"), dict):
        return ["the answer is not a JSON object with an 'applied' object"]
    applied = answer["applied"]
    problems = []
    for key in ("controlWeight", "treatmentWeight"):
        value = applied.get(key)
        # whole numbers only: JSON false is not 0, 50.0 is not 50
        if type(value) is not int or value != step[key]:  # pylint: disable=unidiomatic-typecheck
            problems.append("applied %s is %s, asked %r" % (key, json.dumps(value), step[key]))
    return problems


def _urllib3_errors():
    """``urllib3.exceptions`` (``requests`` is loaded, so urllib3 is): what reading a body raises."""
    from urllib3 import exceptions  # pylint: disable=import-outside-toplevel

    return exceptions


def header_values(options):
    """The values of ``options.headers`` as strings (secrets to redact), whatever its shape (pure)."""
    headers = options.get("headers") or {}
    values = (
        headers.values() if isinstance(headers, dict) else headers if isinstance(headers, (list, tuple)) else [headers]
    )
    return [str(value) for value in values]


def webhook_limits(options):
    """``(total seconds, headers)`` of a webhook's options, checked (pure): ``timeoutSeconds`` a number
    from 0.1 to 300 (default 10), ``headers`` a mapping of strings; ``TrafficError`` naming the option
    otherwise, so a bad option fails the traffic step (and closes the gate) instead of aborting the job."""
    timeout = options.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0.1 <= timeout <= MAX_TIMEOUT:
        raise TrafficError(
            CODE_SHIFT_FAILED,
            "trafficAdapterOptions.timeoutSeconds must be a number of seconds "
            "from 0.1 to %d, got %s" % (MAX_TIMEOUT, json.dumps(timeout)[:40]),
            phase="traffic",
        )
    headers = options.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise TrafficError(
            CODE_SHIFT_FAILED, "trafficAdapterOptions.headers must map header names to strings", phase="traffic"
        )
    return float(timeout), dict(headers)


class Adapter(abc.ABC):
    """A traffic adapter: ``shift`` and ``rollback`` return evidence or raise :class:`TrafficError`."""

    kind = None

    def __init__(self, options):
        self.options = dict(options or {})

    def available(self):
        """``None`` when the adapter can run, else why not (a reason code)."""
        return None

    @abc.abstractmethod
    def apply(self, body):
        """Carry out one request body; return adapter-specific evidence (keys without the prefix)."""

    def shift(self, job, step):
        body = shift_request(job, step)
        prefix = ROLLBACK_PREFIX if step.get("rollback") else PREFIX
        try:
            facts = self.apply(body)
        except TrafficError as exc:
            # the slot the step asked for: the treatment for a shift, the control slot a rollback restores
            slot = step["controlSlot"] if step.get("rollback") else step["treatmentSlot"]
            exc.evidence = failed_evidence(
                self.kind,
                exc.reason,
                slot,
                step["controlWeight"],
                step["treatmentWeight"],
                {prefix + k: v for k, v in (exc.evidence or {}).items()},
                rollback=bool(step.get("rollback")),
            )
            exc.code = CODE_ROLLBACK_FAILED if step.get("rollback") else CODE_SHIFT_FAILED
            raise
        evidence = {
            prefix + "mode": MODE_ROLLBACK if step.get("rollback") else MODE_SHIFT,
            prefix + "status": STATUS_RESTORED if step.get("rollback") else STATUS_SHIFTED,
            prefix + "shifted": True,
            prefix + "adapter": self.kind,
            prefix + "slot": step["controlSlot"] if step.get("rollback") else step["treatmentSlot"],
            prefix + "controlWeight": step["controlWeight"],
            prefix + "treatmentWeight": step["treatmentWeight"],
        }
        if step.get("rollback"):
            evidence[prefix + "reason"] = step.get("reason") or "deployment rolled back"
        evidence.update({prefix + k: v for k, v in facts.items()})
        return evidence


class LocalFileAdapter(Adapter):
    """``local-file``: the route state as JSON in ``options.path``, written atomically. For lab
    verification only: it moves no real traffic."""

    kind = "local-file"

    def available(self):
        return None if self.options.get("path") else REASON_EXECUTOR_MISSING

    def apply(self, body):
        path = self.options["path"]
        state = {
            "jobId": body["jobId"],
            "action": body["action"],
            "controlSlot": body["controlSlot"],
            "treatmentSlot": body["treatmentSlot"],
            "controlWeight": body["controlWeight"],
            "treatmentWeight": body["treatmentWeight"],
        }
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            atomic_write(path, pretty_json(state), mode=0o644)
        except OSError as exc:
            raise TrafficError(
                CODE_SHIFT_FAILED, "cannot write route state %s: %s" % (path, exc.strerror or exc), phase="traffic"
            )
        return {"statePath": path}


class _Deadline:
    """One webhook exchange's deadline: every socket the exchange opens is registered here and shut down
    (both ways) when the deadline passes, so a read or write blocked on it returns at once, however
    the peer paces its bytes (``expire``, run by a timer thread)."""

    def __init__(self, seconds):
        self.at = time.monotonic() + seconds
        self.expired = False
        self._sockets = []
        self._lock = threading.Lock()

    def remaining(self):
        return max(self.at - time.monotonic(), 0.001)

    def opened(self, sock):
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self):
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, or handed over to the TLS socket that is registered too


def _deadline_http_adapter(requests, deadline):
    """A ``requests`` transport adapter whose connections register their sockets with ``deadline`` and
    connect, shake hands and send within what is left of it (the TLS handshake and ``sendall`` of
    Python's sockets are bounded as a whole by the socket's timeout)."""
    # pylint: disable=import-outside-toplevel
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    def new_conn(base):
        class Connection(base):
            def _new_conn(self):
                self.timeout = deadline.remaining()
                sock = super()._new_conn()
                sock.settimeout(deadline.remaining())
                deadline.opened(sock)
                return sock

            def connect(self):
                super().connect()
                deadline.opened(self.sock)  # the TLS socket, which took the plain one's place

        return Connection

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = new_conn(HTTPConnection)

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = new_conn(HTTPSConnection)

    pools = {"http": HTTPPool, "https": HTTPSPool}

    class DeadlineAdapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = dict(pools)

        def proxy_manager_for(self, proxy, **proxy_kwargs):
            manager = super().proxy_manager_for(proxy, **proxy_kwargs)
            if not proxy.lower().startswith("socks"):  # a SOCKS proxy's pools speak SOCKS
                manager.pool_classes_by_scheme = dict(pools)
            return manager

    return DeadlineAdapter()


class WebhookAdapter(Adapter):
    """``webhook``: POSTs each request to ``options.shiftUrl`` / ``options.rollbackUrl`` and fails
    closed on a missing URL, a bad option (:func:`webhook_limits`), a redirect (never followed), an answer
    that takes longer than ``timeoutSeconds`` in all or is larger than ``MAX_ANSWER_BYTES``, an
    unreachable controller, a non-2xx answer or an answer that is not the expected JSON (weights whole
    numbers equal to those asked). ``timeoutSeconds`` bounds the whole exchange: connecting, sending,
    the status line, the headers and the body (:class:`_Deadline`), however slowly the peer sends them.
    ``options.headers`` (e.g. a bearer token) come from ``no_log`` variables and are never written into
    evidence."""

    kind = "webhook"

    def available(self):
        # a disabled webhook (``enabled: false``) is an executor that cannot run: the contract's
        # traffic_adapter_executor_missing, as for a missing shiftUrl
        if self.options.get("enabled") is False:
            return REASON_EXECUTOR_MISSING
        return None if self.options.get("shiftUrl") else REASON_EXECUTOR_MISSING

    def apply(self, body):
        requests = _requests.load()
        url = self.options.get("rollbackUrl" if body["action"] == "rollback" else "shiftUrl") or (
            self.options.get("shiftUrl") if body["action"] == "rollback" else None
        )
        facts = {"webhookUrl": redact_url(url) if url else None}
        if not url:
            raise TrafficError(
                CODE_SHIFT_FAILED, "no webhook URL for %s" % body["action"], phase="traffic", evidence=facts
            )
        if requests is None:
            raise TrafficError(
                CODE_SHIFT_FAILED,
                "requests is required on the controller for the webhook adapter: %s" % _requests.import_error(),
                phase="traffic",
                evidence=facts,
            )
        timeout, headers = webhook_limits(self.options)
        deadline = _Deadline(timeout)
        session = requests.Session()
        adapter = _deadline_http_adapter(requests, deadline)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        timer = threading.Timer(timeout, deadline.expire)
        timer.daemon = True
        timer.start()
        answered = False
        try:
            # redirects are never followed: the credential header and the body go to this URL only
            with session.post(
                url, json=body, timeout=timeout, headers=headers, allow_redirects=False, stream=True
            ) as response:
                answered = not deadline.expired  # else the deadline cut the status line or the headers
                facts["webhookStatus"] = response.status_code
                if not 200 <= response.status_code < 300:
                    raise TrafficError(
                        CODE_SHIFT_FAILED,
                        "webhook %s answered HTTP %d%s"
                        % (
                            facts["webhookUrl"],
                            response.status_code,
                            " (redirects are not followed)" if 300 <= response.status_code < 400 else "",
                        ),
                        phase="traffic",
                        evidence=facts,
                    )
                data = self._read(response, deadline, timeout, facts)
        except (requests.Timeout, _urllib3_errors().ReadTimeoutError):
            self._timed_out(facts, timeout, answered)
        except (requests.RequestException, _urllib3_errors().HTTPError) as exc:
            if deadline.expired:
                self._timed_out(facts, timeout, answered)
            raise TrafficError(
                CODE_SHIFT_FAILED,
                "webhook %s unreachable: %s" % (facts["webhookUrl"], type(exc).__name__),
                phase="traffic",
                evidence=facts,
            ) from None
        finally:
            timer.cancel()
            session.close()
        if deadline.expired:  # the answer was cut at the deadline: what arrived is not the answer
            self._timed_out(facts, timeout, answered)
        try:
            answer = json.loads(data.decode("utf-8"))
        except ValueError:
            answer = None
        problems = check_answer(answer, body)
        if problems:
            raise TrafficError(
                CODE_SHIFT_FAILED,
                "webhook %s answer invalid: %s" % (facts["webhookUrl"], "; ".join(problems)),
                phase="traffic",
                evidence=facts,
            )
        facts["appliedAt"] = answer.get("appliedAt")
        if answer.get("dataPlaneUrl"):
            facts["dataPlaneUrl"] = redact_url(str(answer["dataPlaneUrl"]))
        return facts

    @staticmethod
    def _timed_out(facts, timeout, answered):
        if answered:
            raise TrafficError(
                CODE_SHIFT_FAILED,
                "webhook %s did not finish its answer within %gs" % (facts["webhookUrl"], timeout),
                phase="traffic",
                evidence=facts,
            ) from None
        raise TrafficError(
            CODE_SHIFT_FAILED,
            "webhook %s timed out after %gs" % (facts["webhookUrl"], timeout),
            phase="traffic",
            evidence=facts,
        ) from None

    @staticmethod
    def _read(response, deadline, timeout, facts):
        """The answer's body, within the exchange's deadline (a read blocked when it passes is cut by
        :meth:`_Deadline.expire`) and at most ``MAX_ANSWER_BYTES``."""
        chunks, size = [], 0
        # pieces as they arrive (one receive each), so the deadline is checked while a slow answer drips
        read1 = getattr(response.raw, "read1", None)
        for chunk in iter(lambda: read1(8192), b"") if read1 else response.iter_content(8192):
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise TrafficError(
                    CODE_SHIFT_FAILED,
                    "webhook %s answered more than %d bytes" % (facts["webhookUrl"], MAX_ANSWER_BYTES),
                    phase="traffic",
                    evidence=facts,
                )
            if deadline.expired or time.monotonic() > deadline.at:
                raise TrafficError(
                    CODE_SHIFT_FAILED,
                    "webhook %s did not finish its answer within %gs" % (facts["webhookUrl"], timeout),
                    phase="traffic",
                    evidence=facts,
                )
            chunks.append(chunk)
        return b"".join(chunks)


ADAPTERS = {LocalFileAdapter.kind: LocalFileAdapter, WebhookAdapter.kind: WebhookAdapter}


def resolve(config, options=None, adapters=None):
    """``(adapter or None, reason or None)`` for ``strategyConfig`` (pure but for construction).

    No ``trafficAdapter``: ``traffic_adapter_missing``. A name that is not registered, or an adapter
    whose options leave it unable to run (a webhook without ``shiftUrl`` or with ``enabled: false``):
    ``traffic_adapter_executor_missing``; the contract knows no other no-adapter reason.
    ``options``: the adapter's options from variables (credentials included), over
    ``strategyConfig.trafficAdapterOptions``.
    """
    registry = ADAPTERS if adapters is None else adapters
    name = (config or {}).get("trafficAdapter")
    if not name:
        return None, REASON_MISSING
    factory = registry.get(name)
    if factory is None:
        return None, REASON_EXECUTOR_MISSING
    merged = dict((config or {}).get("trafficAdapterOptions") or {})
    merged.update(options or {})
    adapter = factory(merged)
    why = adapter.available()
    return (None, why) if why else (adapter, None)


def evidence_json(evidence):
    """Evidence as stored: JSON-safe (the adapters only put strings, numbers and booleans in it)."""
    return json.loads(json.dumps(evidence, sort_keys=True))
