"""The lab's data plane for the traffic tests: Debian's nginx on loopback and ``lab/router.py`` (the
router controller the ``webhook`` adapter talks to), started per test and stopped after it."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import time

import requests

import ansible_run as ar
from labkit import free_port

ROUTER = os.path.join(ar.ROOT, "lab", "router.py")


class DataPlane:
    """nginx in front of ``slots`` (``{slot: "host:port"}``) and its router controller."""

    def __init__(self, tmp_path, slots, token=None):
        self.prefix = str(tmp_path / "router")
        os.makedirs(self.prefix, exist_ok=True)
        self.port, self.nginx_port = free_port(), free_port()
        argv = [
            os.path.join(ar.VENV_BIN, "python"),
            ROUTER,
            "serve",
            "--listen",
            "127.0.0.1:%d" % self.port,
            "--nginx-listen",
            "127.0.0.1:%d" % self.nginx_port,
            "--prefix",
            self.prefix,
        ]
        for slot, address in slots.items():
            argv += ["--slot", "%s=%s" % (slot, address)]
        if token:
            token_file = os.path.join(self.prefix, "token")
            with open(token_file, "w", encoding="utf-8") as handle:
                handle.write(token)
            argv += ["--token-file", token_file]
        self.log = open(os.path.join(self.prefix, "router.log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(self.url("/_state"), timeout=1).raise_for_status()
                break
            except requests.RequestException:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "the router did not start: %s"
                        % open(  # pylint: disable=consider-using-with
                            os.path.join(self.prefix, "router.log"), encoding="utf-8"
                        ).read()
                    )
                time.sleep(0.2)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def state(self):
        return requests.get(self.url("/_state"), timeout=5).json()

    def mode(self, mode):
        requests.post(self.url("/_mode"), json={"mode": mode}, timeout=5).raise_for_status()

    def release(self):
        requests.post(self.url("/_release"), json={}, timeout=5).raise_for_status()

    def sample(self, count=100):
        """``Counter`` of page bodies of ``count`` requests through nginx (the app's page is its version)."""
        seen = collections.Counter()
        for _request in range(count):
            with requests.get("http://127.0.0.1:%d/" % self.nginx_port, timeout=5) as response:
                seen[response.text.strip() if response.ok else "HTTP %d" % response.status_code] += 1
        return seen

    def stop(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        subprocess.run(
            [os.path.join(ar.VENV_BIN, "python"), ROUTER, "stop", "--prefix", self.prefix],
            capture_output=True,
            check=False,
            timeout=30,
        )
        self.log.close()
