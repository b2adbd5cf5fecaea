# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella sign IMAGE@DIGEST --key KEY`` (docs/trust.md "Signing images (stella sign)"): sign an image in
its registry as cosign does, in cosign's tag layout.

The simple signing payload (the digest and the identity, default the image's ``registry/repository``) is
signed with a key in cosign's format (trust/keys.py; its passphrase from ``--passphrase-file`` or
``STELLA_SIGNING_PASSPHRASE``); the payload and the config are uploaded as blobs (``POST
/v2/<repo>/blobs/uploads/`` then ``PUT ?digest=``) and the signature manifest is put at the tag
``sha256-<hex>.sig``, keeping the signatures already there (cosign appends). Credentials come from
Docker's client config, as planning's (release/credentials.py), the token scope is
``repository:<repo>:pull,push``; requests go over planning's requests transport (release/registry.py).
Failures print one line, ``stella sign: CODE: REASON`` (``signing_key_invalid``, ``signature_push_failed``),
without any passphrase, key or credential, and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.parse

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import (
    StellaError,
    redact_text,
    redact_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import (
    parse_image_ref,
    registry_base_url,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import (
    MEDIA_DOCKER_MANIFEST,
    MEDIA_OCI_MANIFEST,
    RegistryApi,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.store import fail_line
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.credentials import RegistryCredentials
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import RequestsTransport

SIGNATURE_ACCEPT = ", ".join((MEDIA_OCI_MANIFEST, MEDIA_DOCKER_MANIFEST))


def sign_parser():
    """``stella sign IMAGE@DIGEST --key KEY [--passphrase-file FILE] [--insecure-registry HOST ...]
    [--identity REF]``."""
    parser = argparse.ArgumentParser(
        prog="stella sign",
        description="Sign an image in its registry, in cosign's tag layout (docs/trust.md).",
    )
    parser.add_argument("image", metavar="IMAGE@DIGEST", help="the image, pinned by its digest")
    parser.add_argument("--key", required=True, help="the signing key (cosign's encrypted PEM, or PKCS#8 PEM)")
    parser.add_argument(
        "--passphrase-file",
        metavar="FILE",
        help="a file holding the key's passphrase (default: the environment variable STELLA_SIGNING_PASSPHRASE)",
    )
    parser.add_argument(
        "--insecure-registry",
        metavar="HOST",
        action="append",
        default=[],
        help="a registry reached over plain HTTP (loopback registries always are); repeatable",
    )
    parser.add_argument(
        "--identity",
        metavar="REF",
        help="the repository the signature names (default: the image's own, registry/repository)",
    )
    parser.add_argument(
        "--timeout", metavar="SECONDS", type=float, default=30.0, help="seconds per registry request (default 30)"
    )
    return parser


class _Bodies:
    """The transport ``RegistryApi`` calls, which sends ``body`` with the registry's own requests (an
    upload or a manifest; the token service's are left alone)."""

    def __init__(self, transport, base):
        self.transport, self.base, self.body = transport, base, None

    def __call__(self, method, url, headers, timeout, body=None):
        if body is None and self.body is not None and url.startswith(self.base + "/v2/"):
            body = self.body
        return self.transport(method, url, headers, timeout, body)


def _answer(body):
    """The registry's own words: the first error of a distribution error answer, else its first line."""
    try:
        errors = json.loads(body or b"{}").get("errors") or []
        if errors:
            return "%s %s" % (errors[0].get("code") or "", errors[0].get("message") or "")
    except (ValueError, AttributeError):
        pass
    return " ".join((body or b"").decode("utf-8", "replace").split())[:200]


class _Pusher:
    """Pushes to one repository with the registry's credentials and a pull,push token."""

    def __init__(self, ref, insecure, timeout, credentials):
        self.ref = ref
        self.scope = "repository:%s:pull,push" % ref.repository
        entry = credentials.get(ref.registry) or {}
        self.requests = RequestsTransport()
        self.transport = _Bodies(self.requests, registry_base_url(ref.registry, insecure))
        self.api = RegistryApi(
            entry.get("username"),
            entry.get("password"),
            insecure,
            timeout,
            self.transport,
            identitytoken=entry.get("identitytoken"),
            source=entry.get("source"),
        )
        self.secrets = list(credentials.secrets())

    def call(self, method, path, headers=None, body=None, expect=(200,)):
        self.transport.body = body
        try:
            status, answer, data, _auth = self.api.request(method, self.ref.registry, path, headers, scope=self.scope)
        except StellaError as exc:
            self.fail("%s %s: %s" % (method, path.split("?")[0], exc.reason))
        finally:
            self.transport.body = None
        if expect and status not in expect:
            self.fail(
                "%s %s answered HTTP %d%s"
                % (method, path.split("?")[0], status, (": " + _answer(data)) if _answer(data) else "")
            )
        return status, answer, data

    def fail(self, reason):
        secrets = self.secrets + self.api.secrets()
        raise StellaError(
            "signature_push_failed",
            "registry %s: %s" % (self.ref.registry, redact_text(redact_url(reason), secrets)),
        )

    def blob(self, digest, data):
        """Upload ``data`` as the blob ``digest`` (monolithic: POST then PUT), unless the registry has it."""
        repo = self.ref.repository
        status, _h, _d = self.call("HEAD", "/v2/%s/blobs/%s" % (repo, digest), expect=())
        if status == 200:
            return
        _status, answer, _d = self.call("POST", "/v2/%s/blobs/uploads/" % repo, expect=(202,))
        location = answer.get("location")
        if not location:
            self.fail("the upload of %s got no Location" % digest)
        parts = urllib.parse.urlsplit(location)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + [("digest", digest)]
        path = "%s?%s" % (parts.path, urllib.parse.urlencode(query))
        self.call(
            "PUT",
            path,
            {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))},
            body=data,
            expect=(201, 204),
        )

    def close(self):
        self.requests.close()


def already_signed(entries, payload, signature, public_key=None):
    """Whether ``entries`` (``{"payload", "signature"}``) hold this signature of ``payload``, or (with
    ``public_key``) another signature of the same payload by the same key: an ECDSA signature differs at each
    signing, and signing again with the same key proves nothing more, so a second ``stella sign`` pushes
    nothing (the tag does not grow at every run of a pipeline)."""
    for entry in entries:
        if entry["payload"] != payload:
            continue
        if entry["signature"] == signature:
            return True
        if public_key is not None:
            try:
                raw = base64.b64decode(entry["signature"], validate=True)
            except (ValueError, TypeError):
                continue
            if public_key.verify(raw, payload):
                return True
    return False


def push_signature(ref, digest, payload, signature, pusher, public_key=None):
    """Put the signature of ``payload`` at ``digest``'s tag, keeping the signatures there: ``(tag, manifest
    digest, appended)``; ``appended`` is false when the tag holds this payload signed by this key already
    (:func:`already_signed`)."""
    # pylint: disable-next=import-outside-toplevel  # the trust layer loads cryptography
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign

    tag = cosign.signature_tag(digest)
    path = "/v2/%s/manifests/%s" % (ref.repository, tag)
    status, _answer, body = pusher.call("GET", path, {"Accept": SIGNATURE_ACCEPT}, expect=(200, 404))
    entries = []
    if status == 200:
        try:
            layers = cosign.parse_signature_manifest(body)
        except ValueError as exc:
            pusher.fail("the tag %s holds no signature manifest (%s); delete it first" % (tag, exc))
        for layer in layers:
            _s, _h, blob = pusher.call("GET", "/v2/%s/blobs/%s" % (ref.repository, layer["digest"]))
            entries.append({"payload": blob, "signature": layer["signature"]})
    new = {"payload": payload, "signature": signature}
    if already_signed(entries, payload, signature, public_key):
        image = cosign.signature_manifest(entries)
        return tag, image["digest"], False
    try:
        image = cosign.signature_manifest(entries + [new])
    except ValueError as exc:
        pusher.fail("cannot add the signature at %s: %s" % (tag, exc))
    for blob_digest, blob in image["blobs"].items():
        pusher.blob(blob_digest, blob)
    pusher.call("PUT", path, {"Content-Type": cosign.OCI_MANIFEST_TYPE}, body=image["manifest"], expect=(201, 200))
    return tag, image["digest"], True


def sign(argv, stdout=None, stderr=None, environ=None):
    """``stella sign``: 0 when the signature is in the registry, 1 with one error line, 2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = sign_parser()
    try:
        options = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code
    try:
        ref = parse_image_ref(options.image)
    except StellaError as exc:
        return fail_line(stderr, "sign", StellaError("signature_push_failed", exc.reason))
    if not ref.digest:
        parser.print_usage(stderr)
        stderr.write("stella sign: error: %s has no digest: sign IMAGE@sha256:...\n" % options.image)
        return 2
    pusher = None
    try:
        # pylint: disable-next=import-outside-toplevel  # the trust layer loads cryptography
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign, keys

        passphrase = keys.passphrase_from(options.passphrase_file, environ=environ)
        key = keys.load_private_key(options.key, passphrase)
        identity = options.identity or "%s/%s" % (ref.registry, ref.repository)
        payload = cosign.simple_signing_payload(identity, ref.digest)
        signature = cosign.sign_payload(key, payload)
        pusher = _Pusher(ref, tuple(options.insecure_registry), options.timeout, RegistryCredentials({}))
        tag, manifest_digest, appended = push_signature(ref, ref.digest, payload, signature, pusher, key.public_key)
    except StellaError as exc:
        return fail_line(stderr, "sign", exc)
    finally:
        if pusher is not None:
            pusher.close()
    stdout.write(
        "%s/%s:%s %s%s\n"
        % (ref.registry, ref.repository, tag, manifest_digest, "" if appended else " (already signed)")
    )
    return 0
