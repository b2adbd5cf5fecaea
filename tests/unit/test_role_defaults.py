"""The roles' YAML cannot import the contract's defaults, so they are written there again: each role's
``defaults/main.yml`` must match its ``meta/argument_specs.yml``, and every default the contract owns
must be the value of its one home in Python (a change there fails here until the YAML follows)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.stellaops.runtime.plugins.module_utils.contract import vocabulary as _contract
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import install_request as _runtime_install
from ansible_collections.stellaops.runtime.plugins.module_utils.contract import versions as _versions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(
    name
    for name in os.listdir(os.path.join(ROOT, "roles"))
    if os.path.isfile(os.path.join(ROOT, "roles", name, "meta", "argument_specs.yml"))
)

# (role, variable): the Python value its default must be.
CONTRACT_DEFAULTS = {
    ("deploy", "deploy_min_engine_version"): _versions.DEFAULT_MIN_ENGINE,
    ("deploy", "deploy_min_compose_version"): _versions.DEFAULT_MIN_COMPOSE,
    ("deploy", "deploy_wait_timeout"): _contract.DEFAULT_WAIT_TIMEOUT,
    ("deploy", "deploy_keep_revisions"): _contract.DEFAULT_KEEP_REVISIONS,
    ("preflight", "preflight_work_directory"): _contract.DEFAULT_WORK_DIRECTORY,
    ("preflight", "preflight_minimum_free_disk_bytes"): _contract.DEFAULT_MINIMUM_FREE_DISK_BYTES,
    ("preflight", "preflight_registry_reachability_mode"): _contract.DEFAULT_REACHABILITY_MODE,
    ("preflight", "preflight_min_engine_version"): _versions.DEFAULT_MIN_ENGINE,
    ("preflight", "preflight_min_compose_version"): _versions.DEFAULT_MIN_COMPOSE,
    ("runtime_install", "runtime_install_min_engine_version"): _versions.DEFAULT_MIN_ENGINE,
    ("runtime_install", "runtime_install_min_compose_version"): _versions.DEFAULT_MIN_COMPOSE,
    ("runtime_install", "runtime_install_engine_packages"): list(_runtime_install.DEFAULT_ENGINE_PACKAGES),
    ("runtime_install", "runtime_install_compose_packages"): list(_runtime_install.DEFAULT_COMPOSE_PACKAGES),
    ("runtime_install", "runtime_install_start_timeout"): _runtime_install.DEFAULT_START_TIMEOUT,
    ("runtime_install", "runtime_install_install_timeout"): _runtime_install.DEFAULT_INSTALL_TIMEOUT,
    ("runtime_install", "runtime_install_bundle_target_dir"): _runtime_install.BUNDLE_TARGET_DIR,
    ("runtime_install", "runtime_install_evidence_path"): _runtime_install.EVIDENCE_PATH,
}


def load(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def entry_points(role):
    return load("roles", role, "meta", "argument_specs.yml")["argument_specs"]


def spec_options(role, entry_point="main"):
    return entry_points(role)[entry_point]["options"]


def test_the_roles_with_argument_specs_are_found():
    assert {"deploy", "preflight", "runtime_install"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_defaults_are_its_argument_specs_defaults(role):
    """Every entry point's defaults are the role's defaults; every default is an option of one."""
    defaults = load("roles", role, "defaults", "main.yml")
    options = set()
    for entry_point in entry_points(role):
        spec = spec_options(role, entry_point)
        options |= set(spec)
        for name, option in spec.items():
            if "default" in option:
                assert defaults.get(name) == option["default"], (entry_point, name)
    assert set(defaults) <= options, "defaults that are no option of the role"


def test_the_job_passes_no_contract_default_to_the_roles():
    """The job's playbooks leave the contract's defaults to stella_job (Python): no literal of them."""
    for name in ("job.yml", "job_close.yml", "rollback.yml"):
        with open(os.path.join(ROOT, "playbooks", name), encoding="utf-8") as handle:
            text = handle.read()
        for literal in (
            _versions.DEFAULT_MIN_ENGINE,
            _versions.DEFAULT_MIN_COMPOSE,
            "default(%d)" % _contract.DEFAULT_WAIT_TIMEOUT,
        ):
            assert literal not in text, (name, literal)


@pytest.mark.parametrize("role, variable", sorted(CONTRACT_DEFAULTS))
def test_a_contract_default_in_a_role_is_its_python_value(role, variable):
    expected = CONTRACT_DEFAULTS[(role, variable)]
    assert load("roles", role, "defaults", "main.yml")[variable] == expected
    assert spec_options(role)[variable]["default"] == expected
