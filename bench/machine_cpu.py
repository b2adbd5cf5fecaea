"""Where a bench run's CPU went on the machine, apart from the controller.

The lab's thin targets share this machine and its one engine with the controller, so a run's wall time
also pays for their side. :func:`snapshot` reads, at one instant, the CPU seconds used so far by:

- ``thin``: the containers labelled ``stella.lab=thin`` (the thin targets: their sshd, the modules'
  Python, the ``docker`` CLI and Compose they run), from each container's cgroup;
- ``apps``: every other container (the deployed applications: their processes and the healthchecks the
  engine executes in them), from each container's cgroup;
- ``engine``: ``dockerd``, ``containerd`` and the containers' shims, with the children they reaped (the
  ``runc`` runs of every start and every healthcheck), from ``/proc/PID/stat``.

The difference of two snapshots is what each part used in between; a container or shim that appeared
in between counts from zero. A container removed in between is lost (the benches remove theirs after
the measured runs). cgroup v1 (``cpuacct``) and v2 (``cpu.stat``) are both read; a part that cannot be
read is ``None``.
"""

from __future__ import annotations

import os
import subprocess

ENGINE_COMMANDS = ("dockerd", "containerd", "containerd-shim")  # /proc's comm holds 15 characters
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cgroup_seconds(container_id, root="/sys/fs/cgroup"):
    """A container's CPU seconds from its cgroup (v1 ``cpuacct.usage``, v2 ``cpu.stat``), else ``None``."""
    for path, scale in (
        (os.path.join(root, "cpuacct", "docker", container_id, "cpuacct.usage"), 1e-9),
        (os.path.join(root, "cpu,cpuacct", "docker", container_id, "cpuacct.usage"), 1e-9),
    ):
        try:
            with open(path, encoding="ascii") as handle:
                return int(handle.read().strip()) * scale
        except (OSError, ValueError):
            continue
    for path in (
        os.path.join(root, "system.slice", "docker-%s.scope" % container_id, "cpu.stat"),
        os.path.join(root, "docker", container_id, "cpu.stat"),
    ):
        try:
            with open(path, encoding="ascii") as handle:
                fields = dict(line.split() for line in handle if line.strip())
            return int(fields["usage_usec"]) * 1e-6
        except (OSError, ValueError, KeyError):
            continue
    return None


def stat_seconds(text, children=True):
    """``utime + stime`` (and ``cutime + cstime``, the children it reaped, unless ``children`` is false) in
    seconds from one ``/proc/PID/stat`` line, and its command."""
    command = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # after the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    return command, sum(int(fields[i]) for i in ((11, 12, 13, 14) if children else (11, 12))) / CLOCK_TICKS


def engine_seconds(proc="/proc"):
    """The CPU seconds of the engine's processes (:data:`ENGINE_COMMANDS`) and the children they reaped."""
    total = 0.0
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="ascii", errors="replace") as handle:
                command, seconds = stat_seconds(handle.read())
        except (OSError, ValueError, IndexError):
            continue
        if command.startswith(ENGINE_COMMANDS):
            total += seconds
    return total


def containers():
    """``{container id: is a thin target}`` of every container on the engine, ``{}`` when it does not answer."""
    try:
        out = subprocess.run(
            ["docker", "ps", "--all", "--no-trunc", "--format", '{{.ID}} {{.Label "stella.lab"}}'],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {line.split()[0]: line.split()[1:] == ["thin"] for line in out.splitlines() if line.strip()}


def snapshot():
    """``{"containers": {id: (part, seconds)}, "engine": seconds}`` at this instant (see the module)."""
    seen = {}
    for container_id, thin in containers().items():
        seconds = cgroup_seconds(container_id)
        if seconds is not None:
            seen[container_id] = ("thin" if thin else "apps", seconds)
    return {"containers": seen, "engine": engine_seconds()}


def delta(before, after):
    """What each part used between two snapshots: ``{"thin": s, "apps": s, "engine": s}``, ``None`` for a
    part of which no container could be read. Containers are compared one by one, so one that appeared in
    between counts from zero."""
    out = {"thin": None, "apps": None}
    for container_id, (part, seconds) in after["containers"].items():
        earlier = before["containers"].get(container_id, (part, 0.0))[1]
        out[part] = (out[part] or 0.0) + max(0.0, seconds - earlier)
    out["engine"] = max(0.0, after["engine"] - before["engine"])
    return out
