"""_rollback: payload normalization, digest proof, revision set checks, and refusals before any docker call."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils import _revisions
from ansible_collections.stellaops.runtime.plugins.plugin_utils import _plan
from ansible_collections.stellaops.runtime.plugins.module_utils import _rollback as rb
from ansible_collections.stellaops.runtime.plugins.module_utils._common import StellaError

D1 = "sha256:b9a6e9632066c93f491df171b17ea45ae2caeba315e7305441a9822cf67e9c79"
TARGET = {"Id": "tgt-01", "Name": "vm-01", "Type": "ComposeHost", "Endpoint": "local", "ExecutionMode": "agent"}


def planned(work):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"}, "tenant": "acme", "environment": "prod",
        "application": "shop", "strategy": "rolling", "workDirectory": work,
        "target": {"id": "tgt-01", "name": "vm-01", "type": "ComposeHost", "endpoint": "local", "executionMode": "agent"},
        "components": [{"name": "web", "image": "127.0.0.1:5000/stella/app:v1"}],
    }
    return _plan.plan_release(release, {"127.0.0.1:5000/stella/app:v1": D1})


def test_payload_from_the_real_planner():
    plan = planned("/srv/stella")
    request = rb.rollback_request_from_payload(plan["payloads"]["compose.rollback"])
    assert request["project_name"] == plan["projectName"]
    assert request["revision_path"] is None
    assert request["work_directory"] == "/srv/stella"  # from Variables.workDirectory
    assert request["target"]["endpoint"] == "local"
    explicit = dict(plan["payloads"]["compose.rollback"], RevisionPath="000001-abcdefabcdef", Reason="probe failed")
    request = rb.rollback_request_from_payload(explicit, {"work_directory": "/other"})
    assert request["revision_path"] == "000001-abcdefabcdef" and request["reason"] == "probe failed"
    assert request["work_directory"] == "/other"


@pytest.mark.parametrize("payload,needle", [
    ({"ProjectName": "p", "Target": TARGET, "revisionPath": "x"}, "unknown key(s) revisionPath"),
    ({"Target": TARGET}, "ProjectName"),
    ({"ProjectName": "p"}, "Target"),
    ({"ProjectName": "", "Target": TARGET}, "ProjectName"),
    ({"ProjectName": "p", "Target": TARGET, "RevisionPath": ""}, "RevisionPath"),
    ({"ProjectName": "p", "Target": TARGET, "Variables": "x"}, "Variables"),
])
def test_payload_rejections(payload, needle):
    with pytest.raises(StellaError) as err:
        rb.rollback_request_from_payload(payload)
    assert needle in err.value.reason and err.value.code == "invalid_payload"


def test_options_request():
    request = rb.rollback_request_from_options({"project_name": "p", "target": {k[0].lower() + k[1:]: v
                                                                                for k, v in TARGET.items()},
                                                "pull_images": False})
    assert request["pull_images"] is False and request["work_directory"] == rb.DEFAULT_WORK_DIRECTORY
    with pytest.raises(StellaError):
        rb.rollback_request_from_options({"project_name": "p"})


def test_revision_digests():
    plan = planned("/w")
    assert rb.revision_digests(plan["_files"]["stella.version.json"]) == {"web": D1}
    assert rb.revision_digests(b"nope") == {}


def retained(tmp_path):
    plan = planned(str(tmp_path))
    layout = _revisions.Layout(str(tmp_path), plan["projectName"])
    os.makedirs(layout.project_dir)
    files = {name: plan["_files"][name] for name in _revisions.REVISION_FILES}
    path = _revisions.retain_revision(layout, files, plan["manifestHash"])
    return plan, layout, path


def test_check_revision_set(tmp_path):
    plan, layout, path = retained(tmp_path)
    record, files = _revisions.load_revision(path)
    rb.check_revision_set(layout, record, files)
    # hashes recomputed consistently but the sticker belongs to another manifest: still refused
    other = dict(files, **{_revisions.STICKER_FILE: files[_revisions.STICKER_FILE].replace(b"rel-1", b"rel-2")})
    with pytest.raises(StellaError) as err:
        rb.check_revision_set(layout, record, other)
    assert err.value.code == "revision_tampered"


def refusing_runner(calls):
    def run(argv):
        calls.append(argv)
        if argv[0] == "ip":
            return 0, json.dumps([{"addr_info": [{"local": "127.0.0.1"}]}]), ""
        raise AssertionError("docker must not run: %r" % (argv,))
    return run


def request_for(tmp_path, plan, **kw):
    request = {"project_name": plan["projectName"], "revision_path": None, "work_directory": str(tmp_path),
               "target": {"id": "tgt-01", "name": "vm-01", "type": "ComposeHost", "endpoint": "local",
                          "executionMode": "agent"}, "reason": None, "pull_images": True}
    request.update(kw)
    return request


def test_no_revision_fails_in_resolve_revision_without_docker(tmp_path):
    plan = planned(str(tmp_path))
    calls = []
    with pytest.raises(StellaError) as err:
        rb.ComposeRollback(refusing_runner(calls)).rollback(request_for(tmp_path, plan))
    assert err.value.code == "no_revision" and err.value.phase == "resolve_revision"
    assert err.value.evidence["rollbackRestored"] is False
    assert [p["phase"] for p in err.value.evidence["deploymentPhases"]] == ["rollback-pre"]
    os.makedirs(os.path.join(str(tmp_path), plan["projectName"]))
    with pytest.raises(StellaError) as err:
        rb.ComposeRollback(refusing_runner(calls)).rollback(request_for(tmp_path, plan))
    assert err.value.code == "no_revision"
    assert all(argv[0] == "ip" for argv in calls)


def test_tampered_and_traversal_fail_without_docker(tmp_path):
    plan, layout, path = retained(tmp_path)
    calls = []
    with open(os.path.join(path, _revisions.LOCK_FILE), "ab") as handle:
        handle.write(b"# edited\n")
    with pytest.raises(StellaError) as err:
        rb.ComposeRollback(refusing_runner(calls)).rollback(request_for(tmp_path, plan))
    assert err.value.code == "revision_tampered" and err.value.phase == "validate_revision"
    assert err.value.evidence["restoredRevisionPath"] == path
    with pytest.raises(StellaError) as err:
        rb.ComposeRollback(refusing_runner(calls)).rollback(request_for(tmp_path, plan, revision_path="../../.."))
    assert err.value.code == "revision_path_rejected" and err.value.phase == "resolve_revision"
    assert all(argv[0] == "ip" for argv in calls)
