"""Make the checkout importable as ``ansible_collections.stellaops.runtime`` for every test."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLL_ROOT = os.path.join(ROOT, ".build", "collections")
_link = os.path.join(COLL_ROOT, "ansible_collections", "stellaops", "runtime")
if not os.path.exists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink(ROOT, _link)
if COLL_ROOT not in sys.path:
    sys.path.insert(0, COLL_ROOT)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", COLL_ROOT)

# A test that hangs fails on its own (pytest-timeout, SIGALRM in the test's thread) instead of holding up
# the whole run: unit tests get 5 minutes, integration tests 15 (the slowest fleet scenario takes a few).
# A test may set its own limit with @pytest.mark.timeout(seconds).
TIMEOUTS = {"unit": 300, "integration": 900}


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    import pytest  # pylint: disable=import-outside-toplevel

    for item in items:
        kind = "integration" if "integration" in item.path.parts else "unit"
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIMEOUTS[kind], method="signal"))
