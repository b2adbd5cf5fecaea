"""compose.up Variables must agree with what the task carries, or the task is refused before any change."""

from __future__ import annotations

import copy

import pytest

import scripted as sc
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import request as creq
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError


@pytest.fixture
def payload(tmp_path):
    return copy.deepcopy(sc.Site(tmp_path / "work").plan()["payloads"]["compose.up"])


def test_the_planners_variables_agree(payload):
    request = creq.parse_request(payload)
    files, sticker = creq.check_artifacts(request)
    assert sticker["manifestHash"] == payload["Variables"]["manifestHash"] and files


@pytest.mark.parametrize(
    "key,value",
    [
        ("manifestHash", "sha256:" + "0" * 64),
        ("projectName", "someone_else"),
        ("composeHash", "sha256:" + "1" * 64),
        ("targetId", "tgt-other"),
        ("workDirectory", "/elsewhere"),
    ],
)
def test_contradicting_variables_are_refused(payload, key, value):
    payload["Variables"][key] = value
    with pytest.raises(StellaError) as err:
        creq.check_artifacts(creq.parse_request(payload))
    assert err.value.code == "artifact_hash_mismatch" and err.value.phase == "validate_payload"
    assert "Variables.%s" % key in err.value.reason
