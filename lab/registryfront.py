"""A fault-injecting front for a lab registry (standard library only; loopback only).

Not part of the collection. ``serve --listen ADDR --backend ADDR [--v2-scope SCOPE]`` proxies every
request to the backend registry unchanged (method, path and query, headers including ``Host``, body,
then the backend's status, headers and body; redirects are passed on, never followed) except:

- requests to ``/_lab/...``, the control endpoint, answered by the front itself:

  - ``POST /_lab/faults`` ``{"status": 429, "retryAfter": 2, "count": 1, "match": "/manifests/",
    "method": "GET"}`` adds a fault: the next ``count`` requests (``-1``: every one) whose request target
    (path and query) contains ``match`` (absent or empty: every request) and, when given, whose method
    is ``method`` are answered with ``status`` instead of being proxied. ``retryAfter`` (seconds; ``null``
    or absent: no header) becomes a ``Retry-After`` header. The body is Docker Hub's JSON error
    (``TOOMANYREQUESTS`` for 429). Answers ``201`` with the fault and its ``id``. Faults are tried in
    the order they were added.
  - ``GET /_lab/faults``: every fault with ``remaining`` (``-1``: forever) and ``served``.
  - ``DELETE /_lab/faults`` removes every fault; ``DELETE /_lab/faults/<id>`` removes one.
  - ``GET /_lab/stats``: ``{"faulted": N, "passed": N, "recent": [{"method", "target", "status",
    "fault"}, ...]}`` (the last 200 requests); ``DELETE /_lab/stats`` resets it.

- with ``--v2-scope SCOPE``, a ``401`` answer to ``GET``/``HEAD /v2/`` gets ``,scope="SCOPE"`` added to its
  ``WWW-Authenticate`` challenge when it has none, as GHCR answers
  (``Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:user/image:pull"``).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import http.server
import json
import sys
import threading

# Hop-by-hop headers (RFC 9110 7.6.1): not passed on; the front frames each message itself.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
ERROR_BODIES = {
    429: ("TOOMANYREQUESTS", "You have reached your pull rate limit. You may increase the limit by authenticating "
          "and upgrading: https://www.docker.com/increase-rate-limit"),
    500: ("UNKNOWN", "unknown error"),
    502: ("UNAVAILABLE", "bad gateway"),
    503: ("UNAVAILABLE", "service unavailable"),
    504: ("UNAVAILABLE", "gateway timeout"),
}
CHUNK = 64 * 1024


class Faults:
    """The fault list and the counters, shared by every request thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.faults = []
        self.next_id = 1
        self.faulted = 0
        self.passed = 0
        self.recent = collections.deque(maxlen=200)

    def add(self, spec):
        status = spec.get("status")
        count = spec.get("count", 1)
        retry_after = spec.get("retryAfter")
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status (400-599)")
        if not isinstance(count, int) or isinstance(count, bool) or count < -1 or count == 0:
            raise ValueError("count must be a positive integer or -1 (forever)")
        if retry_after is not None and (not isinstance(retry_after, int) or isinstance(retry_after, bool)
                                        or retry_after < 0):
            raise ValueError("retryAfter must be a non-negative integer or null")
        for key in ("match", "method"):
            if spec.get(key) is not None and not isinstance(spec[key], str):
                raise ValueError("%s must be a string" % key)
        with self.lock:
            fault = {"id": self.next_id, "status": status, "retryAfter": retry_after, "count": count,
                     "remaining": count, "served": 0, "match": spec.get("match") or "",
                     "method": (spec.get("method") or "").upper() or None}
            self.next_id += 1
            self.faults.append(fault)
            return dict(fault)

    def take(self, method, target):
        """The fault that answers this request (its remaining count taken), or ``None``."""
        with self.lock:
            for fault in self.faults:
                if fault["remaining"] == 0 or fault["match"] not in target:
                    continue
                if fault["method"] and fault["method"] != method:
                    continue
                if fault["remaining"] > 0:
                    fault["remaining"] -= 1
                fault["served"] += 1
                return dict(fault)
        return None

    def record(self, method, target, status, fault):
        with self.lock:
            if fault:
                self.faulted += 1
            else:
                self.passed += 1
            self.recent.append({"method": method, "target": target, "status": status, "fault": fault})

    def listing(self):
        with self.lock:
            return [dict(f) for f in self.faults]

    def clear(self, fault_id=None):
        with self.lock:
            before = len(self.faults)
            self.faults = [f for f in self.faults if fault_id is not None and f["id"] != fault_id]
            return before - len(self.faults)

    def stats(self):
        with self.lock:
            return {"faulted": self.faulted, "passed": self.passed, "recent": list(self.recent)}

    def reset_stats(self):
        with self.lock:
            self.faulted = self.passed = 0
            self.recent.clear()


def make_handler(backend, faults, v2_scope):
    backend_host, backend_port = backend.rsplit(":", 1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the lab keeps its own logs
            return

        # -- request bodies

        def _body_chunks(self):
            """The request body as it arrives (chunked or Content-Length), de-framed."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                while True:
                    line = self.rfile.readline(65537)
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return
                    data = self.rfile.read(size)
                    self.rfile.readline(65537)
                    yield data
            else:
                left = int(self.headers.get("Content-Length") or 0)
                while left > 0:
                    data = self.rfile.read(min(CHUNK, left))
                    if not data:
                        return
                    left -= len(data)
                    yield data

        def _drain(self):
            for _chunk in self._body_chunks():
                pass

        # -- answers of the front itself

        def _json(self, status, payload, extra=None):
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _control(self):
            path = self.path.split("?", 1)[0].rstrip("/")
            body = b"".join(self._body_chunks())
            if path == "/_lab/faults" and self.command == "POST":
                try:
                    spec = json.loads(body or b"{}")
                    if not isinstance(spec, dict):
                        raise ValueError("the body must be a JSON object")
                    return self._json(201, faults.add(spec))
                except ValueError as exc:
                    return self._json(400, {"error": str(exc)})
            if path == "/_lab/faults" and self.command == "GET":
                return self._json(200, {"faults": faults.listing()})
            if path == "/_lab/faults" and self.command == "DELETE":
                return self._json(200, {"removed": faults.clear()})
            if path.startswith("/_lab/faults/") and self.command == "DELETE":
                try:
                    fault_id = int(path.rsplit("/", 1)[1])
                except ValueError:
                    return self._json(404, {"error": "no such fault"})
                removed = faults.clear(fault_id)
                return self._json(200 if removed else 404, {"removed": removed})
            if path == "/_lab/stats" and self.command == "GET":
                return self._json(200, faults.stats())
            if path == "/_lab/stats" and self.command == "DELETE":
                faults.reset_stats()
                return self._json(200, {"reset": True})
            return self._json(404, {"error": "unknown control request %s %s" % (self.command, path)})

        def _fault(self, fault):
            self._drain()
            code, message = ERROR_BODIES.get(fault["status"], ("UNKNOWN", "lab fault %d" % fault["status"]))
            extra = {"Docker-Distribution-Api-Version": "registry/2.0"}
            if fault["retryAfter"] is not None:
                extra["Retry-After"] = str(fault["retryAfter"])
            self._json(fault["status"], {"errors": [{"code": code, "message": message}]}, extra)
            faults.record(self.command, self.path, fault["status"], True)

        # -- the proxy

        def _proxy(self):
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            conn = http.client.HTTPConnection(backend_host, int(backend_port), timeout=120)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in self.headers.items():
                    # Expect: 100-continue was answered by the front (http.server) already.
                    if key.lower() not in HOP_BY_HOP and key.lower() != "expect":
                        conn.putheader(key, value)
                if chunked:
                    conn.putheader("Transfer-Encoding", "chunked")
                conn.endheaders()
                for data in self._body_chunks():
                    if chunked:
                        conn.send(b"%x\r\n%s\r\n" % (len(data), data))
                    else:
                        conn.send(data)
                if chunked:
                    conn.send(b"0\r\n\r\n")
                resp = conn.getresponse()
            except OSError as exc:
                conn.close()
                self.close_connection = True
                self._json(502, {"errors": [{"code": "UNAVAILABLE", "message": "lab front: backend %s: %s"
                                             % (backend, exc)}]})
                faults.record(self.command, self.path, 502, False)
                return
            try:
                self._answer(resp)
            finally:
                conn.close()
            faults.record(self.command, self.path, resp.status, False)

        def _answer(self, resp):
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
            if v2_scope and resp.status == 401 and self.path.split("?", 1)[0] in ("/v2/", "/v2"):
                headers = [(k, v if k.lower() != "www-authenticate" or "scope=" in v
                            else '%s,scope="%s"' % (v, v2_scope)) for k, v in headers]
            no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
            length = resp.getheader("Content-Length")
            self.send_response_only(resp.status, resp.reason)
            for key, value in headers:
                self.send_header(key, value)
            if no_body:
                self.end_headers()
                resp.read()
                return
            if length is None:
                # No length from the backend (chunked or close-delimited): chunked to the client.
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    data = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                    if not data:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.write(b"0\r\n\r\n")
                return
            self.end_headers()
            while True:
                data = resp.read(CHUNK)
                if not data:
                    break
                self.wfile.write(data)

        def _handle(self):
            if self.path.startswith("/_lab/"):
                self._control()
                return
            fault = faults.take(self.command, self.path)
            if fault:
                self._fault(fault)
            else:
                self._proxy()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle  # noqa: N815

    return Handler


def loopback(addr):
    host, _sep, port = addr.rpartition(":")
    if not (host.startswith("127.") or host == "localhost") or not port.isdigit():
        raise argparse.ArgumentTypeError("%s is not a loopback HOST:PORT" % addr)
    return addr


def main(argv):
    parser = argparse.ArgumentParser(prog="registryfront.py")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("--listen", required=True, type=loopback)
    serve.add_argument("--backend", required=True, type=loopback)
    serve.add_argument("--v2-scope", default="")
    args = parser.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer((host, int(port)),
                                             make_handler(args.backend, Faults(), args.v2_scope))
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
