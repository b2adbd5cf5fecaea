# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The target's container engine: Docker and Compose through their CLI (cli) and what it prints
(cli_output), the runtime preflight (preflight, preflight_observer, preflight_registry), the OCI
registry API it uses (registry, registry_auth, registry_client), and the managed runtime install
(install, install_request). Standard library only.
"""
