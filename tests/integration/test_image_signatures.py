"""Image signatures against the lab: images pushed to the shared registry (``registry.lab:5001``), signed by
``stella sign`` with a key pair made here, deployed by the real job playbook on one lab target under an
image policy; every refusal (another key, unsigned, a signature copied from another digest, a payload
edited after signing, a tag that is no signature, a 50 MiB payload, the registry down) fails planning
before the target is touched. Planted passphrase and key contents never appear in any output.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import time
import tracemalloc
import uuid

import pytest
import requests

import ansible_run as ar
import fleetkit as fl
from labkit import free_port

sys.path.insert(0, os.path.join(ar.ROOT, "tests", "unit", "fixtures"))

from planning_support import minimal_release  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import cosign  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import generate_key_pair  # noqa: E402

DOCKER_V2 = "application/vnd.docker.distribution.manifest.v2+json"
PASSPHRASE = "PLANTED-signing-passphrase-%s" % uuid.uuid4().hex[:8]
PLAN_MODULE = "stellaops.runtime.stella_plan"


def _sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """The lab's shared registry over plain HTTP, as a test pushes to it."""

    def __init__(self, address, repository="stella/app"):
        self.address, self.repository = address, repository
        self.base = "http://%s/v2/%s" % (address, repository)

    def blob(self, data):
        digest = _sha(data)
        if requests.head("%s/blobs/%s" % (self.base, digest), timeout=30).status_code == 200:
            return digest
        start = requests.post(self.base + "/blobs/uploads/", timeout=30)
        assert start.status_code == 202, start.text
        location = start.headers["Location"]
        put = requests.put(
            location + ("&" if "?" in location else "?") + "digest=" + digest,
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            timeout=120,
        )
        assert put.status_code == 201, put.text
        return digest

    def put_manifest(self, reference, body, media_type):
        answer = requests.put(
            "%s/manifests/%s" % (self.base, reference), data=body, headers={"Content-Type": media_type}, timeout=30
        )
        return answer.status_code, answer.text

    def get_manifest(self, reference, accept=DOCKER_V2):
        answer = requests.get("%s/manifests/%s" % (self.base, reference), headers={"Accept": accept}, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.content

    def variant(self, label):
        """A distinct runnable image: app:v1 with one more label in its config; ``(ref, digest)``."""
        manifest = json.loads(self.get_manifest("v1"))
        config = json.loads(requests.get("%s/blobs/%s" % (self.base, manifest["config"]["digest"]), timeout=30).content)
        config.setdefault("config", {})
        config["config"]["Labels"] = dict(config["config"].get("Labels") or {}, **{"stella.test.signature": label})
        data = json.dumps(config).encode()
        manifest["config"].update(digest=self.blob(data), size=len(data))
        body = json.dumps(manifest, indent=3).encode()
        status, text = self.put_manifest("sig-" + label, body, DOCKER_V2)
        assert status == 201, text
        return "%s/%s:sig-%s" % (self.address, self.repository, label), _sha(body)

    def signature_image(self, digest, image):
        """Push a signature image (``cosign.signature_manifest``'s) at ``digest``'s signature tag."""
        for data in image["blobs"].values():
            self.blob(data)
        return self.put_manifest(cosign.signature_tag(digest), image["manifest"], cosign.OCI_MANIFEST_TYPE)


@pytest.fixture(scope="module")
def lab():
    return ar.load_lab_json()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """The signing key pair (cosign's encrypted PEM, planted passphrase) and another trusted-looking key."""
    root = tmp_path_factory.mktemp("keys")
    private_pem, public_pem = generate_key_pair(PASSPHRASE.encode())
    (root / "cosign.key").write_bytes(private_pem)
    (root / "cosign.pub").write_bytes(public_pem)
    (root / "pass.txt").write_text(PASSPHRASE + "\n")
    _other_private, other_public = generate_key_pair(b"other")
    (root / "other.pub").write_bytes(other_public)
    (root / "docker").mkdir()
    return root


@pytest.fixture(scope="module")
def registry(lab):
    return Registry(lab["registries"]["shared"]["address"])


def planted(keys):
    """Strings no output may contain: the passphrase and the private key's body lines."""
    body = (keys / "cosign.key").read_text().splitlines()[1:-1]
    return [PASSPHRASE] + [line for line in body if len(line) > 20]


def assert_clean(text, keys):
    for secret in planted(keys):
        assert secret not in text, "a planted secret reached the output"


def stella_sign(keys, registry, image, *extra):
    argv = [
        os.path.join(ar.VENV_BIN, "python"),
        os.path.join(ar.ROOT, "scripts", "stella.py"),
        "sign",
        image,
        "--key",
        str(keys / "cosign.key"),
        "--passphrase-file",
        str(keys / "pass.txt"),
        "--insecure-registry",
        registry.address,
    ] + list(extra)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=ar.COLLECTIONS, DOCKER_CONFIG=str(keys / "docker"))
    env.pop("STELLA_SIGNING_PASSPHRASE", None)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert_clean(proc.stdout + proc.stderr, keys)
    return proc


def plan(registry, ref, policy, keys):
    """stella_plan of a one-component release of ``ref`` under ``policy`` (the real module, no target)."""
    release = minimal_release(components=[{"name": "web", "image": ref}])
    result, output = ar.ansible_module(
        PLAN_MODULE,
        {"release": release, "insecure_registries": [registry.address], "image_policy": policy},
        raw=True,
    )
    assert_clean(output, keys)
    return result


def test_refusals_at_planning(registry, keys):
    trusted = {"keys": [str(keys / "cosign.pub")]}
    signed_ref, signed = registry.variant("signed-" + uuid.uuid4().hex[:8])
    proc = stella_sign(keys, registry, "%s@%s" % (signed_ref.rsplit(":", 1)[0], signed))
    assert proc.returncode == 0, proc.stderr
    tag = cosign.signature_tag(signed)
    assert proc.stdout.split()[0] == "%s/%s:%s" % (registry.address, registry.repository, tag)
    assert proc.stdout.split()[1] == _sha(registry.get_manifest(tag, cosign.OCI_MANIFEST_TYPE))

    good = plan(registry, signed_ref, trusted, keys)
    assert not good["failed"], good
    verdict = good["signatures"][signed_ref]
    assert verdict["status"] == "verified" and verdict["source"] == "tag" and verdict["digest"] == signed
    assert verdict["keyPath"] == str(keys / "cosign.pub") and verdict["keyFingerprint"].startswith("sha256:")

    # another key
    other = plan(registry, signed_ref, {"keys": [str(keys / "other.pub")]}, keys)
    assert other["failed"] and other["code"] == "image_signature_invalid", other
    assert "no trusted key verifies" in other["msg"] and other["failurePhase"] == "plan"

    # an unsigned image
    unsigned_ref, _unsigned = registry.variant("unsigned-" + uuid.uuid4().hex[:8])
    result = plan(registry, unsigned_ref, trusted, keys)
    assert result["failed"] and result["code"] == "image_unsigned", result

    # a signature copied from another digest: the signed digest's signature manifest under this one's tag
    copied_ref, copied = registry.variant("copied-" + uuid.uuid4().hex[:8])
    body = registry.get_manifest(tag, cosign.OCI_MANIFEST_TYPE)
    assert registry.put_manifest(cosign.signature_tag(copied), body, cosign.OCI_MANIFEST_TYPE)[0] == 201
    result = plan(registry, copied_ref, trusted, keys)
    assert result["failed"] and result["code"] == "image_signature_invalid", result
    assert "names digest %s" % signed in result["msg"]

    # a payload edited after signing (the manifest names the edited bytes, the signature is the original's)
    edited_ref, edited = registry.variant("edited-" + uuid.uuid4().hex[:8])
    assert stella_sign(keys, registry, "%s@%s" % (edited_ref.rsplit(":", 1)[0], edited)).returncode == 0
    layers = cosign.parse_signature_manifest(
        registry.get_manifest(cosign.signature_tag(edited), cosign.OCI_MANIFEST_TYPE)
    )
    payload = requests.get("%s/blobs/%s" % (registry.base, layers[0]["digest"]), timeout=30).content
    changed = payload.replace(b'"optional":null', b'"optional":{"edited":"after signing"}')
    assert changed != payload
    image = cosign.signature_manifest([{"payload": changed, "signature": layers[0]["signature"]}])
    assert registry.signature_image(edited, image)[0] == 201
    result = plan(registry, edited_ref, trusted, keys)
    assert result["failed"] and result["code"] == "image_signature_invalid", result
    assert "no trusted key verifies" in result["msg"]

    # a signature tag holding something that is no signature: an image manifest; invalid JSON if accepted
    garbage_ref, garbage = registry.variant("garbage-" + uuid.uuid4().hex[:8])
    v1 = registry.get_manifest("v1")
    assert registry.put_manifest(cosign.signature_tag(garbage), v1, DOCKER_V2)[0] == 201
    result = plan(registry, garbage_ref, trusted, keys)
    assert result["failed"] and result["code"] == "image_signature_invalid", result
    assert "no simple signing layer" in result["msg"]
    if registry.put_manifest(cosign.signature_tag(garbage), b"{not json", cosign.OCI_MANIFEST_TYPE)[0] == 201:
        result = plan(registry, garbage_ref, trusted, keys)
        assert result["failed"] and result["code"] == "image_signature_invalid", result

    # the registry down during the signature check (the image pinned: the check is the first request)
    down = "127.0.0.1:%d/stella/app@%s" % (free_port(), signed)
    result = plan(registry, down, trusted, keys)
    assert result["failed"] and result["code"] == "registry_unreachable", result
    assert result["failurePhase"] == "plan"

    # no policy: nothing new in the result
    plain = plan(registry, signed_ref, {}, keys)
    assert not plain["failed"] and "signatures" not in plain


def test_a_50_mib_payload_is_refused_after_a_bounded_read(registry, keys):
    ref, digest = registry.variant("huge-" + uuid.uuid4().hex[:8])
    huge = os.urandom(1024) * (50 * 1024)
    huge_digest = registry.blob(huge)
    config = b'{"architecture":"","config":{},"os":"","rootfs":{"type":"layers","diff_ids":[]}}'
    config_digest = registry.blob(config)

    def manifest(size):
        return json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": cosign.OCI_MANIFEST_TYPE,
                "config": {"mediaType": cosign.CONFIG_TYPE, "size": len(config), "digest": config_digest},
                "layers": [
                    {
                        "mediaType": cosign.SIMPLE_SIGNING_TYPE,
                        "size": size,
                        "digest": huge_digest,
                        "annotations": {cosign.SIGNATURE_ANNOTATION: "MEUCIQ=="},
                    }
                ],
            }
        ).encode()

    # a layer that understates its size makes the read itself bounded; a registry that checks sizes gets the
    # honest size, refused before any read
    tag = cosign.signature_tag(digest)
    if registry.put_manifest(tag, manifest(300), cosign.OCI_MANIFEST_TYPE)[0] != 201:
        assert registry.put_manifest(tag, manifest(len(huge)), cosign.OCI_MANIFEST_TYPE)[0] == 201
    release = minimal_release(components=[{"name": "web", "image": ref}])
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(StellaError) as info:
            inputs.resolve_and_verify(
                release, {}, [registry.address], {}, True, 30.0, job_policy={"keys": [str(keys / "cosign.pub")]}
            )
        elapsed = time.monotonic() - started
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.code == "image_signature_invalid"
    assert "payload over %d bytes" % cosign.MAX_PAYLOAD_BYTES in info.value.reason
    assert elapsed < 5, elapsed
    assert peak < 12 * 1024 * 1024, peak


@pytest.fixture(scope="module")
def signer_target(target_factory):
    return target_factory("sig", image="trixie")


def test_a_signed_image_deploys_and_refusals_change_nothing(lab, signer_target, registry, keys, tmp_path):
    fj = fl.FleetJob(lab, [signer_target], tmp_path, "signed", free_port())
    name = fj.names[0]
    ref, digest = registry.variant("deploy-" + uuid.uuid4().hex[:8])
    fj.refs["signed"], fj.digests["signed"] = ref, digest
    assert stella_sign(keys, registry, "%s@%s" % (ref.rsplit(":", 1)[0], digest)).returncode == 0
    release = fj.release("signed")
    trusted = {"stella_image_policy": {"keys": [str(keys / "cosign.pub")]}}
    try:
        # refused at planning with another key: the target keeps nothing of the application
        refused = fj.run(release, extra={"stella_image_policy": {"keys": [str(keys / "other.pub")]}})
        assert refused.rc != 0 and "image_signature_invalid" in refused.output, refused.output[-3000:]
        assert_clean(refused.output, keys)
        assert _containers(fj, name) == [] and not any(fj.application in p for p in _projects(fj, name))

        # --check previews the verdicts, and changes nothing
        preview = fj.run(release, extra=trusted, check=True, verbose=True)
        assert preview.rc == 0, preview.output[-3000:]
        assert '"keyFingerprint": "sha256:' in preview.output and '"status": "verified"' in preview.output
        assert_clean(preview.output, keys)
        assert fj.job_ids() == [] and _containers(fj, name) == []
        assert not any(fj.application in p for p in _projects(fj, name))

        # deployed under the policy: the record and deployment.json say verified with the key's fingerprint
        run = fj.run(release, extra=trusted)
        assert run.rc == 0, run.output[-4000:]
        assert_clean(run.output, keys)
        record = fj.job(run.job_id)
        verdict = record["signatures"][ref]
        assert verdict["status"] == "verified" and verdict["digest"] == digest
        assert verdict["keyPath"] == str(keys / "cosign.pub")
        facts = fl.web(fj.state(name, record["targets"][name]["projectName"]))
        assert facts["ref"] == "%s@%s" % (ref, digest)
        documents = glob.glob(os.path.join(fj.evidence_dir, "**", "deployment.json"), recursive=True)
        assert documents, "no deployment.json under %s" % fj.evidence_dir
        for path in documents:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
            assert json.loads(text)["signatures"][ref]["keyFingerprint"] == verdict["keyFingerprint"]
            assert_clean(text, keys)
        assert_clean(json.dumps(record), keys)
    finally:
        fj.cleanup()


def _containers(fj, name):
    script = "docker ps -aq --filter label=stella.application=%s" % fj.application
    return fl.labkit.ssh(fj.by_name[name], script).stdout.split()


def _projects(fj, name):
    out = fl.labkit.ssh(fj.by_name[name], "ls -1 %s 2>/dev/null || true" % fl.WORK_DIRECTORY).stdout
    return out.split()


def test_a_signature_pushed_as_an_oci_referrer_verifies_through_the_referrers_api(lab, keys):
    """The hub front answers the OCI 1.1 referrers API (lab/registryfront.py): a cosign signature pushed the
    way ``cosign sign --registry-referrers-mode=oci-1-1`` does (a manifest with ``subject`` and
    ``artifactType``, config the OCI empty descriptor, pushed by digest, no ``.sig`` tag) is found there."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust.keys import load_private_key

    hub = lab["registries"]["hub"]
    repository = "stella/signed-referrers"
    base = "http://%s/v2/%s" % (hub["address"], repository)
    user, password = fl.labkit.auth_credentials(lab)
    http = requests.Session()
    http.trust_env = False  # lab traffic never goes through a proxy
    token = http.get(
        "http://%s/token" % hub["token_service"],
        params={"service": hub["service"], "scope": "repository:%s:pull,push" % repository},
        auth=(user, password),
        timeout=30,
    ).json()["token"]
    http.headers["Authorization"] = "Bearer " + token

    def blob(data):
        start = http.post(base + "/blobs/uploads/", timeout=30)
        assert start.status_code == 202, start.text
        location = start.headers["Location"]
        put = http.put(
            location + ("&" if "?" in location else "?") + "digest=" + _sha(data),
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            timeout=30,
        )
        assert put.status_code == 201, put.text
        return {"digest": _sha(data), "size": len(data)}

    def put_manifest(reference, document):
        body = json.dumps(document, separators=(",", ":")).encode()
        answer = http.put(
            "%s/manifests/%s" % (base, reference or _sha(body)),
            data=body,
            headers={"Content-Type": cosign.OCI_MANIFEST_TYPE},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        assert answer.headers["Docker-Content-Digest"] == _sha(body)
        return body, answer

    # a small image of its own (a config naming this run, one small layer)
    label = uuid.uuid4().hex
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"run": label}}}).encode()
    image, _answer = put_manifest(
        "referrers-" + label[:12],
        {
            "schemaVersion": 2,
            "mediaType": cosign.OCI_MANIFEST_TYPE,
            "config": dict(blob(config), mediaType=cosign.CONFIG_TYPE),
            "layers": [dict(blob(label.encode()), mediaType="application/vnd.oci.image.layer.v1.tar")],
        },
    )
    digest = _sha(image)
    ref = "%s/%s:referrers-%s" % (hub["address"], repository, label[:12])

    # its signature, as an OCI 1.1 referrer pushed by digest
    key = load_private_key(str(keys / "cosign.key"), PASSPHRASE.encode())
    payload = cosign.simple_signing_payload("%s/%s" % (hub["address"], repository), digest)
    signature, answer = put_manifest(
        None,
        {
            "schemaVersion": 2,
            "mediaType": cosign.OCI_MANIFEST_TYPE,
            "artifactType": "application/vnd.dev.cosign.artifact.sig.v1+json",
            "config": dict(blob(b"{}"), mediaType="application/vnd.oci.empty.v1+json"),
            "layers": [
                dict(
                    blob(payload),
                    mediaType=cosign.SIMPLE_SIGNING_TYPE,
                    annotations={cosign.SIGNATURE_ANNOTATION: cosign.sign_payload(key, payload)},
                )
            ],
            "subject": {"mediaType": cosign.OCI_MANIFEST_TYPE, "digest": digest, "size": len(image)},
        },
    )
    assert answer.headers["OCI-Subject"] == digest
    assert http.get("%s/manifests/%s" % (base, cosign.signature_tag(digest)), timeout=30).status_code == 404
    index = http.get("%s/referrers/%s" % (base, digest), timeout=30)
    assert index.status_code == 200 and index.headers["Content-Type"] == "application/vnd.oci.image.index.v1+json"
    assert [m["digest"] for m in index.json()["manifests"]] == [_sha(signature)]

    hub_registry = Registry(hub["address"], repository)
    good = plan(hub_registry, ref, {"keys": [str(keys / "cosign.pub")]}, keys)
    assert not good["failed"], good
    verdict = good["signatures"][ref]
    assert verdict["status"] == "verified" and verdict["source"] == "referrers", verdict
    assert verdict["digest"] == digest and verdict["signatureDigest"] == _sha(signature)
    assert verdict["keyPath"] == str(keys / "cosign.pub")

    other = plan(hub_registry, ref, {"keys": [str(keys / "other.pub")]}, keys)
    assert other["failed"] and other["code"] == "image_signature_invalid", other
    assert "no trusted key verifies" in other["msg"] and other["failurePhase"] == "plan"
