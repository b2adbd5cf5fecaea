"""Plan a 1,000-component release (digests pre-resolved) and print how long it takes.

Usage: .venv/bin/python bench/plan_bench.py [--components N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))

from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402


def build_release(count):
    components = []
    resolved = {}
    for index in range(count):
        image = "registry.example.com/bench/svc-%04d:1.%d" % (index, index % 7)
        resolved[image] = "sha256:%064x" % (index + 1)
        components.append({
            "name": "svc-%04d" % index,
            "image": image,
            "config": {"env.INDEX": index, "env.MODE": "yes", "env.RATIO": "3.8",
                       "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/", "healthcheck.interval": "10s",
                       "healthcheck.retries": 3},
            "ports": ["%d:8080" % (20000 + index)],
        })
    release = {
        "release": {"id": "rel-bench", "name": "bench", "version": "1.0.0"},
        "tenant": "acme", "environment": "perf", "application": "bench", "strategy": "rolling",
        "target": {"id": "tgt-bench", "name": "bench", "type": "ComposeHost", "endpoint": "ssh://bench",
                   "executionMode": "ssh"},
        "components": components,
        "secretEnv": {"TOKEN": "x"},
    }
    return release, resolved


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--components", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    release, resolved = build_release(args.components)
    timings = []
    plan = None
    for _run in range(args.repeat):
        start = time.perf_counter()
        plan = plan_release(release, resolved)
        timings.append(time.perf_counter() - start)
    lock = plan["_files"]["compose.stella.lock.yml"]
    print("plan_release: %d components, lock %d bytes, manifestHash %s" % (args.components, len(lock), plan["manifestHash"]))
    print("time: median %.3f s, min %.3f s, max %.3f s over %d runs" % (
        statistics.median(timings), min(timings), max(timings), len(timings)))


if __name__ == "__main__":
    main()
