# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Post-deploy service health verification (``healthProbe.*`` component config).

Three layers, each replaceable:

* pure parsing (probe/spec.py): :func:`.spec.parse_probe_specs` turns component config and the target
  identity into :class:`.spec.ProbeSpec` objects, failing closed with ``Post-deploy health probe
  configuration invalid: <detail>``; the same parser validates the release at planning time;
* the :class:`ProbeRunner` interface (``run(spec) -> ProbeResult``) with the default
  :class:`HttpTcpProbeRunner` (probe/runner.py: HTTP GET through ``requests`` / TCP connect from
  where it runs; clock and sleep are injectable). An agent-side runner can replace it without
  changing :func:`verify`;
* :func:`verify`: the whole step (skip switch, parsing, probing) producing the flat evidence
  dict ``healthProbe.status``, ``healthProbe.count`` and ``healthProbe.<name>.{endpoint,
  healthy, attempts, observed}``. In check mode it only describes what it would probe
  (``healthProbe.status=not_run``, ``healthProbe.reason=check_mode``) and opens no connection.

Probes are read-only.
"""

from __future__ import annotations

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.runner import FAILED_TEMPLATE, HttpTcpProbeRunner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.spec import (
    PREFIX,
    parse_probe_specs,
    probe_components,
    probe_keys,
)

PROBE_FAILED = "health_probe_failed"
STATUS_PASSED = "passed"
STATUS_FAILED = "failed"
STATUS_SKIPPED = "skipped"
STATUS_NOT_RUN = "not_run"
SKIP_REASON = "waitForHealthCheck=false"
CHECK_MODE_REASON = "check_mode"


def _result(failed, msg, evidence, probes=(), code=None):
    data = {"failed": failed, "msg": msg, "evidence": evidence, "probes": list(probes)}
    if code:
        data["code"] = code
    return data


def _check_mode_result(specs):
    """What the step would probe, with no verdict: ``healthProbe.status=not_run``."""
    evidence = {
        "healthProbe.status": STATUS_NOT_RUN,
        "healthProbe.reason": CHECK_MODE_REASON,
        "healthProbe.count": len(specs),
    }
    probes = []
    for spec in specs:
        evidence[PREFIX + spec.component + ".endpoint"] = spec.endpoint
        probes.append(dict(spec.as_dict(), expected=spec.expectation))
    planned = ", ".join("%s (%s at %s)" % (s.component, s.expectation, s.endpoint) for s in specs)
    return _result(
        False,
        "Check mode: nothing probed, no verdict; would probe %d component(s): %s" % (len(specs), planned),
        evidence,
        probes,
    )


def verify(components, target=None, wait_for_health_check=True, host_override=None, runner=None, check_mode=False):
    """Run the post-deploy verification step; returns ``{failed, msg, evidence, probes[, code]}``.

    * no component has ``healthProbe.*`` keys: nothing runs, ``evidence == {}``;
    * ``wait_for_health_check`` false: nothing runs, the skip is recorded;
    * invalid configuration: nothing runs, ``failed`` with the configuration-invalid reason;
    * ``check_mode``: nothing runs and no connection is opened; the result lists what would be
      probed (``healthProbe.status=not_run``, ``healthProbe.reason=check_mode``, per component
      ``healthProbe.<name>.endpoint``) and passes no verdict (``failed`` false);
    * the runner cannot probe (``requests`` missing for HTTP probes): nothing runs, ``failed``;
    * otherwise every probe runs (all of them, even after one fails) and any unhealthy
      component fails the step with ``Post-deploy health probe failed for component ...``.
    """
    try:
        opted_in = probe_components(components)
        if not opted_in:
            return _result(False, "No post-deploy health probes configured", {})
        if not wait_for_health_check:
            evidence = {
                "healthProbe.status": STATUS_SKIPPED,
                "healthProbe.reason": SKIP_REASON,
                "healthProbe.count": len(opted_in),
            }
            return _result(False, "Post-deploy health probes skipped (%s)" % SKIP_REASON, evidence)
        specs = parse_probe_specs(components, target=target, host_override=host_override)
        if check_mode:
            return _check_mode_result(specs)
        own_runner = runner is None
        runner = runner or HttpTcpProbeRunner()
        runner.check(specs)
    except StellaError as err:
        count = 0
        if isinstance(components, (list, tuple)):
            count = sum(1 for c in components if isinstance(c, dict) and probe_keys(c.get("config")))
        evidence = {"healthProbe.status": STATUS_FAILED, "healthProbe.reason": err.reason, "healthProbe.count": count}
        return _result(True, err.reason, evidence, code=err.code)

    try:
        results = [runner.run(spec) for spec in specs]
    finally:
        if own_runner:
            runner.close()
    evidence = {"healthProbe.count": len(results)}
    for result in results:
        prefix = PREFIX + result.spec.component
        evidence[prefix + ".endpoint"] = result.spec.endpoint
        evidence[prefix + ".healthy"] = bool(result.healthy)
        evidence[prefix + ".attempts"] = result.attempts
        evidence[prefix + ".observed"] = result.observed
    failures = [FAILED_TEMPLATE % (r.spec.component, r.detail) for r in results if not r.healthy]
    evidence["healthProbe.status"] = STATUS_FAILED if failures else STATUS_PASSED
    probes = [r.as_dict() for r in results]
    if failures:
        return _result(True, "; ".join(failures), evidence, probes, code=PROBE_FAILED)
    return _result(False, "Post-deploy health probes passed for %d component(s)" % len(results), evidence, probes)
