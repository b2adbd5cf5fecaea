# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Target side of stellaops.runtime, shipped to every target with its modules (private: may change
without notice; Python 3 standard library only). Subpackages: contract and host (shared
with the controller), agent, engine, compose, docker, relay.
"""
