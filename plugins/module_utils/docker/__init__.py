# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""DockerHost targets: digest-pinned containers of one release (run), its request and ``docker run``
arguments (request), a container's verification (container), its retained revision (revision), and
rollback (rollback). Standard library only.
"""
