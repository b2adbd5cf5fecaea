# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Post-deploy verification: a component's ``healthProbe.*`` configuration parsed into probe specs and
checked at planning (spec), the verification step over them (verify) and the runners that carry them out
(runner).
"""
