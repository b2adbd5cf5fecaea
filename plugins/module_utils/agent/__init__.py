# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every target-side task shares: the module skeleton (module) and the manager skeleton
(manager), the target identity check (identity), hooks (hooks), the runtime preflight as an apply
task's step (preflight_step), the verification of running containers (verification), the options
both apply tasks take from stella_compose_deploy (deploy), and teardown (teardown). Standard library
only.
"""
