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
