# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""From a release input to a plan: the input's schema and semantic checks, controller inputs and
digest resolution over the registry API, naming, the lock, agent payloads and the whole plan.
"""
