"""What trust costs: an image signature policy at planning, and ``stella verify`` of a large job's evidence.

planning: a 5-component release of 5 distinct tags in the lab's plain registry, each digest signed in
  cosign's tag layout (pushed once, idempotently). Planned the way ``stella_plan`` plans it, without an
  image policy and with one that requires every signature, alternating, several times each:
  - in process: ``release.inputs.resolve_and_verify`` + ``plan_release`` (what the signature check adds
    to the requests and the work of planning alone);
  - as an operator runs it: one ``stellaops.runtime.stella_plan`` task through ``ansible-playbook``.
  Goal: the policy adds at most 10 % to the planning task's median (the second figure).
verify: a 100-target job's evidence (100 deployment.json, job.json, the report; each in its signed DSSE
  envelope) in a SQLite job store, then ``stella verify JOB --key PUB`` as a command, several times.
  Goal: under 2 s (median wall time of the command).

Usage: .venv/bin/python bench/trust_bench.py [--planning] [--verify] [--repeat R] [--targets N]
Exit 1 on an error (lab missing, a verdict that is not "verified", a verify that fails); a missed goal
is printed as MISSED, not an error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import requests  # noqa: E402

from registry_tags import ensure_tags  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import (  # noqa: E402
    load_credentials,
    resolve_and_verify,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign, keys  # noqa: E402

LAB_JSON = os.environ.get("STELLA_LAB_JSON") or os.path.join(ROOT, ".lab", "lab.json")
BIN = os.path.join(ROOT, ".venv", "bin")
REPOSITORY = "stella/trust-bench"
COMPONENTS = 5
PLANNING_GOAL = 1.10
VERIFY_GOAL_SECONDS = 2.0
PASSPHRASE = b"trust-bench"


def lab_registry():
    try:
        with open(LAB_JSON, encoding="utf-8") as handle:
            return json.load(handle)["registries"]["plain"]["address"]
    except (OSError, KeyError, ValueError) as exc:
        raise SystemExit("trust_bench: the lab is not up (%s): make lab" % exc) from None


def push_signature(registry, digest, key):
    """Sign ``digest`` of REPOSITORY with ``key`` and push the signature in cosign's tag layout (its tag is
    replaced: one signature per run of the bench)."""
    base = "http://%s/v2/%s" % (registry, REPOSITORY)
    payload = cosign.simple_signing_payload("%s/%s" % (registry, REPOSITORY), digest)
    made = cosign.signature_manifest([{"payload": payload, "signature": cosign.sign_payload(key, payload)}])
    session = requests.Session()
    session.trust_env = False
    for blob_digest, data in made["blobs"].items():
        if session.head("%s/blobs/%s" % (base, blob_digest), timeout=15).status_code == 200:
            continue
        started = session.post("%s/blobs/uploads/" % base, timeout=15)
        location = requests.compat.urljoin(base + "/", started.headers["Location"])
        location += ("&" if "?" in location else "?") + "digest=" + blob_digest
        done = session.put(location, data=data, headers={"Content-Type": "application/octet-stream"}, timeout=15)
        if done.status_code != 201:
            raise SystemExit("trust_bench: blob push answered HTTP %d" % done.status_code)
    answer = session.put(
        "%s/manifests/%s" % (base, cosign.signature_tag(digest)),
        data=made["manifest"],
        headers={"Content-Type": cosign.OCI_MANIFEST_TYPE},
        timeout=15,
    )
    if answer.status_code != 201:
        raise SystemExit("trust_bench: signature push answered HTTP %d %s" % (answer.status_code, answer.text[:200]))


def release_of(registry, tags):
    components = [
        {
            "name": "svc-%d" % index,
            "image": "%s/%s:%s" % (registry, REPOSITORY, tag),
            "ports": ["%d:8080" % (21000 + index)],
            "config": {"env.INDEX": index},
        }
        for index, tag in enumerate(sorted(tags))
    ]
    return {
        "release": {"id": "rel-trust-bench", "name": "trust-bench", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "perf",
        "application": "bench",
        "strategy": "rolling",
        "target": {"id": "t", "name": "t", "type": "ComposeHost", "endpoint": "local", "executionMode": "local"},
        "components": components,
    }


def plan_in_process(release, registry, policy):
    started = time.perf_counter()
    resolved, _evidence, verdicts = resolve_and_verify(
        release, load_credentials({}), [registry], {}, True, 15.0, job_policy=policy
    )
    plan_release(release, resolved)
    elapsed = time.perf_counter() - started
    if policy and sorted({v["status"] for v in verdicts.values()}) != ["verified"]:
        raise SystemExit("trust_bench: a verdict is not verified: %s" % verdicts)
    return elapsed


PLAYBOOK = """- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - stellaops.runtime.stella_plan:
        release: "{{ lookup('file', release_file) | from_json }}"
        insecure_registries: ["%s"]
        image_policy: "{{ policy | default({}) }}"
      register: planned
    - ansible.builtin.assert:
        that: (policy is not defined) or (planned.signatures.values() | map(attribute='status') | unique | list
          == ['verified'])
"""


def plan_task(workdir, policy):
    argv = [
        os.path.join(BIN, "ansible-playbook"),
        "-i",
        "localhost,",
        os.path.join(workdir, "plan.yml"),
        "-e",
        "release_file=%s" % os.path.join(workdir, "release.json"),
    ]
    if policy:
        argv += ["-e", json.dumps({"policy": policy})]
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
        ANSIBLE_PYTHON_INTERPRETER=os.path.join(BIN, "python"),
        NO_PROXY="127.0.0.1,localhost,registry.lab,172.17.0.1",
    )
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit("trust_bench: the planning task failed:\n%s" % proc.stdout[-2000:])
    return elapsed


def bench_planning(repeat):
    registry = lab_registry()
    pushed = ensure_tags(registry, COMPONENTS, repository=REPOSITORY)
    workdir = tempfile.mkdtemp(prefix="trust-bench-")
    private_pem, public_pem = keys.generate_key_pair(PASSPHRASE)
    key = keys.private_key_from_pem(private_pem, PASSPHRASE, "bench key")
    public_path = os.path.join(workdir, "bench.pub")
    with open(public_path, "wb") as handle:
        handle.write(public_pem)
    for digest in pushed["registry"].values():
        push_signature(registry, digest, key)
    release = release_of(registry, pushed["registry"])
    with open(os.path.join(workdir, "release.json"), "w", encoding="utf-8") as handle:
        json.dump(release, handle)
    with open(os.path.join(workdir, "plan.yml"), "w", encoding="utf-8") as handle:
        handle.write(PLAYBOOK % registry)
    policy = {"keys": [public_path]}
    print(
        "== planning: %d components of %s/%s, each signed (key %s)"
        % (COMPONENTS, registry, REPOSITORY, key.public_key.fingerprint[:19])
    )
    plan_in_process(release, registry, None)  # imports and connections warm
    plan_in_process(release, registry, policy)
    timings = {"none": [], "policy": []}
    for _round in range(repeat * 4):
        timings["none"].append(plan_in_process(release, registry, None))
        timings["policy"].append(plan_in_process(release, registry, policy))
    base, signed = statistics.median(timings["none"]), statistics.median(timings["policy"])
    print(
        "in process (resolve + plan): no policy median %.1f ms, policy median %.1f ms, ratio %.2f over %d runs each"
        % (base * 1000, signed * 1000, signed / base, len(timings["none"]))
    )
    task = {"none": [], "policy": []}
    for _round in range(repeat):
        task["none"].append(plan_task(workdir, None))
        task["policy"].append(plan_task(workdir, policy))
    base, signed = statistics.median(task["none"]), statistics.median(task["policy"])
    ratio = signed / base
    print(
        "planning task (ansible-playbook, stella_plan): no policy median %.3f s, policy median %.3f s, "
        "ratio %.3f over %d runs each: %s (goal <= %.2f)"
        % (base, signed, ratio, repeat, "PASS" if ratio <= PLANNING_GOAL else "MISSED", PLANNING_GOAL)
    )


def job_step(location, name, **given):
    from ansible_collections.stellaops.runtime.plugins.action.stella_job import ARGUMENT_SPEC
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.run.runner import JobRunner

    args = {key: spec.get("default") for key, spec in ARGUMENT_SPEC.items()}
    args.update(step=name, store=location, job_id="job-bench", **given)
    return JobRunner({}, False).run(args)


def signed_job(workdir, count, key_path):
    """A ``count``-target job in a new SQLite store, each target's outcome recorded through the job's own
    steps, closed with its report and its evidence signed: ``(store location, documents kept)``."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

    now = "2026-01-01T00:00:00.000000Z"
    targets = ["t%03d" % n for n in range(count)]
    location = os.path.join(workdir, "jobs.sqlite3")
    store = _job_store.open_store(location)
    store.create(
        _job.new_job(
            job_id="job-bench",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[targets],
            targets={
                name: {"targetId": "id-" + name, "targetName": name, "targetType": "ComposeHost", "projectName": "shop"}
                for name in targets
            },
            options={},
            now=now,
        )
    )
    store.update("job-bench", lambda r: _job.start(r, now))
    store.close()
    for name in targets:
        digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        job_step(
            location,
            "target",
            target=name,
            result={
                "changed": True,
                "projectName": "shop",
                "composeLockPath": "/srv/shop/compose.stella.lock.yml",
                "composeLockHash": "sha256:" + "1" * 64,
                "versionStickerPath": "/srv/shop/stella.version.json",
                "versionStickerHash": "sha256:" + "2" * 64,
                "services": [
                    {"service": "web", "containerName": "shop-web-1", "health": "healthy", "state": "running"}
                ],
            },
            probe={"passed": True, "checks": []},
            plan={
                "jobId": "job-bench",
                "projectName": "shop",
                "target": {"id": "id-" + name, "type": "ComposeHost"},
                "release": {"id": "r1", "name": "shop", "version": "1.0.0"},
                "components": [{"name": "web", "image": "registry:5000/shop/web:1@" + digest, "digest": digest}],
            },
        )
    closed = job_step(location, "close", report=True, signing_key=key_path, signing_passphrase=PASSPHRASE.decode())
    return location, len(closed["evidenceDocuments"])


def bench_verify(repeat, count):
    workdir = tempfile.mkdtemp(prefix="trust-bench-verify-")
    private_pem, public_pem = keys.generate_key_pair(PASSPHRASE)
    key_path, public_path = os.path.join(workdir, "bench.key"), os.path.join(workdir, "bench.pub")
    for path, data in ((key_path, private_pem), (public_path, public_pem)):
        with open(path, "wb") as handle:
            handle.write(data)
    started = time.perf_counter()
    location, kept = signed_job(workdir, count, key_path)
    print(
        "== verify: a %d-target job, %d documents and envelopes in its store (made in %.1f s)"
        % (count, kept, time.perf_counter() - started)
    )
    argv = [
        os.path.join(BIN, "python"),
        os.path.join(ROOT, "scripts", "stella.py"),
        "verify",
        "job-bench",
        "--key",
        public_path,
        "--store",
        location,
    ]
    timings = []
    for _round in range(repeat):
        started = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        timings.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit("trust_bench: stella verify failed:\n%s%s" % (proc.stdout[-1000:], proc.stderr))
    last = proc.stdout.splitlines()[-1]
    median = statistics.median(timings)
    print(
        "stella verify (the command, Python start included): median %.3f s, min %.3f s, max %.3f s over %d runs: "
        "%s (goal < %.1f s)"
        % (
            median,
            min(timings),
            max(timings),
            repeat,
            "PASS" if median < VERIFY_GOAL_SECONDS else "MISSED",
            VERIFY_GOAL_SECONDS,
        )
    )
    print("its last line: %s" % last)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planning", action="store_true")
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--targets", type=int, default=100)
    options = parser.parse_args()
    everything = not (options.planning or options.verify)
    if options.planning or everything:
        bench_planning(options.repeat)
    if options.verify or everything:
        bench_verify(options.repeat, options.targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
