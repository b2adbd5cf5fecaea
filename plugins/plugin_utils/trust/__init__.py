# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Trust: the cryptography of image signatures and signed evidence. Signing keys in cosign's format and
public keys (keys), cosign's image signatures in its tag layout (cosign), and in-toto Statements in DSSE
envelopes (dsse). cryptography, PyNaCl and securesystemslib are imported at first use.
"""
