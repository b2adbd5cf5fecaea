"""The target's fence: work carrying a claim generation older than the newest its store got accepted for the
project is refused with ``claim_superseded`` and changes nothing; a claim of another store takes the project
over (recorded); a missing or unreadable claim file fails closed (``claim_lost``) for work not shown newer
than the job whose sticker runs."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    CLAIM_FILE,
    CLAIM_STORES_KEPT,
    STICKER_FILE,
    generated_job_id,
    job_is_newer,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.host import claim as _claim

AT = "2026-12-07T18:00:00.000000Z"
J1 = "job-20261207T170000-0000000a"  # generated job ids, in the order they were planned
J2 = "job-20261207T170500-0000000b"
J3 = "job-20261207T171000-0000000c"
A1 = {"jobId": J1, "generation": 1, "storeId": "store-a"}
A2 = {"jobId": J2, "generation": 2, "storeId": "store-a"}
B1 = {"jobId": J3, "generation": 1, "storeId": "store-b"}


def path(directory, name=CLAIM_FILE):
    return os.path.join(str(directory), name)


def kept(directory):
    with open(path(directory), encoding="utf-8") as handle:
        return json.load(handle)


def fence(directory, claim, accept=True):
    return _claim.fence(str(directory), claim, accept=accept, at=AT)


def sticker(directory, job_id):
    with open(path(directory, STICKER_FILE), "w", encoding="utf-8") as handle:
        json.dump({"jobId": job_id, "manifestHash": "sha256:" + "0" * 64}, handle)


def test_a_first_claim_is_accepted_and_kept(tmp_path):
    assert fence(tmp_path, A1) == {}
    assert kept(tmp_path) == dict(A1, stores=[A1], takeovers=[])
    assert oct(os.stat(path(tmp_path)).st_mode & 0o777) == "0o600"


def test_an_older_generation_of_the_same_store_is_refused_and_nothing_is_written(tmp_path):
    fence(tmp_path, A2)
    before = (os.path.getmtime(path(tmp_path)), kept(tmp_path))
    with pytest.raises(StellaError) as err:
        fence(tmp_path, A1)
    assert err.value.code == "claim_superseded"
    assert (
        "job %s (claim generation 1 of store store-a) was superseded on this project by job %s (generation 2)"
        % (J1, J2)
    ) in err.value.reason
    assert "nothing was changed" in err.value.reason and "stella show %s" % J2 in err.value.reason
    assert err.value.evidence == {"claim": A1, "acceptedClaim": A2}
    assert (os.path.getmtime(path(tmp_path)), kept(tmp_path)) == before


def test_a_newer_or_equal_generation_is_accepted(tmp_path):
    fence(tmp_path, A1)
    assert fence(tmp_path, A2) == {} and kept(tmp_path)["jobId"] == J2
    assert fence(tmp_path, A2) == {}  # the same job's later work (its rollback)


def test_the_same_generation_held_by_another_job_of_the_store_is_refused(tmp_path):
    fence(tmp_path, A2)
    with pytest.raises(StellaError) as err:
        fence(tmp_path, dict(A2, jobId=J3))
    assert err.value.code == "claim_superseded" and kept(tmp_path)["jobId"] == J2


def test_a_claim_of_another_store_takes_the_project_over_and_the_takeover_is_kept(tmp_path):
    fence(tmp_path, A2)
    assert fence(tmp_path, B1) == {"claimTakeover": A2}  # generation 1 < 2, but of another store
    document = kept(tmp_path)
    assert {key: document[key] for key in ("jobId", "generation", "storeId")} == B1
    assert document["stores"] == [B1, A2]
    assert document["takeovers"] == [dict(A2, byStoreId="store-b", byJobId=J3, at=AT)]


def test_each_store_is_fenced_by_its_own_newest_claim_after_a_takeover(tmp_path):
    """The frozen controller of store A, whose job was taken over inside A before store B took the
    project over, is still refused: the file keeps A's newest claim."""
    fence(tmp_path, A2)
    fence(tmp_path, B1)
    with pytest.raises(StellaError) as err:
        fence(tmp_path, A1)
    assert err.value.code == "claim_superseded" and err.value.evidence["acceptedClaim"] == A2
    assert fence(tmp_path, dict(A2, jobId="job-20261207T172000-0000000d", generation=3)) == {"claimTakeover": B1}


def test_the_file_keeps_the_newest_claim_of_the_most_recent_stores_only(tmp_path):
    for number in range(CLAIM_STORES_KEPT + 4):
        fence(tmp_path, {"jobId": J1, "generation": 5, "storeId": "store-%02d" % number})
    stores = kept(tmp_path)["stores"]
    assert len(stores) == CLAIM_STORES_KEPT and stores[0]["storeId"] == "store-%02d" % (CLAIM_STORES_KEPT + 3)
    assert len(kept(tmp_path)["takeovers"]) == _claim.TAKEOVERS_KEPT


def test_a_file_from_before_stores_had_ids_reads_as_one_unnamed_store(tmp_path):
    with open(path(tmp_path), "w", encoding="utf-8") as handle:
        json.dump({"jobId": J1, "generation": 7}, handle)
    with pytest.raises(StellaError) as err:  # a claim without a store id is of that same unnamed store
        fence(tmp_path, {"jobId": J2, "generation": 6})
    assert err.value.code == "claim_superseded"
    legacy = {"storeId": None, "jobId": J1, "generation": 7}
    assert fence(tmp_path, A1) == {"claimTakeover": legacy}
    assert kept(tmp_path)["stores"] == [A1, legacy]


def test_a_look_without_accepting_writes_nothing(tmp_path):
    assert fence(tmp_path, A1, accept=False) == {}
    assert not os.path.exists(path(tmp_path))
    fence(tmp_path, A2)
    with pytest.raises(StellaError):
        fence(tmp_path, A1, accept=False)
    assert fence(tmp_path, B1, accept=False) == {} and kept(tmp_path)["storeId"] == "store-a"


def test_work_without_a_claim_is_not_fenced(tmp_path):
    fence(tmp_path, A2)
    assert fence(tmp_path, None) == {} and kept(tmp_path)["jobId"] == J2


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"jobId": "j"},
        {"jobId": "", "generation": 1},
        {"jobId": "j", "generation": 0},
        {"jobId": "j", "generation": True},
        {"jobId": "j", "generation": "2"},
        ["j", 1],
        {"jobId": "j", "generation": 1, "storeId": ""},
        {"jobId": "j", "generation": 1, "storeId": 7},
    ],
)
def test_a_malformed_claim_is_an_invalid_payload(value):
    with pytest.raises(StellaError) as err:
        _claim.parse_claim(value)
    assert err.value.code == "invalid_payload"


def test_extra_keys_of_a_claim_stay_on_the_controller():
    assert _claim.parse_claim({"jobId": "j", "generation": 3, "projectKey": "t|p", "storeId": "s"}) == {
        "jobId": "j",
        "generation": 3,
        "storeId": "s",
    }


# ------------------------------------------------------------------ a missing or unreadable claim file
@pytest.mark.parametrize("damage", ["missing", "garbled", "not-an-object", "bad-claim", "binary"])
def test_a_lost_claim_file_refuses_work_of_a_job_older_than_the_stickers(tmp_path, damage):
    """The frozen-controller case with the file gone: job J1's late work where job J2's release runs."""
    fence(tmp_path, A2)
    sticker(tmp_path, J2)
    content = {
        "missing": None,
        "garbled": b"{not json",
        "not-an-object": b"[1, 2]",
        "bad-claim": b'{"jobId": "x", "generation": -1}',
        "binary": b"\xff\xfe\x00",
    }[damage]
    os.remove(path(tmp_path))
    if content is not None:
        with open(path(tmp_path), "wb") as handle:
            handle.write(content)
    with pytest.raises(StellaError) as err:
        fence(tmp_path, A1)
    assert err.value.code == "claim_lost"
    problem = "missing" if damage == "missing" else "unreadable"
    assert err.value.reason.startswith(
        "job %s started before job %s, whose release this project runs, and the "
        "project's .stella-claim.json is %s: nothing was changed" % (J1, J2, problem)
    )
    assert err.value.evidence == {"claim": A1, "claimFile": problem, "stickerJobId": J2}
    assert os.path.exists(path(tmp_path)) == (content is not None)


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_a_lost_claim_file_accepts_a_newer_job_and_is_written_again(tmp_path, damage):
    sticker(tmp_path, J2)
    if damage == "garbled":
        with open(path(tmp_path), "wb") as handle:
            handle.write(b"{not json")
    problem = "missing" if damage == "missing" else "unreadable"
    assert fence(tmp_path, B1) == {"claimFileRecreated": {"was": problem, "stickerJobId": J2}}
    assert kept(tmp_path)["jobId"] == J3
    assert fence(tmp_path, dict(A2, generation=1)) == {"claimTakeover": B1}  # readable again: stores apart


def test_a_lost_claim_file_accepts_the_stickers_own_job(tmp_path):
    sticker(tmp_path, J2)
    assert fence(tmp_path, A2) == {"claimFileRecreated": {"was": "missing", "stickerJobId": J2}}


def test_an_unreadable_file_refuses_a_job_whose_order_is_unknown_a_missing_one_does_not(tmp_path):
    """A damaged file proves claims were kept here; a missing one may never have existed (the project was
    deployed by a module used on its own, whose sticker names a job id derived from its inputs)."""
    sticker(tmp_path, "job-5f2a9c0e1d3b4a67")
    custom = {"jobId": "nightly-42", "generation": 9, "storeId": "store-a"}
    assert fence(tmp_path, custom, accept=False) == {}
    with open(path(tmp_path), "wb") as handle:
        handle.write(b"\x00")
    with pytest.raises(StellaError) as err:
        fence(tmp_path, custom)
    assert err.value.code == "claim_lost" and "cannot be shown newer than job job-5f2a9c0e1d3b4a67" in err.value.reason


def test_a_missing_file_with_no_sticker_is_a_first_claim(tmp_path):
    assert fence(tmp_path, A1) == {} and kept(tmp_path)["jobId"] == J1


def test_job_ids_tell_their_order_within_one_scheme_only():
    assert job_is_newer(J2, J1) is True and job_is_newer(J1, J2) is False and job_is_newer(J1, J1) is False
    assert job_is_newer("awx-12", "awx-9") is True and job_is_newer("tower-3", "tower-30") is False
    assert job_is_newer("awx-12", J1) is None and job_is_newer("nightly", J1) is None
    assert job_is_newer(J1, None) is None
    assert generated_job_id("2026-12-07T17:00:00.123456Z", "0000000a") == J1
