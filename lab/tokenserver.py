"""A small OCI registry token service for the lab (the Bearer flow of the distribution spec).

Not part of the collection. ``init DIR`` makes an EC P-256 key and a self-signed certificate (the
registry's ``rootcertbundle``); ``serve [--anonymous-pull] ADDR DIR SECRETS_JSON SERVICE ISSUER`` answers
``GET /token?service=...&scope=repository:NAME:ACTIONS`` with an ES256 JWT. A request with the right
Basic credentials gets the actions it asked for; wrong credentials get HTTP 401. A request without
credentials gets a token with no access, or with ``--anonymous-pull`` a token with ``pull`` (only) on every
repository it asked for, as Docker Hub and GHCR answer anonymous clients for public images.
Runs with the project's venv Python (``cryptography`` comes with ansible-core). Loopback only.
"""

from __future__ import annotations

import base64
import datetime
import hmac
import http.server
import json
import os
import sys
import time
import urllib.parse
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils
from cryptography.x509.oid import NameOID


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def cmd_init(directory: str) -> None:
    key_path, cert_path = os.path.join(directory, "token.key"), os.path.join(directory, "token.crt")
    if os.path.exists(key_path) and os.path.exists(cert_path):
        return
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stella-lab-token")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
    with open(key_path + ".tmp", "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    with open(cert_path + ".tmp", "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(key_path + ".tmp", key_path)
    os.replace(cert_path + ".tmp", cert_path)


class Issuer:
    def __init__(self, directory, secrets_file, service, issuer, anonymous_pull=False):
        with open(os.path.join(directory, "token.key"), "rb") as handle:
            self.key = serialization.load_pem_private_key(handle.read(), None)
        with open(os.path.join(directory, "token.crt"), "rb") as handle:
            cert = x509.load_pem_x509_certificate(handle.read())
        self.x5c = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode("ascii")]
        with open(secrets_file, encoding="utf-8") as handle:
            secrets = json.load(handle)
        self.username, self.password = secrets["username"], secrets["password"]
        self.service, self.issuer = service, issuer
        self.anonymous_pull = anonymous_pull

    def check(self, header):
        """``None`` (anonymous), the user name, or ``False`` for wrong credentials."""
        if not header:
            return None
        scheme, _sep, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _sep, password = base64.b64decode(value).decode("utf-8").partition(":")
        except ValueError:
            return False
        ok = hmac.compare_digest(user, self.username) and hmac.compare_digest(password, self.password)
        return user if ok else False

    def token(self, subject, scopes):
        access = []
        for scope in scopes if subject or self.anonymous_pull else []:
            kind, _sep, rest = scope.partition(":")
            name, _sep, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if a and (subject or a == "pull")]
            if kind == "repository" and name and granted:
                access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": self.x5c}
        claims = {"iss": self.issuer, "sub": subject or "", "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())).encode()
        r, s = utils.decode_dss_signature(self.key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
        return signing_input.decode() + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def serve(addr, issuer):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet: the lab keeps its own logs
            return

        def do_GET(self):  # noqa: N802 - http.server API
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/token":
                self.send_error(404)
                return
            query = urllib.parse.parse_qs(url.query)
            subject = issuer.check(self.headers.get("Authorization"))
            if subject is False:
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]}')
                return
            token = issuer.token(subject, query.get("scope", []))
            body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    host, port = addr.rsplit(":", 1)
    http.server.ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


def main(argv):
    if argv[:1] == ["init"] and len(argv) == 2:
        cmd_init(argv[1])
    elif argv[:1] == ["serve"] and len(argv) in (6, 7) and argv[1:].count("--anonymous-pull") == len(argv) - 6:
        args = [a for a in argv[1:] if a != "--anonymous-pull"]
        serve(args[0], Issuer(args[1], args[2], args[3], args[4], anonymous_pull=len(argv) == 7))
    else:
        sys.stderr.write("usage: tokenserver.py init DIR | serve [--anonymous-pull] ADDR DIR SECRETS_JSON SERVICE ISSUER\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
