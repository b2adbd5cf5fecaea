# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """How target-side modules reach the Docker CLI (argument spec: ``DOCKER_ARGUMENT_SPEC`` in
    module_utils/agent/module.py)."""

    DOCUMENTATION = r"""
options:
  docker_cli:
    description:
      - Name or path of the Docker CLI on the target.
    type: str
    default: docker
  docker_host:
    description:
      - Docker daemon address (C(DOCKER_HOST)). Defaults to the environment's, then the local socket.
    type: str
  command_timeout:
    description:
      - Seconds any single Docker or Compose command may take (pulls and C(up) get their own,
        longer bounds). A daemon that does not answer in time fails with V(runtime_daemon_unavailable)
        instead of hanging the task.
    type: int
    default: 60
"""
