"""Digest resolution and planning against the lab's real registries (plain :5000, htpasswd :5002, token :5003).

The lab must be up (``make lab`` writes .lab/lab.json). Without it every test FAILS with a clear
message; nothing here is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.request
import uuid

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "fixtures"))

from planning_support import compose_config, minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import plan_release  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver  # noqa: E402

LAB_JSON = os.path.join(ROOT, ".lab", "lab.json")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def load_lab():
    """The lab description (labkit.load_lab when present); fails, never skips, when the lab is absent."""
    try:
        from labkit import load_lab as labkit_load_lab  # pylint: disable=import-outside-toplevel
    except ImportError:
        labkit_load_lab = None
    if labkit_load_lab is not None:
        return labkit_load_lab()
    if not os.path.isfile(LAB_JSON):
        pytest.fail("the Docker lab is not running (%s is missing): run `make lab` first" % LAB_JSON, pytrace=False)
    with open(LAB_JSON, encoding="utf-8") as handle:
        return json.load(handle)


def auth_credentials(lab):
    registry = lab["registries"]["auth"]
    path = registry["password_file"]
    path = path if os.path.isabs(path) else os.path.join(lab.get("root", ROOT), path)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        data = json.loads(text)
        password = data["password"]
        username = data.get("username", registry["username"])
    except ValueError:
        password, username = text.strip(), registry["username"]
    return registry["address"], username, password


@pytest.fixture(scope="module")
def lab():
    return load_lab()


def test_tag_resolves_to_the_pushed_digest(lab):
    image = lab["images"]["app_v1"]
    result = DigestResolver().resolve(image["loopback_ref"])
    assert result["digest"] == image["digest"]
    assert result["image"] == image["loopback_ref"] + "@" + image["digest"]
    assert result["resolved"] is True


def test_unknown_tag_is_image_unresolved(lab):
    ref = lab["registries"]["plain"]["address"] + "/stella/app:no-such-tag-%s" % uuid.uuid4().hex[:6]
    with pytest.raises(StellaError) as info:
        DigestResolver().resolve(ref)
    assert info.value.code == "image_unresolved" and "not found" in info.value.reason


def _http(method, url, data=None, headers=None):
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def _push_blob(base, repository, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    status, headers, _body = _http("POST", "%s/v2/%s/blobs/uploads/" % (base, repository), b"")
    assert status == 202
    location = headers["Location"]
    if location.startswith("/"):
        location = base + location
    sep = "&" if "?" in location else "?"
    upload_headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
    status, _headers, _body = _http("PUT", location + sep + "digest=" + digest, data, upload_headers)
    assert status == 201
    return {"digest": digest, "size": len(data)}


def _push_manifest(base, repository, reference, document, media_type):
    body = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    url = "%s/v2/%s/manifests/%s" % (base, repository, reference)
    status, headers, _body = _http("PUT", url, body, {"Content-Type": media_type})
    assert status == 201
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    assert headers.get("Docker-Content-Digest") == digest
    return {"digest": digest, "size": len(body)}


def test_multi_platform_index_pins_the_index_digest_and_reports_platforms(lab):
    address = lab["registries"]["plain"]["address"]
    base = "http://" + address
    repository = "stella/multi-%s" % uuid.uuid4().hex[:8]
    manifests = []
    for arch in ("amd64", "arm64"):
        config = _push_blob(
            base,
            repository,
            json.dumps(
                {"architecture": arch, "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}, "config": {}}
            ).encode(),
        )
        layer = _push_blob(base, repository, ("layer for %s\n" % arch).encode())
        manifest = _push_manifest(
            base,
            repository,
            "single-" + arch,
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": dict(config, mediaType="application/vnd.oci.image.config.v1+json"),
                "layers": [dict(layer, mediaType="application/vnd.oci.image.layer.v1.tar")],
            },
            OCI_MANIFEST,
        )
        manifests.append(dict(manifest, mediaType=OCI_MANIFEST, platform={"os": "linux", "architecture": arch}))
    index = _push_manifest(
        base, repository, "multi", {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}, OCI_INDEX
    )
    ref = "%s/%s:multi" % (address, repository)
    result = DigestResolver().resolve(ref)
    assert result["digest"] == index["digest"]
    assert result["digest"] not in [m["digest"] for m in manifests]
    assert result["platforms"] == ["linux/amd64", "linux/arm64"]
    assert result["mediaType"] == OCI_INDEX
    plan = plan_release(minimal_release(components=[{"name": "multi", "image": ref}]), {ref: result["digest"]})
    config = compose_config({"compose.stella.lock.yml": plan["lock"]})
    assert config["services"]["multi"]["image"] == ref + "@" + index["digest"]


def test_auth_registry_without_credentials_fails_clearly(lab):
    ref = lab["images"]["auth_app_v1"]["ref"]
    with pytest.raises(StellaError) as info:
        DigestResolver().resolve(ref)
    assert info.value.code == "image_unresolved"
    assert "requires authentication" in info.value.reason and "no credentials" in info.value.reason


def test_auth_registry_with_credentials(lab):
    address, username, password = auth_credentials(lab)
    image = lab["images"]["auth_app_v1"]
    result = DigestResolver({address: {"username": username, "password": password}}).resolve(image["ref"])
    assert result["digest"] == image["digest"]
    assert result["image"] == image["ref"] + "@" + image["digest"]


def test_auth_registry_with_a_wrong_password_never_echoes_it(lab):
    address, username, password = auth_credentials(lab)
    wrong = password + "-wrong"
    with pytest.raises(StellaError) as info:
        DigestResolver({address: {"username": username, "password": wrong}}).resolve(
            lab["images"]["auth_app_v1"]["ref"]
        )
    assert info.value.code == "image_unresolved" and "credentials were refused" in info.value.reason
    assert wrong not in info.value.reason + repr(info.value.evidence)


def test_plan_with_real_digests_is_accepted_by_compose(lab):
    images = lab["images"]
    refs = {
        "web": images["app_v1"]["loopback_ref"],
        "next": images["app_v2"]["loopback_ref"],
        "tool": images["tool"]["loopback_ref"],
    }
    resolver = DigestResolver()
    resolved = {ref: resolver.resolve(ref)["digest"] for ref in refs.values()}
    release = minimal_release(
        strategy="blue-green",
        components=[
            {"name": name, "image": ref, "config": {"env.MODE": "yes", "env.RATIO": "3.8", "env.CODE": "010"}}
            for name, ref in sorted(refs.items())
        ],
    )
    plan = plan_release(release, resolved)
    config = compose_config({"compose.stella.lock.yml": plan["lock"]})
    for name, ref in refs.items():
        service = config["services"][name]
        key = {"web": "app_v1", "next": "app_v2", "tool": "tool"}[name]
        assert service["image"] == ref + "@" + images[key]["digest"]
        assert service["environment"] == {"MODE": "yes", "RATIO": "3.8", "CODE": "010"}
        assert service["labels"]["stella.image.digest"] == images[key]["digest"]
        assert service["labels"]["stella.slot"] == "green" and service["labels"]["stella.traffic.role"] == "standby"


# --------------------------------------------------------------------- Bearer token flow (real token service)


def test_token_registry_resolves_through_the_bearer_flow(lab):
    dummy, username, password = auth_credentials(lab)
    token_registry = lab["registries"]["token"]["address"]
    image = lab["images"]["token_app_v1"]
    seen = []

    def record(response, *args, **kwargs):
        request = response.request
        seen.append(
            (request.method, request.url.split("?")[0], (request.headers.get("Authorization") or "").split(" ")[0])
        )

    session = requests.Session()
    session.hooks["response"].append(record)
    resolver = DigestResolver({token_registry: {"username": username, "password": password}}, session=session)
    result = resolver.resolve(image["ref"])
    assert result["digest"] == image["digest"] and result["image"] == image["ref"] + "@" + image["digest"]
    token_url = "http://%s/token" % lab["registries"]["token"]["token_service"]
    assert ("GET", token_url, "Basic") in seen  # the token came from the token service with Basic credentials
    assert any(auth == "Bearer" and "/manifests/" in url for dummy_method, url, auth in seen)


def test_token_registry_without_or_with_wrong_credentials(lab):
    dummy, username, password = auth_credentials(lab)
    token_registry = lab["registries"]["token"]["address"]
    ref = lab["images"]["token_app_v1"]["ref"]
    with pytest.raises(StellaError) as anonymous:
        DigestResolver().resolve(ref)
    assert "requires authentication (bearer)" in anonymous.value.reason and "no credentials" in anonymous.value.reason
    wrong = password + "-wrong"
    with pytest.raises(StellaError) as refused:
        DigestResolver({token_registry: {"username": username, "password": wrong}}).resolve(ref)
    assert refused.value.code == "image_unresolved" and "credentials were refused" in refused.value.reason
    assert wrong not in refused.value.reason + repr(refused.value.evidence)


# --------------------------------------------------------------------- one requests session, connections reused


def test_one_plan_reuses_connections_across_images_and_registries(lab, monkeypatch):
    """Every image of every registry (and the token service) goes through one session: one TCP
    connection per host, however many images and requests."""
    import urllib3.connection  # pylint: disable=import-outside-toplevel

    dummy, username, password = auth_credentials(lab)
    images = lab["images"]
    refs = [images[key]["loopback_ref"] for key in ("app_v1", "app_v2", "tool")]
    refs += [images["auth_app_v1"]["ref"], images["token_app_v1"]["ref"]]
    credentials = {
        lab["registries"][kind]["address"]: {"username": username, "password": password} for kind in ("auth", "token")
    }
    connects = []
    real_connect = urllib3.connection.HTTPConnection.connect

    def counting_connect(self):
        connects.append("%s:%d" % (self.host, self.port))
        return real_connect(self)

    monkeypatch.setattr(urllib3.connection.HTTPConnection, "connect", counting_connect)
    with DigestResolver(credentials) as resolver:
        result = resolver.resolve_all(refs)
    assert [result[ref]["digest"] for ref in refs] == [
        images[key]["digest"] for key in ("app_v1", "app_v2", "tool", "auth_app_v1", "token_app_v1")
    ]
    assert sorted(connects) == sorted(set(connects)), connects
    assert set(connects) >= {
        lab["registries"]["plain"]["address"],
        lab["registries"]["auth"]["address"],
        lab["registries"]["token"]["address"],
    }
