#!/usr/bin/python
# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stella_inspect
short_description: Report what a target runs for its deployed projects, read-only (drift checks)
version_added: 0.1.0
description:
  - Runs on the target host and reports, for each project, its containers (every container labelled
    C(stella.project=<project>)) and the SHA-256 of the project directory's lock, version sticker and
    apply manifest. The controller's C(drift) step of M(stellaops.runtime.stella_job) compares this with
    what the project's last successful job recorded (playbook C(stellaops.runtime.verify)).
  - Read-only. It never writes, starts, stops, removes or locks anything, and always returns
    C(changed=false); it runs the same in check mode.
  - At most three Docker calls, each an argument list; the project files are hashed, never returned.
author:
  - Stella Ops runtime team (@stellaops)
extends_documentation_fragment:
  - stellaops.runtime.attributes
  - stellaops.runtime.docker
attributes:
  check_mode:
    support: full
    details: The module only reads, so it runs unchanged in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  projects:
    description:
      - The Compose project names to report. A project named here is reported even when nothing of it is
        left on the target (no container, no file).
      - When omitted, every project whose directory under O(work_directory) holds a version sticker, and
        every project a container's C(stella.project) label names.
    type: list
    elements: str
  work_directory:
    description:
      - The Stella work directory the project directories are in (C(<work_directory>/<project>)). A Compose
        project's directory recorded on its containers wins when it ends in the project's name.
    type: path
    default: /var/lib/stella/projects
notes:
  - The output is bounded to at most 200 projects and 1000 containers (RV(truncated) says when more were
    there), and only the C(stella.*) labels of each container.
seealso:
  - module: stellaops.runtime.stella_job
"""

EXAMPLES = r"""
- name: Report what runs for every project on the target
  stellaops.runtime.stella_inspect:
  register: stella_inspect

- name: Report two projects of another work directory
  stellaops.runtime.stella_inspect:
    projects: [shop-blue, shop-green]
    work_directory: /srv/stella
"""

RETURN = r"""
workDirectory:
  description: The work directory the project directories were looked for in.
  returned: always
  type: str
projects:
  description:
    - One entry per project, keyed by its name, with C(projectName), C(projectDirectory),
      C(directoryExists), C(files) (the C(sha256:<hex>) of C(compose.stella.lock.yml),
      C(stella.version.json) and C(apply-manifest.json) by file name, null for a file that is not there) and C(containers).
    - Each container has C(id) (12 characters), C(name), C(component) (its C(stella.component) label, else
      its Compose service), C(service), C(state), C(running), C(image), C(imageId), C(imageDigest) (its
      C(stella.image.digest) label), C(repoDigests) (of its image, null when the image could not be
      inspected), C(retained) (a DockerHost container kept for rollback), C(composeDirectory) and C(labels)
      (the C(stella.*) labels).
  returned: always
  type: dict
truncated:
  description: Whether projects or containers were left out of the answer to keep it bounded.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import inspect as _inspect
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WORK_DIRECTORY
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.module import (
    argument_spec,
    engine_client,
    run_task,
)

ARGUMENT_SPEC = argument_spec(
    dict(
        projects=dict(type="list", elements="str"),
        work_directory=dict(type="path", default=DEFAULT_WORK_DIRECTORY),
    )
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)

    def task():
        request = _inspect.parse_request(module.params)
        return _inspect.Inspect(engine_client(module), module.warn).run(request, check_mode=module.check_mode)

    run_task(module, task)


if __name__ == "__main__":
    main()
