"""Probe configuration checked at planning time with the one probe parser; URLs the runner could not send."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import load_release, resolved_for  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe import runner as _probe_runner  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.probe.spec import (  # noqa: E402
    parse_probe_specs,
    valid_host,
    validate_probe_config,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.schema import validate_release  # noqa: E402

INVALID = "Post-deploy health probe configuration invalid: "
TARGET = {"endpoint": "ssh://root@10.0.0.5:22"}


@pytest.mark.parametrize(
    "config, key, detail",
    [
        ({"healthProbe.url": "http://h:0/x"}, "healthProbe.url", "healthProbe.url 'http://h:0/x' has port 0"),
        (
            {"healthProbe.url": "http://ex ample/"},
            "healthProbe.url",
            "healthProbe.url 'http://ex ample/' has an invalid host",
        ),
        ({"healthProbe.url": "http://.h/"}, "healthProbe.url", "healthProbe.url 'http://.h/' has an invalid host"),
        ({"healthProbe.url": "http://1.2.3.999/"}, "healthProbe.url", "has an invalid host"),
        ({"healthProbe.url": "http://h/a b"}, "healthProbe.url", "contains whitespace or control characters"),
        ({"healthProbe.url": "http://h:99999/"}, "healthProbe.url", "must be an absolute http:// or https:// URL"),
        ({"healthProbe.url": "http://[::1/"}, "healthProbe.url", "must be an absolute http:// or https:// URL"),
        ({"healthProbe.host": "bad host"}, "healthProbe.host", "healthProbe.host 'bad host' is not a host name"),
        ({"healthProbe.host": "-x"}, "healthProbe.host", "is not a host name or IP address"),
        ({"healthProbe.path": "/he alth"}, "healthProbe.path", "contains whitespace or control characters"),
        ({"healthProbe.port": "\u00b2"}, "healthProbe.port", "healthProbe.port must be an integer from 1 to 65535"),
        ({"healthProbe.port": "9" * 5000}, "healthProbe.port", "healthProbe.port must be an integer from 1 to 65535"),
        ({"healthProbe.timeoutSeconds": 10**400}, "healthProbe.timeoutSeconds", "must be a number of seconds"),
        ({"healthProbe.timeoutSeconds": "\u0661"}, "healthProbe.timeoutSeconds", "must be a number of seconds"),
        ({"healthProbe.attempts": ["3"]}, "healthProbe.attempts", "must be an integer from 1 to 100"),
        ({"healthProbe.type": "udp"}, "healthProbe.type", "unsupported healthProbe.type 'udp'"),
        ({"healthProbe.type": "tcp"}, "healthProbe.tcp.port", "healthProbe.tcp.port is required for tcp probes"),
        ({"healthProbe.bogus": 1}, "healthProbe.bogus", "unknown key healthProbe.bogus"),
    ],
    ids=[
        "url-port-0",
        "url-space-host",
        "url-empty-label",
        "url-bad-ip",
        "url-space",
        "url-port-range",
        "url-ipv6",
        "host-space",
        "host-dash",
        "path-space",
        "port-unicode-digit",
        "port-5000-digits",
        "timeout-huge-int",
        "timeout-arabic-digit",
        "attempts-list",
        "type-udp",
        "tcp-no-port",
        "unknown-key",
    ],
)
def test_invalid_probe_config_names_component_and_key(config, key, detail):
    with pytest.raises(StellaError) as err:
        parse_probe_specs([{"name": "api", "config": config}], target=TARGET)
    assert err.value.code == "health_probe_config_invalid"
    assert err.value.reason.startswith(INVALID + "component 'api': ")
    assert detail in err.value.reason and key in err.value.reason
    assert err.value.evidence["key"] == key


@pytest.mark.parametrize(
    "host, ok",
    [
        ("svc.internal", True),
        ("10.0.0.5", True),
        ("[fd00::5]", True),
        ("fd00::5", True),
        ("caf\u00e9.example", True),
        ("web_1", True),
        ("a.", True),
        ("a..b", False),
        ("-a", False),
        ("a-", False),
        ("1.2.3.999", False),
        ("", False),
        ("h/x", False),
        ("a" * 64, False),
        ("::zz", False),
    ],
)
def test_valid_host(host, ok):
    assert valid_host(host) is ok


def test_planning_validation_uses_a_placeholder_host_but_checks_every_key():
    # no endpoint host is needed at planning: host_override may supply it when the probe runs
    validate_probe_config([{"name": "api", "config": {"healthProbe.port": 8080}}])
    with pytest.raises(StellaError) as err:
        parse_probe_specs([{"name": "api", "config": {"healthProbe.port": 8080}}], target={"endpoint": "unix:///x"})
    assert "no resolvable host" in err.value.reason
    with pytest.raises(StellaError) as err:
        validate_probe_config([{"name": "web", "config": {}}, {"name": "api", "config": {"healthProbe.type": "udp"}}])
    assert err.value.code == "health_probe_config_invalid" and err.value.phase == "plan"
    assert err.value.evidence == {
        "field": 'components[1].config["healthProbe.type"]',
        "component": "api",
        "key": "healthProbe.type",
    }


@pytest.mark.parametrize(
    "config, key",
    [
        ({"healthProbe.type": "udp"}, "healthProbe.type"),
        ({"healthProbe.type": "tcp"}, "healthProbe.tcp.port"),
        ({"healthProbe.url": "http://h:0/"}, "healthProbe.url"),
        ({"healthProbe.url": "not a url"}, "healthProbe.url"),
        ({"healthProbe.expectedStatus": 42}, "healthProbe.expectedStatus"),
        ({"healthProbe.attempts": ["1"]}, "healthProbe.attempts"),
    ],
)
def test_release_validation_fails_on_probe_config_before_any_target_work(config, key, monkeypatch):
    release = load_release()
    release["components"][1]["config"].update(config)
    touched = []
    monkeypatch.setattr(_probe_runner.HttpTcpProbeRunner, "run", lambda self, spec: touched.append(spec))
    for call in (lambda: validate_release(release), lambda: plan_release(release, resolved_for(release))):
        with pytest.raises(StellaError) as err:
            call()
        assert err.value.code == "health_probe_config_invalid"
        assert err.value.phase == "plan"
        assert "component 'worker'" in err.value.reason and key in err.value.reason
        assert err.value.evidence["field"] == 'components[1].config["%s"]' % key
    assert touched == []
