"""The AWX / Automation Platform examples (extensions/awx): the ``awx import`` document refers only to
objects it defines, its job templates run playbooks of the example project, the surveys and the credential
types' injected extra vars are the variables those playbooks read, and the project's playbooks import
playbooks the collection ships."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWX = os.path.join(ROOT, "extensions", "awx")
PROJECT = os.path.join(AWX, "project")

with open(os.path.join(AWX, "stellaops-runtime.awx.json"), encoding="utf-8") as _handle:
    EXPORT = json.load(_handle)


def project_text(playbook):
    """The project playbook's text with the text of the collection playbooks it imports."""
    with open(os.path.join(PROJECT, playbook), encoding="utf-8") as handle:
        text = handle.read()
    for imported in re.findall(r"import_playbook: stellaops\.runtime\.(\w+)", text):
        with open(os.path.join(ROOT, "playbooks", imported + ".yml"), encoding="utf-8") as handle:
            text += handle.read()
    return text


def names(kind):
    return {item["name"] for item in EXPORT[kind]}


def test_the_document_has_what_awx_import_reads_and_every_object_a_natural_key():
    assert set(EXPORT) == {"credential_types", "credentials", "projects", "inventory", "job_templates",
                           "workflow_job_templates"}
    for kind, items in EXPORT.items():
        for item in items:
            assert item["natural_key"]["name"] == item["name"], (kind, item["name"])


@pytest.mark.parametrize("template", EXPORT["job_templates"], ids=lambda t: t["name"])
def test_each_job_template_runs_a_project_playbook_with_known_project_inventory_and_credentials(template):
    assert os.path.isfile(os.path.join(PROJECT, template["playbook"]))
    assert template["project"]["name"] in names("projects")
    assert template["inventory"]["name"] in names("inventory")
    for credential in template["related"]["credentials"]:
        assert credential["name"] in names("credentials")
        assert credential["credential_type"]["name"] in names("credential_types")
    text = project_text(template["playbook"])
    for question in (template["related"].get("survey_spec") or {}).get("spec", []):
        assert re.search(r"\b%s\b" % question["variable"], text), (template["name"], question["variable"])
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"]


def test_the_credential_types_inject_secret_fields_as_the_extra_vars_the_deploy_playbook_reads():
    deploy = project_text("deploy.yml")
    for credential_type in EXPORT["credential_types"]:
        secret = {f["id"] for f in credential_type["inputs"]["fields"] if f.get("secret")}
        assert secret, credential_type["name"]
        injected = credential_type["injectors"]["extra_vars"]
        for variable, template in injected.items():
            assert re.search(r"\b%s\b" % variable, deploy), variable
            assert re.fullmatch(r"\{\{ (\w+) \}\}", template)
        assert secret <= {re.fullmatch(r"\{\{ (\w+) \}\}", t).group(1) for t in injected.values()}
    for credential in EXPORT["credentials"]:
        kind = next(t for t in EXPORT["credential_types"] if t["name"] == credential["credential_type"]["name"])
        for field in kind["inputs"]["fields"]:
            if field.get("secret"):
                assert credential["inputs"][field["id"]] == "", "an example must not carry a secret"


def test_the_workflow_deploys_then_notifies_on_failure():
    (workflow,) = EXPORT["workflow_job_templates"]
    nodes = {node["identifier"]: node for node in workflow["related"]["workflow_nodes"]}
    assert nodes["deploy"]["unified_job_template"]["name"] == "Stella | Deploy"
    assert [n["identifier"] for n in nodes["deploy"]["related"]["failure_nodes"]] == ["notify"]
    assert nodes["deploy"]["related"]["success_nodes"] == []
    assert nodes["notify"]["unified_job_template"]["name"] == "Stella | Notify"
    assert {n["unified_job_template"]["name"] for n in nodes.values()} <= names("job_templates")
    assert "stella_job_outcome" in project_text("notify.yml")


def test_the_inventory_has_the_target_group_the_job_runs_on():
    (inventory,) = EXPORT["inventory"]
    groups = {g["name"]: g for g in inventory["related"]["groups"]}
    hosts = {h["name"] for h in inventory["related"]["hosts"]}
    assert "stella_targets" in groups
    assert {h["name"] for h in groups["stella_targets"]["related"]["hosts"]} <= hosts


@pytest.mark.parametrize("playbook", sorted(p for p in os.listdir(PROJECT) if p.endswith(".yml")))
def test_project_playbooks_import_playbooks_the_collection_ships(playbook):
    with open(os.path.join(PROJECT, playbook), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    for play in plays:
        imported = play.get("ansible.builtin.import_playbook")
        if imported:
            namespace, collection, name = imported.split(".")
            assert (namespace, collection) == ("stellaops", "runtime")
            assert os.path.isfile(os.path.join(ROOT, "playbooks", name + ".yml")), imported


def test_the_example_release_is_a_valid_release_for_an_inventory_host():
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import plan as _job_plan  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import schema as _release  # pylint: disable=import-outside-toplevel

    with open(os.path.join(PROJECT, "releases", "example.yml"), encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    identity = _job_plan.target_identity("vm-01", {"ansible_host": "10.0.0.1"}, document["target"]["type"])
    _release.validate_release(_job_plan.release_for(document, identity, "awx-1"))
