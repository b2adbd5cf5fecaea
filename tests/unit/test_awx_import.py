"""The ``awx import`` document of extensions/awx, imported by awxkit's own import code.

``awx import`` is ``awxkit.api.pages.api.ApiV2.import_assets``: it orders the resources by awxkit's page
dependencies, looks every object and every reference up by its natural key (``PageCache.get_by_natural_key``,
which reads the natural keys ``Page.get_natural_key`` builds from each page class's ``NATURAL_KEY``), creates
or updates the objects, then attaches the related sets (``_assign_related``: group hosts, job template
credentials, workflow node edges, the drift template's schedule through the template's ``schedules/``) and
posts the survey specs and approval templates. Here that code runs
unchanged against an AWX that lives in memory: only the HTTP transport under awxkit's ``Connection`` (a
``requests`` adapter) is replaced. The in-memory AWX answers as AWX 24.6.1 does for what the import asks
(the ``OPTIONS`` POST fields of each list, filtered lists, detail pages with their ``related`` links,
creation, attach with ``204``), refuses what AWX refuses (a custom credential type whose injectors name an
unknown field, credential inputs its type does not define, two credentials of one type on a job template,
a host of another inventory in a group, a job template whose playbook the project's first update did not
find, an invalid survey, a schedule whose rrule, name, variables or template AWX would not take), and
refuses a reference that arrives null: the document never asks for a null
one, so a null one is a natural key awxkit could not resolve (awxkit sends those as null).

A document passes when awxkit reports no error, and the objects it made are wired as the document says.
Copies of the document with a broken reference (a host reference without its ``inventory``, a credential or
job template the document does not define) fail the same check. awxkit's own export, run against what the
import made, writes the same natural keys and references as the document.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import logging
import os
import re
import stat
import urllib.parse

import pytest
import requests
import yaml
from jinja2 import StrictUndefined
from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from awxkit.api import Api
from awxkit.api.client import Connection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWX = os.path.join(ROOT, "extensions", "awx")
PROJECT = os.path.join(AWX, "project")
SERVER = "https://awx.test"

_spec = importlib.util.spec_from_file_location("prepare_import", os.path.join(AWX, "prepare_import.py"))
prepare_import = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prepare_import)

with open(prepare_import.TEMPLATE, encoding="utf-8") as _handle:
    TEMPLATE = json.load(_handle)

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
VALUES = {
    "SCM_URL": "https://git.acme.internal/ops/stella-deployments.git",
    "SCM_BRANCH": "main",
    "SCM_USERNAME": "stella-sync",
    "SCM_PASSWORD": "scm-token-1",
    "SCM_SSH_KEY": None,
    "EE_IMAGE": "registry.acme.internal/stella/stellaops-runtime-ee:0.3.0",
    "EE_REGISTRY_HOST": "registry.acme.internal",
    "EE_REGISTRY_USERNAME": "awx-pull",
    "EE_REGISTRY_PASSWORD": "pull-1",
    "STORE_DSN": "postgresql://stella@db.acme.internal:5432/stella?sslmode=verify-full",
    "STORE_PASSWORD": "store-secret-1",
    "STORE_CA_CERTIFICATE": CA,
    "SSH_USERNAME": "deploy",
    "SSH_PRIVATE_KEY": SSH_KEY,
    "SSH_KEY_PASSPHRASE": None,
    "REGISTRY_HOST": "registry.acme.internal",
    "REGISTRY_USERNAME": "deploy",
    "REGISTRY_PASSWORD": "registry-secret-1",
    "TRAFFIC_URL": "https://router.acme.internal/stella/shift",
    "TRAFFIC_ROLLBACK_URL": None,
    "TRAFFIC_TOKEN": "traffic-token-1",
}
HOSTS = [("vm-01", "10.0.0.11"), ("vm-02", "")]


def prepared(values=None, hosts=None):
    return prepare_import.prepare(TEMPLATE, dict(VALUES, **(values or {})), HOSTS if hosts is None else hosts)


# --------------------------------------------------------------------------- the in-memory AWX 24.6.1

# Each type: its list (its URL under /api/v2/), its POST fields ("string", "integer", "boolean", "json",
# "choice", or the type a foreign key refers to; OPTIONS shows those as "id"), the fields it needs, and the
# fields that scope its name (two objects of a type never share a name within that scope; None: names
# may repeat).
TYPES = {
    "organization": (
        "organizations",
        {
            "name": "string",
            "description": "string",
            "max_hosts": "integer",
            "default_environment": "execution_environment",
        },
        ("name",),
        (),
    ),
    "user": ("users", {"username": "string"}, ("username",), ()),
    "team": ("teams", {"name": "string", "organization": "organization"}, ("name",), ("organization",)),
    "credential_type": (
        "credential_types",
        {"name": "string", "description": "string", "kind": "choice", "inputs": "json", "injectors": "json"},
        ("name", "kind"),
        ("kind",),
    ),
    "credential": (
        "credentials",
        {
            "name": "string",
            "description": "string",
            "organization": "organization",
            "credential_type": "credential_type",
            "inputs": "json",
        },
        ("name", "credential_type"),
        ("organization", "credential_type"),
    ),
    "notification_template": (
        "notification_templates",
        {"name": "string", "organization": "organization"},
        ("name",),
        ("organization",),
    ),
    "execution_environment": (
        "execution_environments",
        {
            "name": "string",
            "description": "string",
            "organization": "organization",
            "image": "string",
            "credential": "credential",
            "pull": "choice",
        },
        ("name", "image"),
        (),
    ),
    "project": (
        "projects",
        {
            "name": "string",
            "description": "string",
            "local_path": "string",
            "scm_type": "choice",
            "scm_url": "string",
            "scm_branch": "string",
            "scm_refspec": "string",
            "scm_clean": "boolean",
            "scm_track_submodules": "boolean",
            "scm_delete_on_update": "boolean",
            "credential": "credential",
            "timeout": "integer",
            "organization": "organization",
            "scm_update_on_launch": "boolean",
            "scm_update_cache_timeout": "integer",
            "allow_override": "boolean",
            "default_environment": "execution_environment",
            "signature_validation_credential": "credential",
        },
        ("name",),
        ("organization",),
    ),
    "inventory": (
        "inventories",
        {
            "name": "string",
            "description": "string",
            "organization": "organization",
            "kind": "choice",
            "host_filter": "string",
            "variables": "string",
            "prevent_instance_group_fallback": "boolean",
        },
        ("name", "organization"),
        ("organization",),
    ),
    "inventory_source": ("inventory_sources", {"name": "string", "inventory": "inventory"}, ("name",), ("inventory",)),
    "host": (
        "hosts",
        {
            "name": "string",
            "description": "string",
            "inventory": "inventory",
            "enabled": "boolean",
            "instance_id": "string",
            "variables": "string",
        },
        ("name", "inventory"),
        ("inventory",),
    ),
    "group": (
        "groups",
        {"name": "string", "description": "string", "inventory": "inventory", "variables": "string"},
        ("name", "inventory"),
        ("inventory",),
    ),
    "job_template": (
        "job_templates",
        {
            "name": "string",
            "description": "string",
            "job_type": "choice",
            "inventory": "inventory",
            "project": "project",
            "playbook": "string",
            "scm_branch": "string",
            "forks": "integer",
            "limit": "string",
            "verbosity": "choice",
            "extra_vars": "string",
            "job_tags": "string",
            "force_handlers": "boolean",
            "skip_tags": "string",
            "start_at_task": "string",
            "timeout": "integer",
            "use_fact_cache": "boolean",
            "execution_environment": "execution_environment",
            "host_config_key": "string",
            "ask_scm_branch_on_launch": "boolean",
            "ask_diff_mode_on_launch": "boolean",
            "ask_variables_on_launch": "boolean",
            "ask_limit_on_launch": "boolean",
            "ask_tags_on_launch": "boolean",
            "ask_skip_tags_on_launch": "boolean",
            "ask_job_type_on_launch": "boolean",
            "ask_verbosity_on_launch": "boolean",
            "ask_inventory_on_launch": "boolean",
            "ask_credential_on_launch": "boolean",
            "ask_execution_environment_on_launch": "boolean",
            "ask_labels_on_launch": "boolean",
            "ask_forks_on_launch": "boolean",
            "ask_job_slice_count_on_launch": "boolean",
            "ask_timeout_on_launch": "boolean",
            "ask_instance_groups_on_launch": "boolean",
            "survey_enabled": "boolean",
            "become_enabled": "boolean",
            "diff_mode": "boolean",
            "allow_simultaneous": "boolean",
            "job_slice_count": "integer",
            "webhook_service": "choice",
            "webhook_credential": "credential",
            "prevent_instance_group_fallback": "boolean",
        },
        ("name", "project", "playbook"),
        ("organization",),
    ),
    "workflow_job_template": (
        "workflow_job_templates",
        {
            "name": "string",
            "description": "string",
            "extra_vars": "string",
            "organization": "organization",
            "survey_enabled": "boolean",
            "allow_simultaneous": "boolean",
            "ask_variables_on_launch": "boolean",
            "inventory": "inventory",
            "limit": "string",
            "scm_branch": "string",
            "ask_inventory_on_launch": "boolean",
            "ask_scm_branch_on_launch": "boolean",
            "ask_limit_on_launch": "boolean",
            "webhook_service": "choice",
            "webhook_credential": "credential",
            "ask_labels_on_launch": "boolean",
            "ask_skip_tags_on_launch": "boolean",
            "ask_tags_on_launch": "boolean",
            "skip_tags": "string",
            "job_tags": "string",
        },
        ("name",),
        ("organization",),
    ),
    "workflow_job_template_node": (
        "workflow_job_template_nodes",
        {
            "extra_data": "json",
            "inventory": "inventory",
            "scm_branch": "string",
            "job_type": "choice",
            "job_tags": "string",
            "skip_tags": "string",
            "limit": "string",
            "diff_mode": "boolean",
            "verbosity": "choice",
            "execution_environment": "execution_environment",
            "forks": "integer",
            "job_slice_count": "integer",
            "timeout": "integer",
            "workflow_job_template": "workflow_job_template",
            "unified_job_template": "unified_job_template",
            "all_parents_must_converge": "boolean",
            "identifier": "string",
        },
        ("workflow_job_template", "identifier"),
        ("workflow_job_template",),
    ),
    "workflow_approval_template": (
        "workflow_approval_templates",
        {"name": "string", "description": "string", "timeout": "integer"},
        ("name",),
        None,
    ),
    "application": ("applications", {"name": "string", "organization": "organization"}, ("name",), ()),
    # awx/api/serializers.py ScheduleSerializer (with LaunchConfigurationBaseSerializer's prompts); a name is
    # unique per unified job template
    "schedule": (
        "schedules",
        {
            "rrule": "string",
            "name": "string",
            "description": "string",
            "extra_data": "json",
            "inventory": "inventory",
            "scm_branch": "string",
            "job_type": "choice",
            "job_tags": "string",
            "skip_tags": "string",
            "limit": "string",
            "diff_mode": "boolean",
            "verbosity": "choice",
            "execution_environment": "execution_environment",
            "forks": "integer",
            "job_slice_count": "integer",
            "timeout": "integer",
            "unified_job_template": "unified_job_template",
            "enabled": "boolean",
        },
        ("name", "rrule", "unified_job_template"),
        ("unified_job_template",),
    ),
    "label": ("labels", {"name": "string", "organization": "organization"}, ("name",), ("organization",)),
}
COLLECTIONS = {collection: kind for kind, (collection, _f, _r, _s) in TYPES.items()}
# Unified job templates share one id space in AWX; a node's unified_job_template is one of them.
UNIFIED = ("job_template", "workflow_job_template", "project", "inventory_source", "workflow_approval_template")
# GET /api/v2/ of AWX 24.6.1 (awx/api/views/root.py): awxkit's import maps its page classes to these names.
# Those without a type above answer as read-only empty lists.
ROOT_RESOURCES = {
    name: name.replace("_", "-") if name in ("service_index", "role_definitions") else name
    for name in (
        "ping",
        "instances",
        "instance_groups",
        "receptor_addresses",
        "config",
        "settings",
        "me",
        "dashboard",
        "organizations",
        "users",
        "execution_environments",
        "projects",
        "project_updates",
        "teams",
        "credentials",
        "credential_types",
        "credential_input_sources",
        "applications",
        "tokens",
        "metrics",
        "inventory",
        "constructed_inventory",
        "inventory_sources",
        "inventory_updates",
        "groups",
        "hosts",
        "host_metrics",
        "host_metric_summary_monthly",
        "job_templates",
        "jobs",
        "ad_hoc_commands",
        "system_job_templates",
        "system_jobs",
        "schedules",
        "roles",
        "notification_templates",
        "notifications",
        "labels",
        "unified_job_templates",
        "unified_jobs",
        "activity_stream",
        "workflow_job_templates",
        "workflow_jobs",
        "workflow_approvals",
        "workflow_job_template_nodes",
        "workflow_job_nodes",
        "mesh_visualizer",
        "bulk",
        "analytics",
        "service_index",
        "role_definitions",
        "role_user_assignments",
        "role_team_assignments",
    )
}
ROOT_RESOURCES.update(inventory="inventories", constructed_inventory="constructed_inventories")
NOTIFICATIONS = {
    "notification_templates_%s" % when: ("notification_template", "attach", None)
    for when in ("error", "started", "success")
}
# Each type's related lists: the type listed, and whether its POST creates ("create", setting the parent
# key), attaches ({"id": N}) or takes a document (a survey spec, an approval template).
SUBLISTS = {
    # a template's schedules/ creates (AWX's *SchedulesList views: parent_key unified_job_template)
    "project": dict(NOTIFICATIONS, schedules=("schedule", "create", "unified_job_template")),
    "inventory": {
        "hosts": ("host", "create", "inventory"),
        "groups": ("group", "create", "inventory"),
        "labels": ("label", "attach", None),
    },
    "group": {"hosts": ("host", "attach", None), "children": ("group", "attach", None)},
    "job_template": dict(
        NOTIFICATIONS,
        credentials=("credential", "attach", None),
        labels=("label", "attach", None),
        schedules=("schedule", "create", "unified_job_template"),
        survey_spec=(None, "survey", None),
    ),
    "workflow_job_template": dict(
        NOTIFICATIONS,
        notification_templates_approvals=("notification_template", "attach", None),
        workflow_nodes=("workflow_job_template_node", "create", "workflow_job_template"),
        labels=("label", "attach", None),
        schedules=("schedule", "create", "unified_job_template"),
        survey_spec=(None, "survey", None),
    ),
    "schedule": {"credentials": ("credential", "attach", None)},
    "workflow_job_template_node": {
        "success_nodes": ("workflow_job_template_node", "attach", None),
        "failure_nodes": ("workflow_job_template_node", "attach", None),
        "always_nodes": ("workflow_job_template_node", "attach", None),
        "credentials": ("credential", "attach", None),
        "create_approval_template": ("workflow_approval_template", "approval", None),
    },
}
MANAGED_CREDENTIAL_TYPES = [
    (
        "Machine",
        "ssh",
        [
            "username",
            "password",
            "ssh_key_data",
            "ssh_public_key_data",
            "ssh_key_unlock",
            "become_method",
            "become_username",
            "become_password",
        ],
    ),
    ("Source Control", "scm", ["username", "password", "ssh_key_data", "ssh_key_unlock"]),
    ("Container Registry", "registry", ["host", "username", "password", "verify_ssl"]),
]
JOB_TEMPLATE_CREDENTIAL_KINDS = ("ssh", "vault", "cloud", "net", "kubernetes")
ENV_BLOCKLIST = (
    "VIRTUAL_ENV",
    "PATH",
    "PYTHONPATH",
    "JOB_ID",
    "INVENTORY_ID",
    "INVENTORY_SOURCE_ID",
    "INVENTORY_UPDATE_ID",
    "AD_HOC_COMMAND_ID",
    "REST_API_URL",
    "REST_API_TOKEN",
    "MAX_EVENT_RES",
    "CALLBACK_QUEUE",
    "CALLBACK_CONNECTION",
    "CACHE",
    "JOB_CALLBACK_DEBUG",
    "INVENTORY_HOSTVARS",
    "AWX_HOST",
    "PROJECT_REVISION",
    "SUPERVISOR_CONFIG_PATH",
)
SURVEY_TYPES = {
    "text": str,
    "textarea": str,
    "password": str,
    "multiplechoice": str,
    "multiselect": str,
    "integer": int,
    "float": (float, int),
}


class Refused(Exception):
    """AWX answers 400 with this body."""

    def __init__(self, body):
        super().__init__(body)
        self.body = body


def project_playbooks():
    """The playbooks a project update of extensions/awx/project finds."""
    found = []
    for name in sorted(os.listdir(PROJECT)):
        if name.endswith(".yml"):
            with open(os.path.join(PROJECT, name), encoding="utf-8") as handle:
                if isinstance(yaml.safe_load(handle), list):
                    found.append(name)
    return found


class FakeAwx:
    """AWX 24.6.1 in memory, for the requests ``awx import`` makes."""

    def __init__(self):
        self.objects = {kind: {} for kind in TYPES}
        self.links = {}  # (kind, id, sublist) -> [ids]
        self.surveys = {}  # (kind, id) -> survey spec
        self.refusals = []
        self.counters = {}
        self.add("organization", {"name": "Default", "description": "", "max_hosts": 0})
        for name, kind, fields in MANAGED_CREDENTIAL_TYPES:
            self.add(
                "credential_type",
                {
                    "name": name,
                    "kind": kind,
                    "managed": True,
                    "description": "",
                    "inputs": {"fields": [{"id": f, "label": f} for f in fields]},
                    "injectors": {},
                },
            )

    # -- storage

    def add(self, kind, fields):
        counter = "unified" if kind in UNIFIED else kind
        self.counters[counter] = self.counters.get(counter, 0) + 1
        obj = dict(fields, id=self.counters[counter])
        self.objects[kind][obj["id"]] = obj
        return obj

    def find(self, kind, /, **fields):
        return [o for o in self.objects[kind].values() if all(o.get(k) == v for k, v in fields.items())]

    def unified(self, ident):
        for kind in UNIFIED:
            if ident in self.objects[kind]:
                return kind, self.objects[kind][ident]
        return None, None

    def url(self, kind, ident):
        return "/api/v2/%s/%d/" % (TYPES[kind][0], ident)

    def render(self, kind, obj):
        related = {}
        for field, ftype in TYPES[kind][1].items():
            if ftype in TYPES or ftype == "unified_job_template":
                if obj.get(field) is not None:
                    target = self.unified(obj[field])[0] if ftype == "unified_job_template" else ftype
                    related[field] = self.url(target, obj[field])
        if kind == "job_template" and obj.get("organization"):
            related["organization"] = self.url("organization", obj["organization"])
        for name in SUBLISTS.get(kind, {}):
            related[name] = self.url(kind, obj["id"]) + name + "/"
        data = dict(obj, type=kind, url=self.url(kind, obj["id"]), related=related, summary_fields={})
        if kind == "credential" and "inputs" in data:
            secret = {
                f["id"]
                for f in self.objects["credential_type"][obj["credential_type"]]["inputs"]["fields"]
                if f.get("secret")
            }
            data["inputs"] = {k: "$encrypted$" if k in secret and v else v for k, v in obj["inputs"].items()}
        return data

    # -- HTTP

    def handle(self, method, path, query, body):
        """(status, body, headers) of one request."""
        parts = [p for p in path.split("/") if p]
        try:
            if parts == ["api"]:
                return 200, {"available_versions": {"v2": "/api/v2/"}, "current_version": "/api/v2/"}, {}
            if parts == ["api", "v2"]:
                return 200, {name: "/api/v2/%s/" % collection for name, collection in ROOT_RESOURCES.items()}, {}
            kind = COLLECTIONS.get(parts[2])
            if kind is None and len(parts) == 3:  # a list the import does not write to
                if method == "OPTIONS":
                    return 200, {"actions": {"GET": {}}}, {"Allow": "GET, HEAD, OPTIONS"}
                return 200, {"count": 0, "next": None, "previous": None, "results": []}, {}
            if len(parts) == 3:
                return self.handle_list(method, kind, query, body)
            obj = self.objects[kind][int(parts[3])]
            if len(parts) == 4:
                if method == "GET":
                    return 200, self.render(kind, obj), {}
                if method == "PUT":
                    self.write(kind, obj, body, update=True)
                    return 200, self.render(kind, obj), {}
            return self.handle_sublist(method, kind, obj, parts[4], body)
        except Refused as exc:
            self.refusals.append("%s %s: %s" % (method, path, json.dumps(exc.body, sort_keys=True)))
            return 400, exc.body, {}

    def options(self, kind, attach=False, parent_key=None):
        fields = {
            f: {
                "type": "id" if t in TYPES or t == "unified_job_template" else t,
                "required": f in TYPES[kind][2] and f != parent_key,
            }
            for f, t in TYPES[kind][1].items()
        }
        if attach:
            fields["id"] = {"type": "integer", "required": False}
        search = [f for f in ("name", "username", "identifier") if f in TYPES[kind][1]]
        return 200, {"actions": {"POST": fields}, "search_fields": search}, {"Allow": "GET, POST, HEAD, OPTIONS"}

    def listing(self, kind, objects):
        results = [self.render(kind, o) for o in objects]
        return 200, {"count": len(results), "next": None, "previous": None, "results": results}, {}

    def handle_list(self, method, kind, query, body):
        if method == "OPTIONS":
            return self.options(kind)
        if method == "POST":
            obj = self.write(kind, {}, body)
            return 201, self.render(kind, obj), {}
        selected = []
        for obj in self.objects[kind].values():
            keep = True
            for key, (value, *_rest) in query.items():
                if key == "id":
                    keep = keep and str(obj["id"]) == value
                elif key in obj:
                    keep = keep and str(obj[key]) == value
            if keep:
                selected.append(obj)
        return self.listing(kind, selected)

    def handle_sublist(self, method, kind, parent, name, body):
        child, mode, parent_key = SUBLISTS[kind][name]
        key = (kind, parent["id"], name)
        if mode == "survey":
            if method == "OPTIONS":
                return 200, {"actions": {"POST": {}}}, {"Allow": "GET, POST, DELETE, HEAD, OPTIONS"}
            if method == "POST":
                check_survey(body)
                self.surveys[(kind, parent["id"])] = body
                return 200, {}, {}
            return 200, self.surveys.get((kind, parent["id"]), {}), {}
        if mode == "approval":
            if method == "OPTIONS":
                return self.options(child)
            if method == "POST":
                approval = self.write(child, {}, body)
                parent["unified_job_template"] = approval["id"]
                return 201, self.render(child, approval), {}
            return 200, {}, {}
        if method == "OPTIONS":
            return self.options(child, attach=True, parent_key=parent_key)
        if method == "GET":
            return self.listing(child, [self.objects[child][i] for i in self.links.get(key, [])])
        if body.get("id") is not None:  # attach
            sub = self.objects[child].get(body["id"])
            if sub is None:
                raise Refused({"id": ["no %s %s" % (child, body["id"])]})
            self.check_attach(kind, parent, name, sub)
            if sub["id"] not in self.links.setdefault(key, []):
                self.links[key].append(sub["id"])
            return 204, None, {}
        created = self.write(child, {}, dict(body, **{parent_key: parent["id"]}))
        self.links.setdefault(key, []).append(created["id"])
        return 201, self.render(child, created), {}

    # -- what AWX checks

    def write(self, kind, obj, body, update=False):
        fields = TYPES[kind][1]
        new = dict(obj)
        for field, value in body.items():
            ftype = fields[field]
            if ftype in TYPES or ftype == "unified_job_template":
                if value is None:
                    raise Refused({field: ["null reference: the document names none, so awxkit did not resolve it"]})
                target = (
                    self.unified(value)[0]
                    if ftype == "unified_job_template"
                    else (ftype if value in self.objects[ftype] else None)
                )
                if target is None:
                    raise Refused({field: ['Invalid pk "%s" - object does not exist.' % value]})
            new[field] = value
        missing = [f for f in TYPES[kind][2] if new.get(f) in (None, "")]
        if missing:
            raise Refused({f: ["This field is required."] for f in missing})
        getattr(self, "check_" + kind, lambda _new: None)(new)
        if TYPES[kind][3] is not None:
            scope = {f: new.get(f) for f in TYPES[kind][3]}
            label = "identifier" if kind == "workflow_job_template_node" else ("username" if kind == "user" else "name")
            if any(o["id"] != new.get("id") for o in self.find(kind, **dict(scope, **{label: new[label]}))):
                raise Refused({"__all__": ["%s with this %s already exists." % (kind, label)]})
        if update:
            obj.update(new)
            return obj
        return self.add(kind, new)

    def check_credential_type(self, new):
        if new["kind"] not in ("cloud", "net"):
            raise Refused({"kind": ["Must be 'cloud' or 'net', not %s" % new["kind"]]})
        ids = [f["id"] for f in new.get("inputs", {}).get("fields", [])]
        if len(set(ids)) != len(ids) or not all(re.match(r"^[a-zA-Z_]+[a-zA-Z0-9_]*$", i) for i in ids):
            raise Refused({"inputs": ["field ids must be unique variable names"]})
        if not set(new.get("inputs", {}).get("required", [])) <= set(ids):
            raise Refused({"inputs": ["required names a field that is not defined"]})
        check_injectors(new.get("injectors", {}), ids)

    def check_credential(self, new):
        kind = self.objects["credential_type"][new["credential_type"]]
        defined = {f["id"] for f in kind["inputs"].get("fields", [])}
        extra = sorted(set(new.get("inputs", {})) - defined)
        if extra:
            raise Refused({"inputs": {k: ["Additional properties are not allowed"] for k in extra}})

    def check_project(self, new):
        url = new.get("scm_url", "")
        ok = (
            new.get("scm_type") == "git"
            and "@@" not in url
            and (re.match(r"^(https?|ssh|git)://[^/\s]+/\S+$", url) or re.match(r"^[^/@\s]+@[^:/\s]+:\S+$", url))
        )
        new["status"] = "successful" if ok else "failed"  # the first project update, started on creation
        new["playbooks"] = project_playbooks() if ok else []

    def check_job_template(self, new):
        project = self.objects["project"][new["project"]]
        if new["playbook"] not in project["playbooks"]:
            raise Refused({"playbook": ["Playbook not found for project."]})
        new["organization"] = project.get("organization")

    def check_schedule(self, new):
        """ScheduleSerializer: a valid rrule, a template that can be scheduled, and a job that starts with
        nobody there to answer: no credential asking for a password at launch, no inventory to prompt for,
        no variables the template does not accept."""
        check_rrule(new["rrule"])
        kind, template = self.unified(new["unified_job_template"])
        if kind not in ("job_template", "workflow_job_template", "project", "inventory_source"):
            raise Refused({"unified_job_template": ["A %s cannot have a schedule." % kind]})
        if kind == "project" and not template.get("scm_type"):
            raise Refused({"unified_job_template": ["Manual Project cannot have a schedule set."]})
        if kind == "job_template":
            if template.get("inventory") is None and new.get("inventory") is None:
                raise Refused({"inventory": ["Job Template inventory is missing or undefined."]})
            credentials = self.links.get(("job_template", template["id"], "credentials"), [])
            if any(v == "ASK" for i in credentials for v in self.objects["credential"][i]["inputs"].values()):
                raise Refused(
                    {"unified_job_template": ["Cannot create schedule because job requires credential passwords."]}
                )
        if new.get("extra_data") and kind in ("job_template", "workflow_job_template"):
            if not template.get("ask_variables_on_launch") and not template.get("survey_enabled"):
                raise Refused(
                    {
                        "extra_data": [
                            "Variables %s provided, but this template cannot accept variables."
                            % sorted(new["extra_data"])
                        ]
                    }
                )

    def check_attach(self, kind, parent, name, sub):
        if (kind, name) == ("group", "hosts") and sub["inventory"] != parent["inventory"]:
            raise Refused({"error": "Cannot associate two items from different inventories."})
        if (kind, name) == ("job_template", "credentials"):
            ctype = self.objects["credential_type"][sub["credential_type"]]
            if ctype["kind"] not in JOB_TEMPLATE_CREDENTIAL_KINDS:
                raise Refused({"error": "Cannot assign a Credential of kind `%s`." % ctype["kind"]})
            if any(
                self.objects["credential"][i]["credential_type"] == sub["credential_type"]
                for i in self.links.get((kind, parent["id"], name), [])
                if i != sub["id"]
            ):
                raise Refused({"error": "Cannot assign multiple %s credentials." % ctype["name"]})
        if kind == "workflow_job_template_node" and name.endswith("_nodes"):
            if sub["workflow_job_template"] != parent["workflow_job_template"] or sub["id"] == parent["id"]:
                raise Refused({"Error": "Nodes of another workflow, or a cycle."})


def check_injectors(injectors, fields):
    """AWX's CredentialTypeInjectorField: env, extra_vars and file templates that name only defined fields."""
    if set(injectors) - {"file", "env", "extra_vars"}:
        raise Refused({"injectors": ["Additional properties are not allowed"]})
    files = [k for k in injectors.get("file", {}) if re.match(r"^template(\.[a-zA-Z_]+[a-zA-Z0-9_]*)?$", k)]
    if len(files) != len(injectors.get("file", {})) or ("template" in files and len(files) > 1):
        raise Refused({"injectors": ["invalid file injector names"]})

    class Filenames:  # pylint: disable=too-few-public-methods
        pass

    class Tower:  # pylint: disable=too-few-public-methods
        filename = "EXAMPLE_FILENAME" if "template" in files else Filenames()

    for label in files:
        if "." in label:
            setattr(Tower.filename, label.split(".", 1)[1], "EXAMPLE_FILENAME")
    namespace = dict({f: "EXAMPLE" for f in fields}, tower=Tower())
    environment = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
    for name in injectors.get("env", {}):
        if name.startswith("ANSIBLE_") or name in ENV_BLOCKLIST or not re.match(r"^[a-zA-Z_]+[a-zA-Z0-9_]*$", name):
            raise Refused({"injectors": ["Environment variable %s is not allowed" % name]})
    for section in ("file", "env", "extra_vars"):
        for key, template in injectors.get(section, {}).items():
            try:
                environment.from_string(template).render(namespace)
            except (UndefinedError, SecurityError, TemplateSyntaxError) as exc:
                raise Refused({"injectors": ["%s uses an undefined field (%s)" % (key, exc)]}) from exc


def check_rrule(value):
    """The checks of AWX's SchedulePreviewSerializer.validate_rrule."""
    errors = []
    dtstarts = re.findall(r".*?(DTSTART(;[^:]+)?\:[0-9]+T[0-9]+Z?)", value)
    rules = re.findall(r".*?(RULE\:[^\s]*)", value)
    if not dtstarts:
        errors.append("Valid DTSTART required in rrule. Value should start with: DTSTART:YYYYMMDDTHHMMSSZ")
    if re.findall(r".*?(DTSTART:[0-9]+T[0-9]+) ", value):
        errors.append("DTSTART cannot be a naive datetime.  Specify ;TZINFO= or YYYYMMDDTHHMMSSZZ.")
    if len(dtstarts) > 1:
        errors.append("Multiple DTSTART is not supported.")
    if "rrule:" not in value.lower():
        errors.append("One or more rule required in rrule.")
    if "exdate:" in value.lower() or "rdate:" in value.lower():
        errors.append("EXDATE and RDATE not allowed in rrule.")
    for rule in rules:
        if "interval" not in rule.lower():
            errors.append("INTERVAL required in rrule: %s" % rule)
        elif "secondly" in rule.lower():
            errors.append("SECONDLY is not supported: %s" % rule)
        if re.match(r".*?BYDAY[\:\=][0-9]+[a-zA-Z]{2}", rule):
            errors.append("BYDAY with numeric prefix not supported: %s" % rule)
        if "COUNT" in rule and "UNTIL" in rule:
            errors.append("RRULE may not contain both COUNT and UNTIL: %s" % rule)
        count = re.match(r".*?COUNT=([0-9]+)", rule)
        if count and int(count.group(1)) > 999:
            errors.append("COUNT > 999 is unsupported: %s" % rule)
    if errors:
        raise Refused({"rrule": errors})


def check_survey(spec):
    """The checks of AWX's JobTemplateSurveySpec._validate_spec_data."""
    if not isinstance(spec.get("name"), str) or not isinstance(spec.get("description"), str) or not spec.get("spec"):
        raise Refused({"error": "name, description and a non-empty spec are required"})
    seen = set()
    for index, item in enumerate(spec["spec"]):
        for field, kind in (("type", str), ("question_name", str), ("variable", str), ("required", bool)):
            if not isinstance(item.get(field), kind):
                raise Refused({"error": "'%s' missing or mistyped in survey question %d" % (field, index)})
        if item["variable"] in seen or item["type"] not in SURVEY_TYPES:
            raise Refused({"error": "survey question %d: duplicated variable or unknown type" % index})
        seen.add(item["variable"])
        default = item.get("default", "")
        if default != "" and not isinstance(default, SURVEY_TYPES[item["type"]]):
            raise Refused({"error": "Default value in survey question %d has the wrong type" % index})
        if any(item.get(k) is not None and not isinstance(item[k], int) for k in ("min", "max")):
            raise Refused({"error": "min / max of survey question %d must be integers" % index})
        if item["type"] in ("multiplechoice", "multiselect"):
            if "choices" not in item:
                raise Refused({"error": "Survey question %d must specify choices." % index})
            defaults = [d for d in str(default).splitlines() if d.strip()]
            if item["type"] == "multiplechoice" and len(defaults) > 1:
                raise Refused({"error": "Multiple Choice (Single Select) can only have one default value."})
            if any(d not in item["choices"] for d in defaults):
                raise Refused({"error": "Default choice must be answered from the choices listed."})


class FakeAwxAdapter(requests.adapters.BaseAdapter):
    """The transport under awxkit's Connection: each request goes to the in-memory AWX."""

    def __init__(self, awx):
        super().__init__()
        self.awx = awx

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):  # pylint: disable=too-many-arguments
        url = urllib.parse.urlsplit(request.url)
        body = json.loads(request.body) if request.body else None
        status, data, headers = self.awx.handle(request.method, url.path, urllib.parse.parse_qs(url.query), body)
        response = requests.Response()
        response.status_code = status
        response._content = b"" if data is None else json.dumps(data).encode("utf-8")  # pylint: disable=protected-access
        response.headers.update(dict(headers, **{"Content-Type": "application/json"}))
        response.encoding = "utf-8"
        response.request = request
        response.url = request.url
        return response

    def close(self):
        pass


class AwxkitErrors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def awx_v2(awx):
    """awxkit's /api/v2/ page over a Connection whose transport is ``awx``, as the awx CLI makes it."""
    connection = Connection(SERVER)
    connection.session.mount(SERVER + "/", FakeAwxAdapter(awx))
    return Api(connection, endpoint="/api/").get().available_versions.v2.get()


def awx_import(document, awx=None):
    """Import ``document`` with awxkit's ``import_assets`` (``awx import``). Returns the AWX and every
    problem: awxkit's errors, the requests AWX refused, an exception out of the import."""
    awx = awx or FakeAwx()
    v2 = awx_v2(awx)
    errors = AwxkitErrors()
    logger = logging.getLogger("awxkit")
    logger.addHandler(errors)
    problems = []
    try:
        v2.import_assets(copy.deepcopy(document))
    except Exception as exc:  # pylint: disable=broad-except
        problems.append("import raised %r" % exc)
    finally:
        logger.removeHandler(errors)
    problems += errors.messages + awx.refusals
    if getattr(v2, "_has_error", False) and not problems:
        problems.append("awxkit recorded an error")
    return awx, problems


def dicts(node):
    """Every dict in ``node``, nested ones too."""
    if isinstance(node, dict):
        yield node
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            yield from dicts(value)


def by_name(awx, kind, name):
    (obj,) = awx.find(kind, name=name)
    return obj


def linked(awx, kind, obj, name, label="name"):
    child = SUBLISTS[kind][name][0]
    return {awx.objects[child][i][label] for i in awx.links.get((kind, obj["id"], name), [])}


# --------------------------------------------------------------------------- the document imports


def test_the_prepared_document_imports_and_every_reference_resolves():
    awx, problems = awx_import(prepared())
    assert problems == []

    inventory = by_name(awx, "inventory", "Stella targets")
    group = by_name(awx, "group", "stella_targets")
    assert group["inventory"] == inventory["id"]
    assert linked(awx, "group", group, "hosts") == {"vm-01", "vm-02"}
    assert linked(awx, "inventory", inventory, "hosts") == {"vm-01", "vm-02"}
    assert by_name(awx, "host", "vm-01")["variables"] == "---\nansible_host: 10.0.0.11\n"

    ee = by_name(awx, "execution_environment", "Stella EE")
    assert ee["image"] == VALUES["EE_IMAGE"]
    assert awx.objects["credential"][ee["credential"]]["inputs"] == {
        "host": "registry.acme.internal",
        "username": "awx-pull",
        "password": "pull-1",
    }
    project = by_name(awx, "project", "Stella deployments")
    assert (project["scm_url"], project["status"]) == (VALUES["SCM_URL"], "successful")
    assert project["default_environment"] == ee["id"]
    assert awx.objects["credential"][project["credential"]]["name"] == "Stella project source"

    expected = {
        "Stella | Deploy": {"Stella targets SSH", "Stella job store", "Stella registry", "Stella traffic controller"},
        "Stella | Roll back": {"Stella targets SSH", "Stella job store", "Stella traffic controller"},
        "Stella | Show job": {"Stella job store"},
        "Stella | Target health": {"Stella job store"},
        "Stella | Preflight": {"Stella targets SSH"},
        "Stella | Notify": set(),
        "Stella | Drift check": {"Stella targets SSH", "Stella job store"},
    }
    assert {t["name"] for t in awx.objects["job_template"].values()} == set(expected)
    for name, credentials in expected.items():
        template = by_name(awx, "job_template", name)
        assert linked(awx, "job_template", template, "credentials") == credentials, name
        assert template["execution_environment"] == ee["id"], name
        assert (template["project"], template["inventory"]) == (project["id"], inventory["id"]), name
        assert template["organization"] == project["organization"], name
        assert bool(awx.surveys.get(("job_template", template["id"]))) == template["survey_enabled"], name

    store = by_name(awx, "credential", "Stella job store")
    assert store["inputs"] == {"dsn": VALUES["STORE_DSN"], "password": VALUES["STORE_PASSWORD"], "ca_certificate": CA}
    machine = by_name(awx, "credential", "Stella targets SSH")
    assert awx.objects["credential_type"][machine["credential_type"]]["name"] == "Machine"
    assert machine["inputs"] == {"username": "deploy", "ssh_key_data": SSH_KEY}


DRIFT = "Stella | Drift check"
DRIFT_SCHEDULE = "Stella | Drift check, hourly"
SIGNING_KEY = (
    "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
)


def test_the_drift_check_template_imports_with_its_hourly_schedule():
    awx, problems = awx_import(prepared())
    assert problems == []
    drift = by_name(awx, "job_template", DRIFT)
    assert drift["playbook"] == "drift_check.yml"
    assert drift["inventory"] == by_name(awx, "inventory", "Stella targets")["id"]
    assert drift["execution_environment"] == by_name(awx, "execution_environment", "Stella EE")["id"]
    assert linked(awx, "job_template", drift, "credentials") == {"Stella targets SSH", "Stella job store"}
    assert yaml.safe_load(drift["extra_vars"]) == {"stella_verify_fail_on_drift": True}
    assert not drift["survey_enabled"] and not drift["allow_simultaneous"]

    (schedule,) = awx.objects["schedule"].values()
    assert linked(awx, "job_template", drift, "schedules") == {DRIFT_SCHEDULE}
    assert schedule["name"] == DRIFT_SCHEDULE and schedule["enabled"] is True
    assert awx.unified(schedule["unified_job_template"]) == ("job_template", drift)
    assert re.search(r"RRULE:FREQ=HOURLY;INTERVAL=1$", schedule["rrule"]), schedule["rrule"]
    assert schedule["extra_data"] == {}
    # no other template has a schedule
    for template in awx.objects["job_template"].values():
        if template["name"] != DRIFT:
            assert linked(awx, "job_template", template, "schedules") == set(), template["name"]

    # awxkit's export writes the schedule under its template, keyed by template and name, as the document does
    exported = awx_v2(awx).export_assets()
    (theirs,) = next(t for t in exported["job_templates"] if t["name"] == DRIFT)["related"]["schedules"]
    (ours,) = _template(prepared(), DRIFT)["related"]["schedules"]
    assert theirs["natural_key"] == ours["natural_key"]
    assert theirs["natural_key"]["unified_job_template"] == _template(prepared(), DRIFT)["natural_key"]
    assert (theirs["rrule"], theirs["enabled"], theirs["extra_data"]) == (ours["rrule"], True, {})


def test_a_schedule_keyed_by_another_template_is_made_again_at_each_import_and_awx_refuses_the_second():
    document = prepared()
    (schedule,) = _template(document, DRIFT)["related"]["schedules"]
    schedule["natural_key"]["unified_job_template"]["name"] = "Stella | Preflight"
    awx, problems = awx_import(document)
    assert problems == []  # the template's schedules/ list sets the template itself
    _awx, problems = awx_import(document, awx)
    assert any("schedule with this name already exists" in p for p in problems), problems


def signed(values=None):
    return prepared(dict({"SIGNING_KEY": SIGNING_KEY, "SIGNING_KEY_PASSPHRASE": "signing-pass-1"}, **(values or {})))


def test_the_evidence_signing_key_is_on_deploy_and_roll_back_and_its_type_writes_the_key_to_a_file():
    awx, problems = awx_import(signed())
    assert problems == []
    credential = by_name(awx, "credential", "Stella evidence signing key")
    assert credential["inputs"] == {"private_key": SIGNING_KEY, "passphrase": "signing-pass-1"}
    kind = awx.objects["credential_type"][credential["credential_type"]]
    assert kind["name"] == "Stella evidence signing key" and kind["kind"] == "cloud"
    assert {f["id"] for f in kind["inputs"]["fields"] if f.get("secret")} == {"private_key", "passphrase"}
    # the key goes to a file of the job's private data directory; only its path is an extra var
    assert kind["injectors"]["file"] == {"template.signing_key": "{{ private_key }}"}
    assert kind["injectors"]["extra_vars"] == {
        "stella_evidence_signing_key": "{{ tower.filename.signing_key }}",
        "stella_evidence_signing_passphrase": "{{ passphrase }}",
    }
    assert "env" not in kind["injectors"]
    users = {
        t["name"]
        for t in awx.objects["job_template"].values()
        if "Stella evidence signing key" in linked(awx, "job_template", t, "credentials")
    }
    assert users == {"Stella | Deploy", "Stella | Roll back"}
    # awxkit's export shows the secrets as $encrypted$, as AWX does
    exported = awx_v2(awx).export_assets()
    theirs = next(c for c in exported["credentials"] if c["name"] == "Stella evidence signing key")
    assert theirs["inputs"] == {"private_key": "$encrypted$", "passphrase": "$encrypted$"}


def test_without_a_signing_key_the_credential_and_its_references_are_left_out_even_with_a_passphrase(key_files):
    key, _ca = key_files
    environ = {"STELLA_STORE_PASSWORD": "store-secret-2", "STELLA_SIGNING_PASSPHRASE": "signing-pass-2"}
    code, out, err = run_prepare(required_argv(key), environ)
    assert code == 0, err
    document = json.loads(out)
    assert "Stella evidence signing key" not in {c["name"] for c in document["credentials"]}
    assert "Stella evidence signing key" not in {
        n.get("name") for n in dicts(document) if n.get("type") == "credential"
    }
    assert "signing-pass-2" not in out
    _awx, problems = awx_import(document)
    assert problems == []


def test_the_command_reads_the_signing_key_from_a_file_and_its_passphrase_from_the_environment(key_files, tmp_path):
    key, _ca = key_files
    signing = tmp_path / "cosign.key"
    signing.write_text(SIGNING_KEY, encoding="utf-8")
    environ = {"STELLA_STORE_PASSWORD": "store-secret-2", "STELLA_SIGNING_PASSPHRASE": "signing-pass-2"}
    argv = required_argv(key) + ["--signing-key-file", str(signing)]
    code, out, err = run_prepare(argv, environ)
    assert code == 0, err
    document = json.loads(out)
    credential = next(c for c in document["credentials"] if c["name"] == "Stella evidence signing key")
    assert credential["inputs"] == {"private_key": SIGNING_KEY, "passphrase": "signing-pass-2"}
    assert "signing-pass-2" not in " ".join(argv) and "signing-pass-2" not in err
    awx, problems = awx_import(document)
    assert problems == []
    roll_back = by_name(awx, "job_template", "Stella | Roll back")
    assert "Stella evidence signing key" in linked(awx, "job_template", roll_back, "credentials")
    # a file without a private key is refused
    signing.write_text("not a key\n", encoding="utf-8")
    code, out, err = run_prepare(argv, environ)
    assert (code, out) == (2, "") and "--signing-key-file is not a PEM or OpenSSH private key" in err


def test_the_workflow_deploys_then_on_failure_notifies_and_asks_approval_to_roll_back():
    awx, problems = awx_import(prepared())
    assert problems == []
    (workflow,) = awx.objects["workflow_job_template"].values()
    nodes = {n["identifier"]: n for n in awx.objects["workflow_job_template_node"].values()}
    assert set(nodes) == {"deploy", "approve-rollback", "rollback", "notify"}
    assert all(n["workflow_job_template"] == workflow["id"] for n in nodes.values())

    def template_of(identifier):
        return awx.unified(nodes[identifier]["unified_job_template"])

    assert template_of("deploy")[1]["name"] == "Stella | Deploy"
    assert template_of("rollback")[1]["name"] == "Stella | Roll back"
    assert template_of("notify")[1]["name"] == "Stella | Notify"
    kind, approval = template_of("approve-rollback")
    assert kind == "workflow_approval_template" and approval["timeout"] > 0

    def edges(identifier, name):
        return linked(awx, "workflow_job_template_node", nodes[identifier], name, label="identifier")

    assert edges("deploy", "failure_nodes") == {"approve-rollback", "notify"}
    assert edges("deploy", "success_nodes") == set()
    assert edges("approve-rollback", "success_nodes") == {"rollback"}
    assert edges("rollback", "success_nodes") | edges("rollback", "failure_nodes") == set()
    # the deployment waits for the approval instead of rolling itself back
    assert nodes["deploy"]["extra_data"] == {"stella_auto_rollback": "false"}
    assert awx.surveys[("workflow_job_template", workflow["id"])]["spec"][0]["variable"] == "stella_release_file"


def test_without_the_optional_credentials_they_and_every_reference_to_them_are_left_out():
    values = {
        name: None
        for name in (
            "SCM_USERNAME",
            "SCM_PASSWORD",
            "REGISTRY_HOST",
            "REGISTRY_USERNAME",
            "REGISTRY_PASSWORD",
            "TRAFFIC_URL",
            "TRAFFIC_TOKEN",
            "STORE_CA_CERTIFICATE",
            "EE_REGISTRY_HOST",
            "EE_REGISTRY_USERNAME",
            "EE_REGISTRY_PASSWORD",
        )
    }
    document = prepared(values, hosts=[])
    assert [c["name"] for c in document["credentials"]] == ["Stella job store", "Stella targets SSH"]
    referenced = {node["name"] for node in dicts(document) if node.get("type") == "credential"}
    assert referenced == {"Stella job store", "Stella targets SSH"}
    assert "credential" not in document["projects"][0]
    assert "credential" not in document["execution_environments"][0]
    assert "ca_certificate" not in document["credentials"][0]["inputs"]
    awx, problems = awx_import(document)
    assert problems == []
    assert linked(awx, "job_template", by_name(awx, "job_template", "Stella | Deploy"), "credentials") == {
        "Stella targets SSH",
        "Stella job store",
    }
    assert linked(awx, "group", by_name(awx, "group", "stella_targets"), "hosts") == set()


def test_importing_twice_fails_nothing_and_duplicates_nothing():
    awx, problems = awx_import(prepared())
    assert problems == []
    # AWX's create_approval_template makes a new approval template at each import and points the node at it
    counts = {kind: len(objects) for kind, objects in awx.objects.items() if kind != "workflow_approval_template"}
    links = copy.deepcopy(awx.links)
    awx, problems = awx_import(prepared(), awx)
    assert problems == []
    assert {
        kind: len(objects) for kind, objects in awx.objects.items() if kind != "workflow_approval_template"
    } == counts
    assert awx.links == links


def test_awxkits_export_of_what_the_import_made_has_the_documents_natural_keys_and_references():
    document = prepared()
    awx, problems = awx_import(document)
    assert problems == []
    exported = awx_v2(awx).export_assets()
    for resource, objects in document.items():
        ours = {json.dumps(o["natural_key"], sort_keys=True): o for o in objects}
        theirs = {json.dumps(o["natural_key"], sort_keys=True): o for o in exported[resource]}
        assert set(ours) <= set(theirs), resource
        for key, obj in ours.items():
            assert_same_references(obj, theirs[key], resource)


def _canonical(obj):
    return json.dumps(obj, sort_keys=True)


def assert_same_references(ours, theirs, where):
    """Every reference (a natural key) and every related set of ``ours`` is in ``theirs`` as awxkit wrote it."""
    for key, value in ours.items():
        if key == "related":
            for name, related in value.items():
                if isinstance(related, list) and related and "natural_key" in related[0]:
                    by_key = {json.dumps(o["natural_key"], sort_keys=True): o for o in theirs["related"][name]}
                    assert {json.dumps(o["natural_key"], sort_keys=True) for o in related} == set(by_key), (where, name)
                    for item in related:
                        assert_same_references(
                            item, by_key[json.dumps(item["natural_key"], sort_keys=True)], "%s/%s" % (where, name)
                        )
                elif isinstance(related, list):
                    assert sorted(map(_canonical, related)) == sorted(map(_canonical, theirs["related"][name])), (
                        where,
                        name,
                    )
                else:  # a survey spec, an approval template
                    assert theirs["related"][name] == related, (where, name)
        elif isinstance(value, dict) and "type" in value:
            assert theirs[key] == value, (where, key)


# --------------------------------------------------------------------------- the check can fail


def _group(document):
    return document["inventory"][0]["related"]["groups"][0]


def _template(document, name):
    return next(t for t in document["job_templates"] if t["name"] == name)


def _node(document, identifier):
    return next(
        n for n in document["workflow_job_templates"][0]["related"]["workflow_nodes"] if n["identifier"] == identifier
    )


def host_reference_without_inventory(document):
    del _group(document)["related"]["hosts"][0]["inventory"]


def credential_the_document_does_not_define(document):
    _template(document, "Stella | Roll back")["related"]["credentials"][0]["name"] = "Stella SSH"


def node_of_a_template_the_document_does_not_define(document):
    _node(document, "rollback")["unified_job_template"]["name"] = "Stella | Rollback"


def execution_environment_keyed_with_an_organization(document):
    reference = _template(document, "Stella | Deploy")["execution_environment"]
    reference["organization"] = {"name": "Default", "type": "organization"}


def edge_to_a_node_the_workflow_does_not_have(document):
    _node(document, "deploy")["related"]["failure_nodes"][0]["identifier"] = "approve"


def placeholder_project_url(document):
    document["projects"][0]["scm_url"] = "https://git.example.com/acme/stella-deployments.git@@"


def injector_naming_an_undefined_field(document):
    document["credential_types"][0]["injectors"]["env"]["PGPASSWORD"] = "{{ pasword }}"


def credential_input_its_type_does_not_define(document):
    document["credentials"][0]["inputs"]["sslrootcert"] = "/etc/ssl/ca.pem"


def _drift_schedule(document):
    (schedule,) = _template(document, DRIFT)["related"]["schedules"]
    return schedule


def schedule_with_a_naive_start(document):
    _drift_schedule(document)["rrule"] = "DTSTART:20250101T000700 RRULE:FREQ=HOURLY;INTERVAL=1"


def schedule_without_an_interval(document):
    _drift_schedule(document)["rrule"] = "DTSTART:20250101T000700Z RRULE:FREQ=HOURLY"


def schedule_with_variables_the_template_does_not_accept(document):
    _drift_schedule(document)["extra_data"] = {"stella_verify_fail_on_drift": False}


def schedule_without_a_name(document):
    _drift_schedule(document)["name"] = ""


BREAKERS = [
    schedule_with_a_naive_start,
    schedule_without_an_interval,
    schedule_with_variables_the_template_does_not_accept,
    schedule_without_a_name,
    host_reference_without_inventory,
    credential_the_document_does_not_define,
    node_of_a_template_the_document_does_not_define,
    execution_environment_keyed_with_an_organization,
    edge_to_a_node_the_workflow_does_not_have,
    placeholder_project_url,
    injector_naming_an_undefined_field,
    credential_input_its_type_does_not_define,
]


@pytest.mark.parametrize("breaker", BREAKERS, ids=lambda b: b.__name__)
def test_a_copy_with_a_broken_reference_fails_the_check(breaker):
    document = prepared()
    breaker(document)
    _awx, problems = awx_import(document)
    assert problems


def test_a_host_reference_without_its_inventory_leaves_the_host_out_of_the_group():
    document = prepared()
    host_reference_without_inventory(document)
    awx, problems = awx_import(document)
    assert any("Could not find matching object" in p and "'vm-01'" in p for p in problems), problems
    assert linked(awx, "group", by_name(awx, "group", "stella_targets"), "hosts") == {"vm-02"}


def test_the_template_itself_does_not_import():
    # its project points at a placeholder, so the first project update fails and AWX refuses every job
    # template ("Playbook not found for project"): only the prepared document is for `awx import`
    _awx, problems = awx_import(TEMPLATE)
    assert any("Playbook not found for project" in p for p in problems), problems


# --------------------------------------------------------------------------- prepare_import.py


def test_every_placeholder_of_the_template_is_one_the_command_fills():
    found = set(prepare_import._placeholders(TEMPLATE))  # pylint: disable=protected-access
    assert found == set(prepare_import.SOURCES)
    for credential in TEMPLATE["credentials"]:
        assert all(prepare_import.PLACEHOLDER.match(v) for v in credential["inputs"].values()), credential["name"]


@pytest.fixture(name="key_files")
def fixture_key_files(tmp_path):
    key, ca = tmp_path / "id_stella", tmp_path / "db-ca.pem"
    key.write_text(SSH_KEY, encoding="utf-8")
    ca.write_text(CA, encoding="utf-8")
    return str(key), str(ca)


def run_prepare(argv, environ):
    out, err = io.StringIO(), io.StringIO()
    code = prepare_import.main(argv, environ=environ, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def required_argv(key):
    return [
        "--scm-url",
        VALUES["SCM_URL"],
        "--ee-image",
        VALUES["EE_IMAGE"],
        "--store-dsn",
        VALUES["STORE_DSN"],
        "--ssh-user",
        "deploy",
        "--ssh-key-file",
        key,
    ]


def test_the_command_writes_a_document_that_imports_and_keeps_secrets_off_the_command_line(key_files, tmp_path):
    key, ca = key_files
    output = tmp_path / "stella.awx.json"
    environ = {"STELLA_STORE_PASSWORD": "store-secret-2", "STELLA_TRAFFIC_TOKEN": "traffic-token-2"}
    argv = required_argv(key) + [
        "--store-ca-file",
        ca,
        "--traffic-url",
        VALUES["TRAFFIC_URL"],
        "--host",
        "vm-01=10.0.0.11",
        "--host",
        "vm-02",
        "--output",
        str(output),
    ]
    code, out, err = run_prepare(argv, environ)
    assert (code, out) == (0, ""), err
    assert stat.S_IMODE(os.stat(output).st_mode) == 0o600
    document = json.loads(output.read_text(encoding="utf-8"))
    assert [c["name"] for c in document["credentials"]] == [
        "Stella job store",
        "Stella targets SSH",
        "Stella traffic controller",
    ]
    assert document["credentials"][0]["inputs"]["password"] == "store-secret-2"
    assert not any(s in " ".join(argv) for s in environ.values())
    _awx, problems = awx_import(document)
    assert problems == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"drop": "STELLA_STORE_PASSWORD"}, "missing: STELLA_STORE_PASSWORD"),
        ({"argv": ["--store-dsn", "postgresql://stella:hunter2@db.acme.internal/stella"]}, "carries a password"),
        ({"argv": ["--scm-url", "https://git.example.com/acme/stella-deployments.git"]}, "reserved for examples"),
        ({"argv": ["--ee-image", "registry.example.com/stella/ee:latest"]}, "reserved for examples"),
        ({"argv": ["--scm-url", "not a url"]}, "is not a git URL"),
        ({"argv": ["--traffic-url", "router:8080"]}, "is not an http(s) URL"),
        ({"argv": ["--host", "vm 01"]}, "must be NAME or NAME=ADDRESS"),
        ({"argv": ["--ee-registry-username", "awx-pull"]}, "needs STELLA_EE_REGISTRY_PASSWORD"),
    ],
)
def test_the_command_refuses_what_would_not_work(key_files, change, message):
    key, _ca = key_files
    environ = {"STELLA_STORE_PASSWORD": "store-secret-2"}
    environ.pop(change.get("drop", ""), None)
    code, out, err = run_prepare(required_argv(key) + change.get("argv", []), environ)
    assert (code, out) == (2, "")
    assert message in err


def test_a_credential_without_a_required_input_is_refused():
    document = copy.deepcopy(TEMPLATE)
    with pytest.raises(prepare_import.PrepareError, match="lacks password"):
        prepare_import.prepare(document, dict(VALUES, STORE_PASSWORD=None), HOSTS)
