# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""Target-side teardown of a deployed project: ``state: stopped`` stops its containers and keeps
everything; ``state: absent`` removes its containers (Compose services, DockerHost containers and
their retained ``-stella-previous`` ones), its networks and its project directory. Idempotent: a
project with nothing left reports ``changed: false``. Standard library only.
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_WORK_DIRECTORY,
    check_project_name,
    check_work_directory,
    invalid,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import project_lock
from ansible_collections.stellaops.runtime.plugins.module_utils.agent.manager import Manager

STATES = ("absent", "stopped")
GROUPS = (
    ("teardown", ("list_project", "stop_containers", "remove_containers", "remove_networks", "remove_directory")),
)
PROJECT_LABELS = ("com.docker.compose.project", "stella.project")


def parse_request(options):
    if options.get("state") not in STATES:
        raise invalid("state must be one of %s" % ", ".join(STATES))
    work = check_work_directory(options.get("work_directory") or DEFAULT_WORK_DIRECTORY, "work_directory")
    project = check_project_name(options.get("project_name"), "project_name")
    return {
        "project_name": project,
        "work_directory": work,
        "state": options["state"],
        "project_directory": os.path.join(work, project),
        "target": None,
    }


class Teardown(Manager):
    groups = GROUPS

    def initial_evidence(self, request):
        return {
            "projectName": request["project_name"],
            "projectDirectory": request["project_directory"],
            "state": request["state"],
            "removedContainers": [],
            "stoppedContainers": [],
            "removedNetworks": [],
            "directoryRemoved": False,
        }

    def _ids(self, kind, label, project, phase, extra=()):
        if kind == "container":
            verb = ["ps", "--all", "--quiet", "--no-trunc"]
        else:
            verb = ["network", "ls", "--quiet", "--no-trunc"]
        _rc, out, _err = self.cli.run(verb + ["--filter", "label=%s=%s" % (label, project)] + list(extra), phase=phase)
        return [line.strip() for line in out.splitlines() if line.strip()]

    def execute(self, request, rec, result, check_mode, diff):
        evidence = result["evidence"]
        project = request["project_name"]
        with rec.phase("list_project"):
            containers = sorted(
                {i for label in PROJECT_LABELS for i in self._ids("container", label, project, "list_project")}
            )
            running = sorted(
                {
                    i
                    for label in PROJECT_LABELS
                    for i in self._ids("container", label, project, "list_project", ("--filter", "status=running"))
                }
            )
            networks = self._ids("network", "com.docker.compose.project", project, "list_project")
            directory = request["project_directory"]
            has_dir = os.path.isdir(directory) and not os.path.islink(directory)
        if request["state"] == "stopped":
            result["changed"] = bool(running)
            if running and not check_mode:
                with rec.phase("stop_containers"):
                    self.cli.run(
                        ["stop", "--time", "10"] + running, phase="stop_containers", timeout=10 + self.cli.timeout
                    )
            evidence["stoppedContainers"] = running
            return
        result["changed"] = bool(containers or networks or has_dir)
        if check_mode:
            evidence.update(
                removedContainers=containers, removedNetworks=networks, directoryRemoved=has_dir, checkMode=True
            )
            return
        if containers:
            with rec.phase("remove_containers"):
                self.cli.run(["rm", "--force", "--volumes"] + containers, phase="remove_containers")
            evidence["removedContainers"] = containers
        if networks:
            with rec.phase("remove_networks"):
                self.cli.run(["network", "rm"] + networks, phase="remove_networks")
            evidence["removedNetworks"] = networks
        if has_dir:
            with rec.phase("remove_directory"):
                with project_lock(directory):  # waits for an apply of this project to end
                    shutil.rmtree(directory)
            evidence["directoryRemoved"] = True
