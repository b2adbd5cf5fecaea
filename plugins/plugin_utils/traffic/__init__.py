# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Traffic on the controller: what a traffic strategy asks for, its weights, the planning check of a
release's traffic settings and the evidence key prefixes (strategy), the adapters that shift requests
between the control and the treatment slot and their evidence (adapters), and the deadline that bounds the
webhook adapter's HTTP exchange as a whole (deadline).
"""
