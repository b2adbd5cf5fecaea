"""command/sign.py: ``stella sign`` against a tiny in-process registry: blobs uploaded monolithically, the
signature manifest at sha256-<hex>.sig (appended to, as cosign does), verified by planning's check; its
failures as one line without the passphrase."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
import urllib.parse

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.sign import sign
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.signatures import check_image
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import (
    generate_key_pair,
    load_private_key,
)

PASSPHRASE = "PLANTED-passphrase-4c1e"
DIGEST = "sha256:" + "e" * 64


class _Registry(http.server.BaseHTTPRequestHandler):
    blobs: dict = {}
    manifests: dict = {}
    uploads: dict = {}
    refuse_manifests = False
    log: list = []

    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", headers=None):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_HEAD(self):  # noqa: N802
        self.do_GET()

    def do_GET(self):  # noqa: N802
        self.log.append((self.command, self.path))
        path = urllib.parse.urlsplit(self.path).path
        if "/blobs/" in path:
            blob = self.blobs.get(path.rsplit("/", 1)[1])
            return self._send(200, blob) if blob is not None else self._send(404)
        found = self.manifests.get(path.rsplit("/", 1)[1])
        if found is None:
            return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}')
        return self._send(200, found, {"Content-Type": cosign.OCI_MANIFEST_TYPE})

    def do_POST(self):  # noqa: N802
        self.log.append((self.command, self.path))
        self._body()
        upload = "u%d" % len(self.uploads)
        self.uploads[upload] = b""
        repo = self.path.split("/blobs/")[0]
        self._send(
            202, headers={"Location": "http://%s%s/blobs/uploads/%s?_state=x" % (self.headers["Host"], repo, upload)}
        )

    def do_PUT(self):  # noqa: N802
        self.log.append((self.command, self.path))
        parts = urllib.parse.urlsplit(self.path)
        body = self._body()
        if "/blobs/uploads/" in parts.path:
            digest = urllib.parse.parse_qs(parts.query)["digest"][0]
            assert urllib.parse.parse_qs(parts.query)["_state"] == ["x"]
            if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
                return self._send(400, b'{"errors":[{"code":"DIGEST_INVALID","message":"digest mismatch"}]}')
            self.blobs[digest] = body
            return self._send(201)
        if self.refuse_manifests:
            return self._send(403, b'{"errors":[{"code":"DENIED","message":"requested access is denied"}]}')
        self.manifests[parts.path.rsplit("/", 1)[1]] = body
        self.manifests["sha256:" + hashlib.sha256(body).hexdigest()] = body
        return self._send(201)


@pytest.fixture(name="registry")
def _registry_fixture(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.delenv("STELLA_SIGNING_PASSPHRASE", raising=False)
    _Registry.blobs, _Registry.manifests, _Registry.uploads, _Registry.log = {}, {}, {}, []
    _Registry.refuse_manifests = False
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(name="key")
def _key_fixture(tmp_path):
    private_pem, public_pem = generate_key_pair(PASSPHRASE.encode())
    (tmp_path / "cosign.key").write_bytes(private_pem)
    (tmp_path / "cosign.pub").write_bytes(public_pem)
    (tmp_path / "pass").write_text(PASSPHRASE + "\n")
    return tmp_path


def _run(argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    rc = sign(argv, stdout=out, stderr=err, environ=environ)
    return rc, out.getvalue(), err.getvalue()


def test_sign_pushes_in_the_tag_layout_and_planning_verifies_it(registry, key):
    image = "%s/shop/web@%s" % (registry, DIGEST)
    rc, out, err = _run([image, "--key", str(key / "cosign.key"), "--passphrase-file", str(key / "pass")])
    assert rc == 0, err
    tag = cosign.signature_tag(DIGEST)
    manifest = _Registry.manifests[tag]
    assert out.split() == ["%s/shop/web:%s" % (registry, tag), "sha256:" + hashlib.sha256(manifest).hexdigest()]
    assert [m for m, p in _Registry.log if m in ("POST", "PUT")] == ["POST", "PUT", "POST", "PUT", "PUT"]
    public = load_private_key(str(key / "cosign.key"), PASSPHRASE.encode()).public_key
    with DigestResolver() as resolver:
        verdict = check_image(resolver, image, DIGEST, [("k.pub", public)], "%s/shop/web" % registry)
    assert verdict["status"] == "verified" and verdict["source"] == "tag"
    # the same key again: its (new, randomised) ECDSA signature proves nothing more, nothing is pushed
    pushes = len([m for m, _p in _Registry.log if m in ("POST", "PUT")])
    rc, out, err = _run([image, "--key", str(key / "cosign.key")], environ={"STELLA_SIGNING_PASSPHRASE": PASSPHRASE})
    assert rc == 0, err
    assert out.endswith(" (already signed)\n") and _Registry.manifests[tag] == manifest
    assert len([m for m, _p in _Registry.log if m in ("POST", "PUT")]) == pushes
    # another key's signature is appended; both stay
    other_private, _other_public = generate_key_pair(b"other-pass")
    (key / "other.key").write_bytes(other_private)
    rc, out, err = _run([image, "--key", str(key / "other.key")], environ={"STELLA_SIGNING_PASSPHRASE": "other-pass"})
    assert rc == 0, err
    assert "(already signed)" not in out
    assert len(json.loads(_Registry.manifests[tag])["layers"]) == 2


def test_identity_option_names_another_repository(registry, key):
    image = "%s/shop/web@%s" % (registry, DIGEST)
    rc, _out, err = _run(
        [image, "--key", str(key / "cosign.key"), "--passphrase-file", str(key / "pass"), "--identity", "x.io/y/z"]
    )
    assert rc == 0, err
    payload = next(b for b in _Registry.blobs.values() if b"critical" in b)
    assert json.loads(payload)["critical"]["identity"]["docker-reference"] == "x.io/y/z"


def test_a_wrong_passphrase_is_signing_key_invalid_in_one_line_without_secrets(registry, key, tmp_path):
    wrong = tmp_path / "wrong"
    wrong.write_text("PLANTED-wrong-pass-88\n")
    rc, out, err = _run(
        ["%s/shop/web@%s" % (registry, DIGEST), "--key", str(key / "cosign.key"), "--passphrase-file", str(wrong)]
    )
    assert rc == 1 and out == ""
    assert err.startswith("stella sign: signing_key_invalid: ") and err.count("\n") == 1
    assert "PLANTED-wrong-pass-88" not in err and PASSPHRASE not in err
    key_text = (key / "cosign.key").read_text()
    assert key_text.splitlines()[1] not in err
    assert not _Registry.log


def test_a_refused_push_is_signature_push_failed_with_the_registry_answer(registry, key):
    _Registry.refuse_manifests = True
    rc, _out, err = _run(
        [
            "%s/shop/web@%s" % (registry, DIGEST),
            "--key",
            str(key / "cosign.key"),
            "--passphrase-file",
            str(key / "pass"),
        ]
    )
    assert rc == 1 and err.startswith("stella sign: signature_push_failed: ")
    assert "HTTP 403" in err and "DENIED" in err and PASSPHRASE not in err


def test_a_tag_holding_no_signature_manifest_is_not_overwritten(registry, key):
    tag = cosign.signature_tag(DIGEST)
    _Registry.manifests[tag] = b"{not json"
    rc, _out, err = _run(
        [
            "%s/shop/web@%s" % (registry, DIGEST),
            "--key",
            str(key / "cosign.key"),
            "--passphrase-file",
            str(key / "pass"),
        ]
    )
    assert rc == 1 and "signature_push_failed" in err and _Registry.manifests[tag] == b"{not json"


def test_usage_errors_exit_2(registry, key, capsys):
    assert _run(["%s/shop/web:1.0" % registry, "--key", str(key / "cosign.key")])[0] == 2
    assert _run(["%s/shop/web@%s" % (registry, DIGEST)])[0] == 2
