"""Plan a 1,000-component release and print how long it takes, in two modes.

pre-resolved: ``plan_release`` alone, every digest given (no I/O).
live: 1,000 distinct tags in the lab's plain registry (pushed once, idempotently, by registry_tags.py),
  a release naming them by tag only, planned the way ``stella_plan`` plans (validate, resolve every tag
  with ``release.inputs.resolve_digests`` against the registry, ``plan_release``), several times: every
  plan must be byte-identical and pin every component to the digest the registry answers for its tag.
  Goal: under 3 s per planning run (median), byte-identical. With --profile, or when the goal is missed,
  one more run under cProfile and a measured estimate of resolution on a bounded thread pool.

Usage: .venv/bin/python bench/plan_bench.py [--live | --pre-resolved] [--components N] [--repeat R]
                                            [--live-repeat R] [--registry HOST:PORT] [--profile]
Exit 1 on an error (lab missing, wrong digest, plans that differ); a missed goal is not an error.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402

LAB_JSON = os.environ.get("STELLA_LAB_JSON") or os.path.join(ROOT, ".lab", "lab.json")
LIVE_REPOSITORY = "stella/scale"
GOAL_SECONDS = 3.0
TIMEOUT = 15.0  # stella_plan's default timeout
LAB_NO_PROXY = "127.0.0.1,localhost,registry.lab,172.17.0.1"
ESTIMATE_THREADS = (4, 8)


class BenchError(Exception):
    """A failed check: exit 1."""


def build_release(count, image_for=None):
    """``(release, resolved)``: ``count`` components; ``image_for(index)`` names each image (default: a
    made-up registry, every digest pre-resolved in ``resolved``)."""
    components = []
    resolved = {}
    for index in range(count):
        if image_for is None:
            image = "registry.example.com/bench/svc-%04d:1.%d" % (index, index % 7)
            resolved[image] = "sha256:%064x" % (index + 1)
        else:
            image = image_for(index)
        components.append(
            {
                "name": "svc-%04d" % index,
                "image": image,
                "config": {
                    "env.INDEX": index,
                    "env.MODE": "yes",
                    "env.RATIO": "3.8",
                    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                    "healthcheck.interval": "10s",
                    "healthcheck.retries": 3,
                },
                "ports": ["%d:8080" % (20000 + index)],
            }
        )
    release = {
        "release": {"id": "rel-bench", "name": "bench", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "perf",
        "application": "bench",
        "strategy": "rolling",
        "target": {
            "id": "tgt-bench",
            "name": "bench",
            "type": "ComposeHost",
            "endpoint": "ssh://bench",
            "executionMode": "ssh",
        },
        "components": components,
        "secretEnv": {"TOKEN": "x"},
    }
    return release, resolved


def bench_pre_resolved(count, repeat):
    release, resolved = build_release(count)
    timings = []
    plan = None
    for _run in range(repeat):
        start = time.perf_counter()
        plan = plan_release(release, resolved)
        timings.append(time.perf_counter() - start)
    lock = plan["_files"]["compose.stella.lock.yml"]
    print("== pre-resolved (plan_release alone, digests given)")
    print("plan_release: %d components, lock %d bytes, manifestHash %s" % (count, len(lock), plan["manifestHash"]))
    print(
        "time: median %.3f s, min %.3f s, max %.3f s over %d runs"
        % (statistics.median(timings), min(timings), max(timings), len(timings))
    )


# -- live mode ------------------------------------------------------------------------------------------


class RequestCounter:
    """Counts the HTTP requests (by method) and new connections urllib3 makes in this process, retries
    included (a wrap of ``HTTPConnectionPool._make_request`` and ``_new_conn``; nothing else changes)."""

    def __init__(self):
        self.methods = collections.Counter()
        self.connections = 0
        self.installed = False

    def install(self):
        try:
            from urllib3 import connectionpool  # pylint: disable=import-outside-toplevel
        except ImportError:
            return
        pool = connectionpool.HTTPConnectionPool
        make_request, new_conn, counter = pool._make_request, pool._new_conn, self  # pylint: disable=protected-access

        def counted_make_request(self, conn, method, *args, **kwargs):
            counter.methods[method] += 1
            return make_request(self, conn, method, *args, **kwargs)

        def counted_new_conn(self, *args, **kwargs):
            counter.connections += 1
            return new_conn(self, *args, **kwargs)

        pool._make_request, pool._new_conn = counted_make_request, counted_new_conn  # pylint: disable=protected-access
        self.installed = True

    def reset(self):
        self.methods.clear()
        self.connections = 0

    def describe(self):
        if not self.installed:
            return "requests not counted"
        by_method = ", ".join("%d %s" % (n, m) for m, n in sorted(self.methods.items()))
        return "%d registry requests (%s), %d new connections" % (
            sum(self.methods.values()),
            by_method or "none",
            self.connections,
        )


def load_lab():
    if not os.path.isfile(LAB_JSON):
        raise BenchError("the Docker lab is not set up (%s is missing): run `make lab` first" % LAB_JSON)
    with open(LAB_JSON, encoding="utf-8") as handle:
        return json.load(handle)


def plan_live(release, registry):
    """``stella_plan``'s sequence (plugins/action/stella_plan.py) without Ansible: plain JSON, the
    registry credentials (none given: Docker's client config), validation, ``resolve_digests`` (one
    ``DigestResolver``, one requests session with its retries, the registry as an insecure registry, the
    action's default timeout), ``plan_release``. Returns ``(plan, resolution, phase seconds)``."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import validate_release  # pylint: disable=import-outside-toplevel

    start, cpu = time.perf_counter(), time.process_time()
    release = inputs.plain(release)
    credentials = inputs.load_credentials(inputs.plain({}, "registry_credentials"))
    validate_release(release)
    prepared = time.perf_counter()
    resolved, resolution = inputs.resolve_digests(release, credentials, [registry], {}, True, TIMEOUT)
    resolved_at = time.perf_counter()
    plan = plan_release(release, resolved)
    done = time.perf_counter()
    return (
        plan,
        resolution,
        {
            "prepare": prepared - start,
            "resolve": resolved_at - prepared,
            "plan": done - resolved_at,
            "total": done - start,
            "cpu": time.process_time() - cpu,
        },
    )


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise TypeError("not JSON: %r" % type(value))


def plan_bytes(plan):
    """The whole plan (``_files`` included, as text) serialised with sorted keys."""
    return json.dumps(plan, sort_keys=True, default=_text, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def check_pins(plan, resolution, registry_digests, image_for, count):
    """Every component pinned to the digest the registry answers for its tag (raises BenchError)."""
    lock = plan["_files"]["compose.stella.lock.yml"].decode("utf-8")
    if plan["lock"] != lock:
        raise BenchError("the plan's lock text differs from its lock file bytes")
    lock_images = {
        line.strip()[len("image:") :].strip().strip("'\"")
        for line in lock.splitlines()
        if line.strip().startswith("image:")
    }
    components = {c["reference"]: c for c in plan["components"]}
    if len(plan["components"]) != count or len(components) != count:
        raise BenchError(
            "the plan has %d components (%d references), expected %d"
            % (len(plan["components"]), len(components), count)
        )
    wrong = []
    for index in range(count):
        reference = image_for(index)
        tag = reference.rsplit(":", 1)[1]
        expected = registry_digests[tag]
        component = components.get(reference)
        pinned = "%s@%s" % (reference, expected)
        info = resolution.get(reference) or {}
        if (
            component is None
            or component["digest"] != expected
            or component["image"] != pinned
            or pinned not in lock_images
            or info.get("digest") != expected
            or info.get("resolved") is not True
        ):
            wrong.append((reference, expected, component and component["digest"], info.get("digest")))
    if wrong:
        reference, expected, got, resolved = wrong[0]
        raise BenchError(
            "%d of %d components are not pinned to the registry's digest (first: %s: registry %s, "
            "plan %s, resolution %s)" % (len(wrong), count, reference, expected, got, resolved)
        )
    if len({c["digest"] for c in plan["components"]}) != count:
        raise BenchError("the plan's %d components do not have %d distinct digests" % (count, count))


def print_profile(profile, top=14):
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (cc, nc, tt, ct, _callers) in stats.stats.items():
        where = filename
        for marker in ("site-packages/", "ansible_collections/stellaops/runtime/", "lib/python3"):
            if marker in filename:
                where = filename.split(marker, 1)[1]
                break
        rows.append(("%s:%d(%s)" % (where, line, name), nc, tt, ct))
    total = stats.total_tt
    print("profile (cProfile, one live run, %.2f s under the profiler):" % total)
    print("  by own time:")
    for row in sorted(rows, key=lambda r: -r[2])[:top]:
        print("    %6.3f s %5.1f%%  %7d calls  %s" % (row[2], 100 * row[2] / total, row[1], row[0]))
    print("  by cumulative time:")
    for row in sorted(rows, key=lambda r: -r[3])[:top]:
        print("    %6.3f s %5.1f%%  %7d calls  %s" % (row[3], 100 * row[3] / total, row[1], row[0]))


def bare_heads(registry, references):
    """Seconds for one ``HEAD`` per reference over one bare ``http.client`` connection, sequential: what
    the registry itself needs per tag on this machine, without requests or the resolver."""
    import http.client  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.module_utils.engine.registry import MANIFEST_ACCEPT  # pylint: disable=import-outside-toplevel

    host, port = registry.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    start = time.perf_counter()
    try:
        for reference in references:
            repository, tag = reference.split("/", 1)[1].rsplit(":", 1)
            connection.request("HEAD", "/v2/%s/manifests/%s" % (repository, tag), headers={"Accept": MANIFEST_ACCEPT})
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise BenchError("bare HEAD %s: HTTP %d" % (reference, answer.status))
    finally:
        connection.close()
    return time.perf_counter() - start


def estimate_concurrent(release, registry, registry_digests, image_for, count, threads):
    """Resolution of the same references on a bounded thread pool over ONE ``DigestResolver`` (its one
    session and retries), as a change in ``release/inputs.resolve_digests`` could do it: the measured
    resolve time, checked against the registry's digests. Not what the collection does today."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import unresolved_references  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver  # pylint: disable=import-outside-toplevel

    credentials = inputs.load_credentials({})
    pending = unresolved_references(release)
    start = time.perf_counter()
    with DigestResolver(credentials, [registry], timeout=TIMEOUT) as resolver:
        resolver.resolve(pending[0])  # the first request opens the session (as a sequential run's does)
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            found = dict(zip(pending[1:], pool.map(resolver.resolve, pending[1:])))
    seconds = time.perf_counter() - start
    if len(found) != count - 1:
        raise BenchError("concurrent resolution: %d references resolved, expected %d" % (len(found), count - 1))
    for reference, info in found.items():
        if info["digest"] != registry_digests[reference.rsplit(":", 1)[1]]:
            raise BenchError("concurrent resolution: %s resolved to %s" % (reference, info["digest"]))
    return seconds


def bench_live(count, repeat, registry, profile):
    import registry_tags  # pylint: disable=import-outside-toplevel

    print("== live (resolve every tag against the lab registry %s, then plan; stella_plan's sequence)" % registry)
    try:
        pushed = registry_tags.ensure_tags(registry, count, LIVE_REPOSITORY)
    except (RuntimeError, OSError) as exc:  # OSError: requests' errors too
        raise BenchError("cannot push the tags to %s (is the lab up? `make lab`): %s" % (registry, exc))
    registry_digests = pushed["registry"]
    tags = sorted(registry_digests)
    print(
        "tags: %s:%s..%s in %s, %d distinct digests; %d pushed, %d already present (%d requests, %.2f s)"
        % (
            LIVE_REPOSITORY,
            tags[0],
            tags[-1],
            registry,
            len(set(registry_digests.values())),
            pushed["pushed"],
            pushed["present"],
            pushed["requests"],
            pushed["seconds"],
        )
    )

    def image_for(index):
        return "%s/%s:%s" % (registry, LIVE_REPOSITORY, registry_tags.tag_name(index, count))

    release, _resolved = build_release(count, image_for)
    counter = RequestCounter()
    counter.install()
    runs, first = [], None
    for run in range(1, repeat + 1):
        counter.reset()
        plan, resolution, phases = plan_live(release, registry)
        requests_seen = counter.describe()
        check_pins(plan, resolution, registry_digests, image_for, count)
        data = plan_bytes(plan)
        lock = plan["_files"]["compose.stella.lock.yml"]
        fingerprint = {
            "lock": lock,
            "manifestHash": plan["manifestHash"],
            "plan": data,
            "digests": {ref: info["digest"] for ref, info in resolution.items()},
        }
        print(
            "run %d: %.3f s (prepare %.3f s, resolve %.3f s, plan_release %.3f s; this process's CPU %.3f s); %s; "
            "lock sha256 %s, plan JSON %d bytes sha256 %s"
            % (
                run,
                phases["total"],
                phases["prepare"],
                phases["resolve"],
                phases["plan"],
                phases["cpu"],
                requests_seen,
                sha(lock)[:16],
                len(data),
                sha(data)[:16],
            )
        )
        if first is None:
            first = fingerprint
        else:
            for key in ("lock", "manifestHash", "plan", "digests"):
                if fingerprint[key] != first[key]:
                    raise BenchError("run %d's %s differs from run 1's" % (run, key))
        runs.append(phases)
    median = statistics.median(r["total"] for r in runs)
    print(
        "identical: the %d plans' lock (%d bytes), manifestHash %s and whole plan JSON (%d bytes, sorted keys) "
        "are byte-identical; %d/%d components pinned to the digest the registry answers for their tag"
        % (repeat, len(first["lock"]), first["manifestHash"], len(first["plan"]), count, count)
    )
    print(
        "time: median %.3f s, min %.3f s, max %.3f s over %d runs (median resolve %.3f s = %.2f ms per tag, "
        "plan_release %.3f s)"
        % (
            median,
            min(r["total"] for r in runs),
            max(r["total"] for r in runs),
            repeat,
            statistics.median(r["resolve"] for r in runs),
            1000 * statistics.median(r["resolve"] for r in runs) / count,
            statistics.median(r["plan"] for r in runs),
        )
    )
    verdict = "PASS" if median < GOAL_SECONDS else "MISS"
    print(
        "goal: planning %d components with live resolution under %.0f s, byte-identical twice: %s (%.3f s; "
        "load average %.2f)" % (count, GOAL_SECONDS, verdict, median, os.getloadavg()[0])
    )
    if verdict == "MISS" or profile:
        profiler = cProfile.Profile()
        profiler.enable()
        plan, resolution, _phases = plan_live(release, registry)
        profiler.disable()
        if plan_bytes(plan) != first["plan"]:
            raise BenchError("the profiled run's plan differs from run 1's")
        print_profile(profiler)
        rest = statistics.median(r["prepare"] + r["plan"] for r in runs)
        floor = bare_heads(registry, [image_for(index) for index in range(count)])
        print(
            "floor: the same %d HEADs over one bare http.client connection, sequential (no requests, no "
            "resolver): %.3f s (%.2f ms per tag)" % (count, floor, 1000 * floor / count)
        )
        for threads in ESTIMATE_THREADS:
            seconds = estimate_concurrent(release, registry, registry_digests, image_for, count, threads)
            print(
                "estimate: resolution on a pool of %d threads over one DigestResolver (one session): resolve "
                "%.3f s, so planning about %.3f s (resolve + the measured prepare and plan_release, %.3f s)"
                % (threads, seconds, seconds + rest, rest)
            )
    return verdict


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", help="only the live mode (default: both)")
    mode.add_argument("--pre-resolved", action="store_true", help="only the pre-resolved mode (default: both)")
    parser.add_argument("--components", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="pre-resolved runs (default 5)")
    parser.add_argument("--live-repeat", type=int, default=5, help="live planning runs, at least 2 (default 5)")
    parser.add_argument("--registry", help="host:port of a plain-HTTP registry (default: lab.json's plain one)")
    parser.add_argument("--profile", action="store_true", help="profile a live run even when the goal is met")
    args = parser.parse_args()
    if args.components < 1 or args.repeat < 1 or args.live_repeat < 2:
        parser.error("--components and --repeat must be at least 1, --live-repeat at least 2")
    try:
        if not args.live:
            bench_pre_resolved(args.components, args.repeat)
        if not args.pre_resolved:
            # the lab's addresses are never proxied (as lab.sh exports)
            no_proxy = ",".join(filter(None, [LAB_NO_PROXY, os.environ.get("NO_PROXY")]))
            os.environ.update(NO_PROXY=no_proxy, no_proxy=no_proxy)
            registry = args.registry or load_lab()["registries"]["plain"]["address"]
            bench_live(args.components, args.live_repeat, registry, args.profile)
    except BenchError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 1
    except StellaError as exc:
        print("error: planning failed: %s (%s)" % (exc.reason, exc.code), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
