"""The target's fence: work carrying a claim generation older than the one the project accepted is refused
with ``claim_superseded`` and changes nothing; newer or equal claims are accepted and kept."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import CLAIM_FILE
from ansible_collections.stellaops.runtime.plugins.module_utils.host import claim as _claim

A1 = {"jobId": "job-a", "generation": 1}
B2 = {"jobId": "job-b", "generation": 2}


def kept(directory):
    with open(os.path.join(directory, CLAIM_FILE), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_first_claim_is_accepted_and_kept(tmp_path):
    assert _claim.fence(str(tmp_path), A1) is None
    assert kept(str(tmp_path)) == A1
    assert oct(os.stat(os.path.join(str(tmp_path), CLAIM_FILE)).st_mode & 0o777) == "0o600"


def test_an_older_generation_is_refused_and_nothing_is_written(tmp_path):
    _claim.fence(str(tmp_path), B2)
    before = os.path.getmtime(os.path.join(str(tmp_path), CLAIM_FILE))
    with pytest.raises(StellaError) as err:
        _claim.fence(str(tmp_path), A1)
    assert err.value.code == "claim_superseded"
    assert "job job-a (claim generation 1) was superseded on this project by job job-b (generation 2)" in err.value.reason
    assert "nothing was changed" in err.value.reason and "stella show job-b" in err.value.reason
    assert err.value.evidence == {"claim": A1, "acceptedClaim": B2}
    assert kept(str(tmp_path)) == B2 and os.path.getmtime(os.path.join(str(tmp_path), CLAIM_FILE)) == before


def test_a_newer_or_equal_generation_is_accepted(tmp_path):
    _claim.fence(str(tmp_path), A1)
    assert _claim.fence(str(tmp_path), B2) == A1 and kept(str(tmp_path)) == B2
    assert _claim.fence(str(tmp_path), B2) == B2  # the same job's later work (its rollback)


def test_a_look_without_accepting_writes_nothing(tmp_path):
    assert _claim.fence(str(tmp_path), A1, accept=False) is None
    assert not os.path.exists(os.path.join(str(tmp_path), CLAIM_FILE))
    _claim.fence(str(tmp_path), B2)
    with pytest.raises(StellaError):
        _claim.fence(str(tmp_path), A1, accept=False)


def test_work_without_a_claim_is_not_fenced(tmp_path):
    _claim.fence(str(tmp_path), B2)
    assert _claim.fence(str(tmp_path), None) is None and kept(str(tmp_path)) == B2


@pytest.mark.parametrize("value", [{}, {"jobId": "j"}, {"jobId": "", "generation": 1}, {"jobId": "j", "generation": 0},
                                   {"jobId": "j", "generation": True}, {"jobId": "j", "generation": "2"}, ["j", 1]])
def test_a_malformed_claim_is_an_invalid_payload(value):
    with pytest.raises(StellaError) as err:
        _claim.parse_claim(value)
    assert err.value.code == "invalid_payload"


def test_extra_keys_of_a_claim_stay_on_the_controller():
    assert _claim.parse_claim({"jobId": "j", "generation": 3, "projectKey": "t|p"}) == {"jobId": "j", "generation": 3}


def test_an_unreadable_accepted_claim_counts_as_none(tmp_path):
    (tmp_path / CLAIM_FILE).write_text("{not json")
    assert _claim.accepted_claim(str(tmp_path)) is None
    assert _claim.fence(str(tmp_path), A1) is None and kept(str(tmp_path)) == A1
