"""An image ``pull`` loaded from Compose's local daemon (the ``local`` verdict, a build-only image) is
what ``up`` deploys: pinned by the image id the bookkeeping recorded, which the engine must still hold,
never looked up in a registry; the plan, the target's checks and the resolution evidence say where the
pin came from (docs/provider.md#local-images, docs/evidence.md)."""

from __future__ import annotations

import io
import json
import signal

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import project as _project
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import plan_job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import service as _service
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import inputs as _inputs
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import (
    LOCAL_IMAGE_KEY,
    unresolved_references,
)

IMAGE = "shop-web"  # a build-only image: <project>-<service>, in no registry
IMAGE_ID = "sha256:" + "c" * 64
OTHER_ID = "sha256:" + "d" * 64


def books(state, entry, project="shop", service="web"):
    directory = state / project / service
    directory.mkdir(parents=True)
    (directory / "images.json").write_text(json.dumps({IMAGE: entry}))


def run_up(state, monkeypatch, held):
    """``stella compose up`` of IMAGE with an engine that holds ``held`` (``{ref: id}``); ``(rc, lines,
    the release run_playbook received or None)``."""
    seen = {}
    monkeypatch.setattr(cli, "daemon_image_id", lambda ref, docker="docker": held.get(ref))

    def fake_run(playbooks, extravars, channel, cancelled):
        seen["release"] = extravars["stella_release"]
        return 2, "failed", "stop here", {}, "planned"

    monkeypatch.setattr(cli, "run_playbook", fake_run)
    out = io.BytesIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = cli.compose(
            [
                "compose",
                "--project-name=shop",
                "up",
                "--image=" + IMAGE,
                "--ports=18080:8080",
                "--state_directory=%s" % state,
                "web",
            ],
            io.BytesIO(),
            out,
            {},
        )
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return rc, [json.loads(line) for line in out.getvalue().splitlines()], seen.get("release")


def test_up_pins_the_image_pull_loaded_to_its_recorded_id(tmp_path, monkeypatch):
    books(tmp_path, {"source": "local", "digest": IMAGE_ID, "imageId": IMAGE_ID})
    rc, lines, release = run_up(tmp_path, monkeypatch, {IMAGE_ID: IMAGE_ID, IMAGE: IMAGE_ID})
    assert rc == 1 and lines[-1]["message"].startswith("planned:")  # the job ran (here: a fake one)
    config = release["components"][0]["config"]
    assert release["components"][0]["image"] == IMAGE  # the reference stays the one Compose named
    assert (config[LOCAL_IMAGE_KEY], config["compose.skipPull"]) == (IMAGE_ID, True)
    assert "deploying shop-web as the image pull loaded, %s (job " % IMAGE_ID in [m["message"] for m in lines][0]


def test_a_tag_that_moved_since_pull_is_said_and_the_loaded_image_deployed(tmp_path, monkeypatch):
    books(tmp_path, {"source": "local", "digest": IMAGE_ID, "imageId": IMAGE_ID})
    _rc, lines, release = run_up(tmp_path, monkeypatch, {IMAGE_ID: IMAGE_ID, IMAGE: OTHER_ID})
    assert release["components"][0]["config"][LOCAL_IMAGE_KEY] == IMAGE_ID
    assert "%s now names %s in this engine, not the image pull loaded" % (IMAGE, OTHER_ID) in lines[0]["message"]


@pytest.mark.parametrize(
    "entry,held",
    [
        ({"source": "local", "digest": IMAGE_ID, "imageId": IMAGE_ID}, {}),
        ({"source": "local", "digest": IMAGE_ID}, {IMAGE: OTHER_ID}),  # only the digest Compose announced, now gone
        ({"source": "local"}, {IMAGE: IMAGE_ID}),  # nothing to pin
    ],
    ids=["gone", "announced-only", "no-id"],
)
def test_a_loaded_image_the_engine_no_longer_holds_fails_before_anything_runs(tmp_path, monkeypatch, entry, held):
    books(tmp_path, entry)
    rc, lines, release = run_up(tmp_path, monkeypatch, held)
    assert rc == 1 and release is None and [m["type"] for m in lines] == ["error"]
    message = lines[0]["message"]
    assert message.startswith("local_image_missing: shop-web was loaded by pull as ")
    assert "run `docker compose pull` (or `docker compose up --build`" in message and "\n" not in message


def test_a_registry_verdict_keeps_the_registry_lookup(tmp_path, monkeypatch):
    books(tmp_path, {"source": "registry", "digest": IMAGE_ID})
    _rc, _lines, release = run_up(tmp_path, monkeypatch, {IMAGE: IMAGE_ID, IMAGE_ID: IMAGE_ID})
    assert LOCAL_IMAGE_KEY not in release["components"][0]["config"]
    assert "compose.skipPull" not in release["components"][0]["config"]


def local_release():
    parsed = _arguments.parse_argv(
        ["compose", "--project-name=shop", "up", "--image=" + IMAGE, "--ports=18080:8080", "web"]
    )
    release = _service.release_from(parsed)
    release["components"][0]["config"].update({LOCAL_IMAGE_KEY: IMAGE_ID, "compose.skipPull": True})
    return release


def test_planning_pins_the_image_id_and_asks_no_registry():
    release = local_release()
    assert unresolved_references(release) == []
    resolved, resolution = _inputs.resolve_digests(release, _inputs.load_credentials({}), [], {}, True, 1.0)
    assert resolved == {}
    assert resolution == {
        IMAGE: {
            "reference": IMAGE,
            "image": IMAGE_ID,
            "digest": IMAGE_ID,
            "imageId": IMAGE_ID,
            "resolved": False,
            "source": "local",
        }
    }
    planned = plan_job(release, [("localhost", {"ansible_connection": "local"})], resolved, "job-1")
    plan = planned["plans"]["localhost"]
    assert plan["components"] == [{"name": "web", "reference": IMAGE, "image": IMAGE_ID, "digest": IMAGE_ID}]
    lock = planned["files"]["localhost"]["compose.stella.lock.yml"].decode()
    assert _project.read_lock_services(lock.encode())[0] == {"web": IMAGE_ID}
    assert plan["payloads"]["compose.up"]["PullImages"] is False
    assert "ImageReference" not in plan["payloads"]["compose.preflight"]  # no registry to reach for it


def test_a_local_id_that_is_not_an_image_id_is_refused():
    release = local_release()
    release["components"][0]["config"][LOCAL_IMAGE_KEY] = "shop-web:latest"
    with pytest.raises(StellaError) as err:
        unresolved_references(release)
    assert err.value.code == "release_invalid" and LOCAL_IMAGE_KEY in err.value.reason


def test_the_target_accepts_an_image_id_pin_and_checks_the_id():
    _project.check_pinned({"web": IMAGE_ID}, "write_artifacts")
    with pytest.raises(StellaError) as err:
        _project.check_pinned({"web": IMAGE}, "write_artifacts")
    assert err.value.code == "image_not_pinned"
    held = {"id": IMAGE_ID, "repoDigests": []}
    assert _project.present_image_ids({"web": IMAGE_ID}, {IMAGE_ID: held}) == {"web": IMAGE_ID}
    assert _project.present_image_ids({"web": IMAGE_ID}, {IMAGE_ID: dict(held, id=OTHER_ID)}) is None
    containers = [
        {
            "service": "web",
            "id": "c1",
            "name": "p-web-1",
            "state": "running",
            "running": True,
            "health": "none",
            "imageId": IMAGE_ID,
            "labels": {},
        }
    ]
    target = {"id": "t", "name": "t", "type": "ComposeHost", "endpoint": "local", "executionMode": "local"}
    services, problems = _project.verify_services(
        {"web": IMAGE_ID}, {"web": {}}, containers, {"web": IMAGE_ID}, target, "sha256:" + "e" * 64
    )
    assert services[0]["imageDigest"] == IMAGE_ID
    assert not [code for code, _reason in problems if code == "digest_mismatch"]
    _services, problems = _project.verify_services(
        {"web": IMAGE_ID},
        {"web": {}},
        [dict(containers[0], imageId=OTHER_ID)],
        {"web": IMAGE_ID},
        target,
        "sha256:" + "e" * 64,
    )
    assert "digest_mismatch" in [code for code, _reason in problems]
