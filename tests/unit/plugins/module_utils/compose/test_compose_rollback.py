"""compose/rollback.py: requests from the real planner, digest proof, revision checks, refusals before any
Docker call, and ComposeRollback driven by table-driven Docker scripts."""

from __future__ import annotations

import os

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import apply as ca
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import request as creq
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import rollback as rb
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import revisions as _revisions
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import DEFAULT_WORK_DIRECTORY
from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import read_bytes
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import plan as _plan

D1 = sc.DIGEST
TARGET = {"Id": "tgt-01", "Name": "vm-01", "Type": "ComposeHost", "Endpoint": "local", "ExecutionMode": "agent"}
STICKER, MANIFEST, ENV = "stella.version.json", "apply-manifest.json", ".env.stella"


def planned(work):
    release = {
        "release": {"id": "rel-1", "name": "shop", "version": "1.0.0"},
        "tenant": "acme",
        "environment": "prod",
        "application": "shop",
        "strategy": "rolling",
        "workDirectory": work,
        "target": {
            "id": "tgt-01",
            "name": "vm-01",
            "type": "ComposeHost",
            "endpoint": "local",
            "executionMode": "agent",
        },
        "components": [{"name": "web", "image": "127.0.0.1:5000/stella/app:v1"}],
    }
    return _plan.plan_release(release, {"127.0.0.1:5000/stella/app:v1": D1})


# --------------------------------------------------------------------------- requests


def test_payload_from_the_real_planner():
    plan = planned("/srv/stella")
    request = rb.parse_request(plan["payloads"]["compose.rollback"])
    assert request["project_name"] == plan["projectName"]
    assert request["revision_path"] is None
    assert request["target"]["endpoint"] == "local"
    explicit = dict(plan["payloads"]["compose.rollback"], RevisionPath="000001-abcdefabcdef", Reason="probe failed")
    request = rb.parse_request(explicit, {"work_directory": "/srv/stella/"})
    assert request["revision_path"] == "000001-abcdefabcdef" and request["reason"] == "probe failed"
    assert request["work_directory"] == "/srv/stella"
    # One payload-versus-option rule: another work directory given as an option is a conflict.
    with pytest.raises(StellaError) as err:
        rb.parse_request(explicit, {"work_directory": "/other"})
    assert err.value.code == "invalid_payload"
    assert "WorkDirectory conflicts with option work_directory" in err.value.reason
    del explicit["WorkDirectory"]
    assert rb.parse_request(explicit, {"work_directory": "/other"})["work_directory"] == "/other"


def test_payload_from_the_real_planner_rolls_back_in_the_planned_work_directory():
    """The planned rollback looks for revisions where the planned apply retained them."""
    plan = planned("/srv/stella")
    request = rb.parse_request(plan["payloads"]["compose.rollback"])
    assert request["work_directory"] == "/srv/stella"


@pytest.mark.parametrize(
    "payload,needle",
    [
        ({"ProjectName": "p", "Target": TARGET, "revisionPath": "x"}, "unknown key(s) revisionPath"),
        ({"Target": TARGET}, "ProjectName"),
        ({"ProjectName": "p"}, "Target"),
        ({"ProjectName": "", "Target": TARGET}, "ProjectName"),
        ({"ProjectName": "p", "Target": TARGET, "RevisionPath": ""}, "RevisionPath"),
        ({"ProjectName": "p", "Target": TARGET, "Variables": "x"}, "Variables"),
        ({"ProjectName": "p", "Target": TARGET, "ManifestHash": "sha256:abc"}, "ManifestHash"),
    ],
)
def test_payload_rejections(payload, needle):
    with pytest.raises(StellaError) as err:
        rb.parse_request(payload)
    assert needle in err.value.reason and err.value.code == "invalid_payload"
    assert err.value.phase == "validate_payload"


def test_options_request():
    snake_target = {k[0].lower() + k[1:]: v for k, v in TARGET.items()}
    request = rb.parse_request(None, {"project_name": "p", "target": snake_target})
    assert request["work_directory"] == DEFAULT_WORK_DIRECTORY and request["target"]["id"] == "tgt-01"
    assert request["reason"] is None and request["manifest_hash"] is None
    with pytest.raises(StellaError):
        rb.parse_request(None, {"project_name": "p"})


def test_reason_from_variables():
    payload = {"ProjectName": "p", "Target": TARGET, "Variables": {"rollbackReason": "probe failed"}}
    assert rb.parse_request(payload)["reason"] == "probe failed"
    assert rb.parse_request(dict(payload, Reason="explicit"))["reason"] == "explicit"


def test_revision_digests():
    plan = planned("/w")
    assert rb.revision_digests(plan["_files"][STICKER]) == {"web": D1}
    assert rb.revision_digests(b"nope") == {}


@pytest.mark.parametrize(
    "committed,own,restoring,refused",
    [
        (None, "sha256:b", "sha256:a", False),
        ("sha256:b", "sha256:b", "sha256:a", False),
        ("sha256:a", "sha256:b", "sha256:a", False),
        ("sha256:c", "sha256:b", "sha256:a", True),
        ("sha256:c", None, "sha256:a", False),
    ],
    ids=["nothing-committed", "still-own", "already-restored", "newer-release", "no-own-hash"],
)
def test_superseded(committed, own, restoring, refused):
    why = rb.superseded(committed, own, restoring)
    assert bool(why) is refused
    if refused:
        assert committed in why and own in why


def test_committed_manifest_hash():
    plan = planned("/w")
    assert rb.committed_manifest_hash(plan["_files"][MANIFEST]) == plan["manifestHash"]
    assert rb.committed_manifest_hash(None) is None and rb.committed_manifest_hash(b"[]") is None
    assert rb.committed_manifest_hash(b"{nope") is None


def retained(tmp_path):
    plan = planned(str(tmp_path))
    layout = _revisions.Layout(str(tmp_path), plan["projectName"])
    os.makedirs(layout.project_dir)
    files = {name: plan["_files"][name] for name in _revisions.REVISION_FILES}
    path = _revisions.retain_revision(layout, files, plan["manifestHash"])
    return plan, layout, path


def test_check_revision_set(tmp_path):
    _plan_, layout, path = retained(tmp_path)
    record, files = _revisions.load_revision(path)
    rb.check_revision_set(layout, record, files)
    # hashes recomputed consistently but the sticker belongs to another manifest: still refused
    other = dict(files, **{STICKER: files[STICKER].replace(b"rel-1", b"rel-2")})
    with pytest.raises(StellaError) as err:
        rb.check_revision_set(layout, record, other)
    assert err.value.code == "revision_tampered" and err.value.phase == "validate_revision"


def request_for(tmp_path, plan, **kw):
    options = {
        "project_name": plan["projectName"],
        "work_directory": str(tmp_path),
        "target": {
            "id": "tgt-01",
            "name": "vm-01",
            "type": "ComposeHost",
            "endpoint": "local",
            "executionMode": "agent",
        },
    }
    options.update(kw)
    return rb.parse_request(None, options)


def rollback(runner, request, **kw):
    return rb.ComposeRollback(sc.engine(runner), runner).run(request, **kw)


def test_no_revision_fails_in_resolve_revision_without_docker(tmp_path):
    plan = planned(str(tmp_path))
    runner = sc.ScriptedRunner()
    with pytest.raises(StellaError) as err:
        rollback(runner, request_for(tmp_path, plan))
    assert err.value.code == "no_revision" and err.value.phase == "resolve_revision"
    assert err.value.evidence["rollbackRestored"] is False
    assert [p["phase"] for p in err.value.evidence["deploymentPhases"]] == ["rollback-pre"]
    os.makedirs(os.path.join(str(tmp_path), plan["projectName"]))
    with pytest.raises(StellaError) as err:
        rollback(runner, request_for(tmp_path, plan))
    assert err.value.code == "no_revision"
    assert runner.calls == []


def test_tampered_and_traversal_fail_without_docker(tmp_path):
    plan, _layout, path = retained(tmp_path)
    runner = sc.ScriptedRunner()
    with open(os.path.join(path, sc.LOCK), "ab") as handle:
        handle.write(b"# edited\n")
    with pytest.raises(StellaError) as err:
        rollback(runner, request_for(tmp_path, plan))
    assert err.value.code == "revision_tampered" and err.value.phase == "validate_revision"
    assert err.value.evidence["restoredRevisionPath"] == os.path.realpath(path)
    with pytest.raises(StellaError) as err:
        rollback(runner, request_for(tmp_path, plan, revision_path="../../.."))
    assert err.value.code == "revision_path_rejected" and err.value.phase == "resolve_revision"
    assert runner.calls == []


# --------------------------------------------------------------------------- ComposeRollback, scripted


class History:
    """Releases A, B and C applied in turn on one project (C runs now; A and B are retained)."""

    def __init__(self, tmp_path):
        self.site = sc.Site(tmp_path / "work")
        self.plans = {
            name: self.site.plan(version, secret="secret-" + name)
            for name, version in (("A", "1.0.0"), ("B", "2.0.0"), ("C", "3.0.0"))
        }
        self.running = {name: [self.site.container(plan, "run-" + name)] for name, plan in self.plans.items()}
        self.baseline = {}
        previous = []
        for name in "ABC":
            plan = self.plans[name]
            runner = sc.ScriptedRunner(self.site.apply_steps(plan, previous, self.running[name]))
            result = ca.ComposeApply(sc.engine(runner), runner, env_bytes=self.site.env(plan)).run(
                creq.parse_request(plan["payloads"]["compose.up"])
            )
            runner.assert_done()
            self.baseline[name] = result["evidence"].get("previousRevisionPath")
            previous = self.running[name]
        self.directory = self.site.directory(self.plans["A"])
        self.project = self.site.project(self.plans["A"])

    def request(self, name, **options):
        payload = self.plans[name]["payloads"]["compose.rollback"]
        return rb.parse_request(payload, dict({"work_directory": self.site.work}, **options))


@pytest.fixture
def history(tmp_path):
    return History(tmp_path)


def test_rollback_of_a_superseded_deployment_touches_nothing(history):
    """Deployment B's rollback (to A) while C runs: refused, no Docker call, no file changed."""
    before = sc.snapshot(history.directory)
    runner = sc.ScriptedRunner()
    request = history.request("B", revision_path=history.baseline["B"])
    assert request["manifest_hash"] == history.plans["B"]["manifestHash"]
    with pytest.raises(StellaError) as err:
        rollback(runner, request)
    assert err.value.code == "rollback_superseded" and err.value.phase == "resolve_revision"
    evidence = err.value.evidence
    assert history.plans["C"]["manifestHash"] in evidence["rollbackRefusedReason"]
    assert evidence["rollbackRestored"] is False and evidence["changed"] is False
    assert runner.calls == []
    assert sc.snapshot(history.directory) == before


def test_rollback_of_an_explicit_revision_path(history):
    """Restore A's revision (not the newest, which is B's) by its RevisionPath, relative to revisions/."""
    revisions = sorted(os.listdir(os.path.join(history.directory, "revisions")))
    assert len(revisions) == 2 and os.path.join(history.directory, "revisions", revisions[0]) == history.baseline["B"]
    plan_a, site = history.plans["A"], history.site
    restored = history.running["A"]
    seen = {}

    def at_up(_argv):
        seen["lock"] = read_bytes(os.path.join(history.directory, sc.LOCK))
        seen["sticker"] = read_bytes(os.path.join(history.directory, STICKER))

    steps = (
        sc.runtime()
        + sc.containers(history.project, history.running["C"])
        + [sc.image_present(), site.up_step(plan_a, action=at_up)]
        + sc.containers(history.project, restored)
    )
    runner = sc.ScriptedRunner(steps)
    request = history.request("C", revision_path=revisions[0], reason="probe failed")
    result = rollback(runner, request)

    runner.assert_done()
    # The retained lock is hash-verified and planner-rendered: read directly, never rendered by Compose.
    assert sc.runtime_once(runner.docker_verbs()) == [
        "runtime",
        "ps",
        "inspect",
        "image inspect",
        "compose up",
        "ps",
        "inspect",
    ]
    assert seen == {"lock": plan_a["_files"][sc.LOCK], "sticker": history.plans["C"]["_files"][STICKER]}
    for name in (sc.LOCK, STICKER, MANIFEST, ENV):
        assert read_bytes(os.path.join(history.directory, name)) == plan_a["_files"][name], name
    assert os.stat(os.path.join(history.directory, ENV)).st_mode & 0o777 == 0o600
    evidence = result["evidence"]
    assert result["changed"] is True and evidence["rollbackRestored"] is True
    assert evidence["restoredRevisionPath"] == os.path.realpath(history.baseline["B"])
    assert evidence["restoredManifestHash"] == plan_a["manifestHash"]
    assert evidence["restoredDigests"] == {"web": D1} and evidence["rollbackReason"] == "probe failed"
    assert [p["status"] for p in evidence["deploymentPhases"]] == ["succeeded"] * 4
    assert evidence["versionStickerHash"] == plan_a["versionStickerHash"]
    assert not [n for n in os.listdir(history.directory) if n.startswith(".stella-tmp-")]


def test_rollback_to_the_release_already_running_is_a_no_op(history):
    """The latest retained revision is B's; with B's files and containers in place nothing is restarted."""
    first = sc.ScriptedRunner(
        sc.runtime()
        + sc.containers(history.project, history.running["C"])
        + [sc.image_present(), history.site.up_step(history.plans["B"])]
        + sc.containers(history.project, history.running["B"])
    )
    rollback(first, history.request("C"))
    first.assert_done()
    assert "compose config" not in first.verbs()
    before = sc.snapshot(history.directory)
    runner = sc.ScriptedRunner(
        sc.runtime() + sc.containers(history.project, history.running["B"]), keyed=[sc.image_present()]
    )
    result = rollback(runner, history.request("C"))
    runner.assert_done()
    assert sc.runtime_once(runner.docker_verbs()) == ["runtime", "ps", "inspect", "image inspect"]
    assert "compose up" not in runner.verbs() and "compose config" not in runner.verbs()
    assert result["changed"] is False and result["evidence"]["rollbackRestored"] is True
    assert sc.snapshot(history.directory) == before


def test_failed_rollback_puts_every_file_back(history):
    before = sc.snapshot(history.directory, skip=("revisions",))
    plan_b, site = history.plans["B"], history.site
    up = site.up_step(plan_b, rc=1, err=sc.fixture("compose_up_exited.stderr"))
    runner = sc.ScriptedRunner(
        sc.runtime() + sc.containers(history.project, history.running["C"]) + [sc.image_present(), up]
    )
    with pytest.raises(StellaError) as err:
        rollback(runner, history.request("C"))
    runner.assert_done()
    assert sc.runtime_once(runner.docker_verbs()) == ["runtime", "ps", "inspect", "image inspect", "compose up"]
    assert err.value.code == "compose_up_failed" and err.value.phase == "compose_up"
    assert err.value.evidence["rollbackRestored"] is False
    assert err.value.evidence["filesRestored"] == [ENV, sc.LOCK]
    assert sc.snapshot(history.directory, skip=("revisions",)) == before


def test_hung_daemon_during_rollback(history):
    before = sc.snapshot(history.directory)
    runner = sc.ScriptedRunner([sc.Unordered([sc.docker_version(rc=124), sc.docker_info()])])
    with pytest.raises(StellaError) as err:
        rollback(runner, history.request("C"))
    runner.assert_done()
    assert err.value.code == "runtime_daemon_unavailable" and err.value.phase == "preflight"
    assert sc.snapshot(history.directory) == before


def test_check_mode_restores_nothing(history):
    before = sc.snapshot(history.directory)
    runner = sc.ScriptedRunner(sc.runtime() + sc.containers(history.project, history.running["C"]))
    result = rollback(runner, history.request("C"), check_mode=True)
    runner.assert_done()
    assert result["changed"] is True and result["evidence"]["checkMode"] is True
    assert sc.snapshot(history.directory) == before
