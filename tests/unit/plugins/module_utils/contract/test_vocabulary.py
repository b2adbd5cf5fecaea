"""Where evidence lies: every target of a job has its own deployment directory, whatever its id."""

from __future__ import annotations

import re

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract import vocabulary as ct


@pytest.mark.parametrize("name", ["tgt-01", "10.0.0.7", "a", "web_1.prod", "x" * 100])
def test_a_plain_name_is_its_own_path_component(name):
    assert ct.path_component(name) == name


@pytest.mark.parametrize("name", ["ops@tgt-b", "host:22", "a+b", "../etc", ".hidden", "x" * 101, "/", "-lead", "é"])
def test_any_other_name_becomes_one_plain_component_with_a_digest_of_it(name):
    component = ct.path_component(name)
    assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*__[0-9a-f]{12}\Z", component), component
    assert "/" not in component and component not in (".", "..") and len(component) <= 80


def test_names_that_clean_up_alike_stay_apart():
    assert len({ct.path_component(n) for n in ("a@b", "a+b", "a:b", "a_b")}) == 4


def test_each_target_of_a_job_has_its_own_deployment_directory_under_the_project():
    first = ct.deployment_evidence_dir("/e", "shop", "job-1", "tgt-a")
    second = ct.deployment_evidence_dir("/e", "shop", "job-1", "ops@tgt-b")
    assert first == "/e/shop/job-1/tgt-a"
    assert first != second and second.startswith(ct.project_evidence_dir("/e", "shop", "job-1") + "/")
