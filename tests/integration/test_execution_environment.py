"""The execution environment definitions: ``ansible-builder create`` turns ``execution-environment.yml``
into a build context carrying the collection tarball ``ansible-galaxy collection build`` makes, and
ansible-builder's own introspection reads the collection's ``meta/execution-environment.yml`` (its Python
and system requirements) from the installed collection. The image build itself is ``make ee`` (its
outcome is in docs/execution-environment.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile

import yaml

import ansible_run as ar

BUILDER = os.path.join(ar.VENV_BIN, "ansible-builder")
GALAXY = os.path.join(ar.VENV_BIN, "ansible-galaxy")


def run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, **kw)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def collection_tarball():
    """What ``make ee`` puts where execution-environment.yml expects it."""
    dist = os.path.join(ar.ROOT, ".build", "dist")
    run([GALAXY, "collection", "build", "--force", "--output-path", dist, ar.ROOT])
    with open(os.path.join(ar.ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    built = os.path.join(dist, "stellaops-runtime-%s.tar.gz" % version)
    shutil.copyfile(built, os.path.join(dist, "stellaops-runtime.tar.gz"))
    return version


def test_ansible_builder_create_makes_a_context_with_the_collection_and_a_debian_base(tmp_path):
    version = collection_tarball()
    context = tmp_path / "context"
    run([BUILDER, "create", "-f", "execution-environment.yml", "-c", str(context)], cwd=ar.ROOT)

    dockerfile = (context / "Dockerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="stella-ee-base:bookworm"' in dockerfile
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in dockerfile and 'ARG PYCMD="/opt/ee-python/bin/python3"' in dockerfile
    assert [line.split()[-1] for line in dockerfile.splitlines() if line.startswith("FROM ")] == [
        "base",
        "galaxy",
        "builder",
        "final",
    ]
    refs = next(line for line in dockerfile.splitlines() if line.startswith("ARG ANSIBLE_INSTALL_REFS="))
    assert "ansible-core>=2.19" in refs and "ansible-runner" in refs

    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements == {"collections": [{"name": "collections/stellaops-runtime.tar.gz", "type": "file"}]}
    with tarfile.open(context / "_build" / "collections" / "stellaops-runtime.tar.gz") as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        members = set(tar.getnames())
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == ("stellaops", "runtime", version)
    assert {
        "meta/execution-environment.yml",
        "requirements.txt",
        "requirements/execution-environment.txt",
        "requirements/postgres.txt",
        "requirements/trust.txt",
        "bindep.txt",
    } <= members
    assert not any(name.startswith((".hypothesis", ".build", ".venv", ".lab")) for name in members)


def test_ansible_builder_introspection_reads_the_collection_requirements(tmp_path):
    collection_tarball()
    installed = tmp_path / "collections"
    run(
        [
            GALAXY,
            "collection",
            "install",
            "--force",
            os.path.join(ar.ROOT, ".build", "dist", "stellaops-runtime.tar.gz"),
            "-p",
            str(installed),
        ]
    )
    import ansible_builder  # pylint: disable=import-outside-toplevel

    introspect = os.path.join(os.path.dirname(ansible_builder.__file__), "_target_scripts", "introspect.py")
    found = yaml.safe_load(
        run([os.path.join(ar.VENV_BIN, "python"), introspect, "introspect", "--sanitize", str(installed)]).stdout
    )
    python = [line.split("#")[0].strip() for line in found["python"]]
    system = [line.split("#")[0].strip() for line in found["system"]]
    wanted = []
    for name in (
        "requirements.txt",
        "requirements/postgres.txt",
        "requirements/trust.txt",
    ):  # requirements/execution-environment.txt
        with open(os.path.join(ar.ROOT, name), encoding="utf-8") as handle:
            wanted += [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    assert python == wanted
    assert "openssh-client [platform:dpkg]" in system
