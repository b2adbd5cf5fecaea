"""stella_probe action plugin, run through the real ansible CLI against loopback servers."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(BIN, "python")
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
INVALID = "Post-deploy health probe configuration invalid: "


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        self.server.seen.append(self.path)
        code = {"/ok": 200, "/fail": 500}.get(self.path, 404)
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture
def closed_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    yield sock.getsockname()[1]
    sock.close()


def _env(tmp_path):
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
            "ANSIBLE_STDOUT_CALLBACK": "json_results",
            "ANSIBLE_CALLBACK_PLUGINS": os.path.join(ROOT, "tests", "callback_plugins"),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "local-tmp"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": BIN + os.pathsep + env.get("PATH", ""),
        }
    )
    for key in ("ANSIBLE_CONFIG", "http_proxy", "HTTP_PROXY"):
        env.pop(key, None)
    return env


def _host_result(proc):
    assert proc.stdout.strip(), proc.stderr
    report = json.loads(proc.stdout)
    tasks = report["plays"][0]["tasks"]
    return tasks[-1]["hosts"]["localhost"]


def adhoc(tmp_path, args, *extra):
    proc = subprocess.run(
        [
            os.path.join(BIN, "ansible"),
            "localhost",
            "-c",
            "local",
            "-m",
            "stellaops.runtime.stella_probe",
            "-a",
            json.dumps(args),
            "-e",
            "ansible_python_interpreter=" + PYTHON,
            *extra,
        ],
        cwd=str(tmp_path),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return proc, _host_result(proc)


def test_cli_probes_pass(tmp_path, http_server, tcp_port):
    args = {
        "target": {"targetId": "t-1", "endpoint": "ssh://root@localhost:22"},
        "components": [
            {"name": "api", "config": {"healthProbe.port": http_server.server_port, "healthProbe.path": "/ok"}},
            {"name": "db", "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": tcp_port}},
            {"name": "worker", "config": {"env.MODE": "batch"}},
        ],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["changed"] is False
    assert not res.get("failed")  # ansible drops failed=false from ok results
    assert res["msg"] == "Post-deploy health probes passed for 2 component(s)"
    assert res["evidence"] == {
        "healthProbe.status": "passed",
        "healthProbe.count": 2,
        "healthProbe.api.endpoint": "http://127.0.0.1:%d/ok" % http_server.server_port,
        "healthProbe.api.healthy": True,
        "healthProbe.api.attempts": 1,
        "healthProbe.api.observed": "200",
        "healthProbe.db.endpoint": "tcp://127.0.0.1:%d" % tcp_port,
        "healthProbe.db.healthy": True,
        "healthProbe.db.attempts": 1,
        "healthProbe.db.observed": "connected",
    }
    assert [p["component"] for p in res["probes"]] == ["api", "db"]
    assert http_server.seen == ["/ok"]


def test_cli_probe_failure_fails_task(tmp_path, http_server, closed_port):
    args = {
        "target": {"endpoint": "tcp://127.0.0.1:2376"},
        "components": [
            {
                "name": "api",
                "config": {
                    "healthProbe.port": http_server.server_port,
                    "healthProbe.path": "/fail",
                    "healthProbe.attempts": 2,
                    "healthProbe.intervalSeconds": 0,
                },
            },
        ],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode != 0
    assert res["failed"] is True
    assert res["changed"] is False
    assert res["code"] == "health_probe_failed"
    assert res["msg"] == (
        "Post-deploy health probe failed for component 'api': expected HTTP 200 at "
        "http://127.0.0.1:%d/fail, observed 500 after 2 attempt(s)" % http_server.server_port
    )
    assert res["evidence"]["healthProbe.status"] == "failed"
    assert res["evidence"]["healthProbe.api.observed"] == "500"
    assert http_server.seen == ["/fail", "/fail"]


def test_cli_refused_tcp_fails_task(tmp_path, closed_port):
    args = {
        "target": {"endpoint": "local"},
        "components": [
            {
                "name": "db",
                "config": {"healthProbe.type": "tcp", "healthProbe.tcp.port": closed_port, "healthProbe.attempts": 1},
            }
        ],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode != 0
    assert res["evidence"]["healthProbe.db.observed"].startswith("refused: ")
    assert res["msg"].startswith(
        "Post-deploy health probe failed for component 'db': expected TCP connect at "
        "tcp://127.0.0.1:%d, observed refused: " % closed_port
    )


def test_cli_invalid_config_fails_closed(tmp_path, http_server):
    args = {
        "target": {"endpoint": "unix:///var/run/docker.sock"},
        "components": [{"name": "api", "config": {"healthProbe.path": "/ok"}}],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode != 0
    assert res["code"] == "health_probe_config_invalid"
    assert res["msg"] == INVALID + (
        "component 'api': no resolvable host (target endpoint 'unix:///var/run/docker.sock' has no host; "
        "set healthProbe.host or healthProbe.url)"
    )
    assert res["evidence"]["healthProbe.status"] == "failed"


def test_cli_host_override(tmp_path, http_server):
    args = {
        "target": {"endpoint": "unix:///var/run/docker.sock"},
        "host_override": "127.0.0.1",
        "components": [
            {"name": "api", "config": {"healthProbe.path": "/ok", "healthProbe.port": http_server.server_port}}
        ],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["evidence"]["healthProbe.api.healthy"] is True


def test_cli_skip_records_skip(tmp_path, http_server):
    args = {
        "target": {"endpoint": "local"},
        "wait_for_health_check": False,
        "components": [{"name": "api", "config": {"healthProbe.port": http_server.server_port}}],
    }
    proc, res = adhoc(tmp_path, args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert res["evidence"] == {
        "healthProbe.status": "skipped",
        "healthProbe.reason": "waitForHealthCheck=false",
        "healthProbe.count": 1,
    }
    assert http_server.seen == []


def test_cli_argument_validation(tmp_path):
    proc, res = adhoc(tmp_path, {"target": {"endpoint": "local"}})
    assert proc.returncode != 0
    assert res["failed"] is True
    assert "components" in res["msg"]


def test_playbook_check_mode_reports_without_probing(tmp_path, http_server, tcp_port):
    playbook = tmp_path / "probe.yml"
    playbook.write_text(
        "- hosts: localhost\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Probe\n"
        "      stellaops.runtime.stella_probe:\n"
        "        target: {endpoint: localhost}\n"
        "        components:\n"
        "          - name: api\n"
        "            config:\n"
        "              healthProbe.port: %d\n"
        "              healthProbe.path: /fail\n"
        "          - name: db\n"
        "            config:\n"
        "              healthProbe.type: tcp\n"
        "              healthProbe.tcp.port: %d\n"
        "          - name: worker\n"
        "      register: probe\n"
        "    - name: Assert\n"
        "      ansible.builtin.assert:\n"
        "        that:\n"
        "          - probe.evidence['healthProbe.status'] == 'not_run'\n"
        "          - probe is not changed\n"
        "          - probe is not failed\n" % (http_server.server_port, tcp_port)
    )
    proc = subprocess.run(
        [
            os.path.join(BIN, "ansible-playbook"),
            "--check",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + PYTHON,
            str(playbook),
        ],
        cwd=str(tmp_path),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    probe = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert probe["evidence"] == {
        "healthProbe.status": "not_run",
        "healthProbe.reason": "check_mode",
        "healthProbe.count": 2,
        "healthProbe.api.endpoint": "http://127.0.0.1:%d/fail" % http_server.server_port,
        "healthProbe.db.endpoint": "tcp://127.0.0.1:%d" % tcp_port,
    }
    assert probe["changed"] is False and not probe.get("failed")
    assert [p["component"] for p in probe["probes"]] == ["api", "db"]
    assert http_server.seen == []  # the /fail endpoint was never asked: no verdict in check mode
    assert report["stats"]["localhost"]["failures"] == 0


def test_check_mode_invalid_config_still_fails(tmp_path, http_server):
    args = {"target": {"endpoint": "local"}, "components": [{"name": "api", "config": {"healthProbe.type": "udp"}}]}
    proc, res = adhoc(tmp_path, args, "--check")
    assert proc.returncode != 0
    assert res["code"] == "health_probe_config_invalid"
    assert res["msg"] == INVALID + "component 'api': unsupported healthProbe.type 'udp' (supported: http, tcp)"
