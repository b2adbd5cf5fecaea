"""Signing and public keys (plugin_utils/trust/keys.py): cosign's encrypted key format, opened with keys
that cosign's own tests ship (tests/unit/fixtures/cosign/sigstore-cosign) and written so that the same
format opens again; PEM public keys; fingerprints; refusals that never show the passphrase."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "cosign")
COSIGN_KEYS = os.path.join(FIXTURES, "sigstore-cosign")
CONTAINERS = os.path.join(FIXTURES, "containers-image")
PLANTED = b"planted-Passphrase-7f3c9e"


def fixture(*parts):
    return os.path.join(COSIGN_KEYS, *parts)


def _pem_body_json(pem):
    body = b"".join(pem.split(b"\n")[1:-2])
    return json.loads(base64.b64decode(body))


@pytest.mark.parametrize("algorithm", keys.ALGORITHMS)
def test_round_trip_generate_encrypt_decrypt_sign_verify(algorithm):
    private_pem, public_pem = keys.generate_key_pair(PLANTED, algorithm)
    assert private_pem.startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    key = keys.private_key_from_pem(private_pem, PLANTED, "cosign.key")
    public = keys.public_key_from_pem(public_pem, "cosign.pub")
    assert key.algorithm == public.algorithm == algorithm
    assert key.public_key == public and key.public_key.fingerprint == public.fingerprint
    signature = key.sign(b"the data")
    assert public.verify(signature, b"the data")
    assert not public.verify(signature, b"other data")
    assert not public.verify(signature[:-1] + bytes([signature[-1] ^ 1]), b"the data")
    assert not public.verify(b"", b"the data") and not public.verify(b"\x00" * 64, b"the data")
    assert not public.verify("not bytes", b"the data")
    again = keys.private_key_from_pem(keys.encrypt_private_key(key, b"another"), b"another", "re-encrypted")
    assert again.public_key == public


def test_encrypted_layout_is_cosigns():
    private_pem, _public = keys.generate_key_pair(PLANTED)
    lines = private_pem.decode().splitlines()
    assert lines[0] == "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"
    assert lines[-1] == "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----"
    assert all(len(line) <= 64 for line in lines[1:-1])
    document = _pem_body_json(private_pem)
    assert list(document) == ["kdf", "cipher", "ciphertext"]
    assert document["kdf"]["name"] == "scrypt" and document["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert len(base64.b64decode(document["kdf"]["salt"])) == 32
    assert document["cipher"]["name"] == "nacl/secretbox"
    assert len(base64.b64decode(document["cipher"]["nonce"])) == 24
    # opened independently (scrypt + secretbox by hand): the plaintext is PKCS#8 DER
    import nacl.secret

    secret = hashlib.scrypt(
        PLANTED, salt=base64.b64decode(document["kdf"]["salt"]), n=32768, r=8, p=1, maxmem=1 << 26, dklen=32
    )
    der = nacl.secret.SecretBox(secret).decrypt(
        base64.b64decode(document["ciphertext"]), base64.b64decode(document["cipher"]["nonce"])
    )
    assert isinstance(serialization.load_der_private_key(der, None), ec.EllipticCurvePrivateKey)
    # two encryptions of one key differ (random salt and nonce)
    assert (
        _pem_body_json(private_pem)["kdf"]["salt"] != _pem_body_json(keys.generate_key_pair(PLANTED)[0])["kdf"]["salt"]
    )


def test_cosigns_own_encrypted_test_key_opens_with_its_passphrase():
    # pkg/cosign/keys_test.go's pemsigstorekey, made by cosign, passphrase "hello"
    key = keys.load_private_key(fixture("pemsigstorekey.key"), b"hello")
    assert key.algorithm == "ecdsa-p256"
    assert key.public_key.verify(key.sign(b"payload"), b"payload")
    with pytest.raises(StellaError) as caught:
        keys.load_private_key(fixture("pemsigstorekey.key"), b"wrong")
    assert caught.value.code == "signing_key_invalid"
    assert caught.value.reason.endswith(": the passphrase does not open the private key")


def test_older_cosign_label_and_sec1_plaintext_open():
    assert keys.load_private_key(fixture("pemcosignkey.key"), b"hello").algorithm == "ecdsa-p256"
    # N=65536, its plaintext the SEC1 form of validecp256: the same key as that file
    sec1 = keys.load_private_key(fixture("pemcosigneckey.key"), b"hello")
    assert sec1.public_key == keys.load_private_key(fixture("validecp256.key"), None).public_key


@pytest.mark.parametrize(
    "name,algorithm",
    [("validecp256.key", "ecdsa-p256"), ("validecpkcs8.key", "ecdsa-p256"), ("ed25519key.key", "ed25519")],
)
def test_plain_pem_private_keys(name, algorithm):
    key = keys.load_private_key(fixture(name), None)
    assert key.algorithm == algorithm and key.public_key.verify(key.sign(b"x"), b"x")


@pytest.mark.parametrize(
    "name,fragment",
    [
        ("validecp384.key", "key type EC secp384r1"),
        ("validrsapkcs8.key", "key type RSA"),
        ("invalidrsawithpubkey.key", "a public key, not a private key"),
    ],
)
def test_private_keys_refused(name, fragment):
    with pytest.raises(StellaError) as caught:
        keys.load_private_key(fixture(name), b"hello")
    assert caught.value.code == "signing_key_invalid" and fragment in caught.value.reason


def test_pkcs8_encrypted_private_key():
    crypto_key = ec.generate_private_key(ec.SECP256R1())
    pem = crypto_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PLANTED),
    )
    assert keys.private_key_from_pem(pem, PLANTED, "k").public_key.crypto_key.public_numbers() == (
        crypto_key.public_key().public_numbers()
    )
    for passphrase, ending in ((b"wrong", "does not open the private key"), (None, "no passphrase was given")):
        with pytest.raises(StellaError) as caught:
            keys.private_key_from_pem(pem, passphrase, "k")
        assert ending in caught.value.reason


def test_empty_passphrase_cosign_key():
    key = keys.PrivateKey(ec.generate_private_key(ec.SECP256R1()))
    pem = keys.encrypt_private_key(key, b"")
    assert keys.private_key_from_pem(pem, b"", "k").public_key == key.public_key


def test_no_passphrase_for_an_encrypted_key():
    private_pem, _public = keys.generate_key_pair(PLANTED)
    with pytest.raises(StellaError) as caught:
        keys.private_key_from_pem(private_pem, None, "cosign.key")
    assert caught.value.code == "signing_key_invalid"
    assert caught.value.reason == (
        "cosign.key: the private key is encrypted and no passphrase was given "
        "(STELLA_SIGNING_PASSPHRASE or a passphrase file)"
    )


def test_planted_passphrase_never_in_errors_or_repr(tmp_path):
    private_pem, _public = keys.generate_key_pair(PLANTED)
    key = keys.private_key_from_pem(private_pem, PLANTED, "k")
    raw = key.crypto_key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    texts = [repr(key), repr(key.public_key), str(key), str(key.public_key)]
    wrong = PLANTED + b"-wrong"
    for data in (private_pem, private_pem.replace(b"SIGSTORE", b"COSIGN"), b"garbage " + wrong):
        try:
            keys.private_key_from_pem(data, wrong, "k")
        except StellaError as exc:
            texts.append(exc.reason)
    assert len(texts) == 7
    for text in texts:
        assert PLANTED.decode() not in text and wrong.decode() not in text
        assert base64.b64encode(raw).decode()[:20] not in text and raw.hex()[:20] not in text
    assert "PrivateKey(ecdsa-p256, public sha256:" in repr(key)


def test_fingerprint_is_sha256_of_der_spki():
    with open(os.path.join(CONTAINERS, "cosign.pub"), "rb") as handle:
        pem = handle.read()
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    expected = "sha256:" + hashlib.sha256(base64.b64decode(body)).hexdigest()
    key = keys.load_public_key(os.path.join(CONTAINERS, "cosign.pub"))
    assert key.fingerprint == expected and key.algorithm == "ecdsa-p256"
    assert repr(key) == "PublicKey(ecdsa-p256, %s)" % expected
    assert keys.public_key_from_pem(key.pem(), "again").fingerprint == expected


def _public_pem(crypto_key):
    return crypto_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@pytest.mark.parametrize(
    "make,fragment",
    [
        (lambda: _public_pem(ec.generate_private_key(ec.SECP384R1())), "key type EC secp384r1"),
        (lambda: _public_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)), "key type RSA"),
        (lambda: keys.generate_key_pair(PLANTED)[0], "it is a private key"),
        (
            lambda: ed25519.Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            "it is a private key",
        ),
        (lambda: b"not a key at all", "no PEM block found"),
        (lambda: b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "'CERTIFICATE'"),
        (lambda: b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a valid SubjectPublicKeyInfo"),
    ],
    ids=["p384", "rsa", "cosign-private", "pkcs8-private", "not-pem", "certificate", "broken"],
)
def test_public_keys_refused(make, fragment):
    with pytest.raises(StellaError) as caught:
        keys.public_key_from_pem(make(), "policy.pub")
    assert caught.value.code == "image_policy_invalid"
    assert caught.value.reason.startswith("policy.pub: not a PEM public key of ECDSA P-256 or Ed25519 (")
    assert fragment in caught.value.reason
    with pytest.raises(StellaError) as other:
        keys.public_key_from_pem(make(), "evidence.pub", code="evidence_signature_invalid")
    assert other.value.code == "evidence_signature_invalid"


def test_load_public_key_missing_and_oversized(tmp_path):
    missing = str(tmp_path / "missing.pub")
    with pytest.raises(StellaError) as caught:
        keys.load_public_key(missing)
    assert caught.value.code == "image_policy_invalid"
    assert caught.value.reason == "%s: cannot read the public key: No such file or directory" % missing
    big = tmp_path / "big.pub"
    big.write_bytes(b"A" * (64 * 1024 + 1))
    with pytest.raises(StellaError) as caught:
        keys.load_public_key(str(big))
    assert "over 64 KiB" in caught.value.reason
    with pytest.raises(StellaError) as caught:
        keys.load_private_key(missing, None)
    assert caught.value.code == "signing_key_invalid" and "cannot read the private key" in caught.value.reason


def test_ecdsa_verify_is_cosigns_der_over_sha256():
    key = keys.load_private_key(fixture("validecpkcs8.key"), None)
    signature = key.crypto_key.sign(b"data", ec.ECDSA(hashes.SHA256()))
    assert key.public_key.verify(signature, b"data")
    assert keys.PublicKey(key.crypto_key.public_key()).verify(key.sign(b"data"), b"data")


def test_passphrase_from(tmp_path):
    path = tmp_path / "pass"
    path.write_bytes(b"secret\n\n")
    assert keys.passphrase_from(str(path), environ={"STELLA_SIGNING_PASSPHRASE": "env"}) == b"secret\n"
    path.write_bytes(b"secret")
    assert keys.passphrase_from(str(path)) == b"secret"
    assert keys.passphrase_from(None, environ={"STELLA_SIGNING_PASSPHRASE": "from-env"}) == b"from-env"
    assert keys.passphrase_from(None, environ={}) is None
    assert keys.passphrase_from(None, env="OTHER", environ={"OTHER": "x"}) == b"x"
    with pytest.raises(StellaError) as caught:
        keys.passphrase_from(str(tmp_path / "none"))
    assert caught.value.code == "signing_key_invalid"


def test_unknown_algorithm():
    with pytest.raises(StellaError) as caught:
        keys.generate_key_pair(PLANTED, "rsa")
    assert caught.value.code == "signing_key_invalid"


def test_missing_library_is_a_stella_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_crypto(name, *args, **kwargs):
        if name.startswith("cryptography") or name.startswith("nacl"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_crypto)
    with pytest.raises(StellaError) as caught:
        keys.public_key_from_pem(b"", "x.pub")
    assert caught.value.code == "trust_dependency_missing"
    assert caught.value.reason == "cryptography is required on the controller (pip install -r requirements/trust.txt)"
    with pytest.raises(StellaError) as caught:
        keys.generate_key_pair(b"x")
    assert caught.value.code == "trust_dependency_missing"
