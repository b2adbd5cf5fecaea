# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runtime contract's vocabulary, defined once for the controller and the target agent: its
terms and codes (vocabulary), the agent task payload schemas (tasks), the canonical JSON form,
image references, version gates, the error type, and the desired state, sticker and apply manifest.
Python 3 standard library only.
"""
