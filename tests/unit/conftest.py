"""The unit tests' shared helpers, importable from every test directory: ``docs_support`` (tests/unit),
``planning_support`` (tests/unit/fixtures), ``scripted`` (a scripted Docker CLI, tests/unit/plugins/module_utils)
and ``modrun`` (a module run in-process, tests/unit/plugins/modules). The tests themselves mirror the
collection's packages: tests/unit/plugins/<side>/<package>/test_*.py."""

from __future__ import annotations

import os
import sys

UNIT = os.path.dirname(os.path.abspath(__file__))
for _helpers in (
    UNIT,
    os.path.join(UNIT, "fixtures"),
    os.path.join(UNIT, "plugins", "module_utils"),
    os.path.join(UNIT, "plugins", "modules"),
):
    if _helpers not in sys.path:
        sys.path.append(_helpers)
