"""Deploy benchmark: stella_compose_deploy vs bare ``docker compose up -d --wait`` on the same 5-service lock.

Plans a 5-service release with the real planner (digests from the lab registry), then per round:
bare ``up -d --wait`` on a fresh project, bare no-op ``up`` on the running project, ``down``; the module
through ``ansible -c local`` on a fresh project, the module's no-op re-apply, ``down``; and the engine
called in-process (no Ansible) the same way. Prints medians and ratios. Needs the lab (``make lab``).

Usage: .venv/bin/python bench/deploy_bench.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, ROOT)

# tests.conftest makes ansible_collections.stellaops.runtime importable from the checkout
import tests.conftest  # noqa: E402,F401  pylint: disable=unused-import
import ansible_run as ar  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.apply import ComposeApply  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.request import parse_request  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli, subprocess_runner  # noqa: E402

SERVICES = 5


def plan_five(project, work, lab):
    images = lab["images"]
    ref = images["app_v1"]["loopback_ref"]
    resolved = {ref: images["app_v1"]["digest"]}
    release = ar.release_input(project, {"svc%d" % i: ref for i in range(1, SERVICES + 1)}, work)
    return ar.plan(release, resolved)


def timed(fn):
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def compose(project, directory, *args):
    argv = [
        "docker",
        "compose",
        "--project-name",
        project,
        "--project-directory",
        directory,
        "-f",
        os.path.join(directory, "compose.stella.lock.yml"),
    ] + list(args)
    subprocess.run(argv, check=True, capture_output=True)


def bare_round(lab):
    project = "bench-bare-%s" % uuid.uuid4().hex[:8]
    work = tempfile.mkdtemp(prefix="stella-bench-")
    planned = plan_five(project, work, lab)
    directory = os.path.join(work, project)
    os.makedirs(directory)
    with open(os.path.join(directory, "compose.stella.lock.yml"), "w") as handle:
        handle.write(planned["lock"])
    try:
        fresh = timed(lambda: compose(project, directory, "up", "-d", "--wait"))
        noop = timed(lambda: compose(project, directory, "up", "-d", "--wait"))
    finally:
        ar.compose_down(project)
        shutil.rmtree(work, ignore_errors=True)
    return fresh, noop


def module_round(lab):
    project = "bench-mod-%s" % uuid.uuid4().hex[:8]
    work = tempfile.mkdtemp(prefix="stella-bench-")
    planned = plan_five(project, work, lab)
    args = {"payload": planned["payloads"]["compose.up"]}
    try:
        result = {}

        def apply():
            result["r"] = ar.ansible_module(ar.DEPLOY_MODULE, args)

        fresh = timed(apply)
        assert not result["r"]["failed"] and result["r"]["serviceCount"] == SERVICES, result["r"].get("msg")
        noop = timed(apply)
        assert result["r"]["changed"] is False, "re-apply was not a no-op"
    finally:
        ar.compose_down(project)
        shutil.rmtree(work, ignore_errors=True)
    return fresh, noop


def engine_round(lab):
    project = "bench-eng-%s" % uuid.uuid4().hex[:8]
    work = tempfile.mkdtemp(prefix="stella-bench-")
    planned = plan_five(project, work, lab)
    request = parse_request(planned["payloads"]["compose.up"])

    def apply():
        # a new engine client per task, as each module run has
        return ComposeApply(DockerCli(subprocess_runner), subprocess_runner).run(request)

    try:
        fresh = timed(apply)
        noop = timed(apply)
    finally:
        ar.compose_down(project)
        shutil.rmtree(work, ignore_errors=True)
    return fresh, noop


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    lab = ar.load_lab_json()
    rows = {"bare": [], "module": [], "engine": []}
    for _round in range(options.rounds):
        rows["bare"].append(bare_round(lab))
        rows["module"].append(module_round(lab))
        rows["engine"].append(engine_round(lab))
    med = {
        name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        for name, runs in rows.items()
    }
    print("deploy bench: %d services, %d rounds (median seconds)" % (SERVICES, options.rounds))
    print("%-34s %8s %8s" % ("", "apply", "no-op"))
    print("%-34s %8.2f %8.2f" % ("bare docker compose up -d --wait", med["bare"][0], med["bare"][1]))
    print("%-34s %8.2f %8.2f" % ("stella engine (in-process)", med["engine"][0], med["engine"][1]))
    print("%-34s %8.2f %8.2f" % ("stella_compose_deploy (ansible)", med["module"][0], med["module"][1]))
    print(
        "ratio engine/bare:  apply %.2f  no-op %.2f"
        % (med["engine"][0] / med["bare"][0], med["engine"][1] / med["bare"][1])
    )
    print(
        "ratio module/bare:  apply %.2f  no-op %.2f"
        % (med["module"][0] / med["bare"][0], med["module"][1] / med["bare"][1])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
