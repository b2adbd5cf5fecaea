"""provider/protocol.py: the Compose provider protocol as released Compose versions speak it (argv forms, metadata,
message gating, stdin requests, the chunked image stream), and the release built from a provider
service."""

from __future__ import annotations

import io
import json

import pytest

from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import protocol as pv
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import service as _service
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import plan_job


@pytest.mark.parametrize(
    "argv",
    [
        # v2.40+: one element; 2.35-2.39: two; options in any order; the service last
        ["compose", "--project-name=shop", "up", "--image=reg/app:v1", "--ports=8080:80", "--ports=8443:443", "web"],
        ["compose", "--project-name", "shop", "up", "--ports=8080:80", "--image=reg/app:v1", "--ports=8443:443", "web"],
        ["--project-name=shop", "up", "--ports", "8080:80", "--ports=8443:443", "--image", "reg/app:v1", "web"],
    ],
)
def test_argv_forms(argv):
    parsed = _arguments.parse_argv(argv)
    assert (parsed["command"], parsed["project"], parsed["service"]) == ("up", "shop", "web")
    assert parsed["options"] == {"image": "reg/app:v1", "ports": ["8080:80", "8443:443"]}
    assert parsed["unknown"] == {}


def test_missing_service_and_unknown_options_are_kept_aside():
    parsed = _arguments.parse_argv(["compose", "--project-name=shop", "down", "--colour=blue", "--image=reg/app:v1"])
    assert parsed["service"] is None and parsed["unknown"] == {"colour": "blue"}
    assert parsed["options"] == {"image": "reg/app:v1"}


@pytest.mark.parametrize(
    "argv,code",
    [
        (["compose", "up", "--image=x"], "invalid_arguments"),
        (["compose", "--project-name=p", "explode"], "invalid_arguments"),
        (["compose", "--project-name=p", "up", "--image=a", "--image=b", "web"], "invalid_option"),
        (["compose", "--project-name=p", "up", "web", "extra"], "invalid_arguments"),
    ],
)
def test_bad_argv(argv, code):
    with pytest.raises(pv.ProviderError) as err:
        _arguments.parse_argv(argv)
    assert err.value.code == code


def test_metadata_declares_every_option_for_each_command():
    doc = json.loads(json.dumps(_arguments.METADATA))
    assert set(doc) == {"description", "up", "down", "stop", "pull"}
    deploy = {p["name"] for p in doc["up"]["parameters"]}
    assert {p["name"] for p in doc["pull"]["parameters"]} >= {"image", "source", "policy", "digest", "created"}
    for command in ("up", "down", "stop", "pull"):
        names = [p["name"] for p in doc[command]["parameters"]]
        assert len(names) == len(set(names)) and set(names) <= _arguments.KNOWN
        assert command == "pull" or set(names) == deploy
        for param in doc[command]["parameters"]:
            # the protocol's documented parameter types only; a repeatable option is a string
            assert param["description"] and param["type"] in ("string", "integer", "boolean")
            assert param["required"] is False or "default" not in param


@pytest.mark.parametrize("value, kept", [(None, 10), ("", 10), ("0", 0), ("3", 3)])
def test_keep_revisions_is_a_count(value, kept):
    assert _arguments.keep_revisions({} if value is None else {"keep_revisions": value}) == kept


@pytest.mark.parametrize("value", ["-1", "two", "1.5", " 3"])
def test_keep_revisions_refuses_anything_but_a_count(value):
    with pytest.raises(pv.ProviderError) as err:
        _arguments.keep_revisions({"keep_revisions": value})
    assert err.value.code == "invalid_option" and repr(value) in err.value.reason


def channel(environ, answers=b""):
    out = io.BytesIO()
    return pv.Channel(out, io.BytesIO(answers), environ), out


def lines(out):
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_without_announcement_only_the_base_four_are_sent():
    chan, out = channel({})
    assert chan.send("info", "deploying") and chan.send("setenv", "URL=http://localhost:8080/")
    for kind, message in (("rawsetenv", "TOKEN=x"), ("publish-endpoint", "80=localhost:8080")):
        with pytest.raises(pv.ProviderError):
            chan.send(kind, message)
    chan.send("error", "preflight failed:\nruntime_version_too_old")
    assert [(m["type"], m["message"]) for m in lines(out)] == [
        ("info", "deploying"),
        ("setenv", "URL=http://localhost:8080/"),
        ("error", "preflight failed: runtime_version_too_old"),
    ]


def test_an_announced_list_gates_every_type():
    chan, out = channel({"COMPOSE_PROVIDER_MESSAGES": "error,info,rawsetenv"})
    assert chan.send("rawsetenv", "TOKEN=x") and not chan.send("debug", "detail")
    with pytest.raises(pv.ProviderError):
        chan.send("setenv", "A=b")
    assert [m["type"] for m in lines(out)] == ["rawsetenv"]
    with pytest.raises(pv.ProviderError):
        chan.send("rawsetenv", "no-equals-sign")


def test_a_request_answered_by_eof_is_an_actionable_error():
    chan, out = channel({"COMPOSE_PROVIDER_MESSAGES": "error,info,get-service-config"})
    with pytest.raises(pv.ProviderError) as err:
        chan.request("get-service-config")
    assert err.value.code == "compose_unsupported" and "does not support provider requests" in err.value.reason
    assert lines(out) == [{"type": "get-service-config"}]
    chan, _out = channel({})
    with pytest.raises(pv.ProviderError) as err:
        chan.request("get-service-config")
    assert "COMPOSE_PROVIDER_MESSAGES" in err.value.reason


def test_requests_read_one_line_each():
    answers = b'{"image": "reg/app:v1"}\n{"networks": [{"name": "p_web_relay", "gateway": "172.20.0.1"}]}\n'
    chan, _out = channel({"COMPOSE_PROVIDER_MESSAGES": "get-service-config,get-relay-info"}, answers)
    assert chan.request("get-service-config") == {"image": "reg/app:v1"}
    assert chan.request("get-relay-info")["networks"][0]["gateway"] == "172.20.0.1"


def chunked(data, sizes):
    out, pos = b"", 0
    for size in sizes:
        out += b"%x\r\n" % size + data[pos : pos + size] + b"\r\n"
        pos += size
    return out + b"0\r\n"


def test_chunked_stream_decodes_incrementally_and_leaves_the_next_answer():
    data = bytes(range(256)) * 1000
    stream = io.BytesIO(chunked(data, [1, 4095, 100000, len(data) - 104096]) + b'{"next": 1}\n')
    reader = pv.ChunkedReader(stream, piece=4096)
    pieces = list(reader.chunks())
    assert b"".join(pieces) == data and max(len(p) for p in pieces) <= 4096 and reader.total == len(data)
    assert json.loads(stream.readline()) == {"next": 1}


@pytest.mark.parametrize("cut", [10, 5000, -3, -1])
def test_a_truncated_stream_raises(cut):
    whole = chunked(b"x" * 8000, [4000, 4000])
    reader = pv.ChunkedReader(io.BytesIO(whole[:cut]))
    with pytest.raises(pv.TruncatedStream) as err:
        list(reader.chunks())
    assert err.value.code == "image_stream_truncated"


def test_release_needs_an_image_from_the_options_or_the_service():
    parsed = _arguments.parse_argv(["compose", "--project-name=shop", "up", "web"])
    with pytest.raises(pv.ProviderError) as err:
        _service.release_from(parsed)
    assert err.value.code == "provider_option_missing" and "'image'" in err.value.reason
    release = _service.release_from(
        parsed,
        {
            "image": "reg/app:v1",
            "environment": {"MODE": "x"},
            "ports": [{"target": 80, "published": "8080"}],
            "healthcheck": {"test": ["CMD", "true"]},
        },
    )
    component = release["components"][0]
    assert (component["image"], component["ports"]) == ("reg/app:v1", ["8080:80"])
    assert component["config"]["env.MODE"] == "x" and component["config"]["healthProbe.port"] == 8080
    assert release["application"] == "shop-web" and release["target"] == {"type": "ComposeHost"}


def test_options_win_over_the_service_definition():
    parsed = _arguments.parse_argv(
        [
            "compose",
            "--project-name=shop",
            "up",
            "--image=reg/app:v2",
            "--environment=MODE=y",
            "--auto_rollback=false",
            "web",
        ]
    )
    release = _service.release_from(parsed, {"image": "reg/app:v1", "environment": {"MODE": "x"}})
    assert release["components"][0]["image"] == "reg/app:v2"
    assert release["components"][0]["config"]["env.MODE"] == "y"
    assert release["strategyConfig"] == {"autoRollbackOnFailure": False}


def test_setenv_lines_are_sorted_and_stable():
    facts = {"URL": "http://localhost:8080/", "PORT": 8080, "SLOT": "active", "DIGEST": None}
    assert _service.setenv_lines(facts) == ["PORT=8080", "SLOT=active", "URL=http://localhost:8080/"]


# ------------------------------------------------------------------ the stella command's pure parts

IMAGE = "127.0.0.1:5000/stella/app:v1"
DIGEST = "sha256:" + "a" * 64


def test_down_names_the_project_up_deployed():
    parsed = _arguments.parse_argv(
        ["compose", "--project-name=shop", "up", "--image=" + IMAGE, "--ports=8080:8080", "web"]
    )
    release = _service.release_from(parsed)
    planned = plan_job(release, [("localhost", {"ansible_connection": "local"})], {IMAGE: DIGEST}, "job-1")
    assert cli.project_of(release) == planned["plans"]["localhost"]["projectName"]


def job_event(
    step,
    record,
    action="stellaops.runtime.stella_job",
    host="localhost",
    target_name="localhost",
    task="Record the outcome",
):
    """The ``runner_on_ok`` event of the ``stella_job`` task that records a target's outcome."""
    res = {"changed": True, "step": step, "target": record}
    if target_name:
        res["targetName"] = target_name
    return {"event": "runner_on_ok", "event_data": {"task": task, "task_action": action, "host": host, "res": res}}


def phases(*pairs):
    return [{"name": name, "status": status, "durationMs": 12} for name, status in pairs]


def test_phase_events_become_one_info_per_recorded_phase_and_target():
    chan, out = channel({})
    events = cli.PhaseEvents(chan)
    record = {
        "status": "Failed",
        "phases": phases(
            ("preflight", "succeeded"), ("prepare", "succeeded"), ("deploy", "failed"), ("verify", "skipped")
        ),
    }
    for event in [
        {"event": "playbook_on_task_start", "event_data": {"task": "Check the runtime on the target"}},
        {
            "event": "runner_on_ok",
            "event_data": {
                "task": "Check the runtime on the target",
                "host": "localhost",
                "task_action": "stellaops.runtime.stella_preflight",
            },
        },
        {
            "event": "runner_on_failed",
            "event_data": {
                "task": "Check the services",
                "host": "localhost",
                "res": {"msg": "the target does not run\\nthe release"},
            },
        },
        job_event("target", record),
        job_event("target", record, action="stella_job"),  # the same outcome again: nothing new
    ]:
        assert events(event) is True
    assert [(m["type"], m["message"]) for m in lines(out)] == [
        ("debug", "task: Check the runtime on the target"),
        ("info", "preflight ok on localhost"),
        ("info", "prepare ok on localhost"),
        ("info", "deploy failed on localhost"),
        ("info", "verify skipped on localhost"),
    ]
    assert events.failure == "the target does not run\\nthe release"


def test_phase_events_name_the_target_of_the_result_and_accept_the_short_action():
    chan, out = channel({})
    events = cli.PhaseEvents(chan)
    events(
        job_event(
            "target",
            {"phases": phases(("preflight", "failed"))},
            action="stella_job",
            host="controller",
            target_name="web-1",
        )
    )
    events(job_event("target", {"phases": phases(("preflight", "succeeded"))}, host="web-2", target_name=None))
    assert [(m["type"], m["message"]) for m in lines(out)] == [
        ("info", "preflight failed on web-1"),
        ("info", "preflight ok on web-2"),
    ]


def test_rollback_target_sends_the_rollback_phases():
    chan, out = channel({})
    events = cli.PhaseEvents(chan)
    record = {
        "phases": phases(("preflight", "succeeded"), ("deploy", "failed")),
        "rollbackPhases": phases(
            ("rollback-pre", "succeeded"),
            ("rollback-deploy", "succeeded"),
            ("rollback-verify", "failed"),
            ("rollback-post", "skipped"),
        ),
    }
    events(job_event("rollback_target", record))
    assert [m["message"] for m in lines(out)] == [
        "rollback-pre ok on localhost",
        "rollback-deploy ok on localhost",
        "rollback-verify failed on localhost",
        "rollback-post skipped on localhost",
    ]


def test_task_names_carry_no_meaning():
    chan, out = channel({})
    events = cli.PhaseEvents(chan)
    for kind in ("runner_on_ok", "runner_on_failed"):
        events(
            {
                "event": kind,
                "event_data": {
                    "task": "preflight | whatever",
                    "host": "localhost",
                    "task_action": "ansible.builtin.command",
                    "ignore_errors": True,
                    "res": {"target": {"phases": phases(("preflight", "succeeded"))}},
                },
            }
        )
    events(job_event("target", {"phases": phases(("deploy", "succeeded"))}, task="verify | something else"))
    events(job_event("plan", None))  # a stella_job step without a target record
    assert [(m["type"], m["message"]) for m in lines(out)] == [("info", "deploy ok on localhost")]


def test_setenv_facts_of_a_job_do_not_change_between_jobs_of_the_same_release():
    parsed = _arguments.parse_argv(
        ["compose", "--project-name=shop", "up", "--image=" + IMAGE, "--ports=18080:8080", "web"]
    )
    release = _service.release_from(parsed)
    target = {"currentDigest": DIGEST, "slot": "active", "projectName": "p", "manifestHash": "sha256:" + "b" * 64}
    first = cli.deployment_facts({"jobId": "job-1", "targets": {"localhost": target}}, release)
    again = cli.deployment_facts(
        {"jobId": "job-2", "targets": {"localhost": dict(target, appliedByJobId="job-1")}}, release
    )
    assert first == again and first["URL"] == "http://localhost:18080/" and first["PORT"] == "18080"
    assert set(first) == set(_arguments.FACTS)


# ------------------------------------------------------------------ publish-endpoint, the relay, rawsetenv


@pytest.mark.parametrize(
    "ports,published",
    [
        (["18080:8080"], [(None, "18080", "8080")]),
        (["127.0.0.1:18080:8080/tcp", "53:53/udp", "9000"], [("127.0.0.1", "18080", "8080")]),
        (["[::1]:18080:8080", "8000-8001:8000-8001"], [("::1", "18080", "8080")]),
    ],
)
def test_published_ports_keep_single_tcp_host_ports(ports, published):
    assert _service.published_ports(ports) == published
    assert _service.host_port(ports) == published[0][1]


def test_relay_forwards_reach_the_published_port_on_this_host():
    assert _service.relay_forwards(["18080:8080", "0.0.0.0:18081:81", "10.0.0.5:18082:82"]) == [
        {"port": 8080, "upstream_host": "127.0.0.1", "upstream_port": 18080, "listen_port": 0},
        {"port": 81, "upstream_host": "127.0.0.1", "upstream_port": 18081, "listen_port": 0},
        {"port": 82, "upstream_host": "10.0.0.5", "upstream_port": 18082, "listen_port": 0},
    ]


@pytest.mark.parametrize(
    "answer,expected",
    [
        ({"networks": [{"name": "p_db_relay", "gateway": "172.20.0.1"}]}, ("172.20.0.1", "p_db_relay")),
        ({"networks": [{"name": "desktop", "gateway": "127.0.0.1"}]}, ("127.0.0.1", "desktop")),
        ({"networks": [{"name": "p_db_relay"}]}, (None, "p_db_relay")),
        ({}, (None, None)),
    ],
)
def test_relay_listen_takes_the_announced_gateway(answer, expected):
    assert _service.relay_listen(answer) == expected


def test_publish_lines_keep_routable_addresses_and_name_loopback_localhost():
    assert _service.publish_lines(["8080=172.20.0.1:41000", "81=127.0.0.1:41001"]) == [
        "8080=172.20.0.1:41000",
        "81=localhost:41001",
    ]


def test_raw_environment_names_facts_only():
    raw = _service.raw_environment(["DATABASE_URL=URL", "IMAGE_DIGEST=DIGEST"])
    assert _service.rawsetenv_lines(raw, {"URL": "http://localhost:1/", "DIGEST": None}) == [
        "DATABASE_URL=http://localhost:1/"
    ]
    with pytest.raises(pv.ProviderError) as err:
        _service.raw_environment(["X=PASSWORD"])
    assert err.value.code == "invalid_option"


def relay_channel(messages):
    chan, _out = channel({"COMPOSE_PROVIDER_MESSAGES": messages})
    chan.inp = io.BytesIO(b'{"networks": [{"name": "shop_web_relay", "gateway": "172.20.0.1"}]}\n')
    return chan


def test_relay_plan_follows_what_compose_announces():
    parsed = _arguments.parse_argv(
        [
            "compose",
            "--project-name=shop",
            "up",
            "--image=" + IMAGE,
            "--ports=18080:8080",
            "--state_directory=/state",
            "web",
        ]
    )
    release = _service.release_from(parsed)
    assert cli.relay_plan(parsed, relay_channel("info,error"), release) is None
    linked = cli.relay_plan(parsed, relay_channel("info,publish-endpoint,get-relay-info"), release)
    assert linked == {
        "name": "shop-web",
        "state": "present",
        "listen_address": "172.20.0.1",
        "device": "auto",
        "forwards": [{"port": 8080, "upstream_host": "127.0.0.1", "upstream_port": 18080, "listen_port": 0}],
        "state_directory": "/state/shop/web",
    }
    fallback = cli.relay_plan(parsed, relay_channel("info,publish-endpoint"), release)
    assert (fallback["listen_address"], fallback["device"]) == ("host-gateway", "none")
    off = _arguments.parse_argv(
        ["compose", "--project-name=shop", "up", "--image=" + IMAGE, "--ports=18080:8080", "--relay=off", "web"]
    )
    assert cli.relay_plan(off, relay_channel("info,publish-endpoint,get-relay-info"), release) is None


def test_the_relay_task_result_is_kept_from_the_events():
    chan, _out = channel({})
    events = cli.PhaseEvents(chan)
    events(
        {
            "event": "runner_on_ok",
            "event_data": {
                "task": "Relay | start or remove the relay endpoint",
                "task_action": cli.RELAY_ACTION,
                "host": "localhost",
                "res": {"endpoints": ["8080=172.20.0.1:41000"]},
            },
        }
    )
    assert events.results[cli.RELAY_ACTION]["endpoints"] == ["8080=172.20.0.1:41000"]


def test_repeatable_options_are_strings_given_more_than_once():
    assert _arguments.LIST_OPTIONS == {"ports", "environment", "insecure_registries", "raw_environment"}
    parsed = _arguments.parse_argv(["compose", "--project-name=p", "up", "--ports=1:1", "--ports=2:2", "web"])
    assert parsed["options"]["ports"] == ["1:1", "2:2"]


@pytest.mark.parametrize(
    "source, policy, known, digest, decision",
    [
        ("local", "missing", {}, "sha256:a", "load"),
        ("local", "missing", {"source": "local", "digest": "sha256:old"}, "sha256:new", "load"),  # rebuilt
        ("local", "missing", {"source": "local", "digest": "sha256:a"}, "sha256:a", "up_to_date"),
        ("local", "missing", {"source": "local", "digest": "sha256:a"}, None, "up_to_date"),
        ("local", "always", {"source": "local", "digest": "sha256:a"}, None, "load"),
        ("local", "always", {"source": "local", "digest": "sha256:old"}, "sha256:new", "load"),
        ("local", "always", {"source": "local", "digest": "sha256:a"}, "sha256:a", "up_to_date"),
        ("local", "missing", {"source": "registry", "digest": "sha256:a"}, "sha256:a", "load"),
        ("registry", "missing", {}, None, "resolve"),
        ("registry", "missing", {"source": "registry", "digest": "sha256:a"}, None, "up_to_date"),
        ("registry", "always", {"source": "registry", "digest": "sha256:a"}, None, "resolve"),
    ],
)
def test_the_pull_policy_decides(source, policy, known, digest, decision):
    assert pv.pull_decision(source, policy, known, digest) == decision


def test_an_unknown_policy_is_an_option_error():
    with pytest.raises(pv.ProviderError) as err:
        pv.pull_decision("local", "sometimes", {})
    assert err.value.code == "invalid_option"


def test_a_message_compose_did_not_announce_fails_loudly_unless_it_only_renders():
    out = io.BytesIO()
    channel = pv.Channel(out, io.BytesIO(), {"COMPOSE_PROVIDER_MESSAGES": "error,setenv"})
    assert channel.send("info", "progress") is False and channel.send("debug", "x") is False
    for kind, message in (("publish-endpoint", "80=localhost:1"), ("rawsetenv", "A=b")):
        with pytest.raises(pv.ProviderError) as err:
            channel.send(kind, message)
        assert err.value.code == "compose_unsupported" and kind in err.value.reason
    assert channel.send("setenv", "URL=x") is True
    assert [json.loads(line)["type"] for line in out.getvalue().splitlines()] == ["setenv"]


@pytest.mark.parametrize(
    "argv, what",
    [
        (["--project-name=../escape", "up", "web"], "project name"),
        (["--project-name=p", "up", "../../etc"], "service name"),
        (["--project-name=p", "up", ".hidden"], "service name"),
        (["--project-name=P", "up", "web"], "project name"),
    ],
)
def test_names_that_would_leave_the_state_directory_are_refused(argv, what):
    with pytest.raises(pv.ProviderError) as err:
        _arguments.parse_argv(argv)
    assert err.value.code == "invalid_arguments" and what in err.value.reason


@pytest.mark.parametrize(
    "option, reason",
    [
        ("--health_port=abc", "--health_port=abc is not a whole number"),
        ("--keep_revisions=-1", "is not a whole number"),
        ("--strategy=yolo", "--strategy=yolo is not one of rolling, all-at-once"),
        ("--auto_rollback=maybe", "--auto_rollback=maybe is not true or false"),
        ("--relay=sometimes", "is not one of"),
    ],
)
def test_each_option_is_checked_against_its_declaration(option, reason):
    with pytest.raises(pv.ProviderError) as err:
        _arguments.parse_argv(["--project-name=p", "up", option, "web"])
    assert err.value.code == "invalid_option" and reason in err.value.reason
    assert _arguments.parse_argv(["--project-name=p", "up", "--health_port=8080", "--auto_rollback=false", "web"])


@pytest.mark.parametrize("size", [b"0x10", b"-1", b" 10", b"1_0", b"+5", b"1" * 17, b""])
def test_chunk_sizes_are_hex_digits_only(size):
    reader = pv.ChunkedReader(io.BytesIO(size + b"\r\n" + b"x" * 32 + b"\r\n0\r\n"))
    with pytest.raises(pv.ProviderError) as err:
        list(reader.chunks())
    assert err.value.code == "image_stream_invalid"


@pytest.mark.parametrize(
    "answer", [[], "text", 3, {"ports": "80"}, {"environment": "A=b"}, {"image": 5}, {"healthcheck": ["CMD"]}]
)
def test_a_service_config_of_the_wrong_shape_is_a_protocol_error(answer):
    with pytest.raises(pv.ProviderError) as err:
        _service.service_config(answer)
    assert err.value.code == "compose_protocol"


def test_a_service_config_environment_list_becomes_a_mapping():
    assert _service.service_config({"environment": ["A=b", "C="]})["environment"] == {"A": "b", "C": ""}
