"""relay/endpoint.py: the relay endpoint. Request validation and the pure parts, then a real forwarder process on this
machine's loopback (pinned to ``lo``): started detached, left alone when nothing changed, restarted on
the same port when the upstream changes, stopped and removed by ``absent``."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.relay import endpoint as rl
from ansible_collections.stellaops.runtime.plugins.module_utils.relay import forwarder as fw
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError


def request(tmp_path, **over):
    options = {
        "name": "shop-web",
        "state": "present",
        "listen_address": "127.0.0.1",
        "device": "auto",
        "forwards": [{"port": 8080, "upstream_host": "127.0.0.1", "upstream_port": 18080, "listen_port": 0}],
        "state_directory": str(tmp_path),
    }
    options.update(over)
    return rl.parse_request(options)


@pytest.mark.parametrize(
    "over,code,text",
    [
        ({"listen_address": "0.0.0.0"}, "relay_bind_refused", "every interface"),
        ({"listen_address": "::"}, "invalid_payload", "IPv4"),
        ({"listen_address": "relay.example"}, "invalid_payload", "IPv4"),
        ({"name": "../x"}, "invalid_payload", "name"),
        ({"forwards": []}, "invalid_payload", "at least one"),
        (
            {"forwards": [{"port": 80, "upstream_port": 1}, {"port": 80, "upstream_port": 2}]},
            "invalid_payload",
            "twice",
        ),
        ({"forwards": [{"port": 80, "upstream_port": 70000}]}, "invalid_payload", "upstream_port"),
        ({"state_directory": "relative"}, "invalid_payload", "absolute"),
        ({"state": "running"}, "invalid_payload", "state"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_touched(tmp_path, over, code, text):
    with pytest.raises(StellaError) as err:
        request(tmp_path, **over)
    assert err.value.code == code and text in err.value.reason


def test_absent_needs_only_the_name(tmp_path):
    assert rl.parse_request({"name": "x", "state": "absent", "state_directory": str(tmp_path)})["directory"] == str(
        tmp_path / "x"
    )


def test_interface_of_finds_the_owner_or_fails_with_a_code():
    addresses = {"lo": "127.0.0.1", "eth0": "192.0.2.2", "br-abc": "172.20.0.1"}
    assert rl.interface_of("172.20.0.1", addresses) == "br-abc"
    with pytest.raises(StellaError) as err:
        rl.interface_of("172.21.0.1", addresses)
    assert err.value.code == "relay_address_invalid"


def test_local_addresses_include_loopback():
    assert rl.local_addresses().get("lo") == "127.0.0.1"


def test_endpoints_and_matching_are_pure(tmp_path):
    req = request(tmp_path)
    desired = rl.desired_config(req, "172.20.0.1", "br-abc", "f" * 64)
    current = dict(desired, listenPorts={"8080": 41000}, pid=1)
    assert rl.endpoints(current) == ["8080=172.20.0.1:41000"]
    assert rl.matches(current, desired, req)
    assert not rl.matches(None, desired, req)
    assert not rl.matches(dict(current, device="eth0"), desired, req)
    pinned = request(tmp_path, forwards=[{"port": 8080, "upstream_port": 18080, "listen_port": 41001}])
    assert not rl.matches(current, rl.desired_config(pinned, "172.20.0.1", "br-abc", "f" * 64), pinned)


def test_forwarder_arguments():
    assert fw.parse_args(["--name", "n", "--forward", "3=127.0.0.1:80"]) == ("n", [(3, "127.0.0.1", 80)])
    with pytest.raises(ValueError):
        fw.parse_args(["--forward", "3=nohost"])
    with pytest.raises(ValueError):
        fw.parse_args(["--name", "n"])


class Upstream:
    """A TCP server on loopback that answers every line with its tag."""

    def __init__(self, tag):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.tag = tag
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(1024)
                conn.sendall(self.tag + b":" + data)


def ask(endpoint):
    address, port = endpoint.split("=", 1)[1].rsplit(":", 1)
    with socket.create_connection((address, int(port)), timeout=5) as conn:
        conn.sendall(b"ping")
        conn.shutdown(socket.SHUT_WR)
        return conn.recv(1024)


def alive(pid):
    return rl._running(pid)  # pylint: disable=protected-access


def test_a_real_forwarder_is_started_detached_kept_restarted_and_removed(tmp_path):
    first, second = Upstream(b"one"), Upstream(b"two")
    relay = rl.Relay(None, None)
    fwd = [{"port": 8080, "upstream_host": "127.0.0.1", "upstream_port": first.port, "listen_port": 0}]
    started = relay.run(request(tmp_path, forwards=fwd))
    ev = started["evidence"]
    try:
        assert started["changed"] and ev["device"] == "lo" and ev["listenAddress"] == "127.0.0.1"
        assert alive(ev["pid"]) and os.getsid(ev["pid"]) == ev["pid"]  # a session of its own
        assert open(ev["pidFile"], encoding="utf-8").read().strip() == str(ev["pid"])
        assert ask(ev["endpoints"][0]) == b"one:ping"

        again = relay.run(request(tmp_path, forwards=fwd))
        assert not again["changed"] and again["evidence"]["endpoints"] == ev["endpoints"]
        assert again["evidence"]["pid"] == ev["pid"]

        checked = relay.run(request(tmp_path, forwards=[dict(fwd[0], upstream_port=second.port)]), check_mode=True)
        assert checked["changed"] and checked["evidence"]["pid"] is None and ask(ev["endpoints"][0]) == b"one:ping"

        moved = relay.run(request(tmp_path, forwards=[dict(fwd[0], upstream_port=second.port)]))
        assert moved["changed"] and moved["evidence"]["endpoints"] == ev["endpoints"]  # same listening port
        assert moved["evidence"]["pid"] != ev["pid"]
        deadline = time.monotonic() + 5
        while alive(ev["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(ev["pid"])
        assert ask(ev["endpoints"][0]) == b"two:ping"
        assert "forwarding 127.0.0.1:" in open(ev["logFile"], encoding="utf-8").read()
    finally:
        gone = relay.run(rl.parse_request({"name": "shop-web", "state": "absent", "state_directory": str(tmp_path)}))
    assert gone["changed"] and not (tmp_path / "shop-web").exists()
    with pytest.raises(OSError):
        ask(ev["endpoints"][0])
    assert not relay.run(rl.parse_request({"name": "shop-web", "state": "absent", "state_directory": str(tmp_path)}))[
        "changed"
    ]


# A process whose main thread exits (the raw exit system call ends that thread only) while another
# thread keeps its listening socket open: the thread group leader is a zombie, the process is not gone.
ZOMBIE_LEADER = r"""
import ctypes, socket, sys, threading, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
threading.Thread(target=time.sleep, args=(float(sys.argv[2]),)).start()
ctypes.CDLL(None, use_errno=True).syscall(int(sys.argv[1]), 0)
"""
SYS_EXIT = {"x86_64": 60, "aarch64": 93}


@pytest.mark.skipif(
    platform.machine() not in SYS_EXIT, reason="the exit system call's number is known for x86_64 and aarch64 only"
)
def test_a_zombie_leader_whose_threads_still_hold_its_socket_is_running():
    """The relay waits for its old forwarder to stop before it binds the same port again; a forwarder
    whose main thread had exited while its other threads still held the listening socket was taken for
    stopped, and the port was lost to a new one."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE_LEADER, str(SYS_EXIT[platform.machine()]), "3"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(proc.stdout.readline())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with open("/proc/%d/stat" % proc.pid, "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the main thread did not exit")
        assert rl._running(proc.pid)  # pylint: disable=protected-access
        with pytest.raises(OSError):
            socket.create_server(("127.0.0.1", port)).close()  # still bound by the live thread
        proc.wait(10)
        assert not rl._running(proc.pid)  # pylint: disable=protected-access
    finally:
        proc.kill()
        proc.wait()


def test_a_port_in_use_is_a_coded_failure_and_nothing_is_started(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        fwd = [{"port": 80, "upstream_host": "127.0.0.1", "upstream_port": 9, "listen_port": busy.getsockname()[1]}]
        with pytest.raises(StellaError) as err:
            rl.Relay(None, None).run(request(tmp_path, forwards=fwd))
        assert err.value.code == "relay_port_in_use" and err.value.phase == "bind_endpoints"
        assert not (tmp_path / "shop-web" / rl.PID_FILE).exists()
    finally:
        busy.close()


def test_an_address_this_host_does_not_have_is_refused(tmp_path):
    with pytest.raises(StellaError) as err:
        rl.Relay(None, None).run(request(tmp_path, listen_address="192.0.2.254"))
    assert err.value.code == "relay_address_invalid" and err.value.phase == "resolve_address"
