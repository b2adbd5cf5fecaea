"""The molecule scenarios run from a plain checkout (docs/molecule.md): the base config and everything
the scenarios read name nothing of this repository's lab, every setting they need comes from a documented
scenario variable, the lab's settings live in the override file alone, each sequence starts with
`syntax`, the instance image is built from the collection's own recipe, and `make molecule-run` is
`molecule test --all` from the collection root with the lab's override."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MOLECULE = os.path.join(ROOT, "extensions", "molecule")
LAB_OVERRIDE = os.path.join(MOLECULE, "lab.yml")
# What only this repository's lab has: its description, its registry name, its target images, its
# Compose binary, the variables its Makefile sets.
LAB_MARKERS = (
    "stella_lab",
    "STELLA_LAB",
    "lab.json",
    ".lab/",
    "registry.lab",
    "stella-target",
    "compose_binary",
    "STELLA_COLLECTIONS_PATH",
    "172.17.0.1",
)
SCENARIO_VARIABLES = {
    "stella_molecule_registry": "STELLA_MOLECULE_REGISTRY",
    "stella_molecule_registry_ip": "STELLA_MOLECULE_REGISTRY_IP",
    "stella_molecule_image_ref": "STELLA_MOLECULE_IMAGE_REF",
    "stella_molecule_broken_image_ref": "STELLA_MOLECULE_BROKEN_IMAGE_REF",
}
# ${NAME} or ${NAME:-default}, molecule's interpolation in its config files
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-)?([^}]*)\}")


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def load(path):
    return yaml.safe_load(read(path))


def portable_files():
    """Every file the scenarios read with the portable settings: all of extensions/molecule but lab.yml."""
    files = sorted(
        p
        for p in glob.glob(os.path.join(MOLECULE, "**", "*"), recursive=True)
        if os.path.isfile(p) and p != LAB_OVERRIDE
    )
    assert len(files) >= 11, files
    return files


def scenario_files():
    files = sorted(glob.glob(os.path.join(MOLECULE, "*", "molecule.yml")))
    assert {os.path.basename(os.path.dirname(p)) for p in files} == {"default", "rollback"}
    return files


def makefile_recipe(target):
    """The recipe lines of ``target`` in the Makefile, joined (continuations resolved)."""
    lines = read(os.path.join(ROOT, "Makefile")).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(target + ":"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return " ".join(recipe).replace("\\ ", "")


def lab_markers_in(text):
    return [marker for marker in LAB_MARKERS if marker in text]


@pytest.mark.parametrize("path", portable_files(), ids=lambda p: os.path.relpath(p, MOLECULE))
def test_portable_files_name_nothing_of_the_lab(path):
    assert lab_markers_in(read(path)) == []


def test_the_marker_check_finds_the_lab_where_it_is():
    # the same check on the override, which must name the lab: the check can fail
    assert {"stella_lab", "STELLA_LAB", "lab.json"} <= set(lab_markers_in(read(LAB_OVERRIDE)))


@pytest.mark.parametrize(
    "path",
    [os.path.join(MOLECULE, "config.yml"), LAB_OVERRIDE] + scenario_files(),
    ids=lambda p: os.path.relpath(p, MOLECULE),
)
def test_config_placeholders_need_no_variable(path):
    """Molecule refuses ``${NAME:-}`` and renders an unset ``${NAME}`` as nothing: every placeholder is
    molecule's own or has a non-empty default, so a run with no variable set still renders."""
    for name, operator, default in PLACEHOLDER.findall(read(path)):
        assert name.startswith("MOLECULE_") or (operator == ":-" and default.strip()), (name, operator, default)


def test_scenario_variables_come_from_the_environment():
    group_vars = load(os.path.join(MOLECULE, "config.yml"))["provisioner"]["inventory"]["group_vars"]["all"]
    for var, env in SCENARIO_VARIABLES.items():
        assert group_vars[var] == "{{ lookup('ansible.builtin.env', '%s') }}" % env
    platforms = load(os.path.join(MOLECULE, "config.yml"))["platforms"]
    assert {p["image"] for p in platforms} == {"${STELLA_MOLECULE_IMAGE:-stella-molecule:trixie}"}


def test_every_variable_the_scenarios_read_is_documented():
    names = set()
    for path in portable_files():
        names.update(re.findall(r"STELLA_MOLECULE_[A-Z_]+", read(path)))
    assert set(SCENARIO_VARIABLES.values()) | {"STELLA_MOLECULE_IMAGE"} <= names
    doc = read(os.path.join(ROOT, "docs", "molecule.md"))
    assert sorted(name for name in names if "`%s`" % name not in doc) == []


def test_the_lab_override_sets_the_scenario_variables_and_nothing_else():
    override = load(LAB_OVERRIDE)
    assert list(override) == ["provisioner"]
    assert override["provisioner"] == {
        "inventory": {"group_vars": {"all": override["provisioner"]["inventory"]["group_vars"]["all"]}}
    }
    assert set(override["provisioner"]["inventory"]["group_vars"]["all"]) == set(SCENARIO_VARIABLES) | {"stella_lab"}


def test_every_sequence_checks_the_syntax_before_creating_instances():
    for path in scenario_files():
        sequence = load(path)["scenario"]["test_sequence"]
        assert "syntax" in sequence and sequence.index("syntax") < sequence.index("create"), (path, sequence)
        assert sequence[-1] == "destroy"


def test_the_instance_image_recipe():
    dockerfile = read(os.path.join(MOLECULE, "image", "Dockerfile"))
    assert re.search(r"^ARG BASE=debian:trixie$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE\}$", dockerfile, re.M)
    install = re.search(r"apt-get install[^&]*", dockerfile).group(0).split()
    assert {"docker.io", "docker-cli", "docker-compose", "python3", "iptables"} <= set(install)
    assert "COPY entrypoint.sh " in dockerfile
    entrypoint = read(os.path.join(MOLECULE, "image", "entrypoint.sh"))
    assert entrypoint.startswith("#!/bin/sh\n") and os.access(os.path.join(MOLECULE, "image", "entrypoint.sh"), os.X_OK)
    assert re.search(r"^exec dockerd .*--pidfile /var/run/docker\.pid", entrypoint, re.M)
    assert "insecure-registr" not in entrypoint.split("set -e", 1)[1]  # registries come from daemon.json


def test_make_molecule_run_is_molecule_test_all_from_the_collection_root_with_the_lab_override():
    run = makefile_recipe("molecule-run")
    assert "cd " not in run
    assert run.endswith("molecule -c extensions/molecule/config.yml -c extensions/molecule/lab.yml test --all")
    image = makefile_recipe("molecule-image")
    assert re.fullmatch(
        r"docker build -q -t stella-molecule:trixie --build-arg BASE=stella-target:trixie "
        r"extensions/molecule/image",
        image,
    )
    assert "molecule-image" in read(os.path.join(ROOT, "Makefile")).split("\nmolecule-run:", 1)[1].splitlines()[0]
