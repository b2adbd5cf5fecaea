"""The AWX / Automation Platform examples (extensions/awx): the ``awx import`` template refers only to
objects it defines (or that AWX ships: the Default organization, the Machine, Source Control and Container
Registry credential types), its job templates run playbooks of the example project in the Stella EE with the credentials they
need, the surveys and the credential types' injected variables are the variables those playbooks read, the
project's playbooks import playbooks the collection ships, and the project installs nothing from Galaxy.
tests/unit/test_awx_import.py imports the prepared document with awxkit's own import code."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWX = os.path.join(ROOT, "extensions", "awx")
PROJECT = os.path.join(AWX, "project")

with open(os.path.join(AWX, "stellaops-runtime.awx.template.json"), encoding="utf-8") as _handle:
    EXPORT = json.load(_handle)

ORGANIZATION = {"name": "Default", "type": "organization"}
SHIPPED_BY_AWX = [
    ORGANIZATION,
    {"name": "Machine", "kind": "ssh", "type": "credential_type"},
    {"name": "Source Control", "kind": "scm", "type": "credential_type"},
    {"name": "Container Registry", "kind": "registry", "type": "credential_type"},
]
STORE_TEMPLATES = {
    "Stella | Deploy",
    "Stella | Roll back",
    "Stella | Show job",
    "Stella | Target health",
    "Stella | Drift check",
}
TARGET_TEMPLATES = {"Stella | Deploy", "Stella | Roll back", "Stella | Preflight", "Stella | Drift check"}
TRAFFIC_TEMPLATES = {"Stella | Deploy", "Stella | Roll back"}
SIGNING_TEMPLATES = {"Stella | Deploy", "Stella | Roll back"}


def project_text(playbook):
    """The project playbook's text with the text of the collection playbooks it imports, and theirs."""
    with open(os.path.join(PROJECT, playbook), encoding="utf-8") as handle:
        pending = [handle.read()]
    texts, seen = [], set()
    while pending:
        text = pending.pop(0)
        texts.append(text)
        for imported in re.findall(r"import_playbook: stellaops\.runtime\.(\w+)", text):
            if imported not in seen:
                seen.add(imported)
                with open(os.path.join(ROOT, "playbooks", imported + ".yml"), encoding="utf-8") as handle:
                    pending.append(handle.read())
    return "".join(texts)


def natural_keys():
    """The natural key of every object the document defines, nested ones too, and those AWX ships."""
    keys = [json.dumps(k, sort_keys=True) for k in SHIPPED_BY_AWX]

    def walk(items):
        for item in items:
            if "natural_key" in item:
                keys.append(json.dumps(item["natural_key"], sort_keys=True))
            for related in (item.get("related") or {}).values():
                if isinstance(related, list):
                    walk(related)

    for items in EXPORT.values():
        walk(items)
    return keys


OBJECT_TYPES = {
    "organization",
    "credential_type",
    "credential",
    "execution_environment",
    "project",
    "inventory",
    "host",
    "group",
    "job_template",
    "workflow_job_template",
    "workflow_job_template_node",
}


def references(node):
    """Every reference of the document: a natural key outside an object's own ``natural_key``."""
    if isinstance(node, dict):
        if node.get("type") in OBJECT_TYPES:
            yield node
            return
        for key, value in node.items():
            if key != "natural_key":
                yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def template(name):
    return next(t for t in EXPORT["job_templates"] if t["name"] == name)


def credential_names(job_template):
    return {c["name"] for c in job_template["related"]["credentials"]}


def test_the_document_has_what_awx_import_reads_and_every_object_a_natural_key():
    assert set(EXPORT) == {
        "credential_types",
        "credentials",
        "execution_environments",
        "projects",
        "inventory",
        "job_templates",
        "workflow_job_templates",
    }
    for kind, items in EXPORT.items():
        for item in items:
            assert item["natural_key"]["name"] == item["name"], (kind, item["name"])


def test_every_reference_is_the_natural_key_of_an_object_the_document_defines_or_awx_ships():
    known = set(natural_keys())
    found = list(references(EXPORT))
    assert len(found) > 40
    for reference in found:
        assert json.dumps(reference, sort_keys=True) in known, reference


def test_the_group_names_its_hosts_by_their_full_natural_key():
    (inventory,) = EXPORT["inventory"]
    groups = {g["name"]: g for g in inventory["related"]["groups"]}
    hosts = [h["natural_key"] for h in inventory["related"]["hosts"]]
    assert "stella_targets" in groups
    assert groups["stella_targets"]["related"]["hosts"] == hosts
    for host in hosts:
        assert host["inventory"] == inventory["natural_key"]


@pytest.mark.parametrize("job_template", EXPORT["job_templates"], ids=lambda t: t["name"])
def test_each_job_template_runs_a_project_playbook_in_the_stella_ee(job_template):
    assert os.path.isfile(os.path.join(PROJECT, job_template["playbook"]))
    assert job_template["project"] == EXPORT["projects"][0]["natural_key"]
    assert job_template["inventory"] == EXPORT["inventory"][0]["natural_key"]
    assert job_template["execution_environment"] == EXPORT["execution_environments"][0]["natural_key"]
    text = project_text(job_template["playbook"])
    survey = (job_template["related"].get("survey_spec") or {}).get("spec", [])
    assert bool(survey) == job_template["survey_enabled"]
    for question in survey:
        assert re.search(r"\b%s\b" % question["variable"], text), (job_template["name"], question["variable"])
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"]


def test_each_job_template_has_the_credentials_its_playbook_needs():
    names = {t["name"] for t in EXPORT["job_templates"]}
    assert STORE_TEMPLATES | TARGET_TEMPLATES <= names
    for job_template in EXPORT["job_templates"]:
        credentials = credential_names(job_template)
        name = job_template["name"]
        assert ("Stella job store" in credentials) == (name in STORE_TEMPLATES), name
        assert ("Stella targets SSH" in credentials) == (name in TARGET_TEMPLATES), name
        assert ("Stella traffic controller" in credentials) == (name in TRAFFIC_TEMPLATES), name
        assert ("Stella evidence signing key" in credentials) == (name in SIGNING_TEMPLATES), name
        if name in STORE_TEMPLATES:
            assert re.search(r"\bstella_job_store\b", project_text(job_template["playbook"])), name
    assert "Stella registry" in credential_names(template("Stella | Deploy"))
    machine = next(c for c in EXPORT["credentials"] if c["name"] == "Stella targets SSH")
    assert machine["credential_type"] == SHIPPED_BY_AWX[1]


def test_the_credential_types_inject_what_the_playbooks_read_and_every_secret_field():
    users = {
        c["credential_type"]["name"]: [t for t in EXPORT["job_templates"] if c["name"] in credential_names(t)]
        for c in EXPORT["credentials"]
    }
    for credential_type in EXPORT["credential_types"]:
        fields = {f["id"] for f in credential_type["inputs"]["fields"]}
        secret = {f["id"] for f in credential_type["inputs"]["fields"] if f.get("secret")}
        assert secret, credential_type["name"]
        injectors = credential_type["injectors"]
        used = set()
        for section in ("extra_vars", "env", "file"):
            for template_text in injectors.get(section, {}).values():
                used |= set(re.findall(r"\b(\w+)\b", template_text)) & fields
        assert secret <= used, credential_type["name"]
        readers = users[credential_type["name"]]
        assert readers, credential_type["name"]
        for variable in injectors["extra_vars"]:
            for job_template in readers:
                assert re.search(r"\b%s\b" % variable, project_text(job_template["playbook"])), (
                    variable,
                    job_template["name"],
                )


def test_the_job_store_credential_type_gives_libpq_its_password_and_ca():
    store = next(t for t in EXPORT["credential_types"] if t["name"] == "Stella job store")
    assert store["injectors"]["extra_vars"] == {"stella_job_store": "{{ dsn }}"}
    assert store["injectors"]["env"]["PGPASSWORD"] == "{{ password }}"
    assert store["injectors"]["env"]["PGSSLROOTCERT"] == "{% if ca_certificate %}{{ tower.filename.ca }}{% endif %}"
    assert store["injectors"]["file"] == {"template.ca": "{{ ca_certificate }}"}
    assert store["inputs"]["required"] == ["dsn", "password"]


def test_the_template_carries_no_value_of_its_own_where_a_secret_url_or_image_goes():
    placeholder = re.compile(r"^@@[A-Z0-9_]+@@$")
    for credential in EXPORT["credentials"]:
        for field, value in credential["inputs"].items():
            assert placeholder.match(value), (credential["name"], field)
    (project,) = EXPORT["projects"]
    assert placeholder.match(project["scm_url"])
    assert placeholder.match(EXPORT["execution_environments"][0]["image"])


def test_the_workflow_deploys_then_on_failure_notifies_and_asks_approval_to_roll_back():
    (workflow,) = EXPORT["workflow_job_templates"]
    nodes = {node["identifier"]: node for node in workflow["related"]["workflow_nodes"]}
    assert nodes["deploy"]["unified_job_template"]["name"] == "Stella | Deploy"
    assert sorted(n["identifier"] for n in nodes["deploy"]["related"]["failure_nodes"]) == [
        "approve-rollback",
        "notify",
    ]
    assert nodes["deploy"]["related"]["success_nodes"] == []
    approval = nodes["approve-rollback"]
    assert "unified_job_template" not in approval and approval["related"]["create_approval_template"]["name"]
    assert [n["identifier"] for n in approval["related"]["success_nodes"]] == ["rollback"]
    assert nodes["rollback"]["unified_job_template"]["name"] == "Stella | Roll back"
    assert nodes["notify"]["unified_job_template"]["name"] == "Stella | Notify"
    for node in nodes.values():
        assert node["natural_key"]["workflow_job_template"] == workflow["natural_key"]
    # the deploy node's outcome names the job the rollback node rolls back
    assert "stella_job_outcome" in project_text("rollback.yml") and "stella_job_outcome" in project_text("notify.yml")
    assert "stella_job_outcome" in project_text("deploy.yml")
    assert nodes["deploy"]["extra_data"]["stella_auto_rollback"] == "false"
    deploy_survey = {q["variable"] for q in template("Stella | Deploy")["related"]["survey_spec"]["spec"]}
    assert {q["variable"] for q in workflow["related"]["survey_spec"]["spec"]} <= deploy_survey


def test_the_project_installs_nothing_from_galaxy():
    with open(os.path.join(PROJECT, "collections", "requirements.yml"), encoding="utf-8") as handle:
        requirements = yaml.safe_load(handle)
    for collection in requirements.get("collections") or []:
        assert isinstance(collection, dict) and collection.get("type") in ("url", "file", "git"), collection


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


def test_the_drift_check_template_runs_the_collections_verify_playbook_on_an_hourly_schedule():
    drift = template("Stella | Drift check")
    with open(os.path.join(PROJECT, drift["playbook"]), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    assert [p.get("ansible.builtin.import_playbook") for p in plays] == ["stellaops.runtime.verify"]
    assert plays[0]["vars"]["stella_hosts"] == "stella_targets"
    text = project_text(drift["playbook"])
    assert "stellaops.runtime.stella_inspect" in text and "step: drift" in text
    # the template's own extra vars hold the switch the docs name; the schedule asks nothing
    assert yaml.safe_load(drift["extra_vars"]) == {"stella_verify_fail_on_drift": True}
    assert re.search(r"\bstella_verify_fail_on_drift\b", text)
    assert not drift["survey_enabled"] and not drift["ask_variables_on_launch"]
    (schedule,) = drift["related"]["schedules"]
    assert schedule["natural_key"] == {
        "unified_job_template": drift["natural_key"],
        "name": schedule["name"],
        "type": "schedule",
    }
    assert schedule["unified_job_template"] == drift["natural_key"]
    assert schedule["enabled"] is True and schedule["extra_data"] == {}
    assert re.match(r"^DTSTART:\d{8}T\d{6}Z RRULE:FREQ=HOURLY;INTERVAL=1$", schedule["rrule"]), schedule["rrule"]
    others = [
        t["name"] for t in EXPORT["job_templates"] + EXPORT["workflow_job_templates"] if t["related"]["schedules"]
    ]
    assert others == ["Stella | Drift check"]


def test_the_signing_key_credential_type_writes_the_key_to_a_file_and_injects_its_path():
    signing = next(t for t in EXPORT["credential_types"] if t["name"] == "Stella evidence signing key")
    assert signing["injectors"]["file"] == {"template.signing_key": "{{ private_key }}"}
    assert signing["injectors"]["extra_vars"]["stella_evidence_signing_key"] == "{{ tower.filename.signing_key }}"
    assert {f["id"] for f in signing["inputs"]["fields"] if f.get("secret")} == {"private_key", "passphrase"}
    for name in SIGNING_TEMPLATES:
        text = project_text(template(name)["playbook"])
        assert re.search(r"\bstella_evidence_signing_key\b", text) and "stella_evidence_signing_passphrase" in text
