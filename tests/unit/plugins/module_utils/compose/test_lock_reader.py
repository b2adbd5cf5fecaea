"""read_lock_services reads exactly what the real ``docker compose config`` renders from a planned lock,
or declines (None) so the caller asks Compose."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

import planning_support as ps  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.stellaops.runtime.plugins.module_utils.compose.project import (  # noqa: E402
    read_lock_services,
    service_images,
    service_labels,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan  # noqa: E402


def _lock(**overrides):
    release = ps.minimal_release(**overrides)
    return _plan.plan_release(release, ps.resolved_for(release))["lock"]


WEB = {"name": "web", "image": "registry.example.com/shop/web:1.0"}
CASES = {
    "one": {},
    "three-with-config": {
        "components": [
            dict(WEB, config={"env.A": "x", "healthcheck.test": "wget -q -O- http://127.0.0.1:8080/"}, ports=["8080"]),
            dict(WEB, name="api", config={"label.team": "core"}),
            dict(WEB, name="admin", config={"env.QUOTE": 'it is "ok"', "label.cost": "$5"}),
        ]
    },
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reader_matches_compose_config(name):
    lock = _lock(**CASES[name])
    config = ps.compose_config({"compose.stella.lock.yml": lock})
    assert read_lock_services(lock.encode("utf-8")) == (service_images(config), service_labels(config))


@pytest.mark.parametrize(
    "text",
    [
        'services:\n  web:\n    image: "a$b"\n    labels:\n      x: "y"\n',
        'services:\n  web:\n    image: "a"\n    labels:\n      x: "y\\"z"\n',
        "services:\n  web:\n    image: a\n",
        'name: "x"\n',
        'services:\n    image: "a"\n',
    ],
    ids=["dollar", "escape", "plain-scalar", "no-services", "no-service-key"],
)
def test_reader_declines_what_it_cannot_read_exactly(text):
    assert read_lock_services(text.encode("utf-8")) is None


def test_reader_reads_the_common_case_without_compose():
    read = read_lock_services(_lock(**CASES["three-with-config"]).encode("utf-8"))
    assert read is not None and sorted(read[0]) == ["admin", "api", "web"]
    assert read[1]["web"]["stella.component"] == "web"
