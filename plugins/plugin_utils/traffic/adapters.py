# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Traffic adapters on the controller (contract: the traffic paragraphs of "Automatic rollback on
failed deployment" and "Strategy Evidence Boundary").

An adapter moves traffic between the active slot (control) and the slot a blue-green, canary or A/B
job deployed (treatment) and returns evidence with the contract's keys (``strategy.traffic.*``).
Without an adapter only standby-slot evidence is written, and nothing implies that traffic moved.

Pure parts: :func:`standby_evidence`, :func:`resolve`, the request bodies and the checks of a
controller's answer. The two adapters do I/O: ``local-file`` (an atomic write of the route state, lab
verification only) and ``webhook`` (``requests`` POSTs to an operator's router controller, the whole
exchange bounded by :mod:`.deadline`). Register your own in :data:`ADAPTERS`. The weights each strategy
asks for and the prefixes of the evidence keys are :mod:`.strategy`.
"""

from __future__ import annotations

import abc
import json
import os
import threading
import time

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.canonical import pretty_json
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic.deadline import Deadline, deadline_http_adapter
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic.strategy import PREFIX, ROLLBACK_PREFIX

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
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 300
# The largest controller answer read (the answer is a small JSON object).
MAX_ANSWER_BYTES = 64 * 1024


class TrafficError(StellaError):
    """An adapter failed closed; ``evidence`` holds what it observed (never a credential)."""


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

    kind: str | None = None  # the name it is registered under in ADAPTERS

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


class WebhookAdapter(Adapter):
    """``webhook``: POSTs each request to ``options.shiftUrl`` / ``options.rollbackUrl`` and fails
    closed on a missing URL, a bad option (:func:`webhook_limits`), a redirect (never followed), an answer
    that takes longer than ``timeoutSeconds`` in all or is larger than ``MAX_ANSWER_BYTES``, an
    unreachable controller, a non-2xx answer or an answer that is not the expected JSON (weights whole
    numbers equal to those asked). ``timeoutSeconds`` bounds the whole exchange: connecting, sending,
    the status line, the headers and the body (:class:`Deadline`), however slowly the peer sends them.
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
        deadline = Deadline(timeout)
        session = requests.Session()
        adapter = deadline_http_adapter(requests, deadline)
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
        :meth:`Deadline.expire`) and at most ``MAX_ANSWER_BYTES``."""
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
