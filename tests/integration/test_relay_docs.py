"""The example of docs/stella_relay.md runs through ansible-playbook against a real internal network of
this machine's engine: the endpoint serves the upstream, a second run changes nothing, absent removes it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import uuid

import ansible_run as ar
from test_deploy_docs import example

ABSENT = """
- name: Remove the relay endpoint
  hosts: targets
  gather_facts: false
  tasks:
    - name: Remove it
      stellaops.runtime.stella_relay:
        name: shop-web
        state: absent
        state_directory: "{{ relay_state }}"
"""


def upstream():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve():
        while True:
            conn, _peer = server.accept()
            with conn:
                conn.sendall(b"relayed:" + conn.recv(64))

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def test_the_relay_example_runs_and_a_second_run_changes_nothing(tmp_path):
    network = "relaydoc%s" % uuid.uuid4().hex[:8]
    subprocess.run(["docker", "network", "create", "--internal", network], check=True, capture_output=True)
    state = str(tmp_path / "relays")
    try:
        gateway = json.loads(
            subprocess.run(["docker", "network", "inspect", network], check=True, capture_output=True, text=True).stdout
        )[0]["IPAM"]["Config"][0]["Gateway"]
        book = example("stella_relay.md", "relay-playbook").replace(
            "upstream_port: 18080", 'upstream_port: "{{ relay_upstream }}"'
        )
        extra = {"relay_gateway": gateway, "relay_state": state, "relay_upstream": upstream()}
        rc, doc = ar.run_playbook(book, extra)
        first = ar.task_results(doc)["Start the relay endpoint"]
        assert rc == 0 and first["changed"], first
        assert first["device"].startswith("br-") and first["listenAddress"] == gateway
        listen = first["listenPorts"]["8080"]
        assert first["endpoints"] == ["8080=%s:%d" % (gateway, listen)]
        with socket.create_connection((gateway, listen), timeout=5) as conn:  # this host reaches its own gateway
            conn.sendall(b"ping")
            assert conn.recv(64) == b"relayed:ping"

        rc, doc = ar.run_playbook(book, extra)
        second = ar.task_results(doc)["Start the relay endpoint"]
        assert (
            rc == 0
            and not second["changed"]
            and (second["pid"], second["endpoints"]) == (first["pid"], first["endpoints"])
        )
    finally:
        rc, doc = ar.run_playbook(ABSENT, {"relay_state": state})
        subprocess.run(["docker", "network", "rm", network], check=False, capture_output=True)
    assert rc == 0 and ar.task_results(doc)["Remove it"]["changed"]
    assert not os.path.exists(os.path.join(state, "shop-web"))
