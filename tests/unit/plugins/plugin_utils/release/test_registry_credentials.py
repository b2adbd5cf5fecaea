"""plugin_utils/release/credentials: explicit registry credentials first, then Docker's client config the
way the docker CLI reads it (auths, identitytoken, credsStore, credHelpers), on configs as Docker Desktop,
`docker login` on Linux, ECR/GCR credential helpers and `az acr login` write them. Credential helpers are
real executables on PATH speaking the helper protocol."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time

import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))

from planning_support import FakeRegistry, image_manifest  # noqa: E402

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError  # noqa: E402
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.credentials import (  # noqa: E402
    RegistryCredentials,
    docker_config_path,
    registry_key,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.registry import DigestResolver  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "docker_config")

HELPER = """#!/bin/sh
# docker-credential-%(name)s: answers `get` from a table, logs what was asked
read -r server
echo "$1 $server" >> "%(log)s"
case "$1 $server" in
%(cases)s
  *) echo "credentials not found in native keychain"; exit 1 ;;
esac
"""


def config_dir(tmp_path, name):
    directory = tmp_path / "docker"
    directory.mkdir(exist_ok=True)
    shutil.copy(os.path.join(CONFIGS, name), directory / "config.json")
    return directory


def helper(tmp_path, name, answers):
    """A ``docker-credential-<name>`` on a PATH of its own, answering ``answers`` ({server: (user, secret)})."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / ("%s.log" % name)
    cases = "\n".join(
        "  \"get %s\") echo '%s' ;;" % (server, json.dumps({"ServerURL": server, "Username": user, "Secret": secret}))
        for server, (user, secret) in answers.items()
    )
    path = bindir / ("docker-credential-" + name)
    path.write_text(HELPER % {"name": name, "log": log, "cases": cases})
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"PATH": "%s:/usr/bin:/bin" % bindir}, log


def creds(tmp_path, config, environ=None, explicit=None):
    env = dict(environ or {}, DOCKER_CONFIG=str(config_dir(tmp_path, config)), HOME=str(tmp_path))
    return RegistryCredentials(explicit, environ=env)


@pytest.mark.parametrize(
    "name,key",
    [
        ("docker.io", "docker.io"),
        ("index.docker.io", "docker.io"),
        ("https://index.docker.io/v1/", "docker.io"),
        ("registry-1.docker.io", "docker.io"),
        ("HTTPS://Ghcr.IO/", "ghcr.io"),
        ("127.0.0.1:5002", "127.0.0.1:5002"),
        ("http://registry.lab:5001/v2/", "registry.lab:5001"),
    ],
)
def test_registry_key_is_one_name_per_registry(name, key):
    assert registry_key(name) == key


def test_config_path_follows_docker_config_then_home(tmp_path):
    assert docker_config_path({"DOCKER_CONFIG": str(tmp_path)}) is None
    (tmp_path / "config.json").write_text("{}")
    assert docker_config_path({"DOCKER_CONFIG": str(tmp_path)}) == str(tmp_path / "config.json")


def test_auths_base64_entries_for_hub_under_any_name(tmp_path):
    found = creds(tmp_path, "linux-docker-login.json")
    for name in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        assert found.get(name) == {
            "username": "stella-hub",
            "password": "hub-password-Planted",
            "source": "docker-config:auths",
        }
    assert found.get("127.0.0.1:5002")["password"] == "auth-password-Planted"
    assert found.get("ghcr.io") is None
    assert sorted(found.secrets()) == ["auth-password-Planted", "hub-password-Planted"]


def test_identitytoken_wins_over_auth(tmp_path):
    found = creds(tmp_path, "acr-identitytoken.json").get("stellaops.azurecr.io")
    assert found == {
        "identitytoken": "eyJhbGciOiJSUzI1NiJ9.identity-token-Planted.sig",
        "source": "docker-config:auths",
    }


def test_creds_store_is_asked_with_hub_s_index_url(tmp_path):
    env, log = helper(
        tmp_path,
        "desktop",
        {
            "https://index.docker.io/v1/": ("stella-hub", "store-secret-Planted"),
            "ghcr.io": ("<token>", "ghcr-identity-Planted"),
        },
    )
    found = creds(tmp_path, "desktop-credsstore.json", env)
    assert found.get("docker.io") == {
        "username": "stella-hub",
        "password": "store-secret-Planted",
        "source": "docker-config:credsStore:desktop",
    }
    assert found.get("ghcr.io") == {
        "identitytoken": "ghcr-identity-Planted",
        "source": "docker-config:credsStore:desktop",
    }
    assert found.get("quay.io") is None
    asked = log.read_text().splitlines()
    assert asked[:2] == ["get https://index.docker.io/v1/", "get ghcr.io"] and "get quay.io" in asked
    found.get("docker.io")
    assert len(log.read_text().splitlines()) == len(asked)  # asked once per registry


def test_cred_helpers_per_registry(tmp_path):
    env, log = helper(
        tmp_path, "ecr-login", {"123456789012.dkr.ecr.eu-west-1.amazonaws.com": ("AWS", "ecr-token-Planted")}
    )
    found = creds(tmp_path, "cloud-credhelpers.json", env)
    assert found.get("123456789012.dkr.ecr.eu-west-1.amazonaws.com") == {
        "username": "AWS",
        "password": "ecr-token-Planted",
        "source": "docker-config:credHelpers:ecr-login",
    }
    assert found.get("docker.io") is None  # no helper, no auths entry: anonymous
    assert log.read_text().splitlines() == ["get 123456789012.dkr.ecr.eu-west-1.amazonaws.com"]


def test_a_named_helper_that_is_missing_fails_clearly(tmp_path):
    found = creds(tmp_path, "cloud-credhelpers.json", {"PATH": str(tmp_path)})
    with pytest.raises(StellaError) as info:
        found.get("gcr.io")
    assert info.value.code == "registry_auth_failed"
    assert "docker-credential-gcloud" in info.value.reason and "gcr.io" in info.value.reason


def test_a_default_store_that_is_not_installed_is_a_warning(tmp_path):
    found = creds(tmp_path, "desktop-credsstore.json", {"PATH": str(tmp_path)})
    assert found.get("docker.io") is None
    assert "docker-credential-desktop is not installed" in found.warnings[0]


def test_explicit_credentials_win_and_read_password_files(tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("file-password-Planted\n")
    found = creds(
        tmp_path,
        "linux-docker-login.json",
        explicit={"index.docker.io": {"username": "ops", "password_file": str(password_file)}},
    )
    assert found.get("docker.io") == {
        "username": "ops",
        "password": "file-password-Planted",
        "source": "registry_credentials",
    }
    with pytest.raises(StellaError, match="needs username"):
        RegistryCredentials({"r": {"password": "x"}}, config_path=False)


def test_a_broken_config_is_a_clear_error_without_its_content(tmp_path):
    directory = tmp_path / "docker"
    directory.mkdir()
    (directory / "config.json").write_text('{"auths": {"r.example": {"auth": "bm90LWEtcGFpcg=="}}}')
    found = RegistryCredentials(environ={"DOCKER_CONFIG": str(directory)})
    with pytest.raises(StellaError) as info:
        found.get("r.example")
    assert str(directory) in info.value.reason and "bm90" not in info.value.reason


def test_no_config_means_no_lookup(tmp_path):
    found = RegistryCredentials(environ={"DOCKER_CONFIG": str(tmp_path), "HOME": str(tmp_path)})
    assert not found and found.get("docker.io") is None


def test_planning_names_the_source_never_the_value(tmp_path):
    """The resolver takes its credentials from the config and says where they came from."""
    registry = FakeRegistry(auth=("basic", "stella", "auth-password-Planted"))
    registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    directory = tmp_path / "docker"
    directory.mkdir()
    (directory / "config.json").write_text(
        json.dumps({"auths": {"https://registry.example.com": {"auth": "c3RlbGxhOmF1dGgtcGFzc3dvcmQtUGxhbnRlZA=="}}})
    )
    found = RegistryCredentials(environ={"DOCKER_CONFIG": str(directory)})
    result = DigestResolver(found, transport=registry).resolve("registry.example.com/shop/web:1.0")
    assert result["credentialSource"] == "docker-config:auths"
    assert "auth-password-Planted" not in json.dumps(result)


def test_a_registry_the_config_does_not_name_is_answered_without_the_docker_sdk(tmp_path, monkeypatch):
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import credentials as _credentials

    imported = []
    real = _credentials._docker_auth
    monkeypatch.setattr(_credentials, "_docker_auth", lambda: imported.append(True) or real())
    found = creds(tmp_path, "linux-docker-login.json")
    assert found.get("ghcr.io") is None and imported == []
    assert found.get("127.0.0.1:5002")["source"] == "docker-config:auths" and imported == [True]


# --------------------------------------------------------------------------- what a helper prints, how long it runs

PLANTED = "helper-Secret-Planted"


def script_helper(tmp_path, name, body):
    """A ``docker-credential-<name>`` running the shell ``body`` on a PATH of its own, named by a
    ``credHelpers`` entry for ghcr.io in a config of its own."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    path = bindir / ("docker-credential-" + name)
    path.write_text("#!/bin/sh\nread -r server\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    directory = tmp_path / "docker"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"credHelpers": {"ghcr.io": name}}))
    return RegistryCredentials(
        environ={"PATH": "%s:/usr/bin:/bin" % bindir, "DOCKER_CONFIG": str(directory), "HOME": str(tmp_path)}
    )


@pytest.mark.parametrize(
    "body",
    [
        'echo "token %s expired" ; echo "stderr %s" >&2 ; exit 1' % (PLANTED, PLANTED),
        'echo "stderr only %s" >&2 ; exit 3' % PLANTED,
        'echo "{\\"Username\\": \\"u\\", \\"Secret\\": \\"%s\\"" ; exit 0' % PLANTED,  # cut JSON
    ],
)
def test_nothing_a_helper_prints_reaches_the_error(tmp_path, body):
    found = script_helper(tmp_path, "leaky", body)
    with pytest.raises(StellaError) as info:
        found.get("ghcr.io")
    assert info.value.code == "registry_auth_failed" and "docker-credential-leaky" in info.value.reason
    assert PLANTED not in json.dumps(info.value.as_dict()), info.value.reason


def test_a_helper_s_answer_is_read_with_a_bound(tmp_path):
    import resource

    found = script_helper(tmp_path, "huge", "head -c 300000000 /dev/zero")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(StellaError) as info:
        found.get("ghcr.io")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert info.value.code == "registry_auth_failed" and "more than 1 MiB" in info.value.reason, info.value.reason
    assert grown_mib < 50, grown_mib


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_helper_that_does_not_answer_is_stopped_with_its_children(tmp_path, monkeypatch):
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import credentials as _credentials

    monkeypatch.setattr(_credentials, "HELPER_TIMEOUT", 1)
    pidfile = tmp_path / "child.pid"
    found = script_helper(tmp_path, "stuck", "sleep 300 & echo $! > %s\nsleep 300" % pidfile)
    started = time.monotonic()
    with pytest.raises(StellaError) as info:
        found.get("ghcr.io")
    assert time.monotonic() - started < 5
    assert info.value.code == "registry_auth_failed" and "did not answer within 1 s" in info.value.reason
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the helper's child %d outlived its timeout" % child


def test_a_missing_default_store_is_named_when_planning_then_lacks_credentials(tmp_path):
    """The warning a missing ``credsStore`` gives reaches the operator with the failure it explains."""
    registry = FakeRegistry(auth=("basic", "stella", "pw"))
    registry.push("shop/web", "1.0", image_manifest("1"), "application/vnd.oci.image.manifest.v1+json")
    directory = tmp_path / "docker"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"auths": {"registry.example.com": {}}, "credsStore": "desktop"}))
    found = RegistryCredentials(environ={"DOCKER_CONFIG": str(directory), "PATH": str(tmp_path)})
    with pytest.raises(StellaError) as info:
        DigestResolver(found, transport=registry).resolve("registry.example.com/shop/web:1.0")
    assert "no credentials are configured" in info.value.reason
    assert "docker-credential-desktop is not installed" in info.value.reason, info.value.reason
    assert found.warnings and "docker-credential-desktop is not installed" in found.warnings[0]
