#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_probe
short_description: Verify that deployed services answer (post-deploy health probes)
version_added: 0.1.0
description:
  - Runs the post-deploy service health verification of the Stella Ops runtime contract. A successful
    deploy task proves the containers started; this proves the services answer.
  - Components opt in with C(healthProbe.*) keys in their config. C(healthProbe.type=http) sends an
    HTTP GET and compares the status with C(healthProbe.expectedStatus) (default 200);
    C(healthProbe.type=tcp) opens a TCP connection to C(healthProbe.tcp.port). See C(docs/probes.md)
    for every key.
  - This is an action plugin. Probes always run on the controller, where the control plane runs, whatever
    the play's hosts are. Nothing is copied to or executed on the target. HTTP probes go through one
    C(requests) session per task (connections are reused across attempts), ignore proxy environment
    variables and never follow redirects. TCP probes use plain sockets.
  - The same parser validates every C(healthProbe.*) key when the release is planned
    (M(stellaops.runtime.stella_plan)), so a bad probe configuration fails planning with
    C(health_probe_config_invalid) before anything touches the target. Only the probe host is left to
    this task, because O(host_override) may supply it.
  - >-
    Fail-closed. A probe configuration that is not valid (unsupported type, C(tcp) without
    C(healthProbe.tcp.port), no resolvable host, unknown C(healthProbe.*) key) fails the task with
    C(Post-deploy health probe configuration invalid: <detail>) before any probe runs. A probe that stays
    unhealthy after all its attempts fails the task with
    C(Post-deploy health probe failed for component '<name>': <detail>).
  - Components without C(healthProbe.*) keys are not probed and produce no evidence keys.
requirements:
  - requests (on the controller, for HTTP probes; TCP probes and check mode do not need it)
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.attributes.action
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is probed and no connection is opened. The task parses the configuration
        (an invalid one still fails) and reports what it would probe, per component, without a verdict
        on a release that was not applied.
      - The result has C(failed=false), C(changed=false), C(healthProbe.status=not_run),
        C(healthProbe.reason=check_mode), C(healthProbe.count) and C(healthProbe.<name>.endpoint) in
        RV(evidence), and one entry per component in RV(probes) with the endpoint, type, expected
        answer and attempt settings.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  components:
    description:
      - The release components deployed to the target, in release order.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Component name, used in evidence keys (C(healthProbe.<name>.*)) and failure reasons. Unique.
        type: str
        required: true
      config:
        description:
          - Component config as flat keys. Only the C(healthProbe.*) keys are read; all others are ignored.
        type: dict
        default: {}
  target:
    description:
      - Target identity (C(targetId), C(targetName), C(targetType), C(endpoint)).
      - The host of C(endpoint) (or C(targetEndpoint)) is the default probe host. C(ssh://root@10.0.0.5:22)
        gives C(10.0.0.5), C(tcp://host:2376) and C(host) give C(host), V(local) and V(localhost)
        give C(127.0.0.1).
    type: dict
    default: {}
  wait_for_health_check:
    description:
      - The job-level kill switch (C(strategyConfig.waitForHealthCheck)).
      - V(false) skips probing but records C(healthProbe.status=skipped) and
        C(healthProbe.reason=waitForHealthCheck=false), so evidence never implies that the service was
        verified.
    type: bool
    default: true
  host_override:
    description:
      - Host to probe instead of the target endpoint's host, for example when the controller reaches the
        target through another address. C(healthProbe.url) and C(healthProbe.host) still take precedence.
    type: str
notes:
  - The runner behind this action is transport-agnostic (C(ProbeRunner.run(spec))), so a target-side
    agent runner can replace the direct HTTP/TCP prober later without changing the evidence.
seealso:
  - module: stellaops.runtime.stella_preflight
"""

EXAMPLES = r"""
- name: Verify the services of a ComposeHost deployment
  stellaops.runtime.stella_probe:
    target:
      targetId: t-1
      targetName: web-1
      targetType: ComposeHost
      endpoint: ssh://root@10.0.0.5:22
    components:
      - name: api
        config:
          healthProbe.type: http
          healthProbe.port: 8080
          healthProbe.path: /healthz
          healthProbe.attempts: 5
          healthProbe.intervalSeconds: 3
      - name: db
        config:
          healthProbe.type: tcp
          healthProbe.tcp.port: 5432
      - name: worker
        config: {}
  register: probe

- name: Record the probe evidence (a flat dict)
  ansible.builtin.debug:
    var: probe.evidence

- name: Skip probing for this job but keep the skip in evidence
  stellaops.runtime.stella_probe:
    target: {endpoint: "tcp://10.0.0.5:2376"}
    wait_for_health_check: false
    components:
      - name: api
        config:
          healthProbe.url: http://10.0.0.5:8080/healthz
"""

RETURN = r"""
evidence:
  description:
    - Flat probe evidence for the task result. Empty when no component has C(healthProbe.*) keys.
    - C(healthProbe.status) is V(passed), V(failed), V(skipped), or V(not_run) in check mode;
      C(healthProbe.count) is the number of components that opt in; C(healthProbe.reason) is set for
      V(skipped) (V(waitForHealthCheck=false)), V(not_run) (V(check_mode)) and for an invalid configuration.
    - In check mode only C(healthProbe.<name>.endpoint) is set per component (nothing was observed).
    - >-
      Per probed component C(healthProbe.<name>.endpoint), C(healthProbe.<name>.healthy),
      C(healthProbe.<name>.attempts) and C(healthProbe.<name>.observed) (the HTTP status as text,
      V(connected), or C(refused: ...), C(timeout: ...), C(error: ...)).
  returned: always
  type: dict
  sample:
    healthProbe.status: passed
    healthProbe.count: 1
    healthProbe.api.endpoint: http://10.0.0.5:8080/healthz
    healthProbe.api.healthy: true
    healthProbe.api.attempts: 1
    healthProbe.api.observed: "200"
probes:
  description:
    - One entry per probed component, in component order, with C(component), C(type), C(endpoint),
      C(expected), C(healthy), C(attempts), C(observed), C(history) (observed value per attempt),
      C(durationMs), and C(reason) when unhealthy.
    - In check mode, one entry per component that would be probed, with C(component), C(type),
      C(endpoint), C(expected), C(host), C(port), C(timeoutSeconds), C(attempts), C(intervalSeconds) and
      C(expectedStatus) (http).
  returned: always
  type: list
  elements: dict
msg:
  description:
    - The failure reason when the task fails (reasons of several failing components joined with C(; )),
      otherwise a one-line summary.
  returned: always
  type: str
code:
  description:
    - Stable failure code, V(health_probe_config_invalid), V(health_probe_failed), or V(requests_missing)
      when an HTTP probe is configured and the controller's Python has no C(requests).
  returned: failure
  type: str
durationMs:
  description: How long the step took, in milliseconds (the job records it as part of the verify phase).
  returned: always
  type: int
changed:
  description: Always V(false). Probes never change anything.
  returned: always
  type: bool
"""
