"""Evidence on disk is never replaced by another job's: two job stores sharing one evidence directory with
the same caller job id (two AWX, a demo store and a test store) get ``evidence_conflict``, before anything
is written, at the new job's start and at every write."""

from __future__ import annotations

import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence import writer


def test_the_same_bytes_again_are_kept_other_bytes_are_refused_before_anything_is_written(tmp_path):
    root = str(tmp_path)
    first, _stored = writer.keep_documents(root, "jobs/awx-7", {"job.json": {"jobId": "awx-7", "store": "a"}})
    again, _stored = writer.keep_documents(root, "jobs/awx-7", {"job.json": {"jobId": "awx-7", "store": "a"}})
    assert first == again
    with pytest.raises(StellaError) as err:
        writer.keep_documents(
            root, "jobs/awx-7", {"report.html": b"<html>b</html>", "job.json": {"jobId": "awx-7", "store": "b"}}
        )
    assert err.value.code == "evidence_conflict" and "job.json" in err.value.reason
    assert not os.path.exists(os.path.join(root, "jobs", "awx-7", "report.html"))  # nothing of the call written
    with open(first["job.json"]["path"], encoding="utf-8") as handle:
        assert '"store": "a"' in handle.read()


def test_a_new_job_whose_evidence_directory_exists_is_refused(tmp_path):
    writer.check_new_job_directory(str(tmp_path), "awx-7")  # nothing there yet
    writer.check_new_job_directory("", "awx-7")  # no evidence directory: nothing to check
    os.makedirs(os.path.join(str(tmp_path), "jobs", "awx-7"))
    with pytest.raises(StellaError) as err:
        writer.check_new_job_directory(str(tmp_path), "awx-7")
    assert err.value.code == "evidence_conflict" and "nothing was changed" in err.value.reason


def test_check_mode_writes_nothing_and_refuses_nothing_it_would_not_write(tmp_path):
    entries, stored = writer.keep_documents(str(tmp_path), "jobs/j", {"job.json": {"a": 1}}, check_mode=True)
    assert not os.path.exists(entries["job.json"]["path"]) and list(stored) == ["jobs/j/job.json"]
