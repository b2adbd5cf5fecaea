# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Compose provider: the protocol Compose speaks, its messages, requests and image stream (protocol),
the command line Compose runs it with and what each command declares (arguments), the service as a
release and the facts dependents receive (service), ``stella compose ...`` (cli), the Python packages each
call needs (dependencies), and which job store a ``stella`` store command reads, the provider's among them
(location). The ``stella`` command line itself is ``command``.
"""
