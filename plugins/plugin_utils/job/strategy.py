# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Strategies: the batch plan of a deployment job and the strategy gate. Pure, no I/O.

A batch plan is the ordered list of batches (lists of target names) in which a job deploys. Batch
sizes follow Ansible's ``serial`` exactly, so the plan is also the ``serial`` list the job playbook
runs with: an integer is a count, ``"N%"`` is a share of all targets (rounded down, at least 1), a
list gives the sizes of successive batches and its last size repeats until every target has one.

``strategyConfig.batchSize`` sets the sizes. Defaults by strategy: ``rolling`` 1, ``canary``
``[1, "100%"]`` (one target first, then the rest), ``all-at-once``, ``blue-green`` and ``a-b`` every
target at once. ``all-at-once`` refuses any other size.

The gate decides after each batch whether the next one starts: it opens only when every target of
the batch succeeded (deploy, verify, probes, traffic). A closed gate stops the job; the targets of
later batches are recorded ``Skipped``.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.model import Failure, GateDecision
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import STRATEGIES

# A batch size: a count, or a share of all targets ("25%").
Size = int | str

DEFAULT_BATCH_SIZE: dict[str, Size | list[Size]] = {
    "rolling": 1,
    "canary": [1, "100%"],
    "all-at-once": "100%",
    "blue-green": "100%",
    "a-b": "100%",
}
_PERCENT = re.compile(r"^([1-9][0-9]{0,2})%\Z")
MAX_BATCH_ITEMS = 100


def _invalid(message: str) -> StellaError:
    return StellaError(
        "release_invalid",
        "release input field strategyConfig.batchSize %s" % message,
        phase="plan",
        evidence={"field": "strategyConfig.batchSize"},
    )


def _check_size(value: object) -> Size:
    if isinstance(value, bool):
        raise _invalid('must be a positive integer or a percentage such as "25%"')
    if isinstance(value, int):
        if value < 1:
            raise _invalid('must be a positive integer or a percentage such as "25%"')
        return value
    if isinstance(value, str):
        match = _PERCENT.match(value.strip())
        if match and int(match.group(1)) <= 100:
            return "%d%%" % int(match.group(1))
    raise _invalid('must be a positive integer or a percentage such as "25%%" (got %r)' % (value,))


def check_strategy(strategy: object) -> str:
    """``strategy`` when it is one of :data:`STRATEGIES`, else ``release_invalid`` naming the field."""
    if not isinstance(strategy, str) or strategy not in DEFAULT_BATCH_SIZE:
        raise StellaError(
            "release_invalid",
            "release input field strategy must be one of %s (got %s)"
            % (", ".join(STRATEGIES), "nothing" if strategy in (None, "") else repr(strategy)),
            phase="plan",
            evidence={"field": "strategy"},
        )
    return strategy


def batch_size_spec(strategy: object, strategy_config: dict[str, Any] | None) -> list[Size]:
    """The validated size spec (a list of counts or percentages) for ``strategy``; raises release_invalid."""
    strategy = check_strategy(strategy)
    config = strategy_config or {}
    value = config.get("batchSize", DEFAULT_BATCH_SIZE[strategy])
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_BATCH_ITEMS:
        raise _invalid("must have 1 to %d sizes" % MAX_BATCH_ITEMS)
    spec = [_check_size(item) for item in items]
    if strategy == "all-at-once" and "batchSize" in config and spec != ["100%"]:
        raise _invalid('must be "100%" (or absent) for strategy all-at-once')
    return spec


def _count(item: Size, total: int) -> int:
    if isinstance(item, int):
        return item
    return max(1, total * int(item[:-1]) // 100)


def serial_sizes(spec: list[Size], total: int) -> list[int]:
    """The batch sizes for ``total`` targets, as Ansible's ``serial`` computes them from ``spec``."""
    sizes: list[int] = []
    done, index = 0, 0
    while done < total:
        size = min(_count(spec[min(index, len(spec) - 1)], total), total - done)
        sizes.append(size)
        done += size
        index += 1
    return sizes


def plan_batches(strategy: object, strategy_config: dict[str, Any] | None, targets: list[str]) -> list[list[str]]:
    """``[[target, ...], ...]``: ``targets`` (already in their stable order) cut into batches."""
    if len(set(targets)) != len(targets):
        raise StellaError("release_invalid", "the job's targets are not unique: %s" % ", ".join(targets), phase="plan")
    sizes = serial_sizes(batch_size_spec(strategy, strategy_config), len(targets))
    batches: list[list[str]] = []
    start = 0
    for size in sizes:
        batches.append(list(targets[start : start + size]))
        start += size
    return batches


def gate(
    batch_index: int,
    outcomes: list[tuple[str, str, str | None]],
    traffic_failure: Failure | None = None,
    step_failure: Failure | None = None,
) -> GateDecision:
    """The strategy gate after batch ``batch_index`` (0-based).

    ``outcomes`` is ``[(target, status, reason), ...]`` for the batch's targets; ``traffic_failure``
    (``{"code", "reason"}``) a failed or required-but-missing traffic adapter after the batch. Returns
    ``{"batch": i, "proceed": bool, "reason": str, "failedTargets": [...]}`` (plus ``code`` when the
    traffic adapter closed it); ``step_failure`` (``{"code", "reason"}``) an error inside one of the
    controller's steps of the job (job/step_failure.py).
    """
    failed = [(name, reason) for name, status, reason in outcomes if status != "Succeeded"]
    if not outcomes:
        return {
            "batch": batch_index,
            "proceed": False,
            "reason": "batch %d has no target results" % (batch_index + 1),
            "failedTargets": [],
        }
    if failed:
        name, reason = failed[0]
        more = " (and %d more)" % (len(failed) - 1) if len(failed) > 1 else ""
        return {
            "batch": batch_index,
            "proceed": False,
            "reason": "strategy gate closed after batch %d: target %s failed: %s%s"
            % (batch_index + 1, name, reason or "no result", more),
            "failedTargets": [n for n, _r in failed],
        }
    if step_failure:
        return {
            "batch": batch_index,
            "proceed": False,
            "code": step_failure["code"],
            "failedTargets": [],
            "reason": "strategy gate closed after batch %d: %s" % (batch_index + 1, step_failure["reason"]),
        }
    if traffic_failure:
        return {
            "batch": batch_index,
            "proceed": False,
            "code": traffic_failure["code"],
            "failedTargets": [],
            "reason": "strategy gate closed after batch %d: traffic: %s" % (batch_index + 1, traffic_failure["reason"]),
        }
    return {
        "batch": batch_index,
        "proceed": True,
        "reason": "batch %d: %d of %d target(s) succeeded" % (batch_index + 1, len(outcomes), len(outcomes)),
        "failedTargets": [],
    }
