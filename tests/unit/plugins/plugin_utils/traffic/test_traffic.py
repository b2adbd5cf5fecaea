"""traffic/strategy.py and traffic/adapters.py: weights per strategy, standby-only evidence, adapter resolution,
the local-file adapter on disk and the webhook adapter against a real HTTP server on loopback (success, HTTP
500, invalid JSON, timeout, unreachable), with a planted credential that must not reach the evidence."""

from __future__ import annotations

import http.server
import json
import os
import re
import socket
import threading
import time

import pytest
import yaml

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic import adapters as tr
from ansible_collections.stellaops.runtime.plugins.plugin_utils.traffic import strategy as _strategy

JOB = {
    "jobId": "job-1",
    "release": {"id": "r1", "name": "shop", "version": "2.0.0"},
    "strategy": "blue-green",
    "application": "shop",
    "environment": "lab",
}
STEP = {"controlSlot": "active", "treatmentSlot": "green", "controlWeight": 0, "treatmentWeight": 100, "batch": 0}
SECRET = "s3cr3t-router-token"


@pytest.mark.parametrize(
    "strategy,config,batches,expected",
    [
        ("canary", {}, 3, [(90, 10), (50, 50), (0, 100)]),
        ("canary", {}, 5, [(90, 10), (50, 50), (0, 100), (0, 100), (0, 100)]),
        ("canary", {"trafficSteps": [5, 25]}, 4, [(95, 5), (75, 25), (75, 25), (0, 100)]),
        ("blue-green", {}, 2, [(100, 0), (0, 100)]),
        ("blue-green", {}, 1, [(0, 100)]),
        ("a-b", {"trafficWeights": {"control": 70, "treatment": 30}}, 2, [(70, 30), (70, 30)]),
        ("a-b", {}, 1, [(50, 50)]),
    ],
)
def test_step_weights(strategy, config, batches, expected):
    assert [_strategy.step_weights(strategy, config, b, batches) for b in range(batches)] == expected


@pytest.mark.parametrize(
    "strategy,config,needle",
    [
        ("canary", {"trafficSteps": [50, 10]}, "must not decrease"),
        ("canary", {"trafficSteps": [150]}, "from 0 to 100"),
        ("a-b", {"trafficWeights": {"control": 70, "treatment": 70}}, "add up to 100"),
        ("rolling", {}, "moves no traffic"),
    ],
)
def test_bad_traffic_config_is_refused(strategy, config, needle):
    with pytest.raises(StellaError) as err:
        _strategy.step_weights(strategy, config, 0, 2)
    assert err.value.code == "traffic_config_invalid" and needle in err.value.reason


def test_standby_evidence_is_exactly_the_contract_keys():
    assert tr.standby_evidence(tr.REASON_MISSING, "green") == {
        "strategy.traffic.mode": "standby_only",
        "strategy.traffic.status": "not_shifted",
        "strategy.traffic.shifted": False,
        "strategy.traffic.reason": "traffic_adapter_missing",
        "strategy.traffic.slot": "green",
    }


@pytest.mark.parametrize(
    "config,reason",
    [
        ({}, "traffic_adapter_missing"),
        ({"trafficAdapter": "f5-bigip"}, "traffic_adapter_executor_missing"),
        ({"trafficAdapter": "webhook"}, "traffic_adapter_executor_missing"),
        (
            {"trafficAdapter": "webhook", "trafficAdapterOptions": {"shiftUrl": "http://x/", "enabled": False}},
            "traffic_adapter_executor_missing",
        ),
        ({"trafficAdapter": "local-file"}, "traffic_adapter_executor_missing"),
    ],
)
def test_resolve_without_a_runnable_adapter(config, reason):
    assert tr.resolve(config) == (None, reason)


def test_local_file_adapter_writes_the_route_state_atomically(tmp_path):
    path = str(tmp_path / "routes" / "shop.json")
    adapter, why = tr.resolve({"trafficAdapter": "local-file", "trafficAdapterOptions": {"path": path}})
    assert why is None
    evidence = adapter.shift(JOB, STEP)
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle) == {
            "jobId": "job-1",
            "action": "shift",
            "controlSlot": "active",
            "treatmentSlot": "green",
            "controlWeight": 0,
            "treatmentWeight": 100,
        }
    assert evidence == {
        "strategy.traffic.mode": "traffic_shift",
        "strategy.traffic.status": "shifted",
        "strategy.traffic.shifted": True,
        "strategy.traffic.adapter": "local-file",
        "strategy.traffic.slot": "green",
        "strategy.traffic.controlWeight": 0,
        "strategy.traffic.treatmentWeight": 100,
        "strategy.traffic.statePath": path,
    }
    back = adapter.shift(JOB, dict(STEP, controlWeight=100, treatmentWeight=0, rollback=True, reason="probe failed"))
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["action"] == "rollback"
    assert back["strategy.traffic.rollback.mode"] == "traffic_rollback"
    assert back["strategy.traffic.rollback.slot"] == "active" and back["strategy.traffic.rollback.shifted"] is True
    assert not [n for n in os.listdir(tmp_path / "routes") if n.startswith(".stella-tmp-")]


# ------------------------------------------------------------------ a real router controller on loopback


class Controller(http.server.BaseHTTPRequestHandler):
    """Answers as ``server.mode`` says; records each request's body and Authorization header."""

    def do_POST(self):  # noqa: N802 (the handler's API)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        self.server.seen.append((self.path, body, self.headers.get("Authorization")))
        mode = self.server.mode
        if mode == "slow":
            time.sleep(1.5)
        status, payload = (
            200,
            {
                "applied": {"controlWeight": body["controlWeight"], "treatmentWeight": body["treatmentWeight"]},
                "appliedAt": "2026-12-01T10:00:00Z",
                "dataPlaneUrl": "http://127.0.0.1:8099/",
            },
        )
        if mode == "500":
            status = 500
        data = b"not json" if mode == "garbage" else json.dumps(payload).encode()
        if mode == "wrong":
            data = json.dumps({"applied": {"controlWeight": 50, "treatmentWeight": 50}}).encode()
        if mode == "false":  # JSON false where 0 is asked
            data = json.dumps(
                {
                    "applied": {
                        "controlWeight": False if body["controlWeight"] == 0 else body["controlWeight"],
                        "treatmentWeight": body["treatmentWeight"],
                    }
                }
            ).encode()
        if mode == "huge":
            data = b" " * (2 * 1024 * 1024) + json.dumps(payload).encode()
        try:
            if mode == "redirect":
                self.send_response(307)
                self.send_header("Location", "http://127.0.0.1:%d/elsewhere" % self.server.server_address[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if mode == "drip":  # each piece in time (0.2 s apart), the whole answer not (gives up after 1.6 s)
                started = time.monotonic()
                for index in range(0, len(data), 4):
                    if time.monotonic() - started > 1.6:
                        return
                    self.wfile.write(data[index : index + 4])
                    self.wfile.flush()
                    time.sleep(0.2)
                return
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)

    def log_message(self, *args):
        pass


@pytest.fixture
def controller():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Controller)
    server.seen, server.mode = [], "ok"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def webhook(server, userinfo=False, **options):
    base = "http://%s127.0.0.1:%d" % ("router:%s@" % SECRET if userinfo else "", server.server_address[1])
    options = dict(
        {
            "shiftUrl": base + "/shift",
            "rollbackUrl": base + "/rollback",
            "timeoutSeconds": 1,
            "headers": {"Authorization": "Bearer " + SECRET},
        },
        **options,
    )
    adapter, why = tr.resolve({"trafficAdapter": "webhook"}, options)
    assert why is None
    return adapter


def test_webhook_shift_and_rollback(controller):
    adapter = webhook(controller)
    evidence = adapter.shift(JOB, STEP)
    assert evidence["strategy.traffic.status"] == "shifted" and evidence["strategy.traffic.webhookStatus"] == 200
    assert evidence["strategy.traffic.appliedAt"] == "2026-12-01T10:00:00Z"
    assert evidence["strategy.traffic.dataPlaneUrl"] == "http://127.0.0.1:8099/"
    back = adapter.shift(JOB, dict(STEP, controlWeight=100, treatmentWeight=0, rollback=True))
    assert back["strategy.traffic.rollback.status"] == "restored"
    assert [(path, body["action"]) for path, body, _auth in controller.seen] == [
        ("/shift", "shift"),
        ("/rollback", "rollback"),
    ]
    assert controller.seen[0][1]["treatmentSlot"] == "green" and controller.seen[0][2] == "Bearer " + SECRET
    assert SECRET not in json.dumps([evidence, back])


def test_a_failed_traffic_rollback_names_the_slot_it_was_to_restore(controller):
    controller.mode = "500"
    with pytest.raises(tr.TrafficError) as info:
        webhook(controller).shift(JOB, dict(STEP, controlWeight=100, treatmentWeight=0, rollback=True))
    evidence = info.value.evidence
    assert info.value.code == "traffic_adapter_rollback_failed"
    assert (evidence["strategy.traffic.rollback.status"], evidence["strategy.traffic.rollback.slot"]) == (
        "failed",
        "active",
    )
    assert "strategy.traffic.slot" not in evidence


def test_webhook_credentials_in_the_url_are_sent_but_never_recorded(controller):
    # requests turns URL userinfo into Basic auth (it takes precedence over an Authorization header)
    evidence = webhook(controller, userinfo=True, headers={}).shift(JOB, STEP)
    assert controller.seen[0][2].startswith("Basic ")
    assert evidence["strategy.traffic.webhookUrl"].startswith("http://") and SECRET not in json.dumps(evidence)


@pytest.mark.parametrize(
    "mode,needle",
    [
        ("500", "answered HTTP 500"),
        ("garbage", "answer invalid"),
        ("wrong", "applied controlWeight is 50"),
        ("slow", "timed out"),
    ],
)
def test_webhook_fails_closed(controller, mode, needle):
    controller.mode = mode
    with pytest.raises(StellaError) as err:
        webhook(controller, userinfo=True).shift(JOB, STEP)
    assert err.value.code == "traffic_adapter_failed" and needle in err.value.reason
    evidence = err.value.evidence
    assert evidence["strategy.traffic.status"] == "failed" and evidence["strategy.traffic.shifted"] is False
    assert SECRET not in json.dumps(evidence) + err.value.reason


def test_webhook_unreachable_fails_closed():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter, _why = tr.resolve({"trafficAdapter": "webhook"}, {"shiftUrl": "http://127.0.0.1:%d/shift" % port})
    with pytest.raises(StellaError) as err:
        adapter.shift(JOB, dict(STEP, rollback=True))
    assert err.value.code == "traffic_adapter_rollback_failed" and "unreachable" in err.value.reason
    assert err.value.evidence["strategy.traffic.rollback.shifted"] is False


# ------------------------------------------------------------------ docs/traffic.md says what the code does

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "docs", "traffic.md")


def doc_blocks(language):
    with open(DOC, encoding="utf-8") as handle:
        text = handle.read()
    return re.findall(r"^```%s\n(.*?)^```" % language, text, re.M | re.S)


def test_the_documented_release_options_resolve_to_the_webhook_adapter():
    release = yaml.safe_load(doc_blocks("yaml")[0])
    adapter, why = tr.resolve(release["strategyConfig"])
    assert why is None and adapter.kind == "webhook"
    assert release["strategy"] in _strategy.TRAFFIC_STRATEGIES


def test_the_documented_request_body_and_route_state_have_the_keys_the_adapters_send(tmp_path):
    body, state = [json.loads(b) for b in doc_blocks("json")]
    assert set(body) == set(tr.shift_request(JOB, STEP))
    path = str(tmp_path / "state.json")
    tr.resolve({"trafficAdapter": "local-file"}, {"path": path})[0].shift(JOB, STEP)
    with open(path, encoding="utf-8") as handle:
        assert set(json.load(handle)) == set(state)


def test_no_adapter_evidence_never_says_traffic_moved():
    assert tr.no_adapter_evidence(tr.REASON_MISSING, STEP) == tr.standby_evidence(tr.REASON_MISSING, "green")
    assert tr.no_adapter_evidence(tr.REASON_EXECUTOR_MISSING, dict(STEP, rollback=True)) == {
        "strategy.traffic.rollback.mode": "traffic_rollback",
        "strategy.traffic.rollback.status": "not_shifted",
        "strategy.traffic.rollback.shifted": False,
        "strategy.traffic.rollback.reason": "traffic_adapter_executor_missing",
        "strategy.traffic.rollback.slot": "active",
    }


@pytest.mark.parametrize(
    "mode, needle",
    [
        ("redirect", "answered HTTP 307 (redirects are not followed)"),
        ("huge", "answered more than 65536 bytes"),
        ("drip", "did not finish its answer within 1s"),
        ("false", "applied controlWeight is false, asked 0"),
    ],
)
def test_webhook_answers_are_bounded_and_exact(controller, mode, needle):
    controller.mode = mode
    with pytest.raises(tr.TrafficError) as info:
        webhook(controller).shift(JOB, STEP)
    assert info.value.code == "traffic_adapter_failed" and needle in info.value.reason, info.value.reason
    # a redirect is never followed: the controller saw one request, at the shift URL
    assert [path for path, _body, _auth in controller.seen] == ["/shift"]


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"timeoutSeconds": "ten"}, "timeoutSeconds must be a number"),
        ({"timeoutSeconds": 0}, "timeoutSeconds must be a number"),
        ({"headers": ["Authorization: x"]}, "headers must map header names to strings"),
        ({"headers": {"X-Retries": 3}}, "headers must map header names to strings"),
    ],
)
def test_bad_webhook_options_fail_the_step_not_the_job(controller, options, needle):
    with pytest.raises(tr.TrafficError) as info:
        webhook(controller, **options).shift(JOB, STEP)
    assert info.value.code == "traffic_adapter_failed" and needle in info.value.reason
    assert controller.seen == []


# ------------------------------------------------------------------ a router controller that trickles its answer


@pytest.fixture
def trickler():
    """A raw HTTP peer on loopback that reads the request, then sends its answer one byte every 0.1 s
    (``server.stage``: ``status`` trickles from the status line on, ``headers`` sends the status line at
    once and trickles the headers); it stops when the client goes away or the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()
    state = {"stage": "headers", "closed": None}

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _addr = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                seen = b""
                while b"\r\n\r\n" not in seen:
                    seen += conn.recv(65536) or b"\r\n\r\n"
                status = b"HTTP/1.1 200 OK\r\n"
                rest = (
                    b"Content-Type: application/json\r\n"
                    + b"".join(b"X-Slow-%d: %s\r\n" % (i, b"a" * 20) for i in range(40))
                    + b"\r\n"
                )
                try:
                    if state["stage"] == "headers":
                        conn.sendall(status)
                    for byte in status + rest if state["stage"] == "status" else rest:
                        if stop.is_set():
                            break
                        conn.sendall(bytes([byte]))
                        time.sleep(0.1)
                except OSError:
                    state["closed"] = time.monotonic()  # the client gave up

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    state["port"] = listener.getsockname()[1]
    yield state
    stop.set()
    thread.join(10)
    listener.close()


@pytest.mark.parametrize("stage", ["status", "headers"])
def test_webhook_timeout_bounds_the_whole_exchange_headers_included(trickler, stage):
    # every byte arrives well within the read timeout, the whole answer would take about 90 s
    trickler["stage"] = stage
    adapter, _why = tr.resolve(
        {"trafficAdapter": "webhook"}, {"shiftUrl": "http://127.0.0.1:%d/shift" % trickler["port"], "timeoutSeconds": 1}
    )
    started = time.monotonic()
    with pytest.raises(tr.TrafficError) as info:
        adapter.shift(JOB, STEP)
    took = time.monotonic() - started
    assert info.value.code == "traffic_adapter_failed" and "timed out after 1s" in info.value.reason, info.value.reason
    assert took < 2.0, took
    assert info.value.evidence["strategy.traffic.shifted"] is False
