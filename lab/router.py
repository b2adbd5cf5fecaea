"""The lab's traffic data plane: Debian's nginx on loopback and a small router controller for it.

Not part of the collection: it plays the operator-owned router controller that the collection's
``webhook`` traffic adapter talks to. ``serve`` starts nginx (its own prefix and config, never the
system service) on ``--nginx-listen`` in front of the slots given by ``--slot NAME=HOST:PORT``, and
answers on ``--listen``:

- ``POST /shift`` and ``POST /rollback`` with the adapter's JSON body (``controlSlot``,
  ``treatmentSlot``, ``controlWeight``, ``treatmentWeight``): rewrites nginx's upstream weights,
  checks the config (``nginx -t``), reloads nginx and answers ``{"applied": {...}, "appliedAt",
  "dataPlaneUrl"}``. With ``--token-file`` a request without ``Authorization: Bearer <token>`` gets 401.
- ``GET /_state``: the applied weights, the history of requests, and whether an answer is held.
- ``POST /_mode`` ``{"mode": "ok"|"500"|"garbage"|"slow"|"hold"}``: fault injection for the tests.
  ``hold`` applies and reloads, then holds the answer until ``POST /_release`` (so a test can read
  the split through nginx at each step of a running job).

Runs with the project's venv Python; standard library only. Loopback only.
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import os
import subprocess
import sys
import threading
import time


def nginx_conf(prefix, listen, servers):
    """nginx.conf for ``servers`` ``[(address, weight), ...]`` (weight 0: left out)."""
    lines = ["    server %s weight=%d max_fails=0;" % (address, weight) for address, weight in servers if weight > 0]
    return """worker_processes 1;
daemon on;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/client_body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream stella_slots {{
{servers}
  }}
  server {{
    listen {listen};
    location / {{
      proxy_pass http://stella_slots;
      proxy_next_upstream off;
      proxy_connect_timeout 2s;
      proxy_read_timeout 5s;
    }}
  }}
}}
""".format(prefix=prefix, listen=listen, servers="\n".join(lines))


class Router:
    def __init__(self, prefix, nginx_listen, slots, token=None):
        self.prefix = prefix
        self.nginx_listen = nginx_listen
        self.slots = dict(slots)
        self.token = token
        self.mode = "ok"
        self.applied = None
        self.history = []
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.conf = os.path.join(prefix, "nginx.conf")

    def nginx(self, *args):
        return subprocess.run(["nginx", "-p", self.prefix, "-c", self.conf] + list(args), capture_output=True,
                              text=True, timeout=30, check=False)

    def write(self, control, control_weight, treatment, treatment_weight):
        servers = [(self.slots[control], control_weight)]
        if treatment in self.slots and treatment != control:
            servers.append((self.slots[treatment], treatment_weight))
        tmp = self.conf + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(nginx_conf(self.prefix, self.nginx_listen, servers))
        os.replace(tmp, self.conf)

    def start(self, control):
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.prefix, name), exist_ok=True)
        self.write(control, 100, control, 0)
        proc = self.nginx()
        if proc.returncode != 0:
            raise SystemExit("nginx did not start: %s" % proc.stderr)

    def apply(self, body):
        control, treatment = body["controlSlot"], body["treatmentSlot"]
        if control not in self.slots:
            return 422, {"error": "unknown control slot %s" % control}
        weights = (int(body["controlWeight"]), int(body["treatmentWeight"]))
        if weights[1] > 0 and treatment not in self.slots:
            return 422, {"error": "unknown treatment slot %s" % treatment}
        with self.lock:
            self.write(control, weights[0], treatment, weights[1])
            check = self.nginx("-t")
            if check.returncode != 0:
                return 500, {"error": "nginx -t failed: %s" % check.stderr.strip()}
            reload = self.nginx("-s", "reload")
            if reload.returncode != 0:
                return 500, {"error": "nginx reload failed: %s" % reload.stderr.strip()}
            time.sleep(0.3)  # the new workers take over
            self.applied = {"controlSlot": control, "treatmentSlot": treatment, "controlWeight": weights[0],
                            "treatmentWeight": weights[1]}
            self.history.append(dict(self.applied, action=body.get("action"), jobId=body.get("jobId")))
        return 200, {"applied": dict(self.applied), "dataPlaneUrl": "http://%s/" % self.nginx_listen,
                     "appliedAt": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def handler_for(router):
    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, status, payload, raw=None):
            data = raw if raw is not None else json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self):  # noqa: N802
            if self.path == "/_state":
                self._send(200, {"applied": router.applied, "history": router.history, "mode": router.mode,
                                 "held": router.held.is_set()})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):  # noqa: N802
            body = self._body()
            if self.path == "/_mode":
                router.mode = body["mode"]
                self._send(200, {"mode": router.mode})
                return
            if self.path == "/_release":
                router.release.set()
                self._send(200, {"released": True})
                return
            if self.path not in ("/shift", "/rollback"):
                self._send(404, {"error": "not found"})
                return
            if router.token and self.headers.get("Authorization") != "Bearer " + router.token:
                self._send(401, {"error": "unauthorized"})
                return
            mode = router.mode
            if mode == "500":
                self._send(500, {"error": "injected failure"})
                return
            if mode == "slow":
                time.sleep(30)
                self._send(504, {"error": "injected delay"})
                return
            if mode == "garbage":
                self._send(200, None, raw=b"<html>not json</html>")
                return
            status, payload = router.apply(body)
            if mode == "hold" and status == 200:
                router.release.clear()
                router.held.set()
                router.release.wait(600)
                router.held.clear()
            self._send(status, payload)

        def log_message(self, *args):
            pass

    return Handler


def main(argv=None):
    parser = argparse.ArgumentParser(prog="router.py")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--listen", required=True)
    serve.add_argument("--nginx-listen", required=True)
    serve.add_argument("--prefix", required=True)
    serve.add_argument("--slot", action="append", default=[], help="NAME=HOST:PORT")
    serve.add_argument("--control", default="active")
    serve.add_argument("--token-file")
    stop = sub.add_parser("stop")
    stop.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)
    if args.command == "stop":
        conf = os.path.join(args.prefix, "nginx.conf")
        subprocess.run(["nginx", "-p", args.prefix, "-c", conf, "-s", "stop"], capture_output=True, check=False)
        return 0
    slots = dict(item.split("=", 1) for item in args.slot)
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
    router = Router(os.path.abspath(args.prefix), args.nginx_listen, slots, token)
    router.start(args.control)
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer((host, int(port)), handler_for(router))
    try:
        server.serve_forever()
    finally:
        router.nginx("-s", "stop")
    return 0


if __name__ == "__main__":
    sys.exit(main())
