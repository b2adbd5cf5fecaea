"""Provider benchmark: what the ``stella`` Compose provider adds over running the same playbook directly,
and its peak memory while streaming a 512 MiB image through ``get-image``.

1. Overhead. For N rounds (default 3), in alternating order: ``stella compose up`` (as Compose invokes
   it, with no Compose around it) and ``ansible-playbook stellaops.runtime.job`` with the release the
   provider builds, the same job store and inventory (``localhost``, local connection). Both are no-op
   re-runs of a release that already runs, so both do the same work: plan, preflight, verify, evidence.
   Prints the medians and the difference (goal: at most 1.0 s).
2. Streaming. Builds a ``FROM scratch`` image with one 512 MiB layer of random bytes, saves it, removes
   it, and plays Compose's ``get-image`` answer (the chunked stream, 64 KiB chunks) to
   ``stella compose pull --source=local``. Prints the provider's peak resident set (``wait4`` rusage of
   that process only; ``docker load`` is a separate process) with the goal under 64 MiB, and checks
   the image was loaded.

Needs the lab (``make lab``). Usage: .venv/bin/python bench/provider_bench.py [--rounds N] [--size-mib N]
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
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
sys.path.insert(0, os.path.join(ROOT, ".build", "collections"))

from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import protocol as _provider  # noqa: E402


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lab_image(key):
    with open(os.path.join(ROOT, ".lab", "lab.json"), encoding="utf-8") as handle:
        return json.load(handle)["images"][key]["loopback_ref"]


def timed(argv, env, stdin=subprocess.DEVNULL):
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, stdin=stdin, check=False, timeout=900)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("failed: %s\n%s%s" % (" ".join(argv[:4]), proc.stdout[-3000:], proc.stderr[-2000:]))
    return seconds


def overhead(stella, work, rounds):
    project, port = "bench%s" % uuid.uuid4().hex[:6], free_port()
    state = os.path.join(work, "state")
    options = [
        "--image=%s" % lab_image("app_v1"),
        "--ports=%d:8080" % port,
        "--insecure_registries=127.0.0.1:5000",
        "--min_engine_version=20.10.0",
        "--state_directory=%s" % state,
        "--work_directory=%s" % os.path.join(work, "projects"),
    ]
    up = [stella, "compose", "--project-name=%s" % project, "up"] + options + ["web"]
    env = dict(os.environ)
    timed(up, env)  # the first, fresh deployment: not timed
    release = _provider.release_from(_provider.parse_argv(up[1:]))
    inventory = os.path.join(work, "inventory.json")
    with open(inventory, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "all": {
                    "children": {
                        "stella_targets": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": os.path.join(VENV_BIN, "python"),
                                }
                            }
                        }
                    }
                }
            },
            handle,
        )
    extra = os.path.join(work, "vars.json")
    store = os.path.join(state, project, "web", "jobs.sqlite3")
    with open(extra, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "stella_release": release,
                "stella_job_store": store,
                "stella_evidence_dir": os.path.join(state, project, "web", "evidence"),
                "stella_insecure_registries": ["127.0.0.1:5000"],
                "stella_min_engine_version": "20.10.0",
            },
            handle,
        )
    direct = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory, "stellaops.runtime.job", "-e", "@" + extra]
    denv = dict(env, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"), ANSIBLE_NOCOLOR="1")
    times = {"provider": [], "playbook": []}
    try:
        for index in range(rounds):
            order = [("provider", up, env), ("playbook", direct, denv)]
            for name, argv, environ in order if index % 2 == 0 else order[::-1]:
                times[name].append(timed(argv, environ))
    finally:
        subprocess.run(
            [stella, "compose", "--project-name=%s" % project, "down"] + options + ["web"],
            env=env,
            capture_output=True,
            check=False,
            timeout=600,
        )
    provider, playbook = statistics.median(times["provider"]), statistics.median(times["playbook"])
    print(
        "no-op up, median of %d: provider %.2f s, ansible-playbook %.2f s, overhead %.2f s (goal <= 1.0 s) %s"
        % (rounds, provider, playbook, provider - playbook, "PASS" if provider - playbook <= 1.0 else "MISS")
    )


def streaming(stella, work, size_mib):
    build = os.path.join(work, "image")
    os.makedirs(build)
    with open(os.path.join(build, "blob"), "wb") as handle:
        for _block in range(size_mib):
            handle.write(os.urandom(1 << 20))
    with open(os.path.join(build, "Dockerfile"), "w", encoding="utf-8") as handle:
        handle.write("FROM scratch\nCOPY blob /blob\n")
    tag = "stella-bench/big:%s" % uuid.uuid4().hex[:8]
    subprocess.run(["docker", "build", "-q", "-t", tag, build], check=True, capture_output=True, timeout=900)
    tar = os.path.join(work, "image.tar")
    with open(tar, "wb") as handle:
        subprocess.run(["docker", "save", tag], check=True, stdout=handle, timeout=900)
    image_id = json.loads(
        subprocess.run(["docker", "image", "inspect", tag], check=True, capture_output=True, text=True).stdout
    )[0]["Id"]
    subprocess.run(["docker", "rmi", tag], check=True, capture_output=True)
    shutil.rmtree(build)
    env = dict(os.environ, COMPOSE_PROVIDER_MESSAGES="error,info,debug,get-image")
    argv = [
        stella,
        "compose",
        "--project-name=bench",
        "pull",
        "--image=%s" % tag,
        "--source=local",
        "--policy=missing",
        "--digest=%s" % image_id,
        "--state_directory=%s" % os.path.join(work, "pullstate"),
        "web",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    request = json.loads(proc.stdout.readline())
    assert request["type"] == "get-image", request
    proc.stdin.write(b'{"type": "image-stream", "encoding": "chunked", "media-type": "application/x-tar"}\n')
    with open(tar, "rb") as handle:
        while True:
            block = handle.read(1 << 16)
            if not block:
                break
            proc.stdin.write(b"%x\r\n" % len(block) + block + b"\r\n")
    proc.stdin.write(b"0\r\n")
    proc.stdin.close()
    rest = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    loaded = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode == 0
    subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
    size = os.path.getsize(tar)
    peak = usage.ru_maxrss / 1024.0
    print(
        "get-image stream of %.0f MiB in %.1f s: provider peak RSS %.1f MiB (goal < 64 MiB) %s; loaded: %s; exit %s"
        % (size / 1048576.0, seconds, peak, "PASS" if peak < 64 else "MISS", loaded, os.waitstatus_to_exitcode(status))
    )
    if not loaded:
        print(rest.decode(errors="replace")[-2000:])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=512)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="stella-provider-bench-")
    try:
        bindir = os.path.join(work, "bin")
        subprocess.run(
            [
                os.path.join(VENV_BIN, "python"),
                os.path.join(ROOT, "scripts", "stella.py"),
                "install",
                "--bin-dir",
                bindir,
                "--plugin-dir",
                os.path.join(work, "plugins"),
            ],
            check=True,
            capture_output=True,
        )
        stella = os.path.join(bindir, "stella")
        overhead(stella, work, args.rounds)
        streaming(stella, work, args.size_mib)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
