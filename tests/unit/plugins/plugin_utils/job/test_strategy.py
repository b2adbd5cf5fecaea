"""The batch planner and the strategy gate (pure)."""

from __future__ import annotations

import pytest

from ansible.executor.playbook_executor import PlaybookExecutor
from ansible.playbook.play import Play

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import strategy as _strategy

T4 = ["t1", "t2", "t3", "t4"]


@pytest.mark.parametrize(
    "strategy, config, expected",
    [
        ("rolling", {}, [["t1"], ["t2"], ["t3"], ["t4"]]),
        ("rolling", {"batchSize": 2}, [["t1", "t2"], ["t3", "t4"]]),
        ("rolling", {"batchSize": 3}, [["t1", "t2", "t3"], ["t4"]]),
        ("rolling", {"batchSize": "50%"}, [["t1", "t2"], ["t3", "t4"]]),
        ("rolling", {"batchSize": "10%"}, [["t1"], ["t2"], ["t3"], ["t4"]]),
        ("rolling", {"batchSize": 9}, [T4]),
        ("all-at-once", {}, [T4]),
        ("all-at-once", {"batchSize": "100%"}, [T4]),
        ("canary", {}, [["t1"], ["t2", "t3", "t4"]]),
        ("canary", {"batchSize": [1, "50%", "100%"]}, [["t1"], ["t2", "t3"], ["t4"]]),
        ("canary", {"batchSize": [1, "25%", "100%"]}, [["t1"], ["t2"], ["t3", "t4"]]),
        ("blue-green", {}, [T4]),
        ("a-b", {"batchSize": 2}, [["t1", "t2"], ["t3", "t4"]]),
    ],
)
def test_batches(strategy, config, expected):
    assert _strategy.plan_batches(strategy, config, T4) == expected


@pytest.mark.parametrize("spec", [1, 2, 3, "25%", "34%", "100%", [1, "50%", "100%"], [2, 1], ["10%", 3], [1, 5, 10]])
@pytest.mark.parametrize("total", [1, 2, 3, 4, 7, 10, 23])
def test_sizes_are_what_ansible_serial_gives(spec, total):
    """The planner agrees with ansible-core's own serial batching for the same spec."""
    hosts = ["h%02d" % i for i in range(total)]

    class _Inventory:
        def get_hosts(self, *_args, **_kwargs):
            return list(hosts)

    play = Play.load({"hosts": "all", "serial": spec if isinstance(spec, list) else [spec]})
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = _Inventory()
    ansible = [len(batch) for batch in executor._get_serialized_batches(play)]
    spec_list = _strategy.batch_size_spec("rolling", {"batchSize": spec})
    assert _strategy.serial_sizes(spec_list, total) == ansible
    assert sum(ansible) == total


@pytest.mark.parametrize(
    "strategy, config, needle",
    [
        ("rolling", {"batchSize": 0}, "positive integer"),
        ("rolling", {"batchSize": -1}, "positive integer"),
        ("rolling", {"batchSize": True}, "positive integer"),
        ("rolling", {"batchSize": "0%"}, "percentage"),
        ("rolling", {"batchSize": "101%"}, "percentage"),
        ("rolling", {"batchSize": "half"}, "percentage"),
        ("rolling", {"batchSize": []}, "1 to 100 sizes"),
        ("rolling", {"batchSize": 1.5}, "percentage"),
        ("all-at-once", {"batchSize": 2}, "all-at-once"),
    ],
)
def test_bad_batch_sizes_name_the_field(strategy, config, needle):
    with pytest.raises(StellaError) as info:
        _strategy.plan_batches(strategy, config, T4)
    assert info.value.code == "release_invalid"
    assert "strategyConfig.batchSize" in info.value.reason and needle in info.value.reason
    assert info.value.evidence["field"] == "strategyConfig.batchSize"


def test_duplicate_targets_are_refused():
    with pytest.raises(StellaError):
        _strategy.plan_batches("rolling", {}, ["a", "a"])


def test_gate_opens_only_when_every_target_succeeded():
    ok = _strategy.gate(0, [("t1", "Succeeded", None), ("t2", "Succeeded", None)])
    assert ok["proceed"] is True and ok["failedTargets"] == []
    closed = _strategy.gate(1, [("t3", "Succeeded", None), ("t4", "Failed", "probe failed"), ("t5", "Failed", "x")])
    assert closed == {
        "batch": 1,
        "proceed": False,
        "failedTargets": ["t4", "t5"],
        "reason": "strategy gate closed after batch 2: target t4 failed: probe failed (and 1 more)",
    }
    assert _strategy.gate(0, [])["proceed"] is False
    assert _strategy.gate(0, [("t1", "Running", None)])["proceed"] is False
