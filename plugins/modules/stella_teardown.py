#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_teardown
short_description: Stop or remove a deployed project on the target host
version_added: 0.2.0
description:
  - O(state=stopped) stops the running containers of the project and keeps them, its files and its
    retained revisions, so a later deployment resumes it.
  - O(state=absent) removes every container of the project (Compose services labelled
    C(com.docker.compose.project), DockerHost containers labelled C(stella.project), retained
    C(-stella-previous) containers included), its Compose networks and its project directory.
  - A project with nothing left to stop or remove reports C(changed=false).
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
attributes:
  check_mode:
    support: full
    details: Lists what would be stopped or removed.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  project_name:
    description: The project (the Compose project name of the deployment).
    type: str
    required: true
  work_directory:
    description: Root of the project directories on the target.
    type: path
    default: /var/lib/stella/projects
  state:
    description: V(stopped) or V(absent).
    type: str
    choices: [absent, stopped]
    default: absent
seealso:
  - module: stellaops.runtime.stella_compose_deploy
"""

EXAMPLES = r"""
- name: Remove everything the deployment of a project created
  stellaops.runtime.stella_teardown:
    project_name: acme-prod-vm-01-shop
    state: absent
"""

RETURN = r"""
projectName:
  description: The project.
  returned: always
  type: str
projectDirectory:
  description: Its directory on the target.
  returned: always
  type: str
state:
  description: The state asked for.
  returned: always
  type: str
stoppedContainers:
  description: Ids of the containers stopped (V(stopped)).
  returned: always
  type: list
  elements: str
removedContainers:
  description: Ids of the containers removed (V(absent)).
  returned: always
  type: list
  elements: str
removedNetworks:
  description: Ids of the networks removed (V(absent)).
  returned: always
  type: list
  elements: str
directoryRemoved:
  description: Whether the project directory was removed.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import teardown as _teardown
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WORK_DIRECTORY
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import (
    argument_spec,
    command_runner,
    engine_client,
    run_task,
)

ARGUMENT_SPEC = argument_spec(
    dict(
        project_name=dict(type="str", required=True),
        work_directory=dict(type="path", default=DEFAULT_WORK_DIRECTORY),
        state=dict(type="str", choices=["absent", "stopped"], default="absent"),
    )
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_command = command_runner(module)

    def task():
        request = _teardown.parse_request(module.params)
        manager = _teardown.Teardown(engine_client(module, run_command), run_command, module.warn)
        return manager.run(request, check_mode=module.check_mode)

    run_task(module, task)


if __name__ == "__main__":
    main()
