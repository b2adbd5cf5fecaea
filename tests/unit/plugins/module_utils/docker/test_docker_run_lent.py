"""docker/run.py with registry credentials lent by the controller: ``docker pull`` (and only it) reads the
temporary Docker config, which is gone after the pull, also when the pull fails; evidence names the source."""

from __future__ import annotations

import json
import os
import sys

import pytest

import scripted as sc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_docker_run import Host  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.module_utils.host import dockerconfig  # noqa: E402

SECRET = "lent-password-Planted"
LENT = {"registry.example": {"username": "stella", "password": SECRET, "source": "docker-config:auths"}}


def test_docker_pull_reads_the_lent_config_and_it_is_gone_after_a_failed_pull(tmp_path, monkeypatch):
    base = str(tmp_path / "private")
    monkeypatch.setattr(dockerconfig, "private_base", lambda uid=None: base)
    host = Host(tmp_path)
    steps = [
        sc.docker_version(),
        sc.image_absent(),
        sc.Step(["docker", "pull", "--quiet", sc.PINNED], 1, "", "Error response from daemon: unauthorized\n"),
    ]
    runner = sc.ScriptedRunner(steps)
    seen = []

    def recording(argv, environ_update=None):
        directory = (environ_update or {}).get("DOCKER_CONFIG")
        if directory:
            with open(os.path.join(directory, "config.json"), encoding="utf-8") as handle:
                seen.append((sc.strip_timeout(argv)[0][:2], directory, json.load(handle)))
        return runner(argv, environ_update)

    with pytest.raises(StellaError) as err:
        host.run(recording, lent=dockerconfig.parse_lent(LENT))
    runner.assert_done()
    assert err.value.phase == "pull_image"
    [(argv, directory, config)] = seen
    assert argv == ["docker", "pull"] and list(config["auths"]) == ["registry.example"]
    assert not os.path.exists(directory) and os.listdir(base) == []
    evidence = err.value.evidence
    assert evidence["lentRegistryCredentials"] == [
        {"registry": "registry.example", "source": "docker-config:auths", "lent": True}
    ]
    assert SECRET not in json.dumps(evidence) and SECRET not in err.value.reason
