"""Fleet benchmark: a 4-target rolling job with batch size 1 against an all-at-once job on the same targets.

Starts 4 Debian 13 lab targets (``lab/lab.sh target up benchfleetN --image trixie``, reused when they
run), then for N rounds (default 3), in an order rotated from round to round:

a) ``stellaops.runtime.job`` with ``strategy: rolling``, ``batchSize: 1`` (4 batches);
b) the same job with ``strategy: all-at-once`` (1 batch);

each a fresh deployment of the lab's app (one service with a container healthcheck and an HTTP probe)
into a new application name, so every run creates its containers, followed by ``docker compose down``
on every target (not timed). Every job must end ``Succeeded`` in the job store (else exit 1).

Prints the median wall time of each, the ratio rolling ÷ all-at-once (linear in batches is the goal:
at most 4, about the number of batches, with the fixed planning and closing cost making it lower), and
the controller's peak memory: the largest resident set of ``ansible-playbook`` or any of its forks
(``getrusage(RUSAGE_CHILDREN).ru_maxrss``).

Usage: .venv/bin/python bench/fleet_bench.py [--rounds N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
LAB = os.path.join(ROOT, "lab", "lab.sh")
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))

from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store  # noqa: E402

TARGETS = ["benchfleet%d" % i for i in range(1, 5)]
SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"


def start_targets():
    procs = [
        subprocess.Popen(
            [LAB, "target", "up", name, "--image", "trixie"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name in TARGETS
    ]
    targets = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            sys.exit("fleet_bench: a target did not start: %s" % err[-2000:])
        targets.append(json.loads(out.strip().splitlines()[-1]))
    return targets


def inventory(targets, path):
    hosts = {
        t["name"]: {
            "ansible_host": t["address"],
            "ansible_user": t.get("ssh_user", "root"),
            "ansible_ssh_private_key_file": t["ssh_key"],
            "ansible_ssh_common_args": SSH_ARGS,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        for t in targets
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({"all": {"children": {"stella_targets": {"hosts": hosts}}}}, handle)


def release(lab, application, strategy):
    config = {"strategy": strategy}
    if strategy == "rolling":
        config["batchSize"] = 1
    return {
        "release": {"id": "rel-bench", "name": "bench", "version": "1.0.0"},
        "tenant": "bench",
        "environment": "lab",
        "application": application,
        "strategy": strategy,
        "strategyConfig": config,
        "target": {"type": "ComposeHost"},
        "components": [
            {
                "name": "web",
                "image": lab["images"]["app_v1"]["ref"],
                "ports": ["18090:8080"],
                "config": {
                    "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/",
                    "healthcheck.interval": "1s",
                    "healthcheck.retries": 15,
                    "healthProbe.type": "http",
                    "healthProbe.port": 18090,
                    "healthProbe.attempts": 10,
                    "healthProbe.intervalSeconds": 1,
                },
            }
        ],
    }


def run_job(work, lab, strategy):
    application = "b%s" % uuid.uuid4().hex[:8]
    store = os.path.join(work, "jobs.sqlite3")
    variables = {
        "stella_release": release(lab, application, strategy),
        "stella_job_store": store,
        "stella_insecure_registries": [lab["registries"]["shared"]["address"]],
    }
    vars_path = os.path.join(work, "vars-%s.json" % application)
    with open(vars_path, "w", encoding="utf-8") as handle:
        json.dump(variables, handle)
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_NOCOLOR="1",
    )
    argv = [
        os.path.join(VENV_BIN, "ansible-playbook"),
        "-i",
        os.path.join(work, "inventory.json"),
        "stellaops.runtime.job",
        "-e",
        "@" + vars_path,
    ]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=900, check=False)
    seconds = time.monotonic() - start
    record = _job_store.open_store(store).list(limit=1)[0]
    if proc.returncode != 0 or record["status"] != "Succeeded" or record["release"]["id"] != "rel-bench":
        output = (proc.stdout + proc.stderr)[-3000:]
        sys.exit("fleet_bench: the %s job did not succeed (%s):\n%s" % (strategy, record["status"], output))
    return seconds, record, application


def down(targets, record):
    for target in targets:
        project = record["targets"][target["name"]]["projectName"]
        subprocess.run(
            ["ssh", "-i", target["ssh_key"]]
            + SSH_ARGS.split()
            + [
                "root@" + target["address"],
                "docker compose -p %s down -t 1 >/dev/null 2>&1; rm -rf /var/lib/stella/projects/%s"
                % (project, project),
            ],
            check=False,
            timeout=120,
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the 4 targets running")
    args = parser.parse_args()
    with open(os.path.join(ROOT, ".lab", "lab.json"), encoding="utf-8") as handle:
        lab = json.load(handle)
    targets = start_targets()
    times = {"rolling": [], "all-at-once": []}
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as work:
            inventory(targets, os.path.join(work, "inventory.json"))
            order = ["rolling", "all-at-once"]
            for index in range(args.rounds):
                for strategy in order[index % 2 :] + order[: index % 2]:
                    seconds, record, _app = run_job(work, lab, strategy)
                    times[strategy].append(seconds)
                    print(
                        "round %d %-11s %6.2f s  batches %d  job %s"
                        % (index + 1, strategy, seconds, len(record["batches"]), record["jobId"]),
                        flush=True,
                    )
                    down(targets, record)
    finally:
        if not args.keep:
            for name in TARGETS:
                subprocess.run([LAB, "target", "down", name], capture_output=True, check=False, timeout=120)
    rolling, at_once = statistics.median(times["rolling"]), statistics.median(times["all-at-once"])
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print("")
    print("4 targets, median of %d rounds" % args.rounds)
    print("  rolling (batchSize 1, 4 batches)  %6.2f s" % rolling)
    print("  all-at-once (1 batch)             %6.2f s" % at_once)
    print(
        "  ratio rolling / all-at-once       %6.2f  (4 batches; linear in batches: <= 4.0)  %s"
        % (rolling / at_once, "PASS" if rolling / at_once <= 4.0 else "MISS")
    )
    print("  controller peak memory            %6.1f MiB (largest ansible-playbook process or fork)" % peak_mib)


if __name__ == "__main__":
    main()
