"""bench/machine_cpu.py: where a bench run's CPU went apart from the controller. Its parsing and its
differences are checked here on files laid out as the kernel lays them out (cgroup v1 and v2, /proc)."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("machine_cpu", os.path.join(ROOT, "bench", "machine_cpu.py"))
machine_cpu = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(machine_cpu)
TICKS = machine_cpu.CLOCK_TICKS


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def stat_line(pid, command, utime, stime, cutime, cstime):
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    return "%d (%s) S 1 1 1 0 -1 4194560 10 0 0 0 %d %d %d %d 20 0 1 0 100 0 0" % (
        pid,
        command,
        utime,
        stime,
        cutime,
        cstime,
    )


def test_stat_seconds_sums_own_and_reaped_children():
    command, seconds = machine_cpu.stat_seconds(stat_line(7, "dockerd", TICKS, 2 * TICKS, 3 * TICKS, 4 * TICKS))
    assert command == "dockerd"
    assert seconds == pytest.approx(10.0)


def test_stat_seconds_without_children_is_the_process_alone():
    _command, seconds = machine_cpu.stat_seconds(
        stat_line(7, "ansible-playboo", TICKS, 2 * TICKS, 30 * TICKS, 40 * TICKS), children=False
    )
    assert seconds == pytest.approx(3.0)


def test_stat_seconds_reads_a_command_with_spaces_and_parentheses():
    command, seconds = machine_cpu.stat_seconds(stat_line(8, "a (b) c", TICKS, 0, 0, 0))
    assert command == "a (b) c"
    assert seconds == pytest.approx(1.0)


def test_cgroup_seconds_v1_and_v2(tmp_path):
    write(str(tmp_path / "cpuacct" / "docker" / "c1" / "cpuacct.usage"), "2500000000\n")
    write(
        str(tmp_path / "system.slice" / "docker-c2.scope" / "cpu.stat"),
        "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
    )
    assert machine_cpu.cgroup_seconds("c1", root=str(tmp_path)) == pytest.approx(2.5)
    assert machine_cpu.cgroup_seconds("c2", root=str(tmp_path)) == pytest.approx(1.5)
    assert machine_cpu.cgroup_seconds("gone", root=str(tmp_path)) is None


def test_engine_seconds_counts_only_the_engine(tmp_path):
    write(str(tmp_path / "10" / "stat"), stat_line(10, "dockerd", 2 * TICKS, 0, 0, 0))
    write(str(tmp_path / "11" / "stat"), stat_line(11, "containerd-shim", TICKS, 0, TICKS, 0))
    write(str(tmp_path / "12" / "stat"), stat_line(12, "python3", 50 * TICKS, 0, 0, 0))
    write(str(tmp_path / "self" / "stat"), stat_line(13, "dockerd", 99 * TICKS, 0, 0, 0))
    assert machine_cpu.engine_seconds(proc=str(tmp_path)) == pytest.approx(4.0)


def test_delta_per_part_new_containers_from_zero():
    before = {"containers": {"t1": ("thin", 1.0), "a1": ("apps", 5.0)}, "engine": 10.0}
    after = {"containers": {"t1": ("thin", 1.75), "a1": ("apps", 5.5), "a2": ("apps", 0.25)}, "engine": 12.5}
    assert machine_cpu.delta(before, after) == {
        "thin": pytest.approx(0.75),
        "apps": pytest.approx(0.75),
        "engine": pytest.approx(2.5),
    }


def test_delta_says_none_for_a_part_it_could_not_read():
    before = {"containers": {}, "engine": 1.0}
    after = {"containers": {"a1": ("apps", 0.5)}, "engine": 1.0}
    assert machine_cpu.delta(before, after) == {"thin": None, "apps": pytest.approx(0.5), "engine": 0.0}
