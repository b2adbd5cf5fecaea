"""Thin lab targets (``lab/lab.sh thin up|down``) for scale tests: many SSH hosts on the lab's own engine.

- ``start_thin(count, prefix)`` / ``stop_thin(prefix)``: start (or reuse) ``count`` thin targets
  ``<prefix>-001``.. in parallel, or remove them. Each is a target dict as ``lab.sh target up`` prints it
  (``name``, ``container``, ``hostname``, ``address``, ``ssh_user``, ``ssh_key``, ``compose``, ``image``,
  ``flavour``, ``engine_version``, ``compose_version``) plus ``"kind": "thin"``, so it goes straight into
  :class:`fleetkit.FleetJob` (which builds the job's inventory from those dicts, as for DinD targets).
- ``session_prefix(suffix)``: a prefix of this pytest process (``it<pid>-<suffix>``);
  ``remove_orphans()`` removes thin targets of pytest processes that are gone.
- :class:`ThinFleetJob`: a :class:`fleetkit.FleetJob` for thin targets: its releases publish no port and ask
  for no probe (every thin target shares the engine's ports, so the same published port would collide on
  the second target, and the controller could not reach a thin target's published port at its address;
  the containers' own healthcheck still gates the deployment), and its ``cleanup()`` removes the
  application's projects once, on the engine, instead of from every target.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess

import fleetkit
import labkit

THIN_LABEL = "stella.lab=thin"
PREFIX_LABEL = "stella.lab.thin.prefix"


def start_thin(count: int, prefix: str = "thin", image: str | None = None, timeout: float = 300) -> list[dict]:
    """Start (or reuse) thin targets ``<prefix>-001``..``<prefix>-<count>``; their dicts in that order."""
    labkit.load_lab()
    args = ["thin", "up", str(count), "--prefix", prefix] + (["--image", image] if image else [])
    stdout = labkit.run_lab(*args, timeout=timeout)
    targets = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if len(targets) != count:
        raise labkit.LabCommandFailed(
            "lab/lab.sh thin up %d printed %d JSON lines:\n%s" % (count, len(targets), stdout)
        )
    return targets


def stop_thin(prefix: str = "thin") -> None:
    """Remove every thin target of ``prefix`` (no error when there is none)."""
    labkit.run_lab("thin", "down", "--prefix", prefix, timeout=300)


def session_prefix(suffix: str) -> str:
    """The thin-target prefix of this pytest process: ``it<pid>-<suffix>``."""
    return "it%d-%s" % (os.getpid(), suffix)


def remove_orphans() -> None:
    """Remove thin targets whose prefix names a pytest process that is gone (``it<pid>-...``)."""
    proc = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=" + THIN_LABEL, "--format", '{{.Label "%s"}}' % PREFIX_LABEL],
        capture_output=True,
        text=True,
        check=False,
    )
    for prefix in sorted(set(proc.stdout.split())):
        match = re.match(r"^it(\d+)-", prefix)
        if match and not os.path.exists("/proc/%s" % match.group(1)):
            stop_thin(prefix)


def ssh_master_alive(control_path: str) -> bool:
    """Whether an SSH master answers on ``control_path`` (``ssh -O check``)."""
    proc = subprocess.run(
        ["ssh", "-o", "ControlPath=" + control_path, "-O", "check", "master"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    return proc.returncode == 0


def ssh_master_exit(control_path: str) -> None:
    """Ask the SSH master on ``control_path`` to exit (``ssh -O exit``; no error when none answers)."""
    subprocess.run(
        ["ssh", "-o", "ControlPath=" + control_path, "-O", "exit", "master"],
        capture_output=True,
        check=False,
        timeout=30,
    )


def engine_containers(label: str, value: str) -> list[str]:
    """Ids of the containers on the lab's engine whose ``label`` is ``value`` (read on the controller)."""
    proc = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", "label=%s=%s" % (label, value)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return proc.stdout.split()


class ThinFleetJob(fleetkit.FleetJob):
    """A :class:`fleetkit.FleetJob` over thin targets (one engine underneath)."""

    def release(self, *args, **kwargs):  # pylint: disable=arguments-differ
        release = super().release(*args, **kwargs)
        for component in release["components"]:
            component.pop("ports", None)
            component["config"] = {k: v for k, v in component["config"].items() if not k.startswith("healthProbe.")}
        return release

    def cleanup(self):
        """Remove the application's Compose projects from the engine (once each, from the controller)."""
        proc = subprocess.run(
            [
                "docker",
                "ps",
                "-a",
                "--filter",
                "label=stella.application=%s" % self.application,
                "--format",
                '{{.Label "com.docker.compose.project"}}',
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        projects = sorted({p for p in proc.stdout.split() if p})

        def down(project):
            subprocess.run(
                ["docker", "compose", "-p", project, "down", "-v", "-t", "1", "--remove-orphans"],
                capture_output=True,
                check=False,
                timeout=300,
            )

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(down, projects))
        ids = engine_containers("stella.application", self.application)
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False, timeout=120)
