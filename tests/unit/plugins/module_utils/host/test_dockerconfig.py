"""host/dockerconfig.py: the registry credentials the controller lends for one pull, written to a private,
temporary Docker config that only the pull commands read (``DOCKER_CONFIG``) and that is gone afterwards,
however the pull ended; evidence names the source, never the value (planted secrets)."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

import scripted as sc

from ansible_collections.stellaops.runtime.plugins.module_utils.compose import apply as ca
from ansible_collections.stellaops.runtime.plugins.module_utils.compose import request as creq
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import pulls
from ansible_collections.stellaops.runtime.plugins.module_utils.host import dockerconfig as dc

SECRET = "lent-password-Planted"
TOKEN = "lent-token-Planted"
LENT = {
    "127.0.0.1:5002": {"username": "stella", "password": SECRET, "source": "docker-config:credHelpers:stella-lab"},
    "ghcr.example": {"identitytoken": TOKEN, "source": "registry_credentials"},
    "registry.lab:5001": None,
}


@pytest.fixture
def base(tmp_path, monkeypatch):
    """The private location the lent configs go under, in tmp_path."""
    location = str(tmp_path / "private")
    monkeypatch.setattr(dc, "private_base", lambda uid=None: location)
    return location


def test_the_config_holds_auths_only_in_docker_s_form():
    document = dc.config_document(dc.lent_only(dc.parse_lent(LENT)))
    assert document == {
        "auths": {
            "127.0.0.1:5002": {"auth": base64.b64encode(("stella:" + SECRET).encode()).decode()},
            "ghcr.example": {"identitytoken": TOKEN},
        }
    }
    hub = dc.config_document({"docker.io": {"username": "u", "password": "p", "source": "x"}})
    assert list(hub["auths"]) == ["https://index.docker.io/v1/"]


def test_evidence_names_registry_and_source_never_the_value():
    evidence = dc.lent_evidence(dc.parse_lent(LENT))
    assert evidence == [
        {"registry": "127.0.0.1:5002", "source": "docker-config:credHelpers:stella-lab", "lent": True},
        {"registry": "ghcr.example", "source": "registry_credentials", "lent": True},
        {"registry": "registry.lab:5001", "source": None, "lent": False},
    ]
    assert SECRET not in json.dumps(evidence) and TOKEN not in json.dumps(evidence)
    assert dc.lent_evidence(dc.parse_lent({})) == [] and dc.parse_lent(None) is None


def test_a_bad_entry_is_refused_naming_the_registry_only():
    with pytest.raises(StellaError) as err:
        dc.parse_lent({"r.example": {"username": "u", "password": SECRET, "identitytoken": TOKEN}})
    assert err.value.code == "invalid_request" and "r.example" in err.value.reason
    assert SECRET not in err.value.reason and TOKEN not in err.value.reason


def test_the_lent_config_is_private_and_gone_after_the_block(base):
    with dc.lent_config(dc.parse_lent(LENT)) as directory:
        assert os.path.dirname(directory) == base
        assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        path = os.path.join(directory, "config.json")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path, encoding="utf-8") as handle:
            assert set(json.load(handle)) == {"auths"}
        assert dc.pull_environment(directory) == {"DOCKER_CONFIG": directory}
    assert not os.path.exists(directory) and os.listdir(base) == []


def test_the_lent_config_is_removed_when_the_pull_fails(base):
    with pytest.raises(StellaError):
        with dc.lent_config(dc.parse_lent(LENT)) as directory:
            raise StellaError("runtime_daemon_unavailable", "docker pull did not finish within 600s")
    assert not os.path.exists(directory) and os.listdir(base) == []


def test_nothing_is_written_when_nothing_is_lent(base):
    for lent in (None, {}, {"registry.lab:5001": None}):
        with dc.lent_config(dc.parse_lent(lent)) as directory:
            assert directory is None
    assert not os.path.exists(base)


@pytest.mark.parametrize("kind", ["symlink", "open", "file"])
def test_an_unsafe_location_is_refused(tmp_path, kind):
    location = tmp_path / "private"
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        location.symlink_to(tmp_path / "elsewhere")
    elif kind == "open":
        location.mkdir()
        os.chmod(location, 0o755)
    else:
        location.write_text("")
    with pytest.raises(StellaError) as err:
        with dc.lent_config(dc.parse_lent(LENT), base=str(location)):
            pass
    assert err.value.code == "io_error" and str(location) in err.value.reason
    assert "stella_lend_registry_credentials: false" in err.value.reason
    assert SECRET not in json.dumps(sorted(os.listdir(tmp_path)))
    if kind == "symlink":
        assert os.listdir(tmp_path / "elsewhere") == []


def test_configs_left_by_a_killed_run_are_removed(base):
    os.makedirs(os.path.join(base, "pull-999999999-gone"), mode=0o700)
    os.chmod(base, 0o700)
    with dc.lent_config(dc.parse_lent(LENT)):
        assert [name for name in os.listdir(base) if "999999999" in name] == []


def test_user_names_and_sources_are_unmasked_and_the_basic_values_masked():
    values = {"stella", "docker-config:credHelpers:stella-lab", SECRET, "registry_credentials", TOKEN}
    dc.mask_lent(values, LENT, other_secrets=["registry_credentials"])
    basic = base64.b64encode(("stella:" + SECRET).encode()).decode()
    assert values == {SECRET, TOKEN, "registry_credentials", basic}


def test_only_pull_commands_read_the_lent_config():
    base_argv = ["compose", "--project-name", "p", "--project-directory", "/d", "-f", "/d/lock.yml"]
    assert pulls(["pull", "--quiet", "r/x@sha256:" + "0" * 64])
    assert pulls(base_argv + ["pull", "--quiet", "web"])
    assert not pulls(base_argv + ["up", "-d", "--remove-orphans", "--pull", "never"])
    assert not pulls(["image", "inspect", "pull"]) and not pulls(["compose", "version"])


class Recording:
    """A ``run_command`` over a scripted runner recording each command's environment additions and, for
    a command given ``DOCKER_CONFIG``, the config it finds there at that moment."""

    def __init__(self, runner):
        self.runner, self.envs, self.configs = runner, [], []

    def __call__(self, argv, environ_update=None):
        inner, _limit = sc.strip_timeout(argv)
        self.envs.append((inner, environ_update))
        if environ_update and "DOCKER_CONFIG" in environ_update:
            directory = environ_update["DOCKER_CONFIG"]
            with open(os.path.join(directory, "config.json"), encoding="utf-8") as handle:
                self.configs.append((directory, json.load(handle)))
        return self.runner(argv, environ_update)


def compose_pull_run(site, plan, pull_rc=0):
    after = [site.container(plan, "a1")]
    pull = site.pull_step(plan, "web")
    if pull_rc:
        pull.answer = (pull_rc, "", "Error response from daemon: pull access denied\n")
        image = [sc.image_absent(), sc.image_absent(), pull]
        steps = site.apply_steps(plan, [], after, image=image)
        steps = steps[: steps.index(pull) + 1] if pull in steps else steps
    else:
        image = [sc.image_absent(), sc.image_absent(), pull, sc.image_present()]
        steps = site.apply_steps(plan, [], after, image=image)
    return sc.ScriptedRunner(steps)


def test_compose_pull_reads_the_lent_config_and_nothing_else_does(tmp_path, base):
    site = sc.Site(tmp_path / "work")
    plan = site.plan()
    runner = Recording(compose_pull_run(site, plan))
    lent = dc.parse_lent(LENT)
    manager = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan), lent=lent)
    result = manager.run(creq.parse_request(plan["payloads"]["compose.up"]))
    runner.runner.assert_done()
    with_config = [argv for argv, env in runner.envs if env and "DOCKER_CONFIG" in env]
    assert len(with_config) == 1 and with_config[0][:2] == ["docker", "compose"] and "pull" in with_config[0]
    [(directory, config)] = runner.configs
    assert config["auths"]["127.0.0.1:5002"]["auth"] == base64.b64encode(("stella:" + SECRET).encode()).decode()
    assert not os.path.exists(directory) and os.listdir(base) == []
    assert result["evidence"]["lentRegistryCredentials"][0] == {
        "registry": "127.0.0.1:5002",
        "source": "docker-config:credHelpers:stella-lab",
        "lent": True,
    }
    assert SECRET not in json.dumps(result) and TOKEN not in json.dumps(result)


def test_a_failed_pull_leaves_no_lent_config(tmp_path, base):
    site = sc.Site(tmp_path / "work")
    plan = site.plan()
    runner = Recording(compose_pull_run(site, plan, pull_rc=1))
    manager = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan), lent=dc.parse_lent(LENT))
    with pytest.raises(StellaError) as err:
        manager.run(creq.parse_request(plan["payloads"]["compose.up"]))
    assert err.value.phase == "compose_pull"
    [(directory, _config)] = runner.configs
    assert not os.path.exists(directory) and os.listdir(base) == []
    assert SECRET not in json.dumps(err.value.evidence)


def test_without_lent_credentials_the_pull_runs_as_before(tmp_path, base):
    site = sc.Site(tmp_path / "work")
    plan = site.plan()
    runner = Recording(compose_pull_run(site, plan))
    manager = ca.ComposeApply(sc.engine(runner), runner, env_bytes=site.env(plan), lent={"registry.lab:5001": None})
    result = manager.run(creq.parse_request(plan["payloads"]["compose.up"]))
    assert all(not env for _argv, env in runner.envs) and runner.configs == []
    assert result["evidence"]["lentRegistryCredentials"] == [
        {"registry": "registry.lab:5001", "source": None, "lent": False}
    ]
    assert not os.path.exists(base)


def test_docker_pull_reads_the_lent_config(base):
    seen = []

    def run(argv, environ_update=None):
        directory = (environ_update or {}).get("DOCKER_CONFIG")
        seen.append((sc.strip_timeout(argv)[0], directory and os.listdir(directory)))
        return 0, "", ""

    cli = sc.engine(run)
    with dc.lent_config(dc.parse_lent(LENT)) as directory:
        with cli.pull_environment(dc.pull_environment(directory)):
            cli.pull("127.0.0.1:5002/stella/app@sha256:" + "1" * 64)
            cli.run(["image", "inspect", "x"], check=False)
    cli.pull("registry.lab:5001/stella/app@sha256:" + "1" * 64)
    assert [(argv[1], listing) for argv, listing in seen] == [
        ("pull", ["config.json"]),
        ("image", None),
        ("pull", None),
    ]
    assert cli.pull_env is None


def test_the_module_option_is_read_and_its_labels_unmasked():
    class Module:
        argument_spec = {"pull_credentials": {"no_log": True}, "secrets": {"no_log": True}, "task": {}}
        params = {"pull_credentials": LENT, "secrets": ["stella"], "task": "compose.up"}
        # what Ansible lists for no_log options: every string of their values
        no_log_values = {"stella", SECRET, TOKEN, "docker-config:credHelpers:stella-lab", "registry_credentials"}

    lent = dc.lent_from_module(Module)
    assert lent["127.0.0.1:5002"]["password"] == SECRET and lent["registry.lab:5001"] is None
    # "stella" is also a value of another no_log option: it stays masked; the labels are not secrets
    assert "stella" in Module.no_log_values and SECRET in Module.no_log_values and TOKEN in Module.no_log_values
    assert "docker-config:credHelpers:stella-lab" not in Module.no_log_values
    assert "registry_credentials" not in Module.no_log_values
    Module.params = {"pull_credentials": None, "secrets": [], "task": "compose.up"}
    assert dc.lent_from_module(Module) is None
