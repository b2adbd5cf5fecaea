# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ComposeHost targets: apply a planned release to a Compose project (apply), its request and artifact
checks (request), the project on this host (project), its retained revisions (revisions), and
rollback to one (rollback). Standard library only.
"""
