# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where this collection is, as it was found (a symbolic link in the collections path is kept)."""

from __future__ import annotations

import os

# <collections path>/ansible_collections/stellaops/runtime/plugins/plugin_utils/execution/paths.py
COLLECTION_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3))
# the directory that holds the ``ansible_collections`` package
COLLECTIONS_PATH = os.path.normpath(os.path.join(COLLECTION_ROOT, *[os.pardir] * 3))
