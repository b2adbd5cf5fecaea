"""The lab's registries that answer like the public ones, and its Docker credential helper.

- ``registries.hub``: a Docker-Hub-like registry behind ``lab/registryfront.py`` (fault injection) with a
  token service that gives anonymous clients ``pull`` (``lab/tokenserver.py --anonymous-pull``).
- ``registries.ghcr``: a GHCR-like front whose ``/v2/`` challenge carries a scope.
- both fronts answer the OCI 1.1 referrers API (``/v2/<name>/referrers/<digest>``) for the manifests with a
  ``subject`` pushed through them, which the registry behind them (distribution 2.8) lacks.
- ``credential_helper``: the directory of ``docker-credential-stella-lab``.

Plain HTTP with ``requests`` (never through a proxy) and the real ``docker`` CLI; the lab must be up
(``make lab``), otherwise every test fails.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
import requests

import labkit

MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)
NOT_FOUND = "credentials not found in native keychain"


@pytest.fixture(name="http")
def fixture_http():
    with requests.Session() as session:
        session.trust_env = False  # lab traffic never goes through a proxy
        yield session


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def get_token(http, registry, scope, auth=None):
    resp = http.get(
        "http://%s/token" % registry["token_service"],
        params={"service": registry["service"], "scope": scope},
        auth=auth,
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["token"]


def manifest(http, address, reference, token, query=""):
    return http.get(
        "http://%s/v2/stella/app/manifests/%s%s" % (address, reference, query),
        timeout=10,
        headers={"Accept": MANIFEST_ACCEPT, "Authorization": "Bearer " + token},
    )


def add_fault(http, registry, spec):
    resp = http.post(registry["faults"], json=spec, timeout=10)
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_hub_challenge_is_realm_and_service_only(lab, http):
    hub = lab["registries"]["hub"]
    resp = http.get("http://%s/v2/" % hub["address"], timeout=10)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="http://%s/token",service="%s"' % (
        hub["token_service"],
        hub["service"],
    )
    assert resp.headers["Docker-Distribution-Api-Version"] == "registry/2.0"


def test_hub_anonymous_token_pulls_and_cannot_push(lab, http):
    hub, image = lab["registries"]["hub"], lab["images"]["hub_app_v1"]
    assert image["ref"] == "%s/stella/app:v1" % hub["address"]
    token = get_token(http, hub, "repository:stella/app:pull,push")
    assert claims(token)["access"] == [{"type": "repository", "name": "stella/app", "actions": ["pull"]}]
    assert claims(token)["aud"] == hub["service"]
    resp = manifest(http, hub["address"], "v1", token)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Docker-Content-Digest"] == image["digest"]
    resp = manifest(http, hub["address"], "v2", token)
    assert resp.headers["Docker-Content-Digest"] == lab["images"]["hub_app_v2"]["digest"]
    resp = http.post(
        "http://%s/v2/stella/app/blobs/uploads/" % hub["address"],
        timeout=10,
        headers={"Authorization": "Bearer " + token},
    )
    assert resp.status_code == 401


def test_hub_token_service_checks_credentials(lab, http):
    hub = lab["registries"]["hub"]
    user, password = labkit.auth_credentials(lab)
    assert user == hub["username"]
    token = get_token(http, hub, "repository:stella/app:pull,push", auth=(user, password))
    assert claims(token)["access"] == [{"type": "repository", "name": "stella/app", "actions": ["pull", "push"]}]
    resp = http.get(
        "http://%s/token" % hub["token_service"],
        auth=(user, password + "x"),
        timeout=10,
        params={"service": hub["service"], "scope": "repository:stella/app:pull"},
    )
    assert resp.status_code == 401
    # The front passes the upload's Location on (pointing at the front), without following anything.
    resp = http.post(
        "http://%s/v2/stella/app/blobs/uploads/" % hub["address"],
        allow_redirects=False,
        headers={"Authorization": "Bearer " + token},
        timeout=10,
    )
    assert resp.status_code == 202, resp.text
    location = resp.headers["Location"]
    assert location.startswith("http://%s/v2/stella/app/blobs/uploads/" % hub["address"])
    token = get_token(http, hub, "repository:stella/app:delete", auth=(user, password))  # cancelling needs it
    assert http.delete(location, headers={"Authorization": "Bearer " + token}, timeout=10).status_code == 204


def test_hub_rate_limit_is_served_once_then_passes(lab, http):
    hub = lab["registries"]["hub"]
    marker = "lab-test=%s" % uuid.uuid4().hex  # only this test's requests match (the registry ignores it)
    token = get_token(http, hub, "repository:stella/app:pull")
    before = http.get(hub["stats"], timeout=10).json()
    fault = add_fault(http, hub, {"status": 429, "retryAfter": 2, "count": 1, "match": marker})
    try:
        assert fault["remaining"] == 1 and fault["status"] == 429
        first = manifest(http, hub["address"], "v1", token, "?" + marker)
        assert first.status_code == 429
        assert first.headers["Retry-After"] == "2"
        assert first.json()["errors"][0]["code"] == "TOOMANYREQUESTS"
        assert "pull rate limit" in first.json()["errors"][0]["message"]
        second = manifest(http, hub["address"], "v1", token, "?" + marker)
        assert second.status_code == 200
        assert second.headers["Docker-Content-Digest"] == lab["images"]["hub_app_v1"]["digest"]
        listed = {f["id"]: f for f in http.get(hub["faults"], timeout=10).json()["faults"]}
        assert listed[fault["id"]]["remaining"] == 0 and listed[fault["id"]]["served"] == 1
        after = http.get(hub["stats"], timeout=10).json()
        assert after["faulted"] >= before["faulted"] + 1 and after["passed"] >= before["passed"] + 1
        mine = [(r["status"], r["fault"]) for r in after["recent"] if marker in r["target"]]
        assert mine == [(429, True), (200, False)]
    finally:
        http.delete("%s/%d" % (hub["faults"], fault["id"]), timeout=10)


def test_hub_unavailable_forever_until_removed(lab, http):
    hub = lab["registries"]["hub"]
    marker = "lab-test=%s" % uuid.uuid4().hex
    token = get_token(http, hub, "repository:stella/app:pull")
    fault = add_fault(http, hub, {"status": 503, "retryAfter": None, "count": -1, "match": marker, "method": "GET"})
    try:
        for _attempt in range(2):
            resp = manifest(http, hub["address"], "v1", token, "?" + marker)
            assert resp.status_code == 503
            assert "Retry-After" not in resp.headers
        head = http.head(
            "http://%s/v2/stella/app/manifests/v1?%s" % (hub["address"], marker),
            timeout=10,
            headers={"Accept": MANIFEST_ACCEPT, "Authorization": "Bearer " + token},
        )
        assert head.status_code == 200  # the fault is for GET only
    finally:
        assert http.delete("%s/%d" % (hub["faults"], fault["id"]), timeout=10).json() == {"removed": 1}
    assert manifest(http, hub["address"], "v1", token, "?" + marker).status_code == 200
    assert http.post(hub["faults"], json={"status": 200}, timeout=10).status_code == 400


def test_ghcr_challenge_has_a_scope_and_anonymous_pull_works(lab, http):
    ghcr, image = lab["registries"]["ghcr"], lab["images"]["ghcr_app_v1"]
    resp = http.get("http://%s/v2/" % ghcr["address"], timeout=10)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="http://%s/token",service="%s",scope="%s"' % (
        ghcr["token_service"],
        ghcr["service"],
        ghcr["scope"],
    )
    assert ghcr["scope"] == "repository:user/image:pull"
    token = get_token(http, ghcr, "repository:stella/app:pull")
    resp = manifest(http, ghcr["address"], "v1", token)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Docker-Content-Digest"] == image["digest"]
    # A token for the challenge's placeholder scope does not pull stella/app: clients must ask for theirs.
    placeholder = get_token(http, ghcr, ghcr["scope"])
    resp = manifest(http, ghcr["address"], "v1", placeholder)
    assert resp.status_code == 401
    assert 'scope="repository:stella/app:pull"' in resp.headers["WWW-Authenticate"]


def helper(lab, store, command, stdin):
    path = os.path.join(lab["credential_helper"], "docker-credential-stella-lab")
    env = dict(os.environ, STELLA_LAB_CREDSTORE=str(store))
    return subprocess.run(
        [path, command], input=stdin, capture_output=True, text=True, env=env, timeout=30, check=False
    )


def test_credential_helper_get_store_erase(lab, tmp_path):
    address = lab["registries"]["auth"]["address"]
    user, password = labkit.auth_credentials(lab)
    store = tmp_path / "credstore.json"
    store.write_text(json.dumps({address: {"Username": user, "Secret": password}}))
    got = helper(lab, store, "get", address + "\n")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"ServerURL": address, "Username": user, "Secret": password}
    missing = helper(lab, store, "get", "127.0.0.1:1")
    assert missing.returncode == 1
    assert missing.stdout.strip() == NOT_FOUND
    log = (tmp_path / "credstore.json.log").read_text()
    assert log.splitlines() == [address, "127.0.0.1:1"]
    assert password not in log
    stored = helper(lab, store, "store", json.dumps({"ServerURL": "127.0.0.1:9", "Username": "u", "Secret": "s"}))
    assert stored.returncode == 0, stored.stderr
    assert json.loads(helper(lab, store, "list", "").stdout) == {address: user, "127.0.0.1:9": "u"}
    assert helper(lab, store, "erase", "127.0.0.1:9").returncode == 0
    assert helper(lab, store, "get", "127.0.0.1:9").returncode == 1


def docker_pull(lab, tmp_path, config, ref, store=None):
    config_dir = tmp_path / ("docker-%s" % uuid.uuid4().hex[:8])
    config_dir.mkdir()
    (config_dir / "config.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        DOCKER_CONFIG=str(config_dir),
        PATH=lab["credential_helper"] + os.pathsep + os.environ.get("PATH", ""),
    )
    if store is not None:
        env["STELLA_LAB_CREDSTORE"] = str(store)
    return subprocess.run(
        ["docker", "pull", "-q", ref], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_docker_pulls_with_the_credential_helper_and_from_the_hub_anonymously(lab, tmp_path, http):
    # Tags, not digests: Engine 20.10 answers a pull by digest of an image it has without asking the registry.
    address = lab["registries"]["auth"]["address"]
    user, password = labkit.auth_credentials(lab)
    ref = lab["images"]["auth_app_v1"]["ref"]
    config = {"credHelpers": {address: "stella-lab"}}
    denied = docker_pull(lab, tmp_path, config, ref, store=tmp_path / "empty.json")
    assert denied.returncode != 0
    store = tmp_path / "credstore.json"
    store.write_text(json.dumps({address: {"Username": user, "Secret": password}}))
    pulled = docker_pull(lab, tmp_path, config, ref, store=store)
    assert pulled.returncode == 0, pulled.stderr
    assert address in (tmp_path / "credstore.json.log").read_text().splitlines()
    hub = lab["registries"]["hub"]
    before = http.get(hub["stats"], timeout=10).json()["passed"]
    anonymous = docker_pull(lab, tmp_path, {}, lab["images"]["hub_app_v1"]["ref"])
    assert anonymous.returncode == 0, anonymous.stderr
    assert http.get(hub["stats"], timeout=10).json()["passed"] > before


REFERRERS_REPOSITORY = "stella/referrers"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
SIG_TYPE = "application/vnd.dev.cosign.artifact.sig.v1+json"


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push_with_subject(http, address, token, label):
    """Push (through the front at ``address``) an image of its own and two artifacts naming it as their
    subject: a signature (``artifactType``) and an SBOM-like one without (its config's media type counts).
    ``(image digest, {artifact digest: (artifact type, size)}, answers of the artifacts' PUTs)``."""
    base = "http://%s/v2/%s" % (address, REFERRERS_REPOSITORY)
    headers = {"Authorization": "Bearer " + token}

    def blob(data):
        start = http.post(base + "/blobs/uploads/", headers=headers, timeout=10)
        assert start.status_code == 202, start.text
        location = start.headers["Location"]
        put = http.put(
            location + ("&" if "?" in location else "?") + "digest=" + sha256(data),
            data=data,
            headers=dict(headers, **{"Content-Type": "application/octet-stream"}),
            timeout=10,
        )
        assert put.status_code == 201, put.text
        return {"digest": sha256(data), "size": len(data)}

    def put(reference, document):
        body = json.dumps(document).encode()
        resp = http.put(
            "%s/manifests/%s" % (base, reference or sha256(body)),
            data=body,
            headers=dict(headers, **{"Content-Type": OCI_MANIFEST}),
            timeout=10,
        )
        assert resp.status_code == 201, resp.text
        return body, resp

    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"run": label}}}).encode()
    image, resp = put(
        "run-" + label,
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": dict(blob(config), mediaType=CONFIG_TYPE),
            "layers": [],
        },
    )
    assert "OCI-Subject" not in resp.headers  # no subject, nothing to say
    subject = {"mediaType": OCI_MANIFEST, "digest": sha256(image), "size": len(image)}
    empty = dict(blob(b"{}"), mediaType="application/vnd.oci.empty.v1+json")
    layer = dict(blob(label.encode()), mediaType="text/plain")
    signature, sig_resp = put(
        None,
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": SIG_TYPE,
            "config": empty,
            "layers": [layer],
            "subject": subject,
            "annotations": {"run": label},
        },
    )
    sbom_config = dict(blob(b'{"sbom":true}'), mediaType="application/vnd.example.sbom.config.v1+json")
    sbom, sbom_resp = put(
        None,
        {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": sbom_config, "layers": [layer], "subject": subject},
    )
    artifacts = {
        sha256(signature): (SIG_TYPE, len(signature)),
        sha256(sbom): ("application/vnd.example.sbom.config.v1+json", len(sbom)),
    }
    return sha256(image), artifacts, [sig_resp, sbom_resp]


def test_hub_front_answers_the_oci_referrers_api(lab, http):
    hub = lab["registries"]["hub"]
    user, password = labkit.auth_credentials(lab)
    token = get_token(http, hub, "repository:%s:pull,push" % REFERRERS_REPOSITORY, auth=(user, password))
    label = uuid.uuid4().hex[:12]
    subject, artifacts, answers = push_with_subject(http, hub["address"], token, label)
    assert [a.headers["OCI-Subject"] for a in answers] == [subject, subject]

    url = "http://%s/v2/%s/referrers/%s" % (hub["address"], REFERRERS_REPOSITORY, subject)
    # credentials as for the repository itself: anonymous clients get the registry's challenge, then pull
    denied = http.get(url, timeout=10)
    assert denied.status_code == 401
    assert 'scope="repository:%s:pull"' % REFERRERS_REPOSITORY in denied.headers["WWW-Authenticate"]
    reader = {"Authorization": "Bearer " + get_token(http, hub, "repository:%s:pull" % REFERRERS_REPOSITORY)}

    resp = http.get(url, headers=reader, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"] == OCI_INDEX and "OCI-Filters-Applied" not in resp.headers
    index = resp.json()
    assert index["schemaVersion"] == 2 and index["mediaType"] == OCI_INDEX
    listed = {m["digest"]: m for m in index["manifests"]}
    assert {d: (m["artifactType"], m["size"]) for d, m in listed.items()} == artifacts
    assert all(m["mediaType"] == OCI_MANIFEST for m in listed.values())
    signature = next(d for d, (kind, _size) in artifacts.items() if kind == SIG_TYPE)
    assert listed[signature]["annotations"] == {"run": label}
    # each listed digest is a manifest the registry serves
    for digest in listed:
        got = http.get(
            "http://%s/v2/%s/manifests/%s" % (hub["address"], REFERRERS_REPOSITORY, digest),
            headers=dict(reader, Accept=OCI_MANIFEST),
            timeout=10,
        )
        assert got.status_code == 200 and sha256(got.content) == digest

    filtered = http.get(url, params={"artifactType": SIG_TYPE}, headers=reader, timeout=10)
    assert filtered.headers["OCI-Filters-Applied"] == "artifactType"
    assert [m["digest"] for m in filtered.json()["manifests"]] == [signature]
    none = http.get(url, params={"artifactType": "application/x-none"}, headers=reader, timeout=10)
    assert none.status_code == 200 and none.json()["manifests"] == []
    head = http.head(url, headers=reader, timeout=10)
    assert head.status_code == 200 and head.headers["Content-Type"] == OCI_INDEX

    unknown = http.get(url.rsplit("/", 1)[0] + "/sha256:" + "0" * 64, headers=reader, timeout=10)
    assert unknown.status_code == 200 and unknown.json()["manifests"] == []
    invalid = http.get(url.rsplit("/", 1)[0] + "/v1", headers=reader, timeout=10)
    assert invalid.status_code == 400 and invalid.json()["errors"][0]["code"] == "DIGEST_INVALID"
    # the rest is proxied as before: a manifest the backend does not have is its own 404
    missing = http.get(
        "http://%s/v2/%s/manifests/missing-%s" % (hub["address"], REFERRERS_REPOSITORY, label),
        headers=reader,
        timeout=10,
    )
    assert missing.status_code == 404 and missing.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"


def test_front_keeps_its_referrers_in_its_state_file_across_a_restart(lab, http, tmp_path):
    hub = lab["registries"]["hub"]
    user, password = labkit.auth_credentials(lab)
    token = get_token(http, hub, "repository:%s:pull,push" % REFERRERS_REPOSITORY, auth=(user, password))
    state, address = tmp_path / "referrers.json", "127.0.0.1:%d" % labkit.free_port()
    argv = [
        sys.executable,
        os.path.join(labkit.ROOT, "lab", "registryfront.py"),
        "serve",
        "--listen",
        address,
        "--backend",
        hub["backend"],
        "--referrers-state",
        str(state),
    ]

    def start():
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _attempt in range(100):
            try:
                if http.get("http://%s/_lab/faults" % address, timeout=1).status_code == 200:
                    return proc
            except requests.ConnectionError:
                time.sleep(0.05)
        proc.kill()
        raise AssertionError("the front on %s did not answer" % address)

    def listed(subject):
        resp = http.get(
            "http://%s/v2/%s/referrers/%s" % (address, REFERRERS_REPOSITORY, subject),
            headers={"Authorization": "Bearer " + token},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        return {m["digest"] for m in resp.json()["manifests"]}

    proc = start()
    try:
        subject, artifacts, _answers = push_with_subject(http, address, token, uuid.uuid4().hex[:12])
        assert listed(subject) == set(artifacts)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert set(json.loads(state.read_text())["referrers"]) == {"%s@%s" % (REFERRERS_REPOSITORY, subject)}
    proc = start()
    try:
        assert listed(subject) == set(artifacts)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
