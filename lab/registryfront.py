"""A fault-injecting front for a lab registry (standard library only; loopback only).

Not part of the collection. ``serve --listen ADDR --backend ADDR [--v2-scope SCOPE] [--referrers-state FILE]``
proxies every request to the backend registry unchanged (method, path and query, headers including ``Host``,
body, then the backend's status, headers and body; redirects are passed on, never followed) except:

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

- the OCI 1.1 referrers API (distribution-spec "Listing Referrers"), which the backend (distribution 2.8)
  lacks: ``GET``/``HEAD /v2/<name>/referrers/<digest>[?artifactType=T]`` is answered by the front with an
  OCI image index (``application/vnd.oci.image.index.v1+json``) of the manifests pushed THROUGH A FRONT
  whose ``subject.digest`` is ``<digest>``; each entry is ``{mediaType, digest, size, artifactType,
  annotations}`` (``artifactType``: the manifest's, else its config's media type). ``artifactType=T``
  keeps the entries of that type and adds ``OCI-Filters-Applied: artifactType``. An unknown digest gets
  the empty index; a malformed one ``400 DIGEST_INVALID``. The client's credentials are checked first
  by the backend (a ``GET`` of the subject's manifest with the client's headers): its ``401``/``403`` is
  passed on unchanged, challenge included. The front learns referrers from each ``PUT
  /v2/<name>/manifests/<ref>`` that the backend accepts (``201``) of a manifest with a ``subject``: that
  answer also gets ``OCI-Subject: <subject digest>`` (as the spec asks, so clients push no fallback tag);
  a ``DELETE`` of a manifest by digest (``202``) forgets it. With ``--referrers-state FILE`` they are kept
  in that JSON file (locked, re-read on every request: fronts on the same backend share it, and it
  survives a restart of the front); without, in memory only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import hashlib
import http.client
import http.server
import json
import os
import re
import sys
import threading
import urllib.parse

# Hop-by-hop headers (RFC 9110 7.6.1): not passed on; the front frames each message itself.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
ERROR_BODIES = {
    429: (
        "TOOMANYREQUESTS",
        "You have reached your pull rate limit. You may increase the limit by authenticating "
        "and upgrading: https://www.docker.com/increase-rate-limit",
    ),
    500: ("UNKNOWN", "unknown error"),
    502: ("UNAVAILABLE", "bad gateway"),
    503: ("UNAVAILABLE", "service unavailable"),
    504: ("UNAVAILABLE", "gateway timeout"),
}
CHUNK = 64 * 1024
MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        MEDIA_OCI_INDEX,
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)
MAX_MANIFEST = 4 * 1024 * 1024  # distribution's own limit on a manifest's size
NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
REFERRERS_PATH = re.compile(r"^/v2/(?P<name>%s)/referrers/(?P<digest>[^/]*)$" % NAME)
MANIFEST_PATH = re.compile(r"^/v2/(?P<name>%s)/manifests/(?P<ref>[^/]+)$" % NAME)
DIGEST = re.compile(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$")


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
        if retry_after is not None and (
            not isinstance(retry_after, int) or isinstance(retry_after, bool) or retry_after < 0
        ):
            raise ValueError("retryAfter must be a non-negative integer or null")
        for key in ("match", "method"):
            if spec.get(key) is not None and not isinstance(spec[key], str):
                raise ValueError("%s must be a string" % key)
        with self.lock:
            fault = {
                "id": self.next_id,
                "status": status,
                "retryAfter": retry_after,
                "count": count,
                "remaining": count,
                "served": 0,
                "match": spec.get("match") or "",
                "method": (spec.get("method") or "").upper() or None,
            }
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


class Referrers:
    """The descriptors of the manifests with a ``subject`` pushed through the front, by repository and
    subject digest: in memory, or in the JSON file ``path`` (``{"referrers": {"<name>@<subject>":
    [descriptor, ...]}}``), read and written under an exclusive lock on ``path + ".lock"`` so that every
    front on one backend sees the same list."""

    def __init__(self, path=None):
        self.path = path
        self.lock = threading.Lock()
        self.memory = {}

    @contextlib.contextmanager
    def _table(self, write):
        with self.lock:
            if not self.path:
                yield self.memory
                return
            with open(self.path + ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    with open(self.path, encoding="utf-8") as handle:
                        table = json.load(handle).get("referrers") or {}
                except FileNotFoundError:
                    table = {}
                yield table
                if write:
                    tmp = "%s.%d.tmp" % (self.path, os.getpid())
                    with open(tmp, "w", encoding="utf-8") as handle:
                        json.dump({"referrers": table}, handle, indent=1, sort_keys=True)
                    os.replace(tmp, self.path)

    def add(self, name, subject, descriptor):
        with self._table(True) as table:
            entries = [d for d in table.get("%s@%s" % (name, subject), []) if d["digest"] != descriptor["digest"]]
            table["%s@%s" % (name, subject)] = entries + [descriptor]

    def forget(self, name, digest):
        with self._table(True) as table:
            for key in [k for k in table if k.startswith(name + "@")]:
                table[key] = [d for d in table[key] if d["digest"] != digest]
                if not table[key]:
                    del table[key]

    def listing(self, name, subject, artifact_types=None):
        with self._table(False) as table:
            entries = [dict(d) for d in table.get("%s@%s" % (name, subject), [])]
        if artifact_types:
            entries = [d for d in entries if d.get("artifactType") in artifact_types]
        return entries


def subject_descriptor(body, content_type, announced):
    """``(subject digest, descriptor)`` of a manifest's bytes when it names a ``subject``, else ``None``.
    ``announced``: the backend's ``Docker-Content-Digest`` (the bytes' sha256 when absent)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    subject = document.get("subject") if isinstance(document, dict) else None
    digest = subject.get("digest") if isinstance(subject, dict) else None
    if not isinstance(digest, str) or not DIGEST.match(digest):
        return None
    media_type = document.get("mediaType") or (content_type or "").split(";", 1)[0].strip()
    descriptor = {
        "mediaType": media_type,
        "digest": announced or "sha256:" + hashlib.sha256(body).hexdigest(),
        "size": len(body),
    }
    artifact_type = document.get("artifactType")
    config = document.get("config")
    if not artifact_type and isinstance(config, dict):
        artifact_type = config.get("mediaType")  # an image manifest without one: its config's (the spec)
    if isinstance(artifact_type, str) and artifact_type:
        descriptor["artifactType"] = artifact_type
    if isinstance(document.get("annotations"), dict) and document["annotations"]:
        descriptor["annotations"] = document["annotations"]
    return digest, descriptor


def make_handler(backend, faults, v2_scope, referrers=None):
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
            path = self.path.split("?", 1)[0]
            manifest = MANIFEST_PATH.match(path) if referrers is not None else None
            captured = bytearray() if manifest and self.command == "PUT" else None
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
                    if captured is not None:
                        captured += data
                        if len(captured) > MAX_MANIFEST:
                            captured = None  # too big to be a manifest the backend takes
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
                self._json(
                    502, {"errors": [{"code": "UNAVAILABLE", "message": "lab front: backend %s: %s" % (backend, exc)}]}
                )
                faults.record(self.command, self.path, 502, False)
                return
            extra = []
            if captured is not None and resp.status == 201:
                found = subject_descriptor(
                    bytes(captured), self.headers.get("Content-Type"), resp.getheader("Docker-Content-Digest")
                )
                if found:
                    referrers.add(manifest.group("name"), found[0], found[1])
                    extra.append(("OCI-Subject", found[0]))
            if manifest and self.command == "DELETE" and resp.status == 202 and DIGEST.match(manifest.group("ref")):
                referrers.forget(manifest.group("name"), manifest.group("ref"))
            try:
                self._answer(resp, extra)
            finally:
                conn.close()
            faults.record(self.command, self.path, resp.status, False)

        # -- the referrers API

        def _referrers(self, match):
            """``GET``/``HEAD /v2/<name>/referrers/<digest>``: the index of the recorded referrers, once the
            backend has let the client's credentials read ``<name>``."""
            self._drain()
            name, digest = match.group("name"), match.group("digest")
            api = {"Docker-Distribution-Api-Version": "registry/2.0"}
            if not DIGEST.match(digest):
                self._json(
                    400,
                    {
                        "errors": [
                            {
                                "code": "DIGEST_INVALID",
                                "message": "the referrers of a manifest are asked for by its digest",
                                "detail": digest,
                            }
                        ]
                    },
                    api,
                )
                faults.record(self.command, self.path, 400, False)
                return
            conn = http.client.HTTPConnection(backend_host, int(backend_port), timeout=120)
            try:
                conn.putrequest(
                    "GET", "/v2/%s/manifests/%s" % (name, digest), skip_host=True, skip_accept_encoding=True
                )
                for key, value in self.headers.items():
                    if key.lower() not in HOP_BY_HOP and key.lower() not in ("expect", "accept", "content-length"):
                        conn.putheader(key, value)
                conn.putheader("Accept", MANIFEST_ACCEPT)
                conn.endheaders()
                resp = conn.getresponse()
                if resp.status in (401, 403):
                    try:
                        self._answer(resp)
                    finally:
                        conn.close()
                    faults.record(self.command, self.path, resp.status, False)
                    return
                resp.read()
            except OSError as exc:
                conn.close()
                self.close_connection = True
                self._json(
                    502, {"errors": [{"code": "UNAVAILABLE", "message": "lab front: backend %s: %s" % (backend, exc)}]}
                )
                faults.record(self.command, self.path, 502, False)
                return
            conn.close()
            query = urllib.parse.parse_qs(self.path.partition("?")[2])
            wanted = [t for t in query.get("artifactType", []) if t]
            index = {
                "schemaVersion": 2,
                "mediaType": MEDIA_OCI_INDEX,
                "manifests": referrers.listing(name, digest, wanted),
            }
            body = json.dumps(index).encode()
            self.send_response(200)
            self.send_header("Content-Type", MEDIA_OCI_INDEX)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
            if wanted:
                self.send_header("OCI-Filters-Applied", "artifactType")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            faults.record(self.command, self.path, 200, False)

        def _answer(self, resp, extra=()):
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP] + list(extra)
            if v2_scope and resp.status == 401 and self.path.split("?", 1)[0] in ("/v2/", "/v2"):
                headers = [
                    (k, v if k.lower() != "www-authenticate" or "scope=" in v else '%s,scope="%s"' % (v, v2_scope))
                    for k, v in headers
                ]
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
                return
            match = REFERRERS_PATH.match(self.path.split("?", 1)[0]) if referrers is not None else None
            if match and self.command in ("GET", "HEAD"):
                self._referrers(match)
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
    serve.add_argument("--referrers-state", default="", help="the JSON file of the referrers (default: memory)")
    args = parser.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer(
        (host, int(port)), make_handler(args.backend, Faults(), args.v2_scope, Referrers(args.referrers_state or None))
    )
    server.daemon_threads = True
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
