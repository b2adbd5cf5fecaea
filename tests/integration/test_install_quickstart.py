"""A new user's install and the README's quickstart, in a fresh Debian 12 container from the lab's target
image that gets only the built collection tarball and the pip package (its dependencies from the package
registry): ``ansible-galaxy collection install``, ``pip install``, then the README's quickstart as written
(its inventory with two lab targets for its three hosts, its release with the lab's images), a second
version, ``stella list``, ``stella show``, the rollback and ``stella report``."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import uuid

import pytest
import yaml

import ansible_run as ar
import labkit

BASE_IMAGE = "stella-target:bookworm"
CONTROLLER_IMAGE = "stella-quickstart-controller:bookworm"
VENV = "/opt/stella"
JOB_RE = re.compile(r"\bjob-\d{8}T\d{6}-[0-9a-f]{8}\b")


def run(argv, timeout=600, **kwargs):
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL, **kwargs
    )
    assert proc.returncode == 0, "%s failed (rc=%d):\n%s\n%s" % (
        argv[:4],
        proc.returncode,
        proc.stdout[-3000:],
        proc.stderr[-3000:],
    )
    return proc.stdout


def readme_blocks():
    """The README's fenced blocks: ``[(language, text)]`` in order."""
    with open(os.path.join(ar.ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)


def console_commands(text):
    """The commands of a console block: continuation lines joined, comments dropped."""
    joined = text.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def readme_quickstart():
    blocks = readme_blocks()
    install = next(
        console_commands(body)
        for lang, body in blocks
        if lang == "console" and "ansible-galaxy collection install stellaops.runtime" in body
    )
    inventory = next(yaml.safe_load(body) for lang, body in blocks if lang == "yaml" and "stella_targets:" in body)
    release = next(yaml.safe_load(body) for lang, body in blocks if lang == "yaml" and "stella_release:" in body)
    commands = [cmd for lang, body in blocks if lang == "console" for cmd in console_commands(body)]
    job = next(cmd for cmd in commands if "stellaops.runtime.job " in cmd)
    show = [cmd for cmd in commands if cmd.startswith("stella ") and cmd != "stella --version"]
    rollback = next(cmd for cmd in commands if "stellaops.runtime.rollback" in cmd)
    return install, inventory, release, job, show, rollback


def bridge_gateway():
    return run(["docker", "network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}"]).strip()


def controller_image(tmp_path):
    """The lab's Debian 12 target image with python3-venv and this machine's CA bundle (the package
    registry is reached through it); built once, then Docker's cache answers."""
    context = tmp_path / "controller-image"
    context.mkdir()
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", context / "ca-certificates.crt")
    (context / "Dockerfile").write_text(
        "FROM %s\n"
        "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv"
        " && rm -rf /var/lib/apt/lists/*\n" % BASE_IMAGE
    )
    run(["docker", "build", "-q", "-t", CONTROLLER_IMAGE, str(context)], timeout=900)
    return CONTROLLER_IMAGE


def artifacts(tmp_path):
    """The collection tarball (``ansible-galaxy collection build``) and the pip package's wheel."""
    dist = tmp_path / "dist"
    run([os.path.join(ar.VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(dist), ar.ROOT])
    source = tmp_path / "python-src"
    shutil.copytree(os.path.join(ar.ROOT, "python"), source)
    run(
        [
            os.path.join(ar.VENV_BIN, "python"),
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ]
    )
    [tarball] = glob.glob(str(dist / "stellaops-runtime-*.tar.gz"))
    [wheel] = glob.glob(str(dist / "stellaops_runtime-*.whl"))
    return dist, os.path.basename(tarball), os.path.basename(wheel)


class Controller:
    """The fresh container, and commands run in it as its root user would type them."""

    def __init__(self, name):
        self.name = name

    def sh(self, command, timeout=900, check=True):
        argv = [
            "docker",
            "exec",
            "-w",
            "/root/quickstart",
            "-e",
            "HOME=/root",
            "-e",
            "ANSIBLE_HOST_KEY_CHECKING=False",
            "-e",
            "ANSIBLE_NOCOLOR=1",
            "-e",
            "PATH=%s/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" % VENV,
            self.name,
            "bash",
            "-c",
            command,
        ]
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
        if check:
            assert proc.returncode == 0, "%s (rc=%d):\n%s\n%s" % (
                command,
                proc.returncode,
                proc.stdout[-5000:],
                proc.stderr[-3000:],
            )
        return proc

    def write(self, path, text):
        proc = subprocess.run(
            ["docker", "exec", "-i", self.name, "sh", "-c", "cat > %s" % shlex.quote(path)],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr


@pytest.fixture
def controller(tmp_path, lab):
    image = controller_image(tmp_path)
    name = "stella-quickstart-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    dist, tarball, wheel = artifacts(tmp_path)
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(lab["ssh_key"], keys / "id_ed25519")
    os.chmod(keys / "id_ed25519", 0o600)
    run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--add-host",
            "registry.lab:%s" % bridge_gateway(),
            "-v",
            "%s:/dist:ro" % dist,
            "-v",
            "%s:/keys:ro" % keys,
            "--label",
            "stella.lab=quickstart",
            "-w",
            "/root/quickstart",
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        ]
    )
    box = Controller(name)
    box.tarball, box.wheel = tarball, wheel
    try:
        yield box
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def target_images(target):
    """The image digest of each running container of the quickstart's project on ``target`` (from the lock's
    digest-pinned reference the container was created from)."""
    command = "docker ps -q --filter name=shop | xargs -r docker inspect --format '{{.Config.Image}}'"
    out = subprocess.run(
        labkit.ssh_argv(target, command), capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return sorted(ref.rsplit("@", 1)[-1] for ref in out.split())


def test_install_from_the_tarball_and_pip_then_the_readme_quickstart(controller, target_factory, lab):
    install, inventory, release, job, show, rollback = readme_quickstart()
    # Install as the README says, from the built artifacts (this machine reaches no Galaxy); in a virtual
    # environment, as Debian's Python wants (docs/install.md).
    controller.sh("python3 -m venv %s" % VENV)
    for command in install:
        command = command.replace(
            "collection install stellaops.runtime", "collection install /dist/%s" % controller.tarball
        )
        command = command.replace("pip install stellaops-runtime", "pip install /dist/%s" % controller.wheel)
        assert "/dist/" in command or command == "stella --version", command
        out = controller.sh(command).stdout
    with open(os.path.join(ar.ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    assert out.strip() == "stella (stellaops.runtime) %s" % version
    assert "stellaops.runtime" in controller.sh("ansible-galaxy collection list stellaops.runtime").stdout

    # The README's inventory with two lab targets (Engine 26.1) for its hosts, its vars kept.
    targets = [target_factory("qs%d" % i, image="trixie") for i in (1, 2)]
    group = inventory["stella_targets"]
    names = list(group["hosts"])[:2]
    assert group["vars"] == {"ansible_user": "root"}
    group["hosts"] = {name: {"ansible_host": t["address"]} for name, t in zip(names, targets)}
    group["vars"].update(
        ansible_ssh_private_key_file="/keys/id_ed25519",
        ansible_ssh_common_args=" ".join(labkit.SSH_OPTIONS),
        ansible_python_interpreter="/usr/bin/python3",
    )
    controller.write("/root/quickstart/inventory.yml", yaml.safe_dump(inventory, sort_keys=False))
    # The README's release with the lab's image (the same application on every host).
    component = release["stella_release"]["components"][0]
    assert component["image"].endswith(":1.0.0") and component["ports"] == ["8080:8080"]
    component["image"] = lab["images"]["app_v1"]["ref"]
    controller.write("/root/quickstart/release.yml", yaml.safe_dump(release, sort_keys=False))
    lab_registry = " -e '%s'" % json.dumps({"stella_insecure_registries": [lab["registries"]["shared"]["address"]]})

    first = controller.sh(job + lab_registry)
    assert "Succeeded" in first.stdout and "failed=0" in first.stdout, first.stdout[-3000:]
    # A new version, as the README says: version and image tag 1.0.1 (the lab's v2 image).
    release["stella_release"]["release"]["version"] = "1.0.1"
    component["image"] = lab["images"]["app_v2"]["ref"]
    controller.write("/root/quickstart/release.yml", yaml.safe_dump(release, sort_keys=False))
    second = controller.sh(job + lab_registry)
    assert "failed=0" in second.stdout, second.stdout[-3000:]
    for target in targets:
        assert target_images(target) == [lab["images"]["app_v2"]["digest"]]

    listed = controller.sh("stella list").stdout
    jobs = JOB_RE.findall(listed)
    assert len(jobs) == 2 and listed.count("Succeeded") == 2, listed
    newest = jobs[0]
    shown = controller.sh("stella show %s" % newest).stdout
    assert "job %s  Succeeded" % newest in shown and all(name in shown for name in names), shown
    assert [cmd.split()[1] for cmd in show] == ["list", "show", "report"]

    back = controller.sh(rollback.replace("JOB", newest))
    assert "failed=0" in back.stdout, back.stdout[-3000:]
    for target in targets:
        assert target_images(target) == [lab["images"]["app_v1"]["digest"]]
    assert "RolledBack" in controller.sh("stella show %s" % newest).stdout

    report_cmd = next(cmd for cmd in show if cmd.startswith("stella report"))
    reported = controller.sh(report_cmd.replace("JOB", newest)).stdout
    match = re.match(r"^report: (\S+)$", reported.strip())
    assert match, reported
    page = controller.sh("cat %s" % shlex.quote(match.group(1))).stdout
    assert page.startswith("<!DOCTYPE html>") and newest in page and names[0] in page
