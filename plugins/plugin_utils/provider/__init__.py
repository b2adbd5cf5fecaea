# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Compose provider: the protocol Compose speaks (protocol), ``stella compose ...`` (cli) and the
Python packages each call needs (dependencies). The ``stella`` command line itself is ``command``.
"""
