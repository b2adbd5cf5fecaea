"""Signed evidence (plugin_utils/trust/dsse.py): in-toto Statements v1 in DSSE envelopes, checked by
securesystemslib itself and by an independent PAE verification, and refused for every tampering."""

from __future__ import annotations

import base64
import copy
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import dsse, keys

SUBJECTS = [{"name": "deployment.json", "digest": {"sha256": "ab" * 32}}]
PREDICATE_TYPE = "https://stellaops.example/deployment/v1"


@pytest.fixture(scope="module", params=keys.ALGORITHMS)
def key(request):
    return keys.generate_private_key(request.param)


@pytest.fixture(scope="module")
def envelope(key):
    return dsse.sign_statement(dsse.statement(SUBJECTS, PREDICATE_TYPE, {"jobId": "j-1", "ok": True}), key)


def test_statement_shape():
    made = dsse.statement(SUBJECTS, PREDICATE_TYPE, {"a": 1})
    assert made == {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": SUBJECTS,
        "predicateType": PREDICATE_TYPE,
        "predicate": {"a": 1},
    }
    for subjects in (
        [{"name": "x", "digest": {"sha512": "ab" * 64}}],
        [{"name": "x", "digest": {"sha256": "XYZ"}}],
        [{"digest": {"sha256": "ab" * 32}}],
        [],
    ):
        with pytest.raises(ValueError):
            dsse.statement(subjects, PREDICATE_TYPE, {})


def test_round_trip(key, envelope):
    assert sorted(envelope) == ["payload", "payloadType", "signatures"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"][0]["keyid"] == key.public_key.fingerprint.split(":", 1)[1]
    payload = base64.b64decode(envelope["payload"])
    assert payload == json.dumps(json.loads(payload), sort_keys=True, separators=(",", ":")).encode()
    opened = dsse.open_envelope(envelope, key.public_key)
    assert opened["predicate"] == {"jobId": "j-1", "ok": True} and opened["subject"] == SUBJECTS
    assert dsse.open_envelope(json.dumps(envelope).encode(), key.public_key) == opened


def test_securesystemslib_accepts_it(key, envelope):
    accepted = Envelope.from_dict(copy.deepcopy(envelope)).verify([dsse.public_sslib_key(key.public_key)], 1)
    assert list(accepted) == [key.public_key.fingerprint.split(":", 1)[1]]


def test_independent_pae_verification(key, envelope):
    payload = base64.b64decode(envelope["payload"])
    kind = envelope["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    public = key.crypto_key.public_key()
    if key.algorithm == "ed25519":
        public.verify(signature, pae)
    else:
        public.verify(signature, pae, ec.ECDSA(hashes.SHA256()))


def _changed_payload_byte(envelope):
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[payload.index(b"j-1")] = ord("k")
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()


def _changed_signature(envelope):
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[-1] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()


TAMPERINGS = {
    "payload-byte": (_changed_payload_byte, "no signature of the envelope verifies"),
    "signature": (_changed_signature, "no signature of the envelope verifies"),
    "extra-field": (lambda e: e.update(extra=1), "not exactly payload, payloadType, signatures"),
    "missing-field": (lambda e: e.pop("payloadType"), "not exactly payload, payloadType, signatures"),
    "payload-type": (lambda e: e.update(payloadType="application/json"), "payloadType is 'application/json'"),
    "no-signature": (lambda e: e.update(signatures=[]), "has no signature"),
    "other-keyid": (lambda e: e["signatures"][0].update(keyid="00" * 32), "no signature of the envelope verifies"),
    "payload-not-base64": (lambda e: e.update(payload="!!"), "payload is not base64"),
    "sig-not-base64": (lambda e: e["signatures"][0].update(sig="!!"), "signature is not base64"),
}


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_tampering_refused(key, envelope, name):
    change, fragment = TAMPERINGS[name]
    tampered = copy.deepcopy(envelope)
    change(tampered)
    with pytest.raises(StellaError) as caught:
        dsse.open_envelope(tampered, key.public_key)
    assert caught.value.code == "evidence_signature_invalid"
    assert fragment in caught.value.reason
    dsse.open_envelope(envelope, key.public_key)  # the original is untouched and still opens


def test_another_key_refused(key, envelope):
    other = keys.generate_private_key(key.algorithm).public_key
    with pytest.raises(StellaError) as caught:
        dsse.open_envelope(envelope, other)
    assert caught.value.code == "evidence_signature_invalid"
    assert caught.value.reason == "no signature of the envelope verifies with the key %s" % other.fingerprint


@pytest.mark.parametrize(
    "data,fragment",
    [(b"{not json", "not JSON"), (b"[]", "a JSON object"), ("[1]", "a JSON object")],
)
def test_not_an_envelope(key, data, fragment):
    with pytest.raises(StellaError) as caught:
        dsse.open_envelope(data, key.public_key)
    assert caught.value.code == "evidence_signature_invalid" and fragment in caught.value.reason


@pytest.mark.parametrize(
    "statement,fragment",
    [
        (
            {"_type": "https://in-toto.io/Statement/v0.1", "subject": SUBJECTS, "predicateType": "x"},
            "not an in-toto Statement v1",
        ),
        ({"_type": dsse.STATEMENT_TYPE, "predicateType": "x"}, "no subject list"),
        ({"_type": dsse.STATEMENT_TYPE, "subject": "x", "predicateType": "x"}, "no subject list"),
        (["not", "an", "object"], "not an in-toto Statement v1"),
    ],
)
def test_signed_payload_that_is_not_a_statement(key, statement, fragment):
    envelope = dsse.sign_statement(statement, key)
    with pytest.raises(StellaError) as caught:
        dsse.open_envelope(envelope, key.public_key)
    assert caught.value.code == "evidence_signature_invalid" and fragment in caught.value.reason
