"""bench/scale_bench.py: its pure parts, the wait before each run and the goal verdicts as printed."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location("scale_bench", os.path.join(ROOT, "bench", "scale_bench.py"))
scale_bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(scale_bench)


class Machine:
    """``/proc/stat``'s (busy, total) seconds of a 2-core machine busy by the given shares, one a second."""

    def __init__(self, shares):
        self.shares = list(shares)
        self.now = 0.0
        self.busy = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.busy += 2 * seconds * self.shares.pop(0)
        self.now += seconds

    def read(self):
        return self.busy, 2 * self.now


def test_settle_waits_for_two_quiet_windows_in_a_row():
    machine = Machine([0.9, 0.3, 0.8, 0.4, 0.2, 0.9])
    waited, share = scale_bench.settle(30, 0.5, clock=machine.clock, sleep=machine.sleep, read=machine.read)
    assert (waited, share) == (5.0, 0.2) and machine.shares == [0.9]


def test_settle_gives_up_at_its_limit_and_says_how_busy_it_was():
    machine = Machine([0.9] * 10)
    assert scale_bench.settle(3, 0.5, clock=machine.clock, sleep=machine.sleep, read=machine.read) == (3.0, 0.9)


def sample(n, run, wall, deployed=None, **kw):
    base = {
        "store": "sqlite",
        "strategy": "all-at-once",
        "targets": n,
        "run": run,
        "deployed": deployed or n,
        "wall_per_target": wall,
        "cpu_per_target": 0.5,
        "store_bytes_per_target": 22000.0,
        "peak_pss_mib": 150.0,
    }
    base.update(kw)
    return base


def test_a_noop_ratio_just_above_its_limit_is_a_miss_printed_with_three_decimals():
    samples = [
        sample(10, "fresh", 3.0),
        sample(100, "fresh", 3.0),
        sample(100, "noop", 1.002),
        sample(10, "noop", 1.0, deployed=100),
        sample(100, "noop", 1.004),
        sample(10, "noop", 1.0, deployed=100),
    ]
    verdicts = {v["goal"]: v for v in scale_bench.goals(samples, [10, 100])}
    noop = verdicts["noop_wall_per_target_ratio"]
    assert (
        noop["verdict"] == "MISS"
        and noop["parts"] == pytest.approx((1.003, 1.0))
        and "(medians of 2 and 2)" in noop["text"]
    )
    assert verdicts["cpu_per_target_ratio"]["verdict"] == "PASS"
    meta = {
        "target_kind": "thin",
        "targets_started": 100,
        "sizes": [10, 100],
        "target_type": "ComposeHost",
        "image": "img",
        "load_start": [0, 0, 0],
        "load_end": [0, 0, 0],
        "health_interval": "10s",
        "control_persist": "30m",
        "sample_interval": 0.1,
        "meter_seen": True,
    }
    for s in samples:
        s.update(
            batches=1,
            wall_seconds=s["wall_per_target"] * s["targets"],
            cpu_seconds=1.0,
            store_bytes=1,
            wal_bytes=None,
            peak_rss_mib=300.0,
            host_busy_pct=90.0,
            ssh_masters=0,
            peak_ssh_masters_pss_mib=0,
        )
    line = [
        x
        for x in scale_bench.report(samples, list(verdicts.values()), meta).splitlines()
        if "no-op wall per target" in x and "100 targets deployed" in x
    ][0]
    assert "1.003  (<= 1.00)  MISS  [1.003 / 1.000]" in line
