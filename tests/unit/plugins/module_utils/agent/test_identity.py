"""agent/identity.py: is the target endpoint this host? (``wrong_host`` otherwise), over captured ``ip -j addr``."""

from __future__ import annotations

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import identity as ident
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import endpoint_host

TARGET = sc.TARGET


@pytest.mark.parametrize(
    "endpoint,expected",
    [
        ("local", True),
        ("localhost", True),
        ("127.0.0.1", True),
        ("ssh://root@127.0.0.1", True),
        ("ssh://root@172.17.0.2", True),
        ("ssh://root@172.17.0.3", False),
        ("target-a", True),
        ("TARGET-A.lab", True),
        ("other-host", False),
        ("ssh://named-elsewhere", False),
        ("resolves-here", True),
        ("", False),
        ("tcp://[::1]:2376", True),
        ("unix:///var/run/docker.sock", True),
    ],
)
def test_endpoint_is_this_host(endpoint, expected):
    resolved = {"resolves-here": ["172.17.0.2"], "named-elsewhere": ["10.9.9.9"]}.get(endpoint_host(endpoint), [])
    assert (
        ident.endpoint_is_this_host(endpoint, ["127.0.0.1", "172.17.0.2"], ["target-a", "target-a.lab"], resolved)
        is expected
    )


def ip_runner(calls):
    ip_json = sc.fixture("ip_addr.json")

    def run(argv, environ_update=None):  # pylint: disable=unused-argument
        calls.append(argv)
        assert argv == ["ip", "-j", "addr"]
        return 0, ip_json, ""

    return run


def test_ensure_this_host_uses_ip_addr_output(monkeypatch):
    monkeypatch.setattr(ident.shutil, "which", lambda name: "/usr/sbin/" + name)
    calls = []
    run = ip_runner(calls)
    ident.ensure_this_host(dict(TARGET, endpoint="ssh://root@127.0.0.1"), run)
    ident.ensure_this_host(dict(TARGET, endpoint="ssh://deploy@192.0.2.2:22"), run)  # eth0 of the capture
    with pytest.raises(StellaError) as err:
        ident.ensure_this_host(dict(TARGET, endpoint="ssh://root@192.0.2.1"), run)
    assert err.value.code == "wrong_host" and err.value.phase == "verify_target"
    assert "192.0.2.1" in err.value.reason
    assert calls and all(argv == ["ip", "-j", "addr"] for argv in calls)


def test_local_endpoints_ask_nothing():
    calls = []
    for endpoint in ("local", "localhost", "LOCALHOST", "unix:///run/docker.sock"):
        ident.ensure_this_host(dict(TARGET, endpoint=endpoint), ip_runner(calls))
    assert calls == []


def test_host_facts_without_ip_falls_back_to_the_resolver(monkeypatch):
    monkeypatch.setattr(ident.shutil, "which", lambda name: None)
    monkeypatch.setattr(ident, "_resolve", lambda host: ["198.51.100.7"])
    calls = []
    facts = ident.host_facts(ip_runner(calls))
    assert calls == [] and facts["addresses"] == ["198.51.100.7"] and facts["hostnames"]
