"""The preflight of an offline site: ``registryReachabilityMode: skip`` asks no registry, an image the engine
already holds by its pinned digest (or id) passes the pull check from the engine's own answer, and the
platform check reads that image; platforms that cannot be read are ``unknown``, not a failure."""

from __future__ import annotations

import copy
import json
import platform as host_platform

import pytest
import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import oci_architecture
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight import build_request, evaluate
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.preflight_observer import HostObserver

ARCH = oci_architecture(host_platform.machine())
OTHER_ARCH = "s390x" if ARCH != "s390x" else "arm64"
DIGEST = "sha256:" + "b" * 64
IMAGE_ID = "sha256:" + "7" * 64
PINNED = "registry.site:5001/stella/app:v1@" + DIGEST


def params(**over):
    base = {
        "payload": None,
        "target_type": "ComposeHost",
        "work_directory": "/tmp",
        "image_reference": PINNED,
        "minimum_free_disk_bytes": 1,
        "registry_reachability_mode": "skip",
        "require_compose": None,
        "min_engine_version": "20.10.0",
        "min_compose_version": "2.20.0",
        "registry_username": None,
        "registry_password": None,
        "insecure_registries": [],
        "docker_host": None,
        "timeout": 5,
    }
    base.update(over)
    return build_request(base)


class CountingRegistry:
    """A registry double that counts what it is asked; ``platforms`` fails the test when ``refuse`` is set."""

    def __init__(self, refuse_manifest=True):
        self.insecure_registries = ()
        self.asked = []
        self.refuse_manifest = refuse_manifest

    def base_url(self, registry):
        return "http://%s" % registry

    def ping(self, registry, mode="http"):
        self.asked.append(("ping", registry, mode))
        return {"url": "http://%s/v2/" % registry, "reachable": True, "httpStatus": 200}

    def platforms(self, image):
        self.asked.append(("manifest", image.render()))
        if self.refuse_manifest:
            pytest.fail("the preflight asked the registry for the manifest of %s" % image.render(), pytrace=False)
        return [{"os": "linux", "architecture": ARCH}]

    def image_access(self, image):
        return {"pullAccess": "anonymous", "auth": None, "scope": "repository:%s:pull" % image.repository}


def inspect_doc(repo_digests=("registry.site:5001/stella/app@" + DIGEST,), arch=ARCH, variant=None):
    doc = copy.deepcopy(sc.fixture_json("image_inspect_app_v1.json")[0])
    doc.update(Id=IMAGE_ID, RepoDigests=list(repo_digests), Architecture=arch, Os="linux")
    doc.pop("Variant", None)
    if variant:
        doc["Variant"] = variant
    return [doc]


def engine(images, calls):
    """An engine client answering ``version``, ``info`` and ``image inspect`` (``images``: ref -> document)."""
    answers = {
        "version": (0, sc.fixture("docker_version_20.10.json"), ""),
        "info": (0, sc.fixture("docker_info.json"), ""),
    }

    def run_command(argv, environ_update=None):  # pylint: disable=unused-argument
        inner, _limit = sc.strip_timeout(argv)
        calls.append(inner[1:])
        if inner[1:3] == ["image", "inspect"]:
            ref = inner[3]
            if ref in images:
                return 0, json.dumps(images[ref]), ""
            return 1, "[]", "Error: No such image: %s" % ref
        return answers[inner[1]] if inner[1] in answers else (1, "", "unexpected %s" % inner)

    return DockerCli(run_command, which=lambda name: "/usr/bin/" + name)


def run(monkeypatch, tmp_path, images, registry=None, **over):
    sc.offline_preflight(monkeypatch)
    calls = []
    registry = registry or CountingRegistry()
    request = params(work_directory=str(tmp_path), **over)
    obs = HostObserver(engine(images, calls), sc.preflight_which, registry).observe(request)
    evidence, failures = evaluate(request, obs)
    return evidence, failures, registry, calls


def statuses(evidence):
    return {c["name"]: (c["status"], c.get("reason")) for c in evidence["checks"]}


def test_skip_and_a_held_image_asks_no_registry_and_passes_from_the_engine(monkeypatch, tmp_path):
    images = {"registry.site:5001/stella/app@" + DIGEST: inspect_doc()}
    evidence, failures, registry, calls = run(monkeypatch, tmp_path, images)
    assert failures == [] and registry.asked == []
    assert ["image", "inspect", "registry.site:5001/stella/app@" + DIGEST] in calls
    reg = evidence["registry"]
    assert reg["skipped"] == "registry_reachability_mode=skip" and reg["mode"] == "skip"
    assert reg["contacted"] is False and reg["requests"] == []
    assert reg["pullSource"] == "local" and reg["pullAccess"] == "local"
    assert reg["localImage"] == {"id": IMAGE_ID, "repoDigest": "registry.site:5001/stella/app@" + DIGEST}
    assert statuses(evidence)["registry"] == ("skipped", "registry_reachability_mode=skip")
    assert statuses(evidence)["registry_access"] == ("passed", None)
    assert statuses(evidence)["platform"] == ("passed", None)
    assert evidence["platform"]["source"] == "local" and evidence["platform"]["available"] == ["linux/" + ARCH]
    assert evidence["platform"]["status"] == "compatible"


def test_skip_and_an_image_not_held_asks_no_registry_and_records_unknown(monkeypatch, tmp_path):
    evidence, failures, registry, dummy = run(monkeypatch, tmp_path, {})
    assert failures == [] and registry.asked == []
    assert evidence["registry"]["contacted"] is False and "pullSource" not in evidence["registry"]
    assert statuses(evidence)["registry_access"] == ("skipped", "registry_reachability_mode=skip")
    assert statuses(evidence)["platform"] == (
        "skipped",
        "registry_reachability_mode=skip and the image is not on the target",
    )
    assert evidence["platform"]["compatible"] is None and evidence["platform"]["status"] == "unknown"


def test_a_held_image_under_another_repository_or_digest_is_not_taken_for_the_pinned_one(monkeypatch, tmp_path):
    other = inspect_doc(repo_digests=("registry.site:5001/stella/other@" + DIGEST,))
    images = {"registry.site:5001/stella/app@" + DIGEST: other}
    evidence, failures, registry, dummy = run(monkeypatch, tmp_path, images)
    assert failures == [] and registry.asked == []
    assert "pullSource" not in evidence["registry"]
    assert statuses(evidence)["registry_access"][0] == "skipped"


@pytest.mark.parametrize("mode", ["http", "tcp"])
def test_a_held_image_passes_the_pull_check_in_every_mode_without_a_manifest_request(monkeypatch, tmp_path, mode):
    images = {"registry.site:5001/stella/app@" + DIGEST: inspect_doc()}
    evidence, failures, registry, dummy = run(monkeypatch, tmp_path, images, registry_reachability_mode=mode)
    assert failures == []
    assert registry.asked == [("ping", "registry.site:5001", mode)]  # the reachability check, nothing more
    assert evidence["registry"]["requests"] == ["ping"] and evidence["registry"]["pullSource"] == "local"
    assert statuses(evidence)["registry_access"] == ("passed", None)


def test_an_image_not_held_is_asked_of_the_registry_in_http_mode(monkeypatch, tmp_path):
    registry = CountingRegistry(refuse_manifest=False)
    evidence, failures, dummy, dummy2 = run(
        monkeypatch, tmp_path, {}, registry=registry, registry_reachability_mode="http"
    )
    assert failures == []
    assert [a[0] for a in registry.asked] == ["ping", "manifest"]
    assert evidence["registry"]["requests"] == ["ping", "manifest"] and evidence["registry"]["contacted"] is True
    assert evidence["registry"]["pullSource"] == "registry" and evidence["platform"]["source"] == "registry"


def test_a_held_image_of_another_platform_is_platform_unsupported(monkeypatch, tmp_path):
    images = {"registry.site:5001/stella/app@" + DIGEST: inspect_doc(arch=OTHER_ARCH, variant="v8")}
    evidence, failures, registry, dummy = run(monkeypatch, tmp_path, images)
    assert registry.asked == []
    assert [f["code"] for f in failures] == ["platform_unsupported"]
    assert "linux/%s/v8" % OTHER_ARCH in failures[0]["reason"]
    assert evidence["platform"]["status"] == "incompatible" and evidence["platform"]["source"] == "local"


def test_an_image_id_pin_is_looked_up_by_id_and_names_no_registry(monkeypatch, tmp_path):
    images = {IMAGE_ID: inspect_doc(repo_digests=())}
    evidence, failures, registry, calls = run(monkeypatch, tmp_path, images, image_reference=IMAGE_ID)
    assert failures == [] and registry.asked == []
    assert ["image", "inspect", IMAGE_ID] in calls
    assert evidence["registry"]["pullSource"] == "local" and evidence["registry"]["localImage"]["id"] == IMAGE_ID
    assert evidence["platform"]["imageReference"] == IMAGE_ID and evidence["platform"]["source"] == "local"


def test_a_tag_is_not_looked_up_in_the_engine(monkeypatch, tmp_path):
    evidence, failures, registry, calls = run(
        monkeypatch, tmp_path, {}, image_reference="registry.site:5001/stella/app:v1"
    )
    assert failures == [] and registry.asked == []
    assert not [c for c in calls if c[:2] == ["image", "inspect"]]
    assert evidence["registry"]["contacted"] is False


def test_unreadable_platforms_are_unknown_evidence_not_a_failure():
    request = params(registry_reachability_mode="http")
    obs = {
        "host": {"system": "Linux", "machine": host_platform.machine()},
        "docker": {"binary": "/usr/bin/docker", "client": {"Version": "28.2.2"}, "server": {"Version": "24.0.0"}},
        "compose": {"plugin": "v2.40.3"},
        "registry": {"registry": "registry.site:5001", "reachable": True, "httpStatus": 200},
        "pull": {"registry": "registry.site:5001", "pullAccess": "anonymous", "requests": ["ping", "manifest"]},
        "platform": {"error": "manifest unknown"},
        "workDirectory": {"path": "/tmp", "writable": True},
        "disk": {"path": "/tmp", "freeBytes": 10**9},
    }
    evidence, failures = evaluate(request, obs)
    assert failures == []
    assert statuses(evidence)["platform"] == ("skipped", "platforms of %s unknown: manifest unknown" % PINNED)
    assert evidence["platform"]["status"] == "unknown" and evidence["platform"]["error"] == "manifest unknown"
