# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Regenerate docs/schemas/release-input.schema.json from the one schema in plugins/plugin_utils/release/schema.py.

Run from the checkout root after ``make collection``:  .venv/bin/python docs/schemas/generate.py
(``tests/unit/plugins/plugin_utils/release/test_release.py`` fails when the file is stale.)
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))

from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import schema_document  # noqa: E402

if __name__ == "__main__":
    with open(os.path.join(ROOT, "docs", "schemas", "release-input.schema.json"), "wb") as handle:
        handle.write(schema_document())
