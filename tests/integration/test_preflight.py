"""stella_preflight against the real lab: each stable code provoked for real, full evidence, auth, DinD target."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import urllib.request

import pytest
import requests

from ansible_run import ROOT, ansible_module

GATES = {"min_engine_version": "20.10.0"}  # the lab's engine is Debian's 20.10.24 (see docs/preflight.md)


def lab_password(lab):
    path = lab["registries"]["auth"]["password_file"]
    with open(path if os.path.isabs(path) else os.path.join(ROOT, path)) as handle:
        return json.load(handle)["password"]


def preflight(args, **kwargs):
    return ansible_module("stellaops.runtime.stella_preflight", args, **kwargs)


def codes(result):
    return [f["code"] for f in result["failures"]]


def test_all_checks_pass_with_gates_the_lab_meets(lab, tmp_path):
    result = preflight(
        dict(GATES, image_reference=lab["images"]["app_v1"]["ref"], work_directory=str(tmp_path / "work"))
    )
    assert result["failed"] is False, result.get("msg")
    ev = result["preflight"]
    assert ev["status"] == "passed"
    assert ev["os"]["system"] == "Linux" and ev["os"]["distribution"] == "debian"
    assert ev["architecture"] == "amd64"
    assert ev["docker"]["clientVersion"] and ev["docker"]["serverVersion"].startswith(
        lab["engine_version"].split("+")[0]
    )
    assert ev["docker"]["daemonStatus"] == "running"
    assert ev["compose"]["version"] == lab["compose_version"]
    assert ev["registry"]["reachable"] is True and ev["registry"]["httpStatus"] == 200
    assert ev["platform"]["compatible"] is True and "linux/amd64" in ev["platform"]["available"]
    assert ev["workDirectory"]["writable"] is True
    assert ev["disk"]["freeBytes"] > 0 and ev["disk"]["sufficient"] is True
    assert not (tmp_path / "work").exists()  # read-only: the work directory is not created


def test_default_gates_reject_engine_20_10(lab, tmp_path):
    result = preflight({"work_directory": str(tmp_path), "registry_reachability_mode": "skip"})
    assert codes(result) == ["runtime_version_too_old"]
    assert "older than the required 24.0.0" in result["failures"][0]["reason"]


def _path_without_docker(bin_dir):
    """A PATH with every tool of /usr/bin and /bin except the Docker CLIs."""
    bin_dir.mkdir()
    for base in ("/usr/bin", "/bin"):
        for name in os.listdir(base):
            link = bin_dir / name
            if not name.startswith("docker") and not link.exists():
                link.symlink_to(os.path.join(base, name))
    return "%s:%s" % (os.path.join(ROOT, ".venv", "bin"), bin_dir)


def test_runtime_missing_without_docker_on_path(lab, tmp_path):
    env = {"PATH": _path_without_docker(tmp_path / "bin")}
    result = preflight(dict(GATES, work_directory=str(tmp_path)), env=env)
    assert codes(result) == ["runtime_missing", "compose_missing"]
    assert result["preflight"]["docker"]["daemonStatus"] == "missing"


def test_daemon_socket_that_does_not_answer(lab, tmp_path):
    path = str(tmp_path / "dead.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)  # bound, never listening: connections are refused
    try:
        result = preflight(dict(GATES, work_directory=str(tmp_path), docker_host="unix://" + path, timeout=3))
    finally:
        sock.close()
    assert "runtime_daemon_unavailable" in codes(result)
    assert result["preflight"]["docker"]["daemonStatus"] == "unavailable"
    assert result["preflight"]["docker"]["clientVersion"]


def test_gates_above_running_versions(lab, tmp_path):
    result = preflight(
        {"work_directory": str(tmp_path), "min_engine_version": "99.0.0", "min_compose_version": "99.1.0"}
    )
    assert codes(result) == ["runtime_version_too_old", "runtime_version_too_old"]
    reasons = " ".join(f["reason"] for f in result["failures"])
    assert "Engine" in reasons and "Compose plugin" in reasons


def test_closed_registry_port(lab, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = preflight(dict(GATES, work_directory=str(tmp_path), image_reference="127.0.0.1:%d/stella/app:v1" % port))
    assert codes(result) == ["registry_unreachable", "platform_unsupported"]
    assert "refused" in result["failures"][0]["reason"].lower()


def _push_single_platform_image(registry, repository, tag, arch):
    """Push a manifest whose config says linux/<arch> through the registry HTTP API."""
    config = json.dumps(
        {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}},
        sort_keys=True,
    ).encode()
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    base = "http://%s/v2/%s" % (registry, repository)
    start = urllib.request.urlopen(urllib.request.Request(base + "/blobs/uploads/", method="POST"))
    location = start.headers["Location"]
    sep = "&" if "?" in location else "?"
    upload = location if location.startswith("http") else "http://%s%s" % (registry, location)
    urllib.request.urlopen(
        urllib.request.Request(
            upload + sep + "digest=" + digest,
            data=config,
            method="PUT",
            headers={"Content-Type": "application/octet-stream"},
        )
    )
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest, "size": len(config)},
            "layers": [],
        }
    ).encode()
    urllib.request.urlopen(
        urllib.request.Request(
            "%s/manifests/%s" % (base, tag),
            data=manifest,
            method="PUT",
            headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )
    )


def test_image_without_a_platform_for_this_host(lab, tmp_path):
    registry = lab["registries"]["plain"]["address"]
    _push_single_platform_image(registry, "stella/armonly", "1", "arm64")
    result = preflight(dict(GATES, work_directory=str(tmp_path), image_reference="%s/stella/armonly:1" % registry))
    assert codes(result) == ["platform_unsupported"]
    assert result["preflight"]["platform"]["available"] == ["linux/arm64"]
    assert "linux/amd64" in result["failures"][0]["reason"]


def test_read_only_work_directory(lab, tmp_path):
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], check=True)
    try:
        result = preflight(
            dict(
                GATES,
                work_directory=str(mount / "projects"),
                registry_reachability_mode="skip",
                minimum_free_disk_bytes=0,
            )
        )
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert codes(result) == ["workdir_not_writable"]
    assert "Read-only file system" in result["failures"][0]["reason"]


def test_free_space_requirement_larger_than_the_disk(lab, tmp_path):
    result = preflight(dict(GATES, work_directory=str(tmp_path), minimum_free_disk_bytes=2**60))
    assert codes(result) == ["disk_space_low"]
    assert result["preflight"]["disk"]["sufficient"] is False


def test_payload_verbatim(lab, tmp_path):
    payload = {
        "WorkDirectory": str(tmp_path),
        "ImageReference": lab["images"]["app_v1"]["ref"],
        "MinimumFreeDiskBytes": 1024,
        "RegistryReachabilityMode": "tcp",
        "RequireCompose": True,
    }
    result = preflight(dict(GATES, payload=payload))
    assert result["failed"] is False, result.get("msg")
    assert result["preflight"]["registry"]["mode"] == "tcp"
    bad = preflight(dict(GATES, payload={"WorkDir": "/x"}))
    assert bad["failed"] is True and bad["code"] == "invalid_request" and "WorkDir" in bad["msg"]


def test_auth_registry_with_and_without_credentials_and_no_leak(lab, tmp_path):
    auth = lab["registries"]["auth"]
    password = lab_password(lab)
    image = lab["images"]["auth_app_v1"]["ref"]
    anonymous = preflight(dict(GATES, work_directory=str(tmp_path), image_reference=image))
    # the registry answers (401, Basic challenge): reachable, but the repository cannot be pulled
    assert codes(anonymous) == ["registry_auth_failed"]
    assert "give credentials for %s" % auth["address"] in anonymous["failures"][0]["reason"]
    assert anonymous["preflight"]["registry"]["reachable"] is True
    wrong = preflight(
        dict(
            GATES,
            work_directory=str(tmp_path),
            image_reference=image,
            registry_credentials={auth["address"]: {"username": auth["username"], "password": password + "-wrong"}},
        )
    )
    assert codes(wrong) == ["registry_auth_failed"] and password not in json.dumps(wrong)

    args = dict(
        GATES,
        work_directory=str(tmp_path),
        image_reference=image,
        registry_username=auth["username"],
        registry_password=password,
    )
    result, raw = preflight(args, verbosity=3, raw=True)
    assert result["failed"] is False, result.get("msg")
    assert result["preflight"]["registry"]["authenticated"] is True
    assert result["preflight"]["registry"]["credentialsSupplied"] is True
    assert password not in raw
    assert raw.count("VALUE_SPECIFIED_IN_NO_LOG_PARAMETER") >= 1


def test_registry_url_credentials_are_used_and_not_recorded(lab, tmp_path):
    auth = lab["registries"]["auth"]
    password = lab_password(lab)
    url = "http://%s:%s@%s/" % (auth["username"], password, auth["address"])
    result, raw = preflight(dict(GATES, work_directory=str(tmp_path), registry_url=url), verbosity=3, raw=True)
    assert result["failed"] is False, result.get("msg")
    assert result["preflight"]["registry"]["authenticated"] is True
    assert result["preflight"]["registry"]["url"] == "http://%s/v2/" % auth["address"]
    assert password not in raw


def test_preflight_on_a_dind_target_over_ssh(lab, target_factory):
    with_compose = target_factory("pf-compose")
    without = target_factory("pf-nocompose", compose=False)
    args = dict(GATES, image_reference=lab["images"]["app_v1"]["ref"])
    ok = ansible_module("stellaops.runtime.stella_preflight", args, host=with_compose)
    assert ok["failed"] is False, ok.get("msg")
    assert ok["preflight"]["os"]["hostname"] == "pf-compose"
    missing = ansible_module("stellaops.runtime.stella_preflight", args, host=without)
    assert codes(missing) == ["compose_missing"]
    docker_host = ansible_module(
        "stellaops.runtime.stella_preflight", dict(args, target_type="DockerHost"), host=without
    )
    assert docker_host["failed"] is False


def test_token_registry_bearer_flow_with_and_without_credentials(lab, tmp_path):
    registry = lab["registries"]["token"]
    password = lab_password(lab)
    image = lab["images"]["token_app_v1"]["ref"]
    anonymous = preflight(dict(GATES, work_directory=str(tmp_path), image_reference=image))
    # the token service gives anonymous clients a token without access: the pull is refused
    assert codes(anonymous) == ["registry_auth_failed"]
    assert "give credentials for %s" % registry["address"] in anonymous["failures"][0]["reason"]
    result, raw = preflight(
        dict(
            GATES,
            work_directory=str(tmp_path),
            image_reference=image,
            registry_username=registry["username"],
            registry_password=password,
        ),
        verbosity=3,
        raw=True,
    )
    assert result["failed"] is False, result.get("msg")
    assert result["preflight"]["registry"]["authenticated"] is True
    assert result["preflight"]["platform"]["available"] == ["linux/amd64"]
    assert password not in raw


@pytest.mark.parametrize("name,image", [("hub", "hub_app_v1"), ("ghcr", "ghcr_app_v1")])
def test_public_registries_are_reachable_and_pulled_anonymously(lab, tmp_path, name, image):
    """Docker Hub's /v2/ answers 401 with a challenge without scope, GHCR's with a scope of another
    repository: both are reachable; the pull check gets an anonymous token with the image's own
    repository's pull scope."""
    registry_lab = lab["registries"][name]
    result = preflight(dict(GATES, work_directory=str(tmp_path), image_reference=lab["images"][image]["ref"]))
    assert result["failed"] is False, result.get("msg")
    registry = result["preflight"]["registry"]
    assert (registry["reachable"], registry["authRequired"], registry["pullAccess"]) == (True, True, "anonymous")
    assert registry["challenge"]["realm"] == "http://%s/token" % registry_lab["token_service"]
    assert registry["challenge"].get("scope") == registry_lab.get("scope")
    assert registry["pullScope"] == "repository:stella/app:pull"
    assert result["preflight"]["platform"]["compatible"] is True


def test_a_rate_limited_registry_is_reachable_and_says_so(lab, tmp_path):
    hub = lab["registries"]["hub"]
    answer = requests.post(
        hub["faults"], json={"status": 429, "retryAfter": 7, "count": 1, "match": "/v2/", "method": "GET"}, timeout=10
    )
    try:
        result = preflight(
            dict(GATES, work_directory=str(tmp_path), image_reference=lab["images"]["hub_app_v1"]["ref"])
        )
    finally:
        requests.delete("%s/%s" % (hub["faults"], answer.json()["id"]), timeout=10)
    registry = result["preflight"]["registry"]
    assert result["failed"] is False and registry["reachable"] is True
    assert registry["rateLimited"] is True and registry["retryAfter"] == "7"
