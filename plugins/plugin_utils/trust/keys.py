# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signing keys and public keys: ECDSA P-256 (cosign's default) and Ed25519.

Private keys are read in cosign's encrypted format (``ENCRYPTED SIGSTORE PRIVATE KEY``: scrypt and NaCl
secretbox around a PKCS#8 key) and as PKCS#8 / SEC1 PEM; new key pairs are written in cosign's format, so
cosign opens them. Signatures follow cosign: ECDSA P-256 is a DER signature over the SHA-256 of the data,
Ed25519 a raw 64-byte signature over the data. No key material or passphrase reaches a message or repr.
cryptography and PyNaCl are imported at first use.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

ECDSA_P256 = "ecdsa-p256"
ED25519 = "ed25519"
ALGORITHMS = (ECDSA_P256, ED25519)
# A library of requirements/trust.txt that cannot be imported: one code, whatever the caller was doing.
DEPENDENCY_MISSING = "trust_dependency_missing"
MISSING_LIBRARY = "cryptography is required on the controller (pip install -r requirements/trust.txt)"
PASSPHRASE_ENV = "STELLA_SIGNING_PASSPHRASE"
# A key file (or passphrase file) larger than this is not one.
MAX_KEY_FILE_BYTES = 64 * 1024
# cosign's encrypted private key (sigstore/cosign, go-securesystemslib's "encrypted" package)
SIGSTORE_PEM_TYPE = "ENCRYPTED SIGSTORE PRIVATE KEY"
COSIGN_PEM_TYPE = "ENCRYPTED COSIGN PRIVATE KEY"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 32768, 8, 1
SALT_BYTES, NONCE_BYTES = 32, 24
# scrypt's memory is 128 * N * r * p bytes: a key file asking for more than this is refused.
MAX_SCRYPT_MEMORY = 256 * 1024 * 1024
_PROC_TYPE_RE = re.compile(rb"^Proc-Type:\s*4,\s*ENCRYPTED", re.MULTILINE)
_PEM_RE = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)


def _crypto(code):
    """The cryptography modules this file uses, or ``StellaError(code)`` when the library is missing."""
    try:
        from cryptography import exceptions
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    except ImportError:
        raise StellaError(DEPENDENCY_MISSING, MISSING_LIBRARY) from None
    return exceptions, hashes, serialization, ec, ed25519


def _secretbox(code):
    try:
        import nacl.exceptions
        import nacl.secret
    except ImportError:
        raise StellaError(DEPENDENCY_MISSING, MISSING_LIBRARY.replace("cryptography", "PyNaCl")) from None
    return nacl.secret.SecretBox, nacl.exceptions.CryptoError


def _algorithm_of(crypto_key, code="image_policy_invalid"):
    """``ecdsa-p256`` or ``ed25519`` for a cryptography key object (public or private), else ``None``."""
    _exceptions, _hashes, _serialization, ec, ed25519 = _crypto(code)
    if isinstance(crypto_key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)):
        return ECDSA_P256 if isinstance(crypto_key.curve, ec.SECP256R1) else None
    if isinstance(crypto_key, (ed25519.Ed25519PublicKey, ed25519.Ed25519PrivateKey)):
        return ED25519
    return None


def _kind_of(crypto_key):
    """What a key that is not accepted is, for a message: ``RSA``, ``EC secp384r1``, ... (no material)."""
    curve = getattr(crypto_key, "curve", None)
    if curve is not None:
        return "EC %s" % curve.name
    name = type(crypto_key).__name__.lstrip("_")
    for suffix in ("PublicKey", "PrivateKey"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "unknown"


class PublicKey:
    """A public key that verifies signatures in cosign's conventions (:data:`ECDSA_P256` or :data:`ED25519`).

    ``fingerprint`` is ``sha256:<hex>`` of the DER SubjectPublicKeyInfo.
    """

    def __init__(self, crypto_key, code="image_policy_invalid"):
        _exceptions, _hashes, serialization, _ec, _ed25519 = _crypto(code)
        algorithm = _algorithm_of(crypto_key, code)
        if algorithm is None:
            raise StellaError(code, "not a public key of ECDSA P-256 or Ed25519 (%s)" % _kind_of(crypto_key))
        self.crypto_key = crypto_key
        self.algorithm = algorithm
        self.der = crypto_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.fingerprint = "sha256:" + hashlib.sha256(self.der).hexdigest()

    def __repr__(self):
        return "PublicKey(%s, %s)" % (self.algorithm, self.fingerprint)

    def __eq__(self, other):
        return isinstance(other, PublicKey) and self.der == other.der

    def __hash__(self):
        return hash(self.der)

    def verify(self, signature, data):
        """Whether ``signature`` is this key's signature of ``data``: ``False`` (never an exception) for a
        wrong, malformed or non-bytes signature."""
        if not isinstance(signature, (bytes, bytearray)) or not isinstance(data, (bytes, bytearray)):
            return False
        exceptions, hashes, _serialization, ec, _ed25519 = _crypto("image_signature_invalid")
        try:
            if self.algorithm == ED25519:
                if len(signature) != 64:
                    return False
                self.crypto_key.verify(bytes(signature), bytes(data))
            else:
                self.crypto_key.verify(bytes(signature), bytes(data), ec.ECDSA(hashes.SHA256()))
        except (exceptions.InvalidSignature, ValueError, TypeError):
            return False
        return True

    def pem(self):
        """The SubjectPublicKeyInfo PEM (``-----BEGIN PUBLIC KEY-----``)."""
        _exceptions, _hashes, serialization, _ec, _ed25519 = _crypto("signing_key_invalid")
        return self.crypto_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class PrivateKey:
    """A signing key (:data:`ECDSA_P256` or :data:`ED25519`); ``crypto_key`` is cryptography's object."""

    def __init__(self, crypto_key, code="signing_key_invalid"):
        algorithm = _algorithm_of(crypto_key, code)
        if algorithm is None:
            raise StellaError(code, "not a private key of ECDSA P-256 or Ed25519 (%s)" % _kind_of(crypto_key))
        self.crypto_key = crypto_key
        self.algorithm = algorithm
        self.public_key = PublicKey(crypto_key.public_key(), code)

    def __repr__(self):
        return "PrivateKey(%s, public %s)" % (self.algorithm, self.public_key.fingerprint)

    def sign(self, data):
        """The signature of ``data``: DER ECDSA over SHA-256 of it, or raw Ed25519 (cosign's conventions)."""
        _exceptions, hashes, _serialization, ec, _ed25519 = _crypto("signing_key_invalid")
        if self.algorithm == ED25519:
            return self.crypto_key.sign(bytes(data))
        return self.crypto_key.sign(bytes(data), ec.ECDSA(hashes.SHA256()))


def _pem_blocks(data):
    """``[(label, whole block bytes, body bytes)]`` of the PEM blocks in ``data``."""
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    return [(m.group(1).decode("ascii"), m.group(0), m.group(2)) for m in _PEM_RE.finditer(bytes(data or b""))]


def public_key_from_pem(data, source, code="image_policy_invalid"):
    """The :class:`PublicKey` of a ``PUBLIC KEY`` PEM of ECDSA P-256 or Ed25519; anything else (not PEM, a
    private key, RSA, another curve) is ``StellaError(code)``."""
    _exceptions, _hashes, serialization, _ec, _ed25519 = _crypto(code)

    def refuse(why):
        return StellaError(code, "%s: not a PEM public key of ECDSA P-256 or Ed25519 (%s)" % (source, why))

    blocks = _pem_blocks(data)
    if not blocks:
        raise refuse("no PEM block found")
    label, block, _body = blocks[0]
    if "PRIVATE KEY" in label:
        raise refuse("it is a private key: give the public key, e.g. cosign.pub")
    if label != "PUBLIC KEY":
        raise refuse("a PEM block of type %r" % label)
    try:
        crypto_key = serialization.load_pem_public_key(block)
    except (ValueError, TypeError) as exc:
        raise refuse("not a valid SubjectPublicKeyInfo: %s" % _first_line(exc)) from None
    except Exception as exc:  # cryptography raises UnsupportedAlgorithm for unknown key types
        raise refuse("unsupported key: %s" % type(exc).__name__) from None
    if _algorithm_of(crypto_key, code) is None:
        raise refuse("key type %s" % _kind_of(crypto_key))
    return PublicKey(crypto_key, code)


def _first_line(exc):
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__


def _read_bounded(path, what, code):
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise StellaError(code, "%s: cannot read the %s: %s" % (path, what, exc.strerror or exc)) from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise StellaError(
            code, "%s: the %s is over %d KiB, which no key file is" % (path, what, MAX_KEY_FILE_BYTES // 1024)
        )
    return data


def load_public_key(path: str, code: str = "image_policy_invalid") -> PublicKey:
    """The :class:`PublicKey` of the PEM file ``path`` (read at most 64 KiB); ``StellaError(code)``."""
    return public_key_from_pem(_read_bounded(path, "public key", code), str(path), code)


def _cosign_plaintext(body, passphrase, source, code):
    """The PKCS#8 DER inside cosign's encrypted PEM body (base64 JSON: scrypt + nacl/secretbox)."""
    SecretBox, CryptoError = _secretbox(code)

    def refuse(why):
        return StellaError(code, "%s: not a cosign encrypted private key (%s)" % (source, why))

    try:
        document = json.loads(base64.b64decode(b"".join(body.split()), validate=True))
        kdf, cipher = document["kdf"], document["cipher"]
        params = kdf["params"]
        n, r, p = int(params["N"]), int(params["r"]), int(params["p"])
        salt = base64.b64decode(kdf["salt"], validate=True)
        nonce = base64.b64decode(cipher["nonce"], validate=True)
        ciphertext = base64.b64decode(document["ciphertext"], validate=True)
        kdf_name, cipher_name = kdf["name"], cipher["name"]
    except (ValueError, TypeError, KeyError, binascii.Error, AttributeError) as exc:
        raise refuse("its body is not the expected JSON: %s" % type(exc).__name__) from None
    if kdf_name != "scrypt" or cipher_name != "nacl/secretbox":
        raise refuse("kdf %r and cipher %r, not scrypt and nacl/secretbox" % (kdf_name, cipher_name))
    if n < 2 or n & (n - 1) or r < 1 or p < 1 or 128 * n * r * p > MAX_SCRYPT_MEMORY:
        raise refuse("scrypt parameters N=%d r=%d p=%d out of range" % (n, r, p))
    if len(nonce) != NONCE_BYTES:
        raise refuse("a nonce of %d bytes, not %d" % (len(nonce), NONCE_BYTES))
    if passphrase is None:
        raise StellaError(code, _no_passphrase(source))
    secret = hashlib.scrypt(bytes(passphrase), salt=salt, n=n, r=r, p=p, maxmem=2 * MAX_SCRYPT_MEMORY, dklen=32)
    try:
        return SecretBox(secret).decrypt(ciphertext, nonce)
    except (CryptoError, ValueError, TypeError):
        raise StellaError(code, "%s: the passphrase does not open the private key" % source) from None


def _no_passphrase(source):
    return "%s: the private key is encrypted and no passphrase was given (%s or a passphrase file)" % (
        source,
        PASSPHRASE_ENV,
    )


def private_key_from_pem(data, passphrase, source, code="signing_key_invalid"):
    """The :class:`PrivateKey` of cosign's encrypted PEM (``ENCRYPTED SIGSTORE PRIVATE KEY`` or the older
    ``ENCRYPTED COSIGN PRIVATE KEY``), or of a PKCS#8 (``PRIVATE KEY``, ``ENCRYPTED PRIVATE KEY``) or SEC1
    (``EC PRIVATE KEY``) PEM; ECDSA P-256 or Ed25519. ``StellaError(code)`` otherwise, never naming the
    passphrase."""
    _exceptions, _hashes, serialization, _ec, _ed25519 = _crypto(code)
    blocks = _pem_blocks(data)
    if not blocks:
        raise StellaError(code, "%s: not a PEM private key (no PEM block found)" % source)
    label, block, body = blocks[0]
    if label in (SIGSTORE_PEM_TYPE, COSIGN_PEM_TYPE):
        der = _cosign_plaintext(body, passphrase, source, code)
        try:
            crypto_key = serialization.load_der_private_key(der, password=None)
        except Exception as exc:  # ValueError, TypeError or UnsupportedAlgorithm
            raise StellaError(
                code, "%s: the decrypted private key is not PKCS#8 (%s)" % (source, type(exc).__name__)
            ) from None
    elif label in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY"):
        encrypted = label == "ENCRYPTED PRIVATE KEY" or bool(_PROC_TYPE_RE.search(body))
        if encrypted and passphrase is None:
            raise StellaError(code, _no_passphrase(source))
        try:
            crypto_key = serialization.load_pem_private_key(block, password=bytes(passphrase) if encrypted else None)
        except (ValueError, TypeError) as exc:
            if encrypted:
                raise StellaError(code, "%s: the passphrase does not open the private key" % source) from None
            raise StellaError(code, "%s: not a valid %s PEM (%s)" % (source, label, type(exc).__name__)) from None
        except Exception as exc:  # UnsupportedAlgorithm
            raise StellaError(code, "%s: unsupported private key (%s)" % (source, type(exc).__name__)) from None
    elif label == "PUBLIC KEY":
        raise StellaError(code, "%s: a public key, not a private key: give the private key, e.g. cosign.key" % source)
    else:
        raise StellaError(code, "%s: not a PEM private key (a PEM block of type %r)" % (source, label))
    if _algorithm_of(crypto_key, code) is None:
        raise StellaError(
            code, "%s: not a private key of ECDSA P-256 or Ed25519 (key type %s)" % (source, _kind_of(crypto_key))
        )
    return PrivateKey(crypto_key, code)


def load_private_key(path: str, passphrase: bytes | None, code: str = "signing_key_invalid") -> PrivateKey:
    """The :class:`PrivateKey` of the PEM file ``path`` (read at most 64 KiB); ``StellaError(code)``."""
    return private_key_from_pem(_read_bounded(path, "private key", code), passphrase, str(path), code)


def _pem(label, der):
    text = base64.b64encode(der).decode("ascii")
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return ("-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label, "\n".join(lines), label)).encode("ascii")


def encrypt_private_key(key, passphrase):
    """``key`` as cosign's encrypted PEM (``ENCRYPTED SIGSTORE PRIVATE KEY``): PKCS#8 DER sealed with NaCl
    secretbox under scrypt(passphrase, N=32768, r=8, p=1) of a random 32-byte salt, random 24-byte nonce."""
    _exceptions, _hashes, serialization, _ec, _ed25519 = _crypto("signing_key_invalid")
    SecretBox, _CryptoError = _secretbox("signing_key_invalid")
    if passphrase is None:
        raise StellaError("signing_key_invalid", "a passphrase is required to encrypt the private key")
    der = key.crypto_key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    salt, nonce = os.urandom(SALT_BYTES), os.urandom(NONCE_BYTES)
    secret = hashlib.scrypt(
        bytes(passphrase), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=2 * MAX_SCRYPT_MEMORY, dklen=32
    )
    sealed = SecretBox(secret).encrypt(der, nonce).ciphertext

    def b64(raw):
        return base64.b64encode(raw).decode("ascii")

    document = {
        "kdf": {"name": "scrypt", "params": {"N": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}, "salt": b64(salt)},
        "cipher": {"name": "nacl/secretbox", "nonce": b64(nonce)},
        "ciphertext": b64(sealed),
    }
    return _pem(SIGSTORE_PEM_TYPE, json.dumps(document, separators=(",", ":")).encode("ascii"))


def generate_private_key(algorithm=ECDSA_P256):
    """A new :class:`PrivateKey` of ``algorithm`` (:data:`ECDSA_P256` or :data:`ED25519`)."""
    _exceptions, _hashes, _serialization, ec, ed25519 = _crypto("signing_key_invalid")
    if algorithm == ECDSA_P256:
        return PrivateKey(ec.generate_private_key(ec.SECP256R1()))
    if algorithm == ED25519:
        return PrivateKey(ed25519.Ed25519PrivateKey.generate())
    raise StellaError("signing_key_invalid", "unknown key algorithm %r (%s)" % (algorithm, " or ".join(ALGORITHMS)))


def generate_key_pair(passphrase, algorithm=ECDSA_P256):
    """``(encrypted private PEM, public PEM)`` of a new key pair, the private key in cosign's format."""
    key = generate_private_key(algorithm)
    return encrypt_private_key(key, passphrase), key.public_key.pem()


def passphrase_from(
    path: str | None = None,
    env: str = PASSPHRASE_ENV,
    environ: dict[str, str] | None = None,
    code: str = "signing_key_invalid",
) -> bytes | None:
    """The passphrase: the file ``path``'s contents with one trailing newline stripped, else the
    environment variable ``env`` (unset or empty: none), else ``None``."""
    if path:
        data = _read_bounded(path, "passphrase file", code)
        if data.endswith(b"\r\n"):
            return data[:-2]
        return data[:-1] if data.endswith(b"\n") else data
    value = (os.environ if environ is None else environ).get(env) if env else None
    if not value:
        return None
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)
