"""The managed runtime install (engine/install.py, engine/install_request.py): the pure decisions, the
installer over a fake host, the module's masking of an embedded password, and docs/runtime-install.md
against the role."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from ansible_collections.stellaops.runtime.plugins.module_utils.engine import install as ri
from ansible_collections.stellaops.runtime.plugins.module_utils.engine import install_request as rq
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSWORD = "planted-unit-s3cr%21t"  # as written in the URL; decoded: planted-unit-s3cr!t
DECODED = "planted-unit-s3cr!t"
URL = "http://stella-apt:%s@172.17.0.1:5010/debian" % PASSWORD
KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGabc\n-----END PGP PUBLIC KEY BLOCK-----\n"


def params(**kw):
    base = {
        "mode": "production",
        "source_type": "apt",
        "apt_url": URL,
        "apt_suite": "./",
        "apt_components": [],
        "apt_signing_key": KEY,
        "apt_trusted": False,
        "source_name": "runtime",
    }
    base.update(kw)
    return base


def code_of(options):
    with pytest.raises(StellaError) as info:
        rq.parse_request(options)
    assert PASSWORD not in info.value.reason and DECODED not in info.value.reason
    return info.value.code


# ------------------------------------------------------------------------------------ the decisions


def test_split_credentials_decodes_and_lists_every_form():
    clean, user, password, secrets = rq.split_credentials(URL)
    assert clean == "http://172.17.0.1:5010/debian"
    assert (user, password) == ("stella-apt", DECODED)
    assert secrets == sorted({PASSWORD, DECODED})
    assert rq.split_credentials("https://apt.example/x")[1:] == (None, None, [])
    assert rq.split_credentials(None)[3] == []


@pytest.mark.parametrize("mode", rq.MODES)
def test_no_source_fails_closed_in_every_mode(mode):
    assert code_of({"mode": mode, "source_type": None}) == "runtime_install_source_missing"
    if mode != "offline":
        assert code_of(params(mode=mode, apt_url="")) == "runtime_install_source_missing"
    assert code_of(params(mode=mode, source_type="bundle", bundle_files=[])) == "runtime_install_source_missing"


@pytest.mark.parametrize(
    "options,code",
    [
        (dict(mode="offline"), "runtime_install_source_not_allowed"),
        (dict(apt_signing_key=None, apt_trusted=True), "runtime_install_source_not_allowed"),
        (dict(apt_signing_key=None), "runtime_install_source_invalid"),
        (dict(apt_url="ftp://host/debian"), "runtime_install_source_invalid"),
        (dict(apt_username="u", apt_password="p"), "runtime_install_source_invalid"),
        (dict(apt_url="http://u@host/debian"), "runtime_install_source_invalid"),
        (dict(apt_components=["main"]), "runtime_install_source_invalid"),
        (dict(apt_suite="trixie"), "runtime_install_source_invalid"),
        (dict(apt_signing_key="not a key"), "runtime_install_source_invalid"),
        (dict(apt_signed_by="/etc/apt/keyrings/x.gpg"), "runtime_install_source_invalid"),
        (dict(source_name="../x"), "runtime_install_source_invalid"),
        (dict(min_engine_version="new"), "runtime_install_source_invalid"),
        (dict(source_type="bundle", bundle_files=[]), "runtime_install_source_missing"),
        (dict(source_type="bundle", bundle_files=["../a.deb"]), "runtime_install_source_invalid"),
        (dict(source_type="bundle", bundle_checksums={"a.deb": "abc"}), "runtime_install_source_invalid"),
    ],
    ids=[
        "offline-apt",
        "production-unsigned",
        "no-signature",
        "scheme",
        "credentials-twice",
        "user-only",
        "flat-with-components",
        "suite-without-components",
        "bad-key",
        "key-and-keyring",
        "name",
        "gate",
        "empty-bundle",
        "bundle-path-in-name",
        "bad-checksum",
    ],
)
def test_refusals(options, code):
    assert code_of(params(**options)) == code


@pytest.mark.parametrize("mode", ["lab", "development"])
def test_lab_and_development_accept_an_unsigned_repository(mode):
    req = rq.parse_request(params(mode=mode, apt_signing_key=None, apt_trusted=True))
    assert req["apt"]["trusted"] is True
    assert rq.apt_source_files(req)["/etc/apt/sources.list.d/stella-runtime.list"][0].endswith(
        "deb [trusted=yes] http://172.17.0.1:5010/debian ./\n"
    )


def test_offline_accepts_a_bundle_only():
    req = rq.parse_request(params(mode="offline", source_type="bundle", bundle_path="/b"))
    assert req["bundle"] == {"path": "/b", "files": None, "checksums": {}}
    assert "apt" not in req


def test_apt_files_keep_the_credential_in_the_auth_file_only():
    req = rq.parse_request(params())
    files = rq.apt_source_files(req)
    listing, mode = files["/etc/apt/sources.list.d/stella-runtime.list"]
    assert mode == 0o644 and listing.splitlines()[-1] == (
        "deb [signed-by=/etc/apt/keyrings/stella-runtime.asc] http://172.17.0.1:5010/debian ./"
    )
    assert "stella-apt" not in listing and DECODED not in listing
    auth, auth_mode = files["/etc/apt/auth.conf.d/stella-runtime.conf"]
    assert auth_mode == 0o600
    # apt uses credentials for plain http only when the machine entry names the scheme
    assert auth == "machine http://172.17.0.1:5010/debian\nlogin stella-apt\npassword %s\n" % DECODED
    assert files["/etc/apt/keyrings/stella-runtime.asc"] == (KEY.strip() + "\n", 0o644)
    assert sorted(req["secrets"]) == sorted({PASSWORD, DECODED})


def test_apt_files_without_credentials_remove_our_auth_file_only():
    req = rq.parse_request(
        params(
            apt_url="https://apt.example/docker/",
            apt_suite="trixie",
            apt_components=["stable"],
            apt_signing_key=None,
            apt_signed_by="/k.gpg",
        )
    )
    files = rq.apt_source_files(req)
    assert files["/etc/apt/auth.conf.d/stella-runtime.conf"] == (None, 0o600)
    assert files["/etc/apt/sources.list.d/stella-runtime.list"][0].splitlines()[-1] == (
        "deb [signed-by=/k.gpg] https://apt.example/docker trixie stable"
    )
    assert set(files) == {"/etc/apt/auth.conf.d/stella-runtime.conf", "/etc/apt/sources.list.d/stella-runtime.list"}


def test_apt_username_and_password_options():
    req = rq.parse_request(params(apt_url="http://h:1/r", apt_username="u", apt_password="pw"))
    assert (req["apt"]["username"], req["apt"]["password"], req["secrets"]) == ("u", "pw", ["pw"])


NEW = {"client": "26.1.5+dfsg1", "server": "26.1.5+dfsg1", "dockerd": "26.1.5+dfsg1", "compose": "2.40.3"}


@pytest.mark.parametrize(
    "observed,expect",
    [
        (NEW, (False, False, False, [])),
        ({}, (True, True, True, ["docker.io", "docker-cli", "docker-compose-plugin"])),
        (dict(NEW, compose=None), (False, True, False, ["docker-compose-plugin"])),
        (dict(NEW, compose="2.19.9"), (False, True, False, ["docker-compose-plugin"])),
        (dict(NEW, server=None), (False, False, True, [])),
        (
            dict(NEW, server="20.10.24", dockerd="20.10.24", client="20.10.24"),
            (True, False, True, ["docker.io", "docker-cli"]),
        ),
    ],
    ids=["satisfied", "nothing", "no-compose", "old-compose", "stopped", "old-engine"],
)
def test_plan_actions(observed, expect):
    plan = ri.plan_actions(rq.parse_request(params()), observed)
    assert (plan["installEngine"], plan["installCompose"], plan["startEngine"], plan["packages"]) == expect


def test_plan_for_a_bundle_names_no_packages_and_none_start_never_starts():
    req = rq.parse_request(params(source_type="bundle", engine_start="none"))
    assert ri.plan_actions(req, {}) == {
        "installEngine": True,
        "installCompose": True,
        "startEngine": False,
        "packages": [],
    }


def test_dpkg_query_and_package_changes():
    text = "docker.io\t26.1.5-9\tii \nlibc6:amd64\t2.41-12\tii \nold\t1.0\trc \n"
    before = {"libc6": "2.41-11", "gone": "1"}
    after = ri.parse_dpkg_query(text)
    assert after == {"docker.io": "26.1.5-9", "libc6": "2.41-12"}
    assert ri.package_changes(before, after) == {
        "docker.io": {"before": None, "after": "26.1.5-9"},
        "gone": {"before": "1", "after": None},
        "libc6": {"before": "2.41-11", "after": "2.41-12"},
    }


def test_source_evidence_records_no_credential():
    req = rq.parse_request(params())
    src = rq.source_evidence(req)
    assert src == {
        "type": "apt",
        "url": "http://172.17.0.1:5010/debian",
        "suite": "./",
        "components": [],
        "credentials": True,
        "signedBy": "/etc/apt/keyrings/stella-runtime.asc",
        "trusted": False,
    }
    doc = ri.evidence_document(req, "installed", {}, {}, src, "t0", "t1")
    assert doc["schema"] == ri.SCHEMA and doc["mode"] == "production"
    assert DECODED not in json.dumps(doc) and "stella-apt" not in json.dumps(doc)


# ------------------------------------------------------------------------- the installer on a fake host


class FakeHost:
    """A Debian host without Docker: ``apt-get install`` installs it, a start method starts it."""

    def __init__(self, root, init_script_fails=True, installed=False, running=False):
        self.root, self.calls = root, []
        self.installed, self.running, self.init_fails = installed, running, init_script_fails
        os.makedirs(os.path.join(root, "etc/init.d"), exist_ok=True)

    def which(self, name):
        if name in ("docker", "dockerd") and not self.installed:
            return None
        return {"docker": "/usr/bin/docker", "dockerd": "/usr/sbin/dockerd"}.get(name, "/usr/bin/" + name)

    def run(self, argv, environ_update=None):
        if argv[0] == "/usr/bin/timeout":
            argv = argv[argv.index("--kill-after") + 3 :]
        self.calls.append(list(argv))
        if argv[0] == "/usr/sbin/dockerd":
            return 0, "Docker version 26.1.5+dfsg1, build 411e817\n", ""
        if argv[:2] == ["docker", "--version"]:
            return 0, "Docker version 26.1.5+dfsg1, build 411e817\n", ""
        if argv[:2] == ["docker", "version"]:
            server = {"Version": "26.1.5+dfsg1", "ApiVersion": "1.45", "Os": "linux", "Arch": "amd64"}
            doc = {
                "Client": {"Version": "26.1.5+dfsg1", "ApiVersion": "1.45"},
                "Server": server if self.running else None,
            }
            return (
                (0 if self.running else 1),
                json.dumps(doc),
                "" if self.running else "Cannot connect to the Docker daemon",
            )
        if argv[:3] == ["docker", "compose", "version"]:
            return 0, '{"version": "v2.40.3"}', ""
        if argv[0] == "dpkg-query":
            installed = (
                "docker.io\t26.1.5+dfsg1-9\tii \ndocker-cli\t26.1.5+dfsg1-9\tii \n"
                "docker-compose-plugin\t2.40.3-1\tii \n"
            )
            rows = "libc6\t2.41-12\tii \n" + (installed if self.installed else "")
            return 0, rows, ""
        if argv[0] == "dpkg-deb":
            name = os.path.basename(argv[2]).split("_")[0]
            return 0, "Package: %s\nVersion: 1.0-1\n" % name, ""
        if argv[0] == "apt-get":
            assert environ_update["DEBIAN_FRONTEND"] == "noninteractive"
            if "install" in argv:
                self.installed = True
                with open(os.path.join(self.root, "etc/init.d/docker"), "w", encoding="utf-8") as handle:
                    handle.write("#!/bin/sh\n")
            return 0, "", ""
        if argv[0].endswith("/etc/init.d/docker"):
            return (2, "", "ulimit: error setting limit (Operation not permitted)") if self.init_fails else (0, "", "")
        if argv[0] == "start-stop-daemon":
            self.running = True
            return 0, "", ""
        raise AssertionError("unexpected command %r" % argv)


def installer(host):
    return ri.RuntimeInstaller(host.run, host.which, lambda msg: None, sleep=lambda s: None, root=host.root)


def apt_calls(host):
    return [c for c in host.calls if c[0] == "apt-get"]


def test_apt_install_uses_only_the_configured_source_and_writes_evidence(tmp_path):
    host = FakeHost(str(tmp_path))
    req = rq.parse_request(params(evidence_path="/var/lib/stella/runtime-install.json"))
    result = installer(host).execute(req)
    assert result["changed"] is True
    update, install = apt_calls(host)
    for call in (update, install):
        assert "Dir::Etc::SourceList=/etc/apt/sources.list.d/stella-runtime.list" in call
        assert "Dir::Etc::SourceParts=-" in call
    assert update[-1] == "update" and install[-3:] == ["docker.io", "docker-cli", "docker-compose-plugin"]
    assert "--no-install-recommends" in install
    doc = result["evidence"]["runtimeInstall"]
    assert doc["status"] == "installed" and doc["engineVersion"] == "26.1.5+dfsg1" and doc["composeVersion"] == "2.40.3"
    assert doc["engineStart"]["method"] == "daemon"
    assert [a["method"] for a in doc["engineStart"]["attempts"]] == ["init-script", "daemon"]
    assert set(doc["packageChanges"]) == {"docker.io", "docker-cli", "docker-compose-plugin"}
    evidence = tmp_path / "var/lib/stella/runtime-install.json"
    assert json.loads(evidence.read_text()) == doc
    assert not [p.name for p in evidence.parent.iterdir() if p.name.startswith(".stella-tmp-")]
    auth = tmp_path / "etc/apt/auth.conf.d/stella-runtime.conf"
    assert oct(auth.stat().st_mode & 0o777) == "0o600" and DECODED in auth.read_text()
    for text in (
        json.dumps(result),
        evidence.read_text(),
        (tmp_path / "etc/apt/sources.list.d/stella-runtime.list").read_text(),
    ):
        assert DECODED not in text and PASSWORD not in text


def test_satisfied_host_is_left_alone(tmp_path):
    host = FakeHost(str(tmp_path), installed=True, running=True)
    result = installer(host).execute(rq.parse_request(params()))
    assert result["changed"] is False and result["evidence"]["evidencePath"] is None
    assert result["evidence"]["runtimeInstall"]["status"] == "satisfied"
    assert not apt_calls(host) and not (tmp_path / "etc/apt/sources.list.d").exists()
    assert not (tmp_path / "var/lib/stella").exists()


def test_check_mode_reports_and_changes_nothing(tmp_path):
    host = FakeHost(str(tmp_path))
    result = installer(host).execute(rq.parse_request(params()), check_mode=True)
    assert result["changed"] is True and result["evidence"]["runtimeInstall"]["status"] == "planned"
    assert result["evidence"]["runtimeInstall"]["plan"]["packages"] == [
        "docker.io",
        "docker-cli",
        "docker-compose-plugin",
    ]
    assert not apt_calls(host) and not (tmp_path / "etc/apt").exists() and not (tmp_path / "var").exists()


def make_bundle(tmp_path, names=("docker.io_1_amd64.deb", "runc_1_amd64.deb")):
    bundle = tmp_path / "var/lib/stella/runtime-bundle"
    bundle.mkdir(parents=True)
    for name in names:
        (bundle / name).write_bytes(name.encode())
    return bundle


def test_bundle_installs_its_files_with_no_repository(tmp_path):
    import hashlib

    make_bundle(tmp_path)
    host = FakeHost(str(tmp_path))
    sums = {"runc_1_amd64.deb": hashlib.sha256(b"runc_1_amd64.deb").hexdigest()}
    req = rq.parse_request(params(mode="offline", source_type="bundle", bundle_checksums=sums))
    doc = installer(host).execute(req)["evidence"]["runtimeInstall"]
    (install,) = apt_calls(host)
    assert "Dir::Etc::SourceList=/dev/null" in install and "Dir::Etc::SourceParts=-" in install
    assert install[-2:] == [
        "/var/lib/stella/runtime-bundle/docker.io_1_amd64.deb",
        "/var/lib/stella/runtime-bundle/runc_1_amd64.deb",
    ]
    assert [(f["name"], f["package"]) for f in doc["source"]["files"]] == [
        ("docker.io_1_amd64.deb", "docker.io"),
        ("runc_1_amd64.deb", "runc"),
    ]
    assert doc["source"]["files"][1]["sha256"] == sums["runc_1_amd64.deb"]
    assert doc["source"]["type"] == "bundle" and doc["mode"] == "offline"


def test_bundle_with_another_digest_is_refused_before_apt(tmp_path):
    make_bundle(tmp_path)
    host = FakeHost(str(tmp_path))
    req = rq.parse_request(params(source_type="bundle", bundle_checksums={"runc_1_amd64.deb": "0" * 64}))
    with pytest.raises(StellaError) as info:
        installer(host).execute(req)
    assert info.value.code == "runtime_install_source_invalid" and not apt_calls(host)


def test_missing_bundle_directory(tmp_path):
    host = FakeHost(str(tmp_path))
    with pytest.raises(StellaError) as info:
        installer(host).execute(rq.parse_request(params(source_type="bundle")))
    assert info.value.code == "runtime_install_source_missing" and not apt_calls(host)


def test_an_engine_that_never_answers_is_a_failure_with_evidence(tmp_path):
    host = FakeHost(str(tmp_path))
    host.run_original = host.run

    def never_start(argv, environ_update=None):
        if "start-stop-daemon" in argv:
            host.calls.append(list(argv))
            return 1, "", "start-stop-daemon: unable to start"
        return host.run_original(argv, environ_update)

    inst = ri.RuntimeInstaller(never_start, host.which, lambda m: None, sleep=lambda s: None, root=host.root)
    with pytest.raises(StellaError) as info:
        inst.execute(rq.parse_request(params()))
    assert info.value.code == "runtime_install_failed"
    doc = info.value.evidence["runtimeInstall"]
    assert doc["status"] == "failed" and doc["failure"]["code"] == "runtime_install_failed"
    assert info.value.evidence["changed"] is True
    assert json.loads((tmp_path / "var/lib/stella/runtime-install.json").read_text())["status"] == "failed"


def test_unverified_when_the_running_engine_is_older_than_the_gate():
    with pytest.raises(StellaError) as info:
        ri.RuntimeInstaller.verify(
            {"min_engine_version": "24.0.0", "min_compose_version": "2.20.0"},
            {"server": "20.10.24", "compose": None, "composeError": "no plugin"},
        )
    assert info.value.code == "runtime_install_unverified"
    assert "20.10.24 is older than 24.0.0" in info.value.reason and "docker compose version" in info.value.reason


def test_a_stale_pid_file_is_removed(tmp_path):
    pidfile = tmp_path / "var/run/docker.pid"
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text("999999999\n")
    warnings = []
    ri.RuntimeInstaller(None, None, warnings.append, root=str(tmp_path))._remove_stale_pidfile()
    assert not pidfile.exists() and "stale" in warnings[0]


def test_start_methods_follow_the_host():
    inst = ri.RuntimeInstaller(None, lambda n: "/usr/sbin/dockerd", None, root="/nonexistent")
    assert [method for method, _argv in inst.start_methods("auto")] == ["daemon"]
    assert inst.start_methods("systemd") == [("systemd", ["systemctl", "start", "docker.service"])]


# ------------------------------------------------------------------------------------------ the module


def test_the_module_masks_a_password_embedded_in_the_url(capsys, monkeypatch):
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "modules"))
    from modrun import run_module  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.modules import stella_runtime_install as module

    rc, result = run_module(module, {"source_type": "apt", "apt_url": URL, "apt_suite": "trixie"}, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "runtime_install_source_invalid"
    text = json.dumps(result)
    assert DECODED not in text and PASSWORD not in text
    assert result["invocation"]["module_args"]["apt_url"].startswith("http://stella-apt:********@")


def test_the_module_without_a_source(capsys, monkeypatch):
    import sys

    sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "plugins", "modules"))
    from modrun import run_module  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.modules import stella_runtime_install as module

    rc, result = run_module(module, {"mode": "production"}, capsys, monkeypatch)
    assert rc == 1 and result["code"] == "runtime_install_source_missing" and result["changed"] is False


# --------------------------------------------------------------------------------------------- the docs


def _doc():
    with open(os.path.join(ROOT, "docs", "runtime-install.md"), encoding="utf-8") as handle:
        return handle.read()


def test_docs_name_every_code():
    text = _doc()
    for code in rq.CODES:
        assert "`%s`" % code in text


def test_docs_example_playbook_matches_the_role_argument_spec():
    with open(os.path.join(ROOT, "roles", "runtime_install", "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    # the role's defaults against its argument specs: tests/unit/test_role_defaults.py
    blocks = re.findall(r"```yaml\n(.*?)```", _doc(), re.S)
    plays = [yaml.safe_load(b) for b in blocks if "stellaops.runtime.runtime_install" in b]
    assert plays, "docs/runtime-install.md has no example playbook using the role"
    checked = 0
    types = {"str": str, "bool": bool, "int": int, "list": list, "dict": dict}
    for play in plays:
        for entry in play:
            for role in entry.get("roles", []):
                assert role["role"] == "stellaops.runtime.runtime_install"
                for key, value in (role.get("vars") or {}).items():
                    assert key in spec, "%s is not an option of the role" % key
                    if not (isinstance(value, str) and "{{" in value):
                        assert isinstance(value, types[spec[key].get("type", "str")]), key
                    if "choices" in spec[key] and "{{" not in str(value):
                        assert value in spec[key]["choices"], key
                    checked += 1
    assert checked >= 5
