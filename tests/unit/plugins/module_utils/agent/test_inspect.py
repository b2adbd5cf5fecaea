"""agent/inspect.py (module stella_inspect): what a target runs for its projects, parsed from the Docker CLI's
answers (a fake ``run_command``, parsing only) and the project directories' files; read-only, bounded."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import inspect as _inspect
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "c" * 64
IMAGE_ID = "sha256:" + "f" * 64


def container(ident, name, project, component, running=True, image_id=IMAGE_ID, workdir=None):
    labels = {
        "stella.project": project,
        "stella.component": component,
        "stella.image.digest": DIGEST,
        "stella.target.name": "web-1",
        "com.docker.compose.service": component,
        "org.opencontainers.image.title": "not stella's",
    }
    if workdir:
        labels["com.docker.compose.project.working_dir"] = workdir
    return {
        "Id": ident * 64,
        "Name": "/" + name,
        "Image": image_id,
        "State": {"Status": "running" if running else "exited", "Running": running},
        "Config": {"Image": "reg/app@" + DIGEST, "Labels": labels},
    }


class FakeDocker:
    """Answers ``docker ps``, ``docker inspect`` and ``docker image inspect`` from the containers given;
    every argv it was called with is kept (each must be a list)."""

    def __init__(self, containers, images=None):
        self.containers = containers
        self.images = (
            images if images is not None else {IMAGE_ID: {"Id": IMAGE_ID, "RepoDigests": ["reg/app@" + DIGEST]}}
        )
        self.calls = []

    def __call__(self, argv, environ_update=None):
        assert isinstance(argv, list)
        self.calls.append(argv)
        args = argv[argv.index("docker") + 1 :]
        if args[0] == "ps":
            return 0, "".join(c["Id"] + "\n" for c in self.containers), ""
        if args[:2] == ["inspect", "--type"]:
            wanted = args[3:]
            return 0, json.dumps([c for c in self.containers if c["Id"] in wanted]), ""
        if args[:2] == ["image", "inspect"]:
            found = [self.images[i] for i in args[2:] if i in self.images]
            if len(found) != len(args[2:]):
                return 1, json.dumps(found), "Error: No such image: x"
            return 0, json.dumps(found), ""
        raise AssertionError("unexpected docker call %s" % argv)


def inspect(fake, work, projects=None):
    cli = DockerCli(fake, which=lambda name: "/usr/bin/" + name)
    request = _inspect.parse_request({"work_directory": str(work), "projects": projects})
    return _inspect.Inspect(cli).run(request)


def project_dir(work, name, files=("compose.stella.lock.yml", "stella.version.json", "apply-manifest.json")):
    directory = work / name
    directory.mkdir(parents=True)
    for file_name in files:
        (directory / file_name).write_bytes(("%s of %s\n" % (file_name, name)).encode())
    return directory


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_every_project_with_a_sticker_or_a_labelled_container_is_reported(tmp_path):
    shop = project_dir(tmp_path, "shop")
    project_dir(tmp_path, "old", files=("compose.stella.lock.yml",))  # no sticker: not a deployed project
    fake = FakeDocker(
        [
            container("1", "shop-web-1", "shop", "web"),
            container("2", "shop-db-1", "shop", "db", running=False),
            container("3", "cart-api-1", "cart", "api"),
        ]
    )
    result = inspect(fake, tmp_path)
    assert result["changed"] is False and result["warnings"] == []
    found = result["evidence"]
    assert sorted(found["projects"]) == ["cart", "shop"] and found["truncated"] is False
    view = found["projects"]["shop"]
    assert view["projectDirectory"] == str(shop) and view["directoryExists"] is True
    assert view["files"]["stella.version.json"] == sha((shop / "stella.version.json").read_bytes())
    assert view["files"]["apply-manifest.json"] == sha((shop / "apply-manifest.json").read_bytes())
    db, web = view["containers"]
    assert (db["component"], db["running"], db["state"]) == ("db", False, "exited")
    assert web == {
        "id": "111111111111",
        "name": "shop-web-1",
        "component": "web",
        "service": "web",
        "state": "running",
        "running": True,
        "image": "reg/app@" + DIGEST,
        "imageId": IMAGE_ID,
        "imageDigest": DIGEST,
        "repoDigests": ["reg/app@" + DIGEST],
        "retained": False,
        "composeDirectory": None,
        "labels": {
            "stella.component": "web",
            "stella.image.digest": DIGEST,
            "stella.project": "shop",
            "stella.target.name": "web-1",
        },
    }
    cart = found["projects"]["cart"]
    assert cart["directoryExists"] is False and set(cart["files"].values()) == {None}
    # one docker call per need: ps, inspect, image inspect (the one image, asked once)
    verbs = [call[call.index("docker") + 1 : call.index("docker") + 3] for call in fake.calls]
    assert verbs == [["ps", "--all"], ["inspect", "--type"], ["image", "inspect"]]
    assert fake.calls[0][-2:] == ["--filter", "label=stella.project"]


def test_named_projects_only_and_a_gone_project_is_still_reported(tmp_path):
    project_dir(tmp_path, "shop")
    fake = FakeDocker([container("1", "shop-web-1", "shop", "web"), container("3", "cart-api-1", "cart", "api")])
    found = inspect(fake, tmp_path, projects=["gone", "shop"])["evidence"]["projects"]
    assert sorted(found) == ["gone", "shop"]
    assert found["gone"]["containers"] == [] and found["gone"]["directoryExists"] is False


def test_an_image_that_cannot_be_inspected_and_a_retained_container(tmp_path):
    fake = FakeDocker(
        [
            container("1", "shop-web", "shop", "web", image_id=OTHER),
            container("2", "shop-web-stella-previous", "shop", "web", running=False),
        ]
    )
    views = inspect(fake, tmp_path, projects=["shop"])["evidence"]["projects"]["shop"]["containers"]
    by_name = {v["name"]: v for v in views}
    assert by_name["shop-web"]["repoDigests"] is None  # its image is gone: the label is all there is
    assert by_name["shop-web-stella-previous"]["retained"] is True


def test_a_compose_project_directory_recorded_on_its_containers_wins(tmp_path):
    elsewhere = project_dir(tmp_path / "srv", "shop")
    fake = FakeDocker([container("1", "shop-web-1", "shop", "web", workdir=str(elsewhere))])
    view = inspect(fake, tmp_path / "work")["evidence"]["projects"]["shop"]
    assert view["projectDirectory"] == str(elsewhere) and view["files"]["stella.version.json"] is not None
    fake = FakeDocker([container("1", "shop-web-1", "shop", "web", workdir="/etc/../root")])
    assert inspect(fake, tmp_path / "work")["evidence"]["projects"]["shop"]["projectDirectory"] == str(
        tmp_path / "work" / "shop"
    )


def test_a_symlinked_file_is_not_followed(tmp_path):
    shop = project_dir(tmp_path, "shop", files=("stella.version.json",))
    os.symlink("/etc/hostname", shop / "compose.stella.lock.yml")
    view = inspect(FakeDocker([]), tmp_path)["evidence"]["projects"]["shop"]
    assert view["files"]["compose.stella.lock.yml"] is None and view["files"]["stella.version.json"]


def test_the_answer_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(_inspect, "MAX_CONTAINERS", 2)
    fake = FakeDocker([container(str(i), "c%d" % i, "p%d" % i, "web") for i in range(1, 5)])
    found = inspect(fake, tmp_path)["evidence"]
    assert found["truncated"] is True and sum(len(p["containers"]) for p in found["projects"].values()) == 2


def test_bad_options_are_refused_before_any_call(tmp_path):
    with pytest.raises(StellaError) as caught:
        _inspect.parse_request({"work_directory": "relative/dir", "projects": None})
    assert caught.value.code == "invalid_payload"
    with pytest.raises(StellaError):
        _inspect.parse_request({"work_directory": str(tmp_path), "projects": ["../etc"]})


def test_nothing_is_written(tmp_path):
    shop = project_dir(tmp_path, "shop")
    before = {p: p.read_bytes() for p in shop.iterdir()}
    stamps = {p: p.stat().st_mtime_ns for p in shop.iterdir()}
    inspect(FakeDocker([container("1", "shop-web-1", "shop", "web")]), tmp_path)
    assert {p: p.read_bytes() for p in shop.iterdir()} == before
    assert {p: p.stat().st_mtime_ns for p in shop.iterdir()} == stamps
