# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every controller package may use: ``requests`` imported at the first HTTP call (http), and
where the collection is (paths). The action of the target-side modules and their payload cache are
the runner's (run/target_action.py, run/payload_cache.py).
"""
