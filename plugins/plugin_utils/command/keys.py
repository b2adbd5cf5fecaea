# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella keys generate``: a signing key pair in cosign's format, for signing images (``stella sign``)
and evidence. The private key (``PREFIX.key``, mode 0600) is encrypted with a passphrase exactly as cosign
encrypts it, so cosign opens it too; the public key (``PREFIX.pub``) is what image policies and ``stella
verify`` trust. Neither the passphrase nor the private key is ever printed.
"""

from __future__ import annotations

import argparse
import os
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import error_line
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import (
    ALGORITHMS,
    ECDSA_P256,
    PASSPHRASE_ENV,
    generate_private_key,
    encrypt_private_key,
    passphrase_from,
)

DEFAULT_PREFIX = "cosign"
PRIVATE_MODE, PUBLIC_MODE = 0o600, 0o644


def keys_parser():
    """``stella keys generate [--output-prefix PREFIX] [--passphrase-file FILE] [--algorithm ALG] [--force]``."""
    parser = argparse.ArgumentParser(
        prog="stella keys",
        description="Manage signing keys. `stella keys generate` writes a new key pair in cosign's format: "
        "PREFIX.key, the private key encrypted with a passphrase (scrypt + NaCl secretbox, as cosign "
        "writes it; mode 0600), and PREFIX.pub, the public key that image policies and `stella verify` "
        "trust. cosign can use either file.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    generate = actions.add_parser(
        "generate",
        help="write a new key pair: PREFIX.key (encrypted) and PREFIX.pub",
        description="Write a new signing key pair in cosign's format: PREFIX.key (encrypted private key, "
        "mode 0600) and PREFIX.pub (public key). The passphrase comes from --passphrase-file or $%s." % PASSPHRASE_ENV,
    )
    generate.add_argument(
        "--output-prefix",
        metavar="PREFIX",
        default=DEFAULT_PREFIX,
        help="the files' path without .key/.pub (default %r: cosign.key and cosign.pub here, cosign's names)"
        % DEFAULT_PREFIX,
    )
    generate.add_argument(
        "--passphrase-file",
        metavar="FILE",
        help="read the passphrase from FILE (one trailing newline dropped); default: $%s" % PASSPHRASE_ENV,
    )
    generate.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=ECDSA_P256,
        help="the key's algorithm (default %s, cosign's)" % ECDSA_P256,
    )
    generate.add_argument("--force", action="store_true", help="overwrite PREFIX.key and PREFIX.pub when they exist")
    return parser


def _write(path, data, mode, force):
    """Write ``data`` to ``path`` with ``mode`` (created with it, never readable by others on the way)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
    except FileExistsError:
        raise StellaError(
            "signing_key_invalid", "%s exists: choose another --output-prefix, or --force to overwrite it" % path
        ) from None
    except OSError as exc:
        raise StellaError("signing_key_invalid", "%s: cannot write the key: %s" % (path, exc.strerror)) from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise StellaError("signing_key_invalid", "%s: cannot write the key: %s" % (path, exc.strerror)) from None


def generate(options, environ=None):
    """Generate and write the key pair; ``(private path, public path, fingerprint)``."""
    private_path, public_path = options.output_prefix + ".key", options.output_prefix + ".pub"
    passphrase = passphrase_from(options.passphrase_file, environ=environ)
    if passphrase is None:
        raise StellaError(
            "signing_key_invalid",
            "no passphrase to encrypt the private key: give --passphrase-file FILE or set %s" % PASSPHRASE_ENV,
        )
    if not passphrase:
        raise StellaError(
            "signing_key_invalid", "the passphrase is empty: an empty passphrase leaves the private key unprotected"
        )
    if not options.force:
        for path in (private_path, public_path):
            if os.path.lexists(path):
                raise StellaError(
                    "signing_key_invalid",
                    "%s exists: choose another --output-prefix, or --force to overwrite it" % path,
                )
    key = generate_private_key(options.algorithm)
    encrypted = encrypt_private_key(key, passphrase)
    _write(private_path, encrypted, PRIVATE_MODE, options.force)
    _write(public_path, key.public_key.pem(), PUBLIC_MODE, options.force)
    return private_path, public_path, key.public_key.fingerprint


def keys(argv, stdout=None, stderr=None, environ=None):
    """``stella keys``: 0 when the key pair was written, 1 with one error line, 2 on a usage error."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    try:
        options = keys_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code
    try:
        private_path, public_path, fingerprint = generate(options, environ)
    except StellaError as exc:
        stderr.write("stella keys: %s\n" % error_line(exc.code, exc.reason))
        return 1
    stdout.write(
        "private key: %s (encrypted, mode 0600)\npublic key:  %s\nfingerprint: %s\n"
        % (private_path, public_path, fingerprint)
    )
    return 0
