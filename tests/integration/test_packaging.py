"""The collection builds into a tarball that installs and documents itself."""

from __future__ import annotations

import os
import subprocess

from ansible_run import ROOT, VENV_BIN

MODULES = ("stella_preflight", "stella_plan", "stella_compose_deploy", "stella_rollback", "stella_probe")


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL, **kwargs)


def test_build_install_and_ansible_doc_from_the_tarball(tmp_path):
    dist = tmp_path / "dist"
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT])
    tarballs = list(dist.glob("stellaops-runtime-*.tar.gz"))
    assert len(tarballs) == 1
    installed = tmp_path / "collections"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed))
    run(
        [
            os.path.join(VENV_BIN, "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "--force",
            "-p",
            str(installed),
            str(tarballs[0]),
        ],
        env=env,
    )
    assert (installed / "ansible_collections" / "stellaops" / "runtime" / "galaxy.yml").exists() is False
    assert (installed / "ansible_collections" / "stellaops" / "runtime" / "MANIFEST.json").exists()
    for name in MODULES:
        out = run([os.path.join(VENV_BIN, "ansible-doc"), "stellaops.runtime." + name], env=env).stdout
        assert "stellaops.runtime.%s" % name in out and "EXAMPLES" in out, (name, out[-500:])
    roles = run([os.path.join(VENV_BIN, "ansible-doc"), "-t", "role", "stellaops.runtime.preflight"], env=env).stdout
    assert "preflight_image_reference" in roles
    # nothing from the developer tree leaks into the artifact
    listing = subprocess.run(["tar", "-tzf", str(tarballs[0])], capture_output=True, text=True, check=True).stdout
    assert ".venv/" not in listing and ".lab/" not in listing and "lab/lab.sh" not in listing
