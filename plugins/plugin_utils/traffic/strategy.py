# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a traffic strategy asks of the adapters (pure; contract: the traffic paragraphs of "Automatic
rollback on failed deployment" and "Strategy Evidence Boundary"): which strategies move traffic
(:data:`TRAFFIC_STRATEGIES`), the weights after each batch (:func:`step_weights`), the traffic part of a
release checked at planning (:func:`check_traffic_config`), and the prefixes of the contract's evidence
keys (``strategy.traffic.*``, ``strategy.traffic.rollback.*``).
"""

from __future__ import annotations

import re

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

TRAFFIC_STRATEGIES = ("blue-green", "canary", "a-b")
PREFIX = "strategy.traffic."
ROLLBACK_PREFIX = "strategy.traffic.rollback."
DEFAULT_CANARY_STEPS = (10, 50, 100)


def _weight(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise StellaError(
            "traffic_config_invalid", "%s must be a number from 0 to 100, got %r" % (what, value), phase="plan"
        )
    return int(value)


def step_weights(strategy, config, batch, batches):
    """``(controlWeight, treatmentWeight)`` after batch ``batch`` (0-based) of ``batches`` (pure).

    - canary: ``strategyConfig.trafficSteps`` (default ``[10, 50, 100]``), one step per batch, the last
      step repeats, and the last batch always ends at 100;
    - blue-green: 0 until the treatment slot is verified, then 100 (one switch, after the last batch);
    - a-b: ``strategyConfig.trafficWeights`` ``{control, treatment}`` (default 50/50).
    """
    config = config or {}
    if strategy == "canary":
        steps = [
            _weight(v, "trafficSteps[%d]" % i) for i, v in enumerate(config.get("trafficSteps") or DEFAULT_CANARY_STEPS)
        ]
        if steps != sorted(steps):
            raise StellaError("traffic_config_invalid", "trafficSteps must not decrease: %s" % steps, phase="plan")
        treatment = 100 if batch >= batches - 1 else steps[min(batch, len(steps) - 1)]
    elif strategy == "blue-green":
        treatment = 100 if batch >= batches - 1 else 0
    elif strategy == "a-b":
        weights = config.get("trafficWeights") or {"control": 50, "treatment": 50}
        control = _weight(weights.get("control"), "trafficWeights.control")
        treatment = _weight(weights.get("treatment"), "trafficWeights.treatment")
        if control + treatment != 100:
            raise StellaError(
                "traffic_config_invalid",
                "trafficWeights must add up to 100, got %d + %d" % (control, treatment),
                phase="plan",
            )
        return control, treatment
    else:
        raise StellaError("traffic_config_invalid", "strategy %s moves no traffic" % strategy, phase="plan")
    return 100 - treatment, treatment


# Option names that carry credentials: they belong in the adapter options from variables (no_log), never
# in the release, which the job record, its evidence and the store keep verbatim.
_SECRET_OPTION = re.compile(r"(password|passwd|secret|token|credential|auth|headers|cookie|api[_-]?key)", re.I)


def check_traffic_config(strategy, config, batches):
    """The traffic part of a release checked once at planning (pure), so it fails the plan
    (``traffic_config_invalid``, nothing touched), never the traffic step of a running job:

    - every batch's weights of a traffic strategy (``trafficSteps``, ``trafficWeights``);
    - no credential in ``trafficAdapterOptions`` (an option named like one, or a URL with userinfo):
      credentials go in ``stella_traffic_adapter_options``, which is never logged or stored.
    """
    config = config or {}
    if strategy in TRAFFIC_STRATEGIES:
        for batch in range(max(batches, 1)):
            step_weights(strategy, config, batch, batches)
    for name, value in sorted((config.get("trafficAdapterOptions") or {}).items()):
        userinfo = isinstance(value, str) and "@" in value.split("://", 1)[-1].split("/", 1)[0]
        if _SECRET_OPTION.search(str(name)) or userinfo:
            raise StellaError(
                "traffic_config_invalid",
                "strategyConfig.trafficAdapterOptions.%s carries credentials, "
                "which the job record and its evidence would keep: give them in "
                "stella_traffic_adapter_options (never logged or stored) instead" % name,
                phase="plan",
            )
