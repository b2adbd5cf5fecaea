#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_relay
short_description: Run the relay endpoint of a deployed service, reachable from the Compose relay only
version_added: 0.2.0
description:
  - Makes a service deployed on this host reachable from the relay container Docker Compose deploys for
    a provider service (C(publish-endpoint)), and from nothing else.
  - O(state=present) binds one listening socket per forward on O(listen_address) only (never a wildcard
    address), pins each socket to the network interface that owns that address (C(SO_BINDTODEVICE)), so
    connections arriving on any other interface are refused, and starts a user-space TCP forwarder
    detached from Ansible (a new session, its output in C(relay.log), its pid in C(relay.pid)) that joins
    each accepted connection to the upstream.
  - A relay already running with the same configuration is left alone (C(changed=false)) and keeps its
    listening ports, so the endpoints it returns are the same on every run.
  - O(state=absent) stops the forwarder and removes its directory; nothing to remove is C(changed=false).
  - Linux only (C(SO_BINDTODEVICE)).
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
attributes:
  check_mode:
    support: full
    details: Reports whether the relay would be started, restarted or removed, without binding anything.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  name:
    description:
      - Name of the relay (letters, digits, V(.), V(_), V(-)); its files are in O(state_directory)/O(name).
    type: str
    required: true
  state:
    description: V(present) or V(absent).
    type: str
    choices: [present, absent]
    default: present
  listen_address:
    description:
      - The IPv4 address to bind, typically the relay-link network gateway Compose announces in its
        answer to C(get-relay-info).
      - V(host-gateway) binds the default bridge's gateway (where C(host.docker.internal) points on a
        Linux engine) without an interface pin, the fallback when Compose announces no gateway. Any
        local container can reach such an endpoint.
      - V(0.0.0.0) is refused.
      - Required with O(state=present).
    type: str
  device:
    description:
      - V(auto) pins the sockets to the interface that owns O(listen_address); V(none) does not pin;
        any other value is the interface to pin to.
    type: str
    default: auto
  forwards:
    description: The ports to relay. Required with O(state=present).
    type: list
    elements: dict
    suboptions:
      port:
        description: The port consumers know (the service's container port); the key of the endpoint.
        type: int
        required: true
      upstream_host:
        description: Where the service is reached from this host.
        type: str
        default: 127.0.0.1
      upstream_port:
        description: Its port there (typically the port the deployment publishes on the host).
        type: int
        required: true
      listen_port:
        description:
          - The port to listen on. V(0) keeps the port of the running relay, or takes a free one.
        type: int
        default: 0
  state_directory:
    description: Where relays keep their configuration, pid file, log and forwarder.
    type: path
    default: ~/.local/state/stellaops/relays
seealso:
  - module: stellaops.runtime.stella_teardown
"""

EXAMPLES = r"""
- name: Relay port 8080 of the deployed service (published on the host as 18080) on the relay-link gateway
  stellaops.runtime.stella_relay:
    name: shop-web
    listen_address: 172.20.0.1
    forwards:
      - port: 8080
        upstream_port: 18080
  register: relay

- name: Remove it
  stellaops.runtime.stella_relay:
    name: shop-web
    state: absent
"""

RETURN = r"""
name:
  description: The relay.
  returned: always
  type: str
state:
  description: The state asked for.
  returned: always
  type: str
endpoints:
  description: One C(<port>=<address>:<listen port>) per forward, as a C(publish-endpoint) message says it.
  returned: always
  type: list
  elements: str
  sample: ["8080=172.20.0.1:41327"]
listenAddress:
  description: The address bound.
  returned: with O(state=present)
  type: str
device:
  description: The interface the sockets are pinned to (null when not pinned).
  returned: with O(state=present)
  type: str
listenPorts:
  description: The listening port of each forwarded port.
  returned: always
  type: dict
pid:
  description: The forwarder's process id.
  returned: always
  type: int
pidFile:
  description: Its pid file.
  returned: always
  type: str
logFile:
  description: Its log (the forwarder's standard output and error).
  returned: always
  type: str
relayDirectory:
  description: The relay's directory.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.relay import endpoint as _relay
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import (
    argument_spec,
    command_runner,
    engine_client,
    run_task,
)

ARGUMENT_SPEC = argument_spec(
    dict(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=list(_relay.STATES), default="present"),
        listen_address=dict(type="str"),
        device=dict(type="str", default="auto"),
        forwards=dict(
            type="list",
            elements="dict",
            options=dict(
                port=dict(type="int", required=True),
                upstream_host=dict(type="str", default="127.0.0.1"),
                upstream_port=dict(type="int", required=True),
                listen_port=dict(type="int", default=0),
            ),
        ),
        state_directory=dict(type="path", default="~/.local/state/stellaops/relays"),
    )
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
        required_if=[("state", "present", ("listen_address", "forwards"))],
    )
    run_command = command_runner(module)

    def task():
        request = _relay.parse_request(module.params)
        manager = _relay.Relay(engine_client(module, run_command), run_command, module.warn)
        return manager.run(request, check_mode=module.check_mode)

    run_task(module, task)


if __name__ == "__main__":
    main()
