"""``stella keys generate`` (plugin_utils/command/keys.py): the files, their modes and cosign's format,
refusals without a passphrase or over existing files, and that no passphrase or private material is
ever printed."""

from __future__ import annotations

import io
import os
import stat

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import main as _main
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command.keys import keys
from ansible_collections.stellaops.runtime.plugins.plugin_utils.trust import keys as _keys

PLANTED = "planted-Passphrase-91d0a4"


def run(argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    rc = keys(argv, stdout=out, stderr=err, environ=environ if environ is not None else {})
    return rc, out.getvalue(), err.getvalue()


def passphrase_file(tmp_path, text=PLANTED + "\n"):
    path = tmp_path / "passphrase"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("algorithm", ["ecdsa-p256", "ed25519"])
def test_generate_writes_both_files(tmp_path, algorithm):
    prefix = str(tmp_path / "signing")
    rc, out, err = run(
        [
            "generate",
            "--output-prefix",
            prefix,
            "--passphrase-file",
            passphrase_file(tmp_path),
            "--algorithm",
            algorithm,
        ]
    )
    assert (rc, err) == (0, "")
    private, public = prefix + ".key", prefix + ".pub"
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(public).st_mode) == 0o644
    key = _keys.load_private_key(private, PLANTED.encode())
    assert key.algorithm == algorithm
    assert _keys.load_public_key(public) == key.public_key
    assert open(private, "rb").read().startswith(b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    assert private in out and public in out and key.public_key.fingerprint in out
    assert PLANTED not in out + err and "PRIVATE KEY" not in out


def test_default_prefix_is_cosigns_names_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, _err = run(["generate"], environ={"STELLA_SIGNING_PASSPHRASE": PLANTED})
    assert rc == 0
    assert sorted(os.listdir(tmp_path)) == ["cosign.key", "cosign.pub"]
    _keys.load_private_key(str(tmp_path / "cosign.key"), PLANTED.encode())
    assert PLANTED not in out


def test_refuses_to_overwrite_without_force(tmp_path):
    prefix = str(tmp_path / "k")
    pf = passphrase_file(tmp_path)
    assert run(["generate", "--output-prefix", prefix, "--passphrase-file", pf])[0] == 0
    before = open(prefix + ".key", "rb").read()
    rc, out, err = run(["generate", "--output-prefix", prefix, "--passphrase-file", pf])
    assert rc == 1 and out == ""
    assert err.startswith("stella keys: signing_key_invalid: %s.key exists" % prefix)
    assert open(prefix + ".key", "rb").read() == before
    # only the public key there: still refused, nothing written
    os.unlink(prefix + ".key")
    assert run(["generate", "--output-prefix", prefix, "--passphrase-file", pf])[0] == 1
    assert not os.path.exists(prefix + ".key")
    rc, _out, _err = run(["generate", "--output-prefix", prefix, "--passphrase-file", pf, "--force"])
    assert rc == 0 and open(prefix + ".key", "rb").read() != before
    assert stat.S_IMODE(os.stat(prefix + ".key").st_mode) == 0o600


def test_force_resets_a_loose_mode(tmp_path):
    prefix = str(tmp_path / "k")
    (tmp_path / "k.key").write_text("old")
    os.chmod(prefix + ".key", 0o666)
    rc, _out, _err = run(
        ["generate", "--output-prefix", prefix, "--passphrase-file", passphrase_file(tmp_path), "--force"]
    )
    assert rc == 0 and stat.S_IMODE(os.stat(prefix + ".key").st_mode) == 0o600


def test_no_passphrase_is_refused(tmp_path):
    prefix = str(tmp_path / "k")
    rc, out, err = run(["generate", "--output-prefix", prefix], environ={})
    assert rc == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("stella keys: signing_key_invalid: no passphrase to encrypt the private key")
    assert "; next: %s" % next_step("signing_key_invalid") in err
    assert not os.path.exists(prefix + ".key") and not os.path.exists(prefix + ".pub")


def test_empty_passphrase_file_is_refused(tmp_path):
    rc, _out, err = run(
        ["generate", "--output-prefix", str(tmp_path / "k"), "--passphrase-file", passphrase_file(tmp_path, "\n")]
    )
    assert rc == 1 and "the passphrase is empty" in err


def test_unreadable_passphrase_file(tmp_path):
    rc, _out, err = run(
        ["generate", "--output-prefix", str(tmp_path / "k"), "--passphrase-file", str(tmp_path / "none")]
    )
    assert rc == 1 and "cannot read the passphrase file" in err


def test_usage_errors_and_help(capsys):
    assert keys(["generate", "--algorithm", "rsa"]) == 2
    assert keys([]) == 2
    assert keys(["rotate"]) == 2
    assert keys(["-h"]) == 0
    help_text = capsys.readouterr().out
    assert "generate" in help_text and "cosign" in help_text
    assert keys(["generate", "-h"]) == 0
    generate_help = capsys.readouterr().out
    for option in ("--output-prefix", "--passphrase-file", "--algorithm", "--force", "STELLA_SIGNING_PASSPHRASE"):
        assert option in generate_help


def test_dispatched_by_stella(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STELLA_SIGNING_PASSPHRASE", PLANTED)
    rc = _main.main(["stella", "keys", "generate", "--output-prefix", str(tmp_path / "via-main")])
    captured = capsys.readouterr()
    assert rc == 0 and os.path.exists(str(tmp_path / "via-main.key"))
    assert PLANTED not in captured.out + captured.err
