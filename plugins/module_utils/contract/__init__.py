# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The runtime contract's vocabulary, defined once for the controller and the target agent: its
terms and codes (vocabulary), the agent task payload schemas (tasks), the canonical JSON form
(canonical), image references (imageref), version gates (versions), the error type (errors), every
failure code's next step (hints), and the desired state, sticker and apply manifest (artifacts).
Python 3 standard library only.
"""
