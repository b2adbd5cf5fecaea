"""Post-deploy health probes: config parsing, real loopback probing, skip path, evidence keys."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.runner import (
    HttpTcpProbeRunner,
    ProbeResult,
    ProbeRunner,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.spec import (
    ProbeSpec,
    parse_probe_specs,
    target_host,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.verify import verify

INVALID = "Post-deploy health probe configuration invalid: "


# --------------------------------------------------------------------------- real loopback servers


class _Handler(http.server.BaseHTTPRequestHandler):
    flaky_left = {}

    def do_GET(self):  # noqa: N802 (http.server API)
        if self.path == "/ok":
            code = 200
        elif self.path == "/fail":
            code = 500
        elif self.path == "/created":
            code = 201
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/ok")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        elif self.path.startswith("/flaky"):
            left = self.server.flaky_left
            code = 503 if left.get(self.path, 0) > 0 else 200
            left[self.path] = left.get(self.path, 0) - 1
        else:
            code = 404
        self.server.seen.append(self.path)
        body = b"{}"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.seen = []
    server.flaky_left = {}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_listener():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock
    sock.close()


@pytest.fixture
def closed_port():
    """A port bound but not listening: connecting is refused, and nobody else can take it meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def silent_server(tcp_listener):
    """Accepts TCP connections but never answers HTTP (for timeouts)."""
    return tcp_listener.getsockname()[1]


class FakeTime:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def runner(fake=None):
    fake = fake or FakeTime()
    return HttpTcpProbeRunner(clock=fake.clock, sleep=fake.sleep)


def http_spec(port, path="/ok", **kw):
    kw.setdefault("attempts", 1)
    kw.setdefault("interval_seconds", 0.5)
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


def tcp_spec(port, **kw):
    kw.setdefault("attempts", 1)
    kw.setdefault("interval_seconds", 0.5)
    kw.setdefault("timeout_seconds", 2.0)
    return ProbeSpec("db", "tcp", "127.0.0.1", port=port, **kw)


# --------------------------------------------------------------------------- target host


@pytest.mark.parametrize(
    "endpoint, host",
    [
        ("ssh://root@10.0.0.5:22", "10.0.0.5"),
        ("ssh://deploy:secret@node-1.example:2222", "node-1.example"),
        ("tcp://docker-host:2376", "docker-host"),
        ("winrm://win01:5986", "win01"),
        ("docker-host", "docker-host"),
        ("docker-host:22", "docker-host"),
        ("root@10.1.2.3", "10.1.2.3"),
        ("[fd00::5]:22", "fd00::5"),
        ("local", "127.0.0.1"),
        ("localhost", "127.0.0.1"),
        ("LOCAL", "127.0.0.1"),
        ("ssh://localhost:22", "127.0.0.1"),
        ("unix:///var/run/docker.sock", None),
        ("", None),
        (None, None),
        ("tcp://[broken", None),
    ],
)
def test_target_host(endpoint, host):
    assert target_host(endpoint) == host


# --------------------------------------------------------------------------- config parsing

TARGET = {"targetId": "t-1", "endpoint": "ssh://root@10.0.0.5:22"}


def one(config, target=None, host_override=None):
    target = TARGET if target is None else target
    specs = parse_probe_specs([{"name": "api", "config": config}], target=target, host_override=host_override)
    assert len(specs) == 1
    return specs[0].as_dict()


BASE = {"timeoutSeconds": 5.0, "attempts": 3, "intervalSeconds": 2.0}


@pytest.mark.parametrize(
    "config, target, override, expected",
    [
        (
            {"healthProbe.type": "http"},
            TARGET,
            None,
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://10.0.0.5/",
                host="10.0.0.5",
                port=80,
                expectedStatus=200,
            ),
        ),
        (
            {"healthProbe.port": "8080", "healthProbe.path": "healthz"},
            TARGET,
            None,
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://10.0.0.5:8080/healthz",
                host="10.0.0.5",
                port=8080,
                expectedStatus=200,
            ),
        ),
        (
            {
                "healthProbe.type": "HTTP",
                "healthProbe.scheme": "https",
                "healthProbe.host": "svc.internal",
                "healthProbe.expectedStatus": 204,
                "healthProbe.timeoutSeconds": "1.5",
                "healthProbe.attempts": "5",
                "healthProbe.intervalSeconds": 0,
            },
            TARGET,
            None,
            dict(
                component="api",
                type="http",
                endpoint="https://svc.internal/",
                host="svc.internal",
                port=443,
                expectedStatus=204,
                timeoutSeconds=1.5,
                attempts=5,
                intervalSeconds=0.0,
            ),
        ),
        (
            {"healthProbe.url": "http://10.9.9.9:9000/ready"},
            {},
            None,
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://10.9.9.9:9000/ready",
                host="10.9.9.9",
                port=9000,
                expectedStatus=200,
            ),
        ),
        (
            {"healthProbe.type": "tcp", "healthProbe.tcp.port": 5432},
            {"endpoint": "tcp://dbhost:2376"},
            None,
            dict(BASE, component="api", type="tcp", endpoint="tcp://dbhost:5432", host="dbhost", port=5432),
        ),
        (
            {"healthProbe.type": "tcp", "healthProbe.tcp.port": "6379"},
            {"endpoint": "local"},
            None,
            dict(BASE, component="api", type="tcp", endpoint="tcp://127.0.0.1:6379", host="127.0.0.1", port=6379),
        ),
        (
            {"healthProbe.port": 8080},
            TARGET,
            "192.168.50.2",
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://192.168.50.2:8080/",
                host="192.168.50.2",
                port=8080,
                expectedStatus=200,
            ),
        ),
        (
            {"healthProbe.host": "explicit", "healthProbe.port": 8080},
            TARGET,
            "192.168.50.2",
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://explicit:8080/",
                host="explicit",
                port=8080,
                expectedStatus=200,
            ),
        ),
        (
            {"healthProbe.type": "tcp", "healthProbe.tcp.port": 22},
            {"endpoint": "[fd00::5]:22"},
            None,
            dict(BASE, component="api", type="tcp", endpoint="tcp://[fd00::5]:22", host="fd00::5", port=22),
        ),
        (
            {"healthProbe.port": 80},
            {"targetEndpoint": "web-3"},
            None,
            dict(
                BASE,
                component="api",
                type="http",
                endpoint="http://web-3:80/",
                host="web-3",
                port=80,
                expectedStatus=200,
            ),
        ),
    ],
    ids=[
        "defaults",
        "port-path",
        "https-explicit",
        "url",
        "tcp",
        "tcp-local",
        "host-override",
        "host-beats-override",
        "ipv6",
        "targetEndpoint-key",
    ],
)
def test_parse_valid(config, target, override, expected):
    assert one(config, target, override) == expected


@pytest.mark.parametrize(
    "config, target, reason",
    [
        (
            {"healthProbe.type": "udp"},
            TARGET,
            "component 'api': unsupported healthProbe.type 'udp' (supported: http, tcp)",
        ),
        ({"healthProbe.type": "tcp"}, TARGET, "component 'api': healthProbe.tcp.port is required for tcp probes"),
        (
            {"healthProbe.type": "tcp", "healthProbe.port": 5432},
            TARGET,
            "component 'api': healthProbe.port does not apply to tcp probes (use healthProbe.tcp.port)",
        ),
        ({"healthProbe.tcp.port": 5432}, TARGET, "component 'api': healthProbe.tcp.port does not apply to http probes"),
        (
            {"healthProbe.port": 8080},
            {"endpoint": "unix:///var/run/docker.sock"},
            "component 'api': no resolvable host (target endpoint 'unix:///var/run/docker.sock' has no host; "
            "set healthProbe.host or healthProbe.url)",
        ),
        (
            {"healthProbe.type": "tcp", "healthProbe.tcp.port": 1},
            {},
            "component 'api': no resolvable host (the target has no endpoint; set healthProbe.host or healthProbe.url)",
        ),
        (
            {"healthProbe.port": 8080},
            {"endpoint": "ssh://deploy:pw@/x"},
            "component 'api': no resolvable host (target endpoint 'ssh:///x' has no host; "
            "set healthProbe.host or healthProbe.url)",
        ),
        (
            {"healthProbe.expectedstatus": 200},
            TARGET,
            "component 'api': unknown key healthProbe.expectedstatus (supported: healthProbe.type, healthProbe.url, "
            "healthProbe.host, healthProbe.port, healthProbe.path, healthProbe.scheme, healthProbe.tcp.port, "
            "healthProbe.expectedStatus, healthProbe.timeoutSeconds, healthProbe.attempts, "
            "healthProbe.intervalSeconds)",
        ),
        (
            {"healthProbe.url": "http://h/x", "healthProbe.port": 1},
            TARGET,
            "component 'api': healthProbe.url cannot be combined with healthProbe.port",
        ),
        (
            {"healthProbe.url": "ftp://h/x"},
            TARGET,
            "component 'api': healthProbe.url 'ftp://h/x' must be an absolute http:// or https:// URL with a host",
        ),
        (
            {"healthProbe.url": "/healthz"},
            TARGET,
            "component 'api': healthProbe.url '/healthz' must be an absolute http:// or https:// URL with a host",
        ),
        ({"healthProbe.url": "http://u:p@h/x"}, TARGET, "component 'api': healthProbe.url must not carry credentials"),
        (
            {"healthProbe.scheme": "ftp"},
            TARGET,
            "component 'api': unsupported healthProbe.scheme 'ftp' (supported: http, https)",
        ),
        (
            {"healthProbe.port": "eighty"},
            TARGET,
            "component 'api': healthProbe.port must be an integer from 1 to 65535, got 'eighty'",
        ),
        (
            {"healthProbe.type": "tcp", "healthProbe.tcp.port": 70000},
            TARGET,
            "component 'api': healthProbe.tcp.port must be an integer from 1 to 65535, got 70000",
        ),
        (
            {"healthProbe.expectedStatus": 42},
            TARGET,
            "component 'api': healthProbe.expectedStatus must be an integer from 100 to 599, got 42",
        ),
        (
            {"healthProbe.attempts": 0},
            TARGET,
            "component 'api': healthProbe.attempts must be an integer from 1 to 100, got 0",
        ),
        (
            {"healthProbe.attempts": True},
            TARGET,
            "component 'api': healthProbe.attempts must be an integer from 1 to 100, got True",
        ),
        (
            {"healthProbe.timeoutSeconds": 0},
            TARGET,
            "component 'api': healthProbe.timeoutSeconds must be a number of seconds greater than 0 up to 300, got 0",
        ),
        (
            {"healthProbe.timeoutSeconds": "nan"},
            TARGET,
            "component 'api': healthProbe.timeoutSeconds must be a number of seconds greater than 0 up to 300, got 'nan'",
        ),
        (
            {"healthProbe.intervalSeconds": "-1"},
            TARGET,
            "component 'api': healthProbe.intervalSeconds must be a number of seconds from 0 up to 300, got '-1'",
        ),
        ({"healthProbe.host": ""}, TARGET, "component 'api': healthProbe.host must be a non-empty string"),
    ],
    ids=[
        "unsupported-type",
        "tcp-no-port",
        "tcp-with-http-port",
        "http-with-tcp-port",
        "unix-endpoint",
        "no-endpoint",
        "endpoint-no-host-redacted",
        "unknown-key",
        "url-and-port",
        "url-ftp",
        "url-relative",
        "url-credentials",
        "bad-scheme",
        "port-text",
        "tcp-port-range",
        "status-range",
        "attempts-zero",
        "attempts-bool",
        "timeout-zero",
        "timeout-nan",
        "interval-negative",
        "empty-host",
    ],
)
def test_parse_invalid_exact_reason(config, target, reason):
    with pytest.raises(StellaError) as err:
        parse_probe_specs([{"name": "api", "config": config}], target=target)
    assert err.value.code == "health_probe_config_invalid"
    assert err.value.reason == INVALID + reason


@pytest.mark.parametrize(
    "components, reason",
    [
        ([{"name": "api", "config": {}}, {"name": "api", "config": {}}], "duplicate component name 'api'"),
        ([{"config": {"healthProbe.port": 1}}], "component at index 0 has no name"),
        ([{"name": "api", "config": ["healthProbe.port"]}], "component 'api': config must be a mapping"),
        ("api", "components must be a list"),
    ],
    ids=["duplicate", "no-name", "config-not-mapping", "not-list"],
)
def test_parse_invalid_components(components, reason):
    with pytest.raises(StellaError) as err:
        parse_probe_specs(components, target=TARGET)
    assert err.value.reason == INVALID + reason


def test_components_without_probe_keys_produce_no_spec():
    specs = parse_probe_specs(
        [
            {"name": "worker", "config": {"healthcheck.test": "curl -f localhost", "env.X": "1"}},
            {"name": "plain"},
            {"name": "api", "config": {"healthProbe.port": 1}},
        ],
        target=TARGET,
    )
    assert [s.component for s in specs] == ["api"]


# --------------------------------------------------------------------------- runner against real servers


def test_http_200_is_healthy(http_server):
    result = runner().run(http_spec(http_server.server_port, "/ok"))
    assert (result.healthy, result.attempts, result.observed) == (True, 1, "200")
    assert http_server.seen == ["/ok"]


def test_http_500_fails_after_all_attempts_with_interval_sleeps(http_server):
    fake = FakeTime()
    result = runner(fake).run(http_spec(http_server.server_port, "/fail", attempts=3, interval_seconds=1.5))
    assert (result.healthy, result.attempts, result.observed) == (False, 3, "500")
    assert result.history == ["500", "500", "500"]
    assert fake.sleeps == [1.5, 1.5]
    assert result.duration_ms == 3000
    assert http_server.seen == ["/fail"] * 3
    port = http_server.server_port
    assert result.detail == "expected HTTP 200 at http://127.0.0.1:%d/fail, observed 500 after 3 attempt(s)" % port


def test_http_recovers_on_a_later_attempt(http_server):
    http_server.flaky_left["/flaky"] = 2
    fake = FakeTime()
    result = runner(fake).run(http_spec(http_server.server_port, "/flaky", attempts=5, interval_seconds=1))
    assert (result.healthy, result.attempts, result.history) == (True, 3, ["503", "503", "200"])
    assert fake.sleeps == [1, 1]


def test_http_expected_status_other_than_200(http_server):
    assert runner().run(http_spec(http_server.server_port, "/created", expected_status=201)).healthy is True
    result = runner().run(http_spec(http_server.server_port, "/ok", expected_status=201))
    assert (result.healthy, result.observed) == (False, "200")


def test_http_redirect_is_observed_not_followed(http_server):
    result = runner().run(http_spec(http_server.server_port, "/redirect"))
    assert (result.healthy, result.observed) == (False, "302")
    assert http_server.seen == []  # /ok was never requested
    assert runner().run(http_spec(http_server.server_port, "/redirect", expected_status=302)).healthy


def test_http_ignores_proxy_environment(http_server, closed_port, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:%d" % closed_port)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:%d" % closed_port)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert runner().run(http_spec(http_server.server_port, "/ok")).observed == "200"


def test_http_refused(closed_port):
    result = runner().run(http_spec(closed_port, "/ok", attempts=2))
    assert result.healthy is False
    assert result.attempts == 2
    assert result.observed.startswith("refused: ")
    assert "Connection refused" in result.observed


def test_http_timeout(silent_server):
    result = runner().run(http_spec(silent_server, "/ok", timeout_seconds=0.3))
    assert result.healthy is False
    assert result.observed.startswith("timeout: ")


def test_tcp_connected(tcp_listener):
    result = runner().run(tcp_spec(tcp_listener.getsockname()[1]))
    assert (result.healthy, result.attempts, result.observed) == (True, 1, "connected")


def test_tcp_refused(closed_port):
    fake = FakeTime()
    result = runner(fake).run(tcp_spec(closed_port, attempts=2, interval_seconds=0.25))
    assert result.healthy is False
    assert result.observed == "refused: [Errno 111] Connection refused"
    assert fake.sleeps == [0.25]
    assert result.detail == (
        "expected TCP connect at tcp://127.0.0.1:%d, observed refused: [Errno 111] "
        "Connection refused after 2 attempt(s)" % closed_port
    )


def test_runner_interface_can_be_replaced():
    class AgentRunner(ProbeRunner):
        def __init__(self):
            super().__init__()
            self.specs = []

        def run(self, spec):
            self.specs.append(spec)
            return ProbeResult(spec, True, 1, "agent-ok")

    agent = AgentRunner()
    out = verify([{"name": "api", "config": {"healthProbe.port": 1}}], target=TARGET, runner=agent)
    assert out["failed"] is False
    assert out["evidence"]["healthProbe.api.observed"] == "agent-ok"
    assert [s.endpoint for s in agent.specs] == ["http://10.0.0.5:1/"]


def test_base_runner_attempt_is_abstract():
    with pytest.raises(StellaError, match="defines neither attempt"):
        ProbeRunner().run(tcp_spec(1))


# --------------------------------------------------------------------------- verify: evidence


def test_verify_passed_evidence_keys(http_server, tcp_listener):
    fake = FakeTime()
    components = [
        {"name": "api", "config": {"healthProbe.path": "/ok", "healthProbe.port": http_server.server_port}},
        {"name": "db", "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": tcp_listener.getsockname()[1]}},
        {"name": "worker", "config": {"healthcheck.interval": "5s"}},
    ]
    out = verify(components, target={"endpoint": "local"}, runner=runner(fake))
    assert out["failed"] is False
    assert out["msg"] == "Post-deploy health probes passed for 2 component(s)"
    assert out["evidence"] == {
        "healthProbe.status": "passed",
        "healthProbe.count": 2,
        "healthProbe.api.endpoint": "http://127.0.0.1:%d/ok" % http_server.server_port,
        "healthProbe.api.healthy": True,
        "healthProbe.api.attempts": 1,
        "healthProbe.api.observed": "200",
        "healthProbe.db.endpoint": "tcp://127.0.0.1:%d" % tcp_listener.getsockname()[1],
        "healthProbe.db.healthy": True,
        "healthProbe.db.attempts": 1,
        "healthProbe.db.observed": "connected",
    }
    assert [p["component"] for p in out["probes"]] == ["api", "db"]
    assert not any(key.startswith("healthProbe.worker") for key in out["evidence"])


def test_verify_failed_reason_and_evidence(http_server, closed_port):
    components = [
        {
            "name": "api",
            "config": {
                "healthProbe.url": "http://127.0.0.1:%d/fail" % http_server.server_port,
                "healthProbe.attempts": 2,
                "healthProbe.intervalSeconds": 0,
            },
        },
        {
            "name": "cache",
            "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": closed_port, "healthProbe.attempts": 1},
        },
        {"name": "ok", "config": {"healthProbe.url": "http://127.0.0.1:%d/ok" % http_server.server_port}},
    ]
    out = verify(components, target=TARGET, runner=runner())
    assert out["failed"] is True
    assert out["code"] == "health_probe_failed"
    assert (
        out["msg"]
        == (
            "Post-deploy health probe failed for component 'api': expected HTTP 200 at http://127.0.0.1:%d/fail, "
            "observed 500 after 2 attempt(s); "
            "Post-deploy health probe failed for component 'cache': expected TCP connect at tcp://10.0.0.5:%d, "
            "observed " % (http_server.server_port, closed_port)
        )
        + out["evidence"]["healthProbe.cache.observed"]
        + " after 1 attempt(s)"
    )
    ev = out["evidence"]
    assert ev["healthProbe.status"] == "failed"
    assert ev["healthProbe.count"] == 3
    assert (ev["healthProbe.api.healthy"], ev["healthProbe.api.attempts"], ev["healthProbe.api.observed"]) == (
        False,
        2,
        "500",
    )
    assert ev["healthProbe.ok.healthy"] is True
    assert out["probes"][0]["reason"].startswith("Post-deploy health probe failed for component 'api': ")


def test_verify_skip_path_records_skip_and_probes_nothing(http_server):
    components = [
        {"name": "api", "config": {"healthProbe.url": "http://127.0.0.1:%d/ok" % http_server.server_port}},
        {"name": "worker", "config": {}},
    ]
    out = verify(components, target=TARGET, wait_for_health_check=False, runner=runner())
    assert out["failed"] is False
    assert out["evidence"] == {
        "healthProbe.status": "skipped",
        "healthProbe.reason": "waitForHealthCheck=false",
        "healthProbe.count": 1,
    }
    assert out["probes"] == []
    assert http_server.seen == []


def test_verify_without_probe_components_has_no_evidence():
    for wait in (True, False):
        out = verify([{"name": "worker", "config": {"env.A": "1"}}], target=TARGET, wait_for_health_check=wait)
        assert out == {"failed": False, "msg": "No post-deploy health probes configured", "evidence": {}, "probes": []}


def test_verify_invalid_config_fails_closed_before_probing(http_server):
    components = [
        {"name": "api", "config": {"healthProbe.url": "http://127.0.0.1:%d/ok" % http_server.server_port}},
        {"name": "db", "config": {"healthProbe.type": "tcp"}},
    ]
    out = verify(components, target=TARGET, runner=runner())
    reason = INVALID + "component 'db': healthProbe.tcp.port is required for tcp probes"
    assert out == {
        "failed": True,
        "msg": reason,
        "code": "health_probe_config_invalid",
        "probes": [],
        "evidence": {"healthProbe.status": "failed", "healthProbe.reason": reason, "healthProbe.count": 2},
    }
    assert http_server.seen == []
