"""job/drift.py: what a target runs held against what its project's last successful job recorded; and
the health a verdict implies (job/health.py)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import drift as _drift
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import health as _health

APP = "sha256:" + "a" * 64
DB = "sha256:" + "b" * 64
OTHER = "sha256:" + "c" * 64
LOCK, STICKER, MANIFEST = ("sha256:" + c * 64 for c in "123")
FILES = {"compose.stella.lock.yml": LOCK, "stella.version.json": STICKER, "apply-manifest.json": MANIFEST}


def deployment():
    return {
        "projectName": "shop",
        "images": [
            {"name": "app", "image": "reg/app@" + APP, "digest": APP},
            {"name": "db", "image": "reg/db@" + DB, "digest": DB},
        ],
        "artifacts": {"composeLockHash": LOCK, "versionStickerHash": STICKER, "applyManifestHash": MANIFEST},
    }


def want():
    return _drift.expected("job-1", {"projectName": "shop", "status": "Succeeded"}, deployment())


def container(component, digest, running=True, **extra):
    entry = {
        "name": "shop-%s-1" % component,
        "component": component,
        "state": "running" if running else "exited",
        "running": running,
        "imageId": "sha256:" + "f" * 64,
        "imageDigest": digest,
        "repoDigests": ["reg/%s@%s" % (component, digest)],
        "retained": False,
        "labels": {"stella.project": "shop", "stella.component": component, "stella.image.digest": digest},
    }
    entry.update(extra)
    return entry


def observed():
    return {"files": dict(FILES), "containers": [container("app", APP), container("db", DB)]}


def kinds(differences):
    return [(d["kind"], d["service"]) for d in differences]


def test_expected_takes_the_recorded_digests_and_file_hashes():
    assert want() == {
        "jobId": "job-1",
        "projectName": "shop",
        "components": {"app": APP, "db": DB},
        "files": {"lock": LOCK, "sticker": STICKER, "manifest": MANIFEST},
    }
    assert _drift.expected("job-1", {}, None) is None  # no deployment evidence: nothing to compare with


def test_a_target_that_runs_what_was_recorded_is_in_sync():
    entry = _drift.verdict("web-1", "shop", want(), observed())
    assert (entry["verdict"], entry["differences"], entry["jobId"]) == ("in_sync", [], "job-1")
    assert _drift.line(entry) == "in_sync web-1 project shop"


def test_another_digest_is_drift_with_the_digest_the_image_has():
    seen = observed()
    seen["containers"][0] = container("app", OTHER)
    entry = _drift.verdict("web-2", "shop", want(), seen)
    assert entry["verdict"] == "drifted"
    assert entry["differences"] == [{"kind": "digest", "service": "app", "recorded": APP, "observed": OTHER}]
    assert (
        _drift.line(entry)
        == "drifted web-2 project shop: digest of app sha256:cccccccccccc.. != recorded sha256:aaaaaaaaaaaa.."
    )


def test_a_label_that_lies_does_not_hide_another_image():
    seen = observed()
    # another image run under the project's labels, its label naming the recorded digest
    seen["containers"][0] = container("app", APP, repoDigests=["reg/other@" + OTHER])
    assert _drift.compare(want(), seen) == [{"kind": "digest", "service": "app", "recorded": APP, "observed": OTHER}]
    # the image is the recorded one but the label says otherwise: drift too
    seen["containers"][0] = container("app", OTHER, repoDigests=["reg/app@" + APP])
    assert kinds(_drift.compare(want(), seen)) == [("digest", "app")]


def test_an_image_known_by_its_id_or_not_inspectable():
    seen = observed()
    seen["containers"][0] = container("app", APP, repoDigests=[], imageId=APP)  # a loaded image: its id
    assert _drift.compare(want(), seen) == []
    seen["containers"][0] = container("app", APP, repoDigests=None)  # image gone: the label is all there is
    assert _drift.compare(want(), seen) == []
    seen["containers"][0] = container("app", OTHER, repoDigests=None)
    assert kinds(_drift.compare(want(), seen)) == [("digest", "app")]


def test_missing_extra_and_stopped_services():
    seen = observed()
    seen["containers"] = [container("app", APP, running=False), container("cache", OTHER)]
    differences = _drift.compare(want(), seen)
    assert kinds(differences) == [("missing_service", "db"), ("extra_service", "cache"), ("stopped", "app")]
    assert differences[2] == {"kind": "stopped", "service": "app", "recorded": "running", "observed": "exited"}
    assert _drift.summary(differences) == "missing db; extra cache; stopped app"


def test_a_retained_container_is_no_extra_service():
    seen = observed()
    seen["containers"].append(container("app", OTHER, running=False, retained=True, name="shop-app-stella-previous"))
    assert _drift.compare(want(), seen) == []


@pytest.mark.parametrize(
    "file_name, kind",
    [("compose.stella.lock.yml", "lock"), ("stella.version.json", "sticker"), ("apply-manifest.json", "manifest")],
)
def test_a_changed_or_missing_file_is_drift(file_name, kind):
    seen = observed()
    seen["files"][file_name] = OTHER
    assert _drift.compare(want(), seen) == [
        {"kind": kind, "service": None, "recorded": want()["files"][kind], "observed": OTHER}
    ]
    seen["files"][file_name] = None
    entry = _drift.verdict("web-1", "shop", want(), seen)
    assert entry["differences"][0]["observed"] is None
    assert entry["reason"] == "%s missing" % kind


def test_a_file_not_recorded_is_not_compared():
    recorded = deployment()
    recorded["artifacts"] = {"versionStickerHash": STICKER}  # a DockerHost target keeps its sticker only
    seen = observed()
    seen["files"]["compose.stella.lock.yml"] = None
    assert _drift.compare(_drift.expected("job-1", {}, recorded), seen) == []


def test_every_kind_is_described():
    seen = {"files": {}, "containers": [container("app", OTHER, running=False), container("x", APP)]}
    found = _drift.compare(want(), seen)
    assert sorted({d["kind"] for d in found}) == sorted(_drift.KINDS)
    assert all(_drift.describe(d) for d in found)


def test_no_successful_job_is_unknown_not_drift():
    entry = _drift.verdict("web-3", "shop", None, observed())
    assert (entry["verdict"], entry["jobId"]) == ("unknown", None)
    assert _drift.line(entry) == "unknown web-3 project shop: no successful job recorded for project shop"
    assert _drift.line(_drift.verdict("web-4", None, None, {}, "unreachable: no answer")) == (
        "unknown web-4: unreachable: no answer"
    )


def test_the_reason_stays_one_bounded_line():
    seen = {"files": {}, "containers": [container("svc%03d" % i, APP) for i in range(200)]}
    entry = _drift.verdict("web-1", "shop", want(), seen)
    assert len(entry["reason"]) <= _drift.MAX_REASON and "\n" not in entry["reason"]
    assert len(_drift.target_reason([entry, copy.deepcopy(entry)])) <= _drift.MAX_REASON


def test_drift_degrades_the_target_and_in_sync_gives_back_what_the_job_gave():
    event = _health.drift_event("id-1", "web-1", "project shop drifted from job job-1: stopped app", "job-1", "T")
    assert (event["status"], event["code"], event["jobId"]) == ("degraded", "runtime_drift", "job-1")
    back = _health.in_sync_event({"targetId": "id-1", "status": "Succeeded"}, "web-1", "job-1", "T")
    assert (back["status"], back["code"], back["targetId"]) == ("healthy", None, "id-1")
    skipped = {"status": "Succeeded", "phases": [{"name": "verify", "detail": {"probes": "skipped"}}]}
    assert _health.in_sync_event(skipped, "web-1", "job-1", "T")["status"] == "unknown"
