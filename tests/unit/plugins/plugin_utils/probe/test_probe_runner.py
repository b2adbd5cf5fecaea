"""The HTTP/TCP probe runner: one requests.Session per runner, observation strings, requests missing, check mode."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading

import pytest
import requests
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ProtocolError

from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution import http as _requests
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.spec import ProbeSpec
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.verify import verify
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.runner import (
    HttpTcpProbeRunner,
    ProbeRunner,
    describe_request_error,
)


class _KeepAliveHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server API)
        self.server.seen.append((self.client_address[1], self.path, self.headers.get("User-Agent")))
        code = {"/ok": 200, "/fail": 500, "/moved": 301}.get(self.path, 404)
        body = b"x" * (100 if self.path != "/big" else 200 * 1024)
        self.send_response(code)
        if code == 301:
            self.send_header("Location", "/ok")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def keepalive_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeepAliveHandler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def raw_server():
    """A TCP server answering every connection with ``raw_server.reply`` bytes, then closing it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(5)
    state = {"reply": b"", "stop": False}

    def serve():
        while not state["stop"]:
            try:
                conn, _addr = sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(state["reply"])
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1], state
    state["stop"] = True
    sock.close()


def spec(port, path="/ok", **kw):
    kw.setdefault("attempts", 1)
    kw.setdefault("interval_seconds", 0)
    kw.setdefault("timeout_seconds", 2.0)
    return ProbeSpec(
        "api",
        "http",
        "127.0.0.1",
        port=port,
        url="http://127.0.0.1:%d%s" % (port, path),
        expected_status=kw.pop("expected_status", 200),
        **kw,
    )


def no_sleep(_seconds):
    return None


def test_attempts_reuse_one_connection(keepalive_server):
    runner = HttpTcpProbeRunner(sleep=no_sleep)
    try:
        result = runner.run(spec(keepalive_server.server_port, "/fail", attempts=3))
        again = runner.run(spec(keepalive_server.server_port, "/ok"))
    finally:
        runner.close()
    assert (result.healthy, result.history) == (False, ["500", "500", "500"])
    assert again.observed == "200"
    ports = {client_port for client_port, _path, _agent in keepalive_server.seen}
    assert len(keepalive_server.seen) == 4
    assert len(ports) == 1, keepalive_server.seen  # one TCP connection for every attempt of the runner
    assert {agent for _port, _path, agent in keepalive_server.seen} == {"stellaops.runtime-probe/1"}


def test_verify_uses_one_session_for_all_components(keepalive_server):
    port = keepalive_server.server_port
    components = [{"name": name, "config": {"healthProbe.url": "http://127.0.0.1:%d/ok" % port}} for name in "abc"]
    out = verify(components, target={"endpoint": "local"})
    assert out["evidence"]["healthProbe.status"] == "passed"
    assert len({client_port for client_port, _path, _agent in keepalive_server.seen}) == 1


def test_large_body_is_not_a_failure_and_redirects_are_not_followed(keepalive_server):
    runner = HttpTcpProbeRunner(sleep=no_sleep)
    try:
        assert runner.run(spec(keepalive_server.server_port, "/big", expected_status=404)).observed == "404"
        assert runner.run(spec(keepalive_server.server_port, "/moved")).observed == "301"
        assert runner.run(spec(keepalive_server.server_port, "/ok")).observed == "200"
    finally:
        runner.close()
    assert [path for _port, path, _agent in keepalive_server.seen] == ["/big", "/moved", "/ok"]


def test_session_ignores_the_environment():
    runner = HttpTcpProbeRunner()
    session = runner.session
    try:
        assert session.trust_env is False and session.proxies == {}
        assert session.headers["User-Agent"] == "stellaops.runtime-probe/1"
    finally:
        runner.close()


@pytest.mark.parametrize(
    "reply, observed",
    [
        (b"garbage\r\n\r\n", "error: BadStatusLine: garbage\r\n"),
        (b"", "error: Remote end closed connection without response"),
    ],
    ids=["bad-status-line", "closed-without-response"],
)
def test_protocol_errors_keep_their_observation_strings(raw_server, reply, observed):
    port, state = raw_server
    state["reply"] = reply
    result = HttpTcpProbeRunner(sleep=no_sleep).run(spec(port))
    assert (result.healthy, result.observed) == (False, observed)


def _chain(outer, inner, cause):
    try:
        try:
            raise inner from cause
        except Exception as exc:  # noqa: BLE001
            raise outer(exc) from None
    except Exception as exc:  # noqa: BLE001
        return exc


def test_describe_request_error_reaches_the_innermost_cause():
    refused = ConnectionRefusedError(111, "Connection refused")
    new_conn = NewConnectionError(None, "Failed to establish a new connection")
    new_conn.__cause__ = refused
    error = requests.exceptions.ConnectionError(MaxRetryError(None, "/ok", reason=new_conn))
    assert describe_request_error(error) == "refused: [Errno 111] Connection refused"

    timeout = ConnectTimeoutError(None, "Connection timed out")
    timeout.__cause__ = socket.timeout("timed out")
    assert (
        describe_request_error(requests.exceptions.ConnectTimeout(MaxRetryError(None, "/", reason=timeout)))
        == "timeout: timed out"
    )

    gai = socket.gaierror(-2, "Name or service not known")
    assert (
        describe_request_error(requests.exceptions.ConnectionError(MaxRetryError(None, "/", reason=gai)))
        == "error: [Errno -2] Name or service not known"
    )

    bad = http.client.BadStatusLine("nope")
    assert (
        describe_request_error(requests.exceptions.ConnectionError(ProtocolError("Connection aborted.", bad)))
        == "error: BadStatusLine: nope"
    )
    assert describe_request_error(requests.exceptions.ReadTimeout("read timed out")) == "timeout: read timed out"


def test_missing_requests_fails_clearly_before_probing(monkeypatch, keepalive_server):
    monkeypatch.setattr(
        _requests, "_STATE", {"module": None, "error": "ModuleNotFoundError: No module named 'requests'"}
    )
    components = [
        {"name": "api", "config": {"healthProbe.url": "http://127.0.0.1:%d/ok" % keepalive_server.server_port}}
    ]
    out = verify(components, target={"endpoint": "local"})
    assert out["failed"] is True
    assert out["code"] == "requests_missing"
    assert out["msg"].startswith("requests is required on the controller")
    assert out["evidence"]["healthProbe.status"] == "failed"
    assert keepalive_server.seen == []


def test_tcp_probes_do_not_need_requests(monkeypatch, keepalive_server):
    monkeypatch.setattr(
        _requests, "_STATE", {"module": None, "error": "ModuleNotFoundError: No module named 'requests'"}
    )
    components = [
        {"name": "db", "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": keepalive_server.server_port}}
    ]
    out = verify(components, target={"endpoint": "local"})
    assert out["failed"] is False and out["evidence"]["healthProbe.db.observed"] == "connected"


class _Forbidden(ProbeRunner):
    def run(self, spec):  # pragma: no cover - a call is the failure
        raise AssertionError("check mode probed %s" % spec.endpoint)


def test_check_mode_reports_what_it_would_probe_and_passes_no_verdict(keepalive_server, monkeypatch):
    def no_network(*_args, **_kwargs):
        raise AssertionError("check mode opened a connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(requests.Session, "request", no_network)
    components = [
        {
            "name": "api",
            "config": {"healthProbe.port": 8080, "healthProbe.path": "/healthz", "healthProbe.attempts": 5},
        },
        {"name": "db", "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": 5432}},
        {"name": "worker", "config": {"env.A": "1"}},
    ]
    for runner in (None, _Forbidden()):
        out = verify(components, target={"endpoint": "ssh://root@10.0.0.5:22"}, runner=runner, check_mode=True)
        assert out["failed"] is False
        assert out["evidence"] == {
            "healthProbe.status": "not_run",
            "healthProbe.reason": "check_mode",
            "healthProbe.count": 2,
            "healthProbe.api.endpoint": "http://10.0.0.5:8080/healthz",
            "healthProbe.db.endpoint": "tcp://10.0.0.5:5432",
        }
        assert [(p["component"], p["type"], p["expected"], p["attempts"]) for p in out["probes"]] == [
            ("api", "http", "HTTP 200", 5),
            ("db", "tcp", "TCP connect", 3),
        ]
        assert out["msg"].startswith("Check mode: nothing probed, no verdict; would probe 2 component(s): ")
    assert keepalive_server.seen == []


def test_check_mode_still_fails_an_invalid_configuration_and_keeps_the_skip():
    bad = [{"name": "api", "config": {"healthProbe.type": "udp"}}]
    out = verify(bad, target={"endpoint": "local"}, check_mode=True)
    assert (out["failed"], out["code"]) == (True, "health_probe_config_invalid")
    ok = [{"name": "api", "config": {"healthProbe.port": 1}}]
    skipped = verify(ok, target={"endpoint": "local"}, wait_for_health_check=False, check_mode=True)
    assert skipped["evidence"]["healthProbe.status"] == "skipped"
    assert verify([{"name": "w"}], target={"endpoint": "local"}, check_mode=True)["evidence"] == {}
