# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signed evidence: in-toto Statements v1 in DSSE envelopes, made and opened with securesystemslib.

An envelope is ``{"payload": b64, "payloadType": "application/vnd.in-toto+json", "signatures": [{"keyid",
"sig"}]}``; the payload is the statement's canonical JSON (sorted keys, no spaces) and the signature is over
DSSE's pre-authentication encoding. The keyid is the key's fingerprint (SHA-256 of its DER
SubjectPublicKeyInfo) in hex. securesystemslib is imported at first use.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import (
    DEPENDENCY_MISSING,
    ED25519,
    MISSING_LIBRARY,
)

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
ENVELOPE_FIELDS = ("payload", "payloadType", "signatures")
INVALID = "evidence_signature_invalid"
# securesystemslib's signing schemes of the two key algorithms
SCHEMES = {"ecdsa-p256": "ecdsa-sha2-nistp256", ED25519: "ed25519"}
_SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}\Z")


def _sslib(code):
    try:
        from securesystemslib.dsse import Envelope
        from securesystemslib.signer import CryptoSigner, Signature, SSlibKey
    except ImportError:
        raise StellaError(DEPENDENCY_MISSING, MISSING_LIBRARY.replace("cryptography", "securesystemslib")) from None
    return Envelope, CryptoSigner, Signature, SSlibKey


def canonical(document):
    """The canonical JSON bytes of ``document``: sorted keys, no spaces, UTF-8."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


def keyid(key):
    """The DSSE keyid of a public key: its fingerprint's hex."""
    return key.fingerprint.split(":", 1)[1]


def statement(subjects, predicate_type, predicate):
    """An in-toto Statement v1 about ``subjects`` (``[{"name": str, "digest": {"sha256": hex}}]``);
    ``ValueError`` for a subject without a sha256 hex digest."""
    checked = []
    for subject in subjects:
        name = subject.get("name") if isinstance(subject, dict) else None
        digest = subject.get("digest") if isinstance(subject, dict) else None
        sha256 = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(name, str) or not isinstance(sha256, str) or not _SHA256_HEX_RE.match(sha256):
            raise ValueError("subject %r has no name and sha256 hex digest" % (name if name else subject,))
        checked.append({"name": name, "digest": dict(digest)})
    if not checked:
        raise ValueError("a statement needs at least one subject")
    if not isinstance(predicate_type, str) or not predicate_type:
        raise ValueError("a statement needs a predicate type")
    return {"_type": STATEMENT_TYPE, "subject": checked, "predicateType": predicate_type, "predicate": predicate}


def public_sslib_key(key):
    """securesystemslib's ``SSlibKey`` of the :class:`~.keys.PublicKey` ``key`` (keyid: :func:`keyid`)."""
    _Envelope, _CryptoSigner, _Signature, SSlibKey = _sslib(INVALID)
    return SSlibKey.from_crypto(key.crypto_key, keyid=keyid(key), scheme=SCHEMES[key.algorithm])


def sign_statement(statement, key):
    """The DSSE envelope (a JSON dict) of ``statement`` signed by the :class:`~.keys.PrivateKey` ``key``."""
    Envelope, CryptoSigner, _Signature, _SSlibKey = _sslib("signing_key_invalid")
    signer = CryptoSigner(key.crypto_key, public_sslib_key(key.public_key))
    envelope = Envelope(canonical(statement), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    return envelope.to_dict()


def _b64(text, what):
    if not isinstance(text, str):
        raise StellaError(INVALID, "the envelope's %s is not a base64 string" % what)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StellaError(INVALID, "the envelope's %s is not base64" % what) from None


def open_envelope(envelope, key):
    """The statement in the DSSE envelope ``envelope`` (a dict, or its JSON bytes), once its signature by
    the :class:`~.keys.PublicKey` ``key`` is verified; ``StellaError(evidence_signature_invalid)`` for an
    envelope that is malformed, not signed by ``key``, or whose payload is not an in-toto Statement v1."""
    if isinstance(envelope, (bytes, bytearray, str)):
        try:
            envelope = json.loads(envelope)
        except (UnicodeDecodeError, ValueError):
            raise StellaError(INVALID, "the signed evidence is not JSON") from None
    if not isinstance(envelope, dict):
        raise StellaError(INVALID, "the signed evidence is not a DSSE envelope (a JSON object)")
    fields = sorted(envelope)
    if fields != sorted(ENVELOPE_FIELDS):
        raise StellaError(
            INVALID,
            "the DSSE envelope has the fields %s, not exactly %s"
            % (", ".join(fields) or "none", ", ".join(ENVELOPE_FIELDS)),
        )
    if envelope["payloadType"] != PAYLOAD_TYPE:
        raise StellaError(INVALID, "the envelope's payloadType is %r, not %r" % (envelope["payloadType"], PAYLOAD_TYPE))
    signatures = envelope["signatures"]
    if not isinstance(signatures, list) or not signatures:
        raise StellaError(INVALID, "the DSSE envelope has no signature")
    payload = _b64(envelope["payload"], "payload")
    for entry in signatures:
        if not isinstance(entry, dict) or not isinstance(entry.get("keyid", ""), str):
            raise StellaError(INVALID, "a signature of the envelope is not a {keyid, sig} object")
        _b64(entry.get("sig"), "signature")
    Envelope, _CryptoSigner, _Signature, _SSlibKey = _sslib(INVALID)
    try:
        parsed = Envelope.from_dict(copy.deepcopy(envelope))
    except Exception as exc:  # KeyError, ValueError, FormatError: a malformed signature entry
        raise StellaError(INVALID, "the DSSE envelope's signatures are malformed (%s)" % type(exc).__name__) from None
    try:
        parsed.verify([public_sslib_key(key)], 1)
    except Exception:  # VerificationError, UnverifiedSignatureError
        raise StellaError(INVALID, "no signature of the envelope verifies with the key %s" % key.fingerprint) from None
    if parsed.payload != payload:
        raise StellaError(INVALID, "the envelope's payload changed while it was read")
    try:
        document = json.loads(payload)
    except (UnicodeDecodeError, ValueError):
        raise StellaError(INVALID, "the signed payload is not JSON") from None
    if not isinstance(document, dict) or document.get("_type") != STATEMENT_TYPE:
        raise StellaError(INVALID, "the signed payload is not an in-toto Statement v1 (_type %s)" % STATEMENT_TYPE)
    subjects = document.get("subject")
    if not isinstance(subjects, list) or not subjects or not all(isinstance(s, dict) for s in subjects):
        raise StellaError(INVALID, "the signed in-toto Statement has no subject list")
    if not isinstance(document.get("predicateType"), str):
        raise StellaError(INVALID, "the signed in-toto Statement has no predicateType")
    return document
