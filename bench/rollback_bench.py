"""Rollback benchmark: stella_rollback (through ``ansible``, as operators run it) vs bare ``docker compose up``.

Per repetition, on localhost with the lab (``make lab``), in a fresh Compose project:

1. deploy v1 (``stella_compose_deploy`` through ``ansible -c local``), healthy;
2. deploy v2 (container healthy) and run ``stella_probe`` through ``ansible``: its probe path 404s, so
   the probe fails;
3. timed from the moment the failed probe returned until v1 runs healthy again:
   * ``stella``: ``stella_rollback`` with the plan's ``compose.rollback`` payload (restore the retained
     v1 revision: validate, restore the lock, pull, ``up --wait``, inspect, restore the sticker);
   * ``bare``: ``docker compose -p P -f <v1 lock> up -d --wait`` of a copy of v1's lock.
   The clock stops once ``docker inspect`` shows the project's container on v1's digest and healthy.

The two methods alternate, N repetitions each (default 5); medians and their ratio are printed (goal:
ratio <= 1.5), with the Ansible process overhead (median of a no-op ``ansible.builtin.ping`` through
the same CLI) so the ratio can be read. Only loopback addresses (the lab's 127.0.0.1:5000 registry and
services published on 127.0.0.1). Every project and work directory is removed, also on failure or ^C.

Usage: .venv/bin/python bench/rollback_bench.py [--repetitions N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
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

PROBE_ACTION = "stellaops.runtime.stella_probe"
TARGET = {"id": "tgt-local", "name": "localhost", "type": "ComposeHost", "endpoint": "local", "executionMode": "local"}


def free_loopback_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def release(application, work, lab, image_key, version, port, probe_path):
    return {
        "release": {"id": "rel-" + version.replace(".", "-"), "name": "bench", "version": version},
        "tenant": "bench",
        "environment": "rollback",
        "application": application,
        "strategy": "rolling",
        "target": TARGET,
        "workDirectory": work,
        "components": [
            {
                "name": "web",
                "image": lab["images"][image_key]["loopback_ref"],
                "ports": ["127.0.0.1:%d:8080" % port],
                "config": {
                    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                    "healthcheck.interval": "1s",
                    "healthcheck.retries": 15,
                    "healthProbe.type": "http",
                    "healthProbe.url": "http://127.0.0.1:%d%s" % (port, probe_path),
                    "healthProbe.attempts": 1,
                },
            }
        ],
    }


def resolved(lab):
    return {v["loopback_ref"]: v["digest"] for v in lab["images"].values() if "loopback_ref" in v}


def must(result, what):
    if result["failed"]:
        raise SystemExit("%s failed: %s" % (what, result.get("msg")))
    return result


def inspect_project(project):
    ids = subprocess.run(
        ["docker", "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project=" + project],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not ids:
        return []
    return json.loads(subprocess.run(["docker", "inspect"] + ids, capture_output=True, text=True, check=True).stdout)


def wait_v1_healthy(project, digest, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        containers = inspect_project(project)
        if containers and all(
            c["Config"]["Image"].endswith("@" + digest) and (c["State"].get("Health") or {}).get("Status") == "healthy"
            for c in containers
        ):
            return
        time.sleep(0.05)
    raise SystemExit("v1 did not become healthy again in project %s" % project)


def repetition(lab, method):
    """One repetition with ``method`` in {"stella", "bare"}; returns the timed seconds."""
    application = "rb-%s-%s" % (method, uuid.uuid4().hex[:8])
    work = tempfile.mkdtemp(prefix="stella-rollback-bench-")
    port = free_loopback_port()
    v1 = ar.plan(release(application, work, lab, "app_v1", "1.0.0", port, "/"), resolved(lab))
    v2 = ar.plan(release(application, work, lab, "app_v2", "2.0.0", port, "/no-such-page"), resolved(lab))
    project = v1["projectName"]
    v1_lock = os.path.join(work, "v1.compose.stella.lock.yml")
    try:
        must(ar.ansible_module(ar.DEPLOY_MODULE, {"payload": v1["payloads"]["compose.up"]}), "deploy v1")
        shutil.copyfile(os.path.join(work, project, "compose.stella.lock.yml"), v1_lock)
        must(ar.ansible_module(ar.DEPLOY_MODULE, {"payload": v2["payloads"]["compose.up"]}), "deploy v2")
        components = [
            {"name": c["name"], "config": c["config"]}
            for c in release(application, work, lab, "app_v2", "2.0.0", port, "/no-such-page")["components"]
        ]
        probe = ar.ansible_module(PROBE_ACTION, {"components": components, "target": TARGET})
        if not probe["failed"] or probe.get("code") != "health_probe_failed":
            raise SystemExit("the v2 probe was expected to fail: %s" % probe.get("msg"))
        start = time.monotonic()
        if method == "stella":
            result = must(
                ar.ansible_module(
                    ar.ROLLBACK_MODULE, {"payload": v2["payloads"]["compose.rollback"], "reason": probe["msg"]}
                ),
                "stella_rollback",
            )
            if not result["rollbackRestored"]:
                raise SystemExit("stella_rollback did not restore: %s" % result)
        else:
            subprocess.run(
                ["docker", "compose", "-p", project, "-f", v1_lock, "up", "-d", "--wait"],
                check=True,
                capture_output=True,
            )
        wait_v1_healthy(project, lab["images"]["app_v1"]["digest"])
        return time.monotonic() - start
    finally:
        subprocess.run(
            ["docker", "compose", "-p", project, "down", "-v", "-t", "1", "--remove-orphans"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)


def ansible_overhead(runs=5):
    """Median seconds of a no-op module call through the same ``ansible -c local`` CLI."""
    times = []
    for _run in range(runs):
        start = time.monotonic()
        must(ar.ansible_module("ansible.builtin.ping", {"data": "pong"}), "ansible ping")
        times.append(time.monotonic() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", "-n", type=int, default=5)
    options = parser.parse_args()
    lab = ar.load_lab_json()
    times = {"stella": [], "bare": []}
    for index in range(options.repetitions):
        for method in ("stella", "bare") if index % 2 == 0 else ("bare", "stella"):
            seconds = repetition(lab, method)
            times[method].append(seconds)
            print("repetition %d %-6s %.2f s" % (index + 1, method, seconds), flush=True)
    overhead = ansible_overhead()
    stella, bare = statistics.median(times["stella"]), statistics.median(times["bare"])
    print("failed probe -> v1 healthy, median of %d:" % options.repetitions)
    print("  stella_rollback via ansible : %.2f s" % stella)
    print("  bare docker compose up      : %.2f s" % bare)
    print("  ratio stella/bare           : %.2f (goal <= 1.5)" % (stella / bare))
    print("  ansible no-op module call   : %.2f s (median of 5; part of the stella time)" % overhead)
    print("  ratio without that overhead : %.2f" % ((stella - overhead) / bare))


if __name__ == "__main__":
    main()
