# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The target's container engine: Docker and Compose through their CLI, the runtime preflight, the
OCI registry API it uses, and the managed runtime install. Standard library only.
"""
