# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella compose ...``: the Compose provider of this collection (documentation: docs/provider.md).

``stella compose metadata|up|down|stop|pull ...`` as Compose invokes it (``command.main`` hands the
arguments over untouched). ``up`` runs the deployment job (``stellaops.runtime.job``) on this host,
``down`` the teardown playbook, ``stop`` the stop playbook, each through ansible-runner in a fresh
private data directory that is removed afterwards; ``pull`` ingests an image (``get-image``) or
resolves it in its registry, and keeps what it ingested for ``up`` (``local_pin``). Every call first
checks its Python dependencies (``dependencies``). stdout carries only JSON lines; the one ``error``
line is the last, after cleanup, with exit status 1.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import shutil
import signal
import stat
import sys
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import error_line
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.imageref import image_id
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import (
    DEFAULT_MIN_COMPOSE,
    DEFAULT_MIN_ENGINE,
)
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import playbook_environment
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import dependencies as _dependencies
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import protocol as _protocol
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import service as _service
from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.plan import LOCAL_IMAGE_KEY
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider.location import STORE_FILE, state_dir

PLAYBOOKS = {
    "up": "stellaops.runtime.job",
    "down": "stellaops.runtime.teardown",
    "stop": "stellaops.runtime.teardown",
    "relay": "stellaops.runtime.relay",
}
RELAY_ACTION = "stellaops.runtime.stella_relay"
JOB_ACTIONS = ("stellaops.runtime.stella_job", "stella_job")
PHASE_WORDS = {"succeeded": "ok", "failed": "failed", "skipped": "skipped"}


class PhaseEvents:
    """ansible-runner events as provider messages: one ``info`` per recorded phase and target, ``debug``
    per task. Phases are read from the result of the ``stella_job`` task that records a target's outcome
    (step ``target``, or ``rollback_target`` with its ``rollbackPhases``), never from task names."""

    def __init__(self, channel):
        self.channel = channel
        self.seen = set()
        self.failure, self.code = None, None
        self.results = {}

    def __call__(self, event):
        data = event.get("event_data") or {}
        task = data.get("task") or ""
        kind = event.get("event")
        if kind == "playbook_on_task_start" and task:
            self.channel.send("debug", "task: %s" % task)
        elif kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
            self.failure = " ".join(str((data.get("res") or {}).get("msg") or task).split())
            self.code = (data.get("res") or {}).get("code") or self.code  # planning's own code, when it has one
        if kind == "runner_on_ok" and data.get("task_action") == RELAY_ACTION:
            self.results[RELAY_ACTION] = data.get("res") or {}
        if kind == "runner_on_ok" and data.get("task_action") in JOB_ACTIONS:
            self.phases(data)
        return True

    def phases(self, data):
        """One ``info`` per phase the target's record holds, in its order: ``<phase> <ok|failed|skipped> on <host>``."""
        res = data.get("res") or {}
        record = res.get("target")
        if not isinstance(record, dict):
            return
        step = res.get("step")
        rollback = step == "rollback_target" or (step != "target" and bool(record.get("rollbackPhases")))
        host = res.get("targetName") or data.get("host") or "localhost"
        for phase in record.get("rollbackPhases" if rollback else "phases") or []:
            if not isinstance(phase, dict) or not phase.get("name") or not phase.get("status"):
                continue
            status = PHASE_WORDS.get(phase["status"], phase["status"])
            key = (phase["name"], host, status)
            if key not in self.seen:
                self.seen.add(key)
                self.channel.send("info", "%s %s on %s" % (phase["name"], status, host))


def run_playbook(playbooks, extravars, channel, cancelled):
    """Run ``playbooks`` (one run, in order) on this host through ansible-runner;
    ``(rc, status, last failure message, results of the relay task, the failed task's code)``."""
    import ansible_runner  # type: ignore[import-untyped]  # pylint: disable=import-outside-toplevel

    private = tempfile.mkdtemp(prefix="stella-provider-")
    try:
        os.chmod(private, stat.S_IRWXU)
        inventory = {
            "all": {
                "children": {
                    "stella_targets": {
                        "hosts": {
                            "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                        }
                    }
                }
            }
        }
        envvars = playbook_environment()
        events = PhaseEvents(channel)
        runner = ansible_runner.run(
            private_data_dir=private,
            playbook=[
                {"name": "stella provider: %s" % name, "ansible.builtin.import_playbook": name} for name in playbooks
            ],
            inventory=inventory,
            extravars=extravars,
            envvars=envvars,
            quiet=True,
            event_handler=events,
            cancel_callback=lambda: cancelled["flag"],
        )
        return runner.rc, runner.status, events.failure, events.results, events.code
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _job(store_path, job_id):
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store  # pylint: disable=import-outside-toplevel

    store = open_store(store_path)
    try:
        return store.get(job_id)
    finally:
        store.close()


def deployment_facts(record, release):
    """What dependents receive: identical on every ``up`` of the same release."""
    target = (record.get("targets") or {}).get("localhost") or {}
    port = _service.host_port(release["components"][0]["ports"])
    return {
        "URL": "http://localhost:%s/" % port if port else None,
        "HOST": "localhost",
        "PORT": port,
        "DIGEST": target.get("currentDigest"),
        "SLOT": target.get("slot"),
        "PROJECT": target.get("projectName"),
        "MANIFEST_HASH": target.get("manifestHash"),
    }


def relay_name(parsed):
    return "%s-%s" % (parsed["project"], parsed["service"] or "service")


def relay_plan(parsed, channel, release):
    """The ``stella_relay`` options when Compose announces ``publish-endpoint`` (``None`` otherwise).
    With ``get-relay-info`` the endpoint binds the announced relay-link gateway, pinned to its
    bridge; without a gateway it binds the default bridge's gateway, unpinned, and says so."""
    if (parsed["options"].get("relay") or "auto") == "off" or not channel.can("publish-endpoint"):
        return None
    forwards = _service.relay_forwards(release["components"][0]["ports"])
    if not forwards:
        channel.send("debug", "publish-endpoint announced, but no TCP port is published on the host: nothing to relay")
        return None
    address, network = (None, None)
    if channel.can("get-relay-info"):
        address, network = _service.relay_listen(channel.request("get-relay-info"))
    if address:
        channel.send("debug", "relay-link network %s: the relay endpoint binds %s only" % (network, address))
        listen, device = address, "auto"
    else:
        listen, device = "host-gateway", "none"
        channel.send(
            "info",
            "no relay-link gateway announced: the relay endpoint binds the default bridge gateway, "
            "not pinned to an interface (any local container can reach it)",
        )
    return {
        "name": relay_name(parsed),
        "state": "present",
        "listen_address": listen,
        "device": device,
        "forwards": forwards,
        "state_directory": state_dir(parsed),
    }


def up(parsed, channel, cancelled):
    options = parsed["options"]
    raw = _service.raw_environment(options.get("raw_environment"))
    if raw and not channel.can("rawsetenv"):
        raise StellaError(
            "compose_unsupported",
            "the option raw_environment needs rawsetenv, which this Compose "
            "does not announce in COMPOSE_PROVIDER_MESSAGES (Compose 2.40.3 aborts on it); use the "
            "prefixed variables (setenv) instead",
        )
    config = None
    if channel.can("get-service-config"):
        config = _service.service_config(channel.request("get-service-config"))
    release = _service.release_from(parsed, config)
    pinned = local_pin(parsed, release["components"][0]["image"], channel)
    if pinned:
        release["components"][0]["config"].update({LOCAL_IMAGE_KEY: pinned, "compose.skipPull": True})
    keep = _arguments.keep_revisions(options)
    directory = state_dir(parsed)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    relay = relay_plan(parsed, channel, release)
    store = os.path.join(directory, STORE_FILE)
    job_id = "compose-%s-%s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S"),
        secrets.token_hex(3),
    )
    extravars = {
        "stella_release": release,
        "stella_job_id": job_id,
        "stella_job_store": store,
        "stella_evidence_dir": os.path.join(directory, "evidence"),
        "stella_insecure_registries": options.get("insecure_registries") or [],
        "stella_min_engine_version": options.get("min_engine_version") or DEFAULT_MIN_ENGINE,
        "stella_min_compose_version": options.get("min_compose_version") or DEFAULT_MIN_COMPOSE,
        "stella_keep_revisions": keep,
    }
    if relay:
        extravars["stella_relay"] = relay
    channel.send(
        "info",
        "deploying %s%s (job %s)"
        % (release["components"][0]["image"], " as the image pull loaded, %s" % pinned if pinned else "", job_id),
    )
    plays = [PLAYBOOKS["up"]] + ([PLAYBOOKS["relay"]] if relay else [])
    rc, status, failure, results, code = run_playbook(plays, extravars, channel, cancelled)
    record = _job(store, job_id) if os.path.exists(store) else None
    if cancelled["flag"]:
        raise StellaError(
            "cancelled", "cancelled by Compose (job %s %s)" % (job_id, (record or {}).get("status", "not started"))
        )
    if record is None:
        raise StellaError(
            code or "provider_run_failed",
            "the deployment job did not start: %s" % (failure or "ansible-runner %s, rc %s" % (status, rc)),
        )
    if record["status"] != "Succeeded":
        raise StellaError(
            record.get("code") or "deploy_failed",
            "job %s %s: %s" % (job_id, record["status"], record.get("reason") or "ansible-runner %s" % status),
        )
    if rc != 0 or (relay and RELAY_ACTION not in results):
        raise StellaError(
            "relay_failed" if relay else "provider_run_failed",
            "job %s succeeded, then: %s" % (job_id, failure or "ansible-runner %s, rc %s" % (status, rc)),
        )
    facts = deployment_facts(record, release)
    for line in _service.setenv_lines(facts):
        channel.send("setenv", line)
    for line in _service.rawsetenv_lines(raw, facts):
        channel.send("rawsetenv", line)
    for line in _service.publish_lines((results.get(RELAY_ACTION) or {}).get("endpoints")):
        channel.send("publish-endpoint", line)
    evidence = job_evidence_dir(os.path.join(directory, "evidence"), job_id)
    channel.send("info", "deployed: job %s, evidence %s" % (job_id, evidence))


def project_of(release):
    """The Compose project the job gives this release on this host (as job/plan.py names it)."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import naming as _naming  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import target_identity  # pylint: disable=import-outside-toplevel

    named = dict(release, target=target_identity("localhost", {"ansible_connection": "local"}, "ComposeHost"))
    return _naming.project_name(named, _naming.select_slot(named)[0])


def down(parsed, channel, cancelled, stop=False):
    """``down`` removes everything ``up`` created on this host (a no-op when nothing is there);
    ``stop`` stops its containers and keeps them."""
    release = _service.release_from(parsed, {"image": parsed["options"].get("image") or "unused"})
    extravars = {
        "stella_teardown_project": project_of(release),
        "stella_teardown_state": "stopped" if stop else "absent",
        "stella_work_directory": release["workDirectory"],
    }
    plays = [PLAYBOOKS["down"]]
    if not stop:  # stop keeps the relay endpoint, so the next up publishes the same one
        plays.append(PLAYBOOKS["relay"])
        extravars["stella_relay"] = {
            "name": relay_name(parsed),
            "state": "absent",
            "state_directory": state_dir(parsed),
        }
    rc, status, failure, _results, _code = run_playbook(plays, extravars, channel, cancelled)
    if rc != 0:
        raise StellaError(
            "teardown_failed",
            "%s failed: %s" % ("stop" if stop else "down", failure or "ansible-runner %s, rc %s" % (status, rc)),
        )
    channel.send("info", "stopped" if stop else "removed")


def _bookkeeping(parsed):
    path = os.path.join(state_dir(parsed), "images.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return path, json.load(handle)
    except (OSError, ValueError):
        return path, {}


def _remember(path, books, image, facts):
    from ansible_collections.stellaops.runtime.plugins.module_utils.host.files import atomic_write  # pylint: disable=import-outside-toplevel

    books = dict(books, **{image: facts})
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write(path, json.dumps(books, indent=1, sort_keys=True).encode("utf-8"), mode=0o600)


def daemon_image_id(ref, docker="docker"):
    """The id of the image ``ref`` names in this host's engine, ``None`` when it holds none."""
    import subprocess  # pylint: disable=import-outside-toplevel

    proc = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, check=False, timeout=60
    )
    if proc.returncode == 0:
        return proc.stdout.decode(errors="replace").strip() or None
    err = " ".join(proc.stderr.decode(errors="replace").split())
    if "no such image" in err.lower():
        return None
    raise StellaError("image_inspect_failed", "docker image inspect %s failed: %s" % (ref, err[:300]))


def local_pin(parsed, image, channel, docker="docker"):
    """The image id ``up`` pins ``image`` to when ``pull`` loaded it from Compose's local daemon (the
    ``local`` verdict; ``None`` otherwise): the id the bookkeeping recorded, which this engine must
    still hold (``local_image_missing`` otherwise). No registry is asked about it."""
    known = _bookkeeping(parsed)[1].get(image) or {}
    if known.get("source") != "local":
        return None
    pinned = known.get("imageId") or known.get("digest")
    if not image_id(pinned) or daemon_image_id(pinned, docker) != pinned:
        raise StellaError(
            "local_image_missing",
            "%s was loaded by pull as %s and this engine no longer holds it: run "
            "`docker compose pull` (or `docker compose up --build` for a service that builds its image) "
            "so Compose hands it over again" % (image, pinned or "an unknown image"),
        )
    now = daemon_image_id(image, docker)
    if now != pinned:
        channel.send(
            "info",
            "%s now names %s in this engine, not the image pull loaded: deploying %s; "
            "`docker compose pull` takes the new one" % (image, now or "no image", pinned),
        )
    return pinned


def load_stream(channel, image, docker="docker"):
    """``get-image``: the chunked ``docker save`` tar from Compose, piped into ``docker load`` in
    pieces of 64 KiB. A truncated stream kills the load before it ends, so nothing is tagged."""
    import subprocess  # pylint: disable=import-outside-toplevel

    header = channel.request("get-image", image)
    if header.get("error"):
        raise StellaError("image_stream_refused", "Compose could not stream %s: %s" % (image, header["error"]))
    if header.get("type") != "image-stream" or header.get("encoding") != "chunked":
        raise StellaError("image_stream_invalid", "unexpected answer to get-image: %s" % json.dumps(header)[:200])
    reader = _protocol.ChunkedReader(channel.inp)
    load = subprocess.Popen(
        [docker, "load", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        for piece in reader.chunks():
            load.stdin.write(piece)
    except BaseException:
        load.kill()
        load.communicate()
        raise
    out, err = load.communicate()
    if load.returncode != 0:
        raise StellaError(
            "image_load_failed", "docker load failed: %s" % " ".join(err.decode(errors="replace").split())[:300]
        )
    return reader.total, out.decode(errors="replace").strip()


def pull(parsed, channel):
    """``pull``: ``source=local`` ingests the local daemon's image through ``get-image``,
    ``source=registry`` resolves the reference upstream (with the Docker client config's credentials),
    unless the bookkeeping says the policy is already met (:func:`protocol.pull_decision`)."""
    options = parsed["options"]
    image, source = options.get("image"), options.get("source")
    if not image or source not in ("local", "registry"):
        raise StellaError("provider_option_missing", "pull needs --image and --source=local|registry")
    path, books = _bookkeeping(parsed)
    known = books.get(image) or {}
    decision = _protocol.pull_decision(source, options.get("policy") or "missing", known, options.get("digest"))
    if decision == "up_to_date":
        channel.send(
            "info",
            "%s is up to date (%s, policy %s)" % (image, known.get("digest"), options.get("policy") or "missing"),
        )
        return
    if decision == "load":
        size, loaded = load_stream(channel, image)
        held = daemon_image_id(image)
        if options.get("digest") and held != options["digest"]:
            channel.send(
                "debug",
                "Compose announced %s for %s, this engine holds %s after the load" % (options["digest"], image, held),
            )
        # what up pins: the id this engine holds, verified again at up (local_pin)
        _remember(
            path,
            books,
            image,
            {
                "digest": options.get("digest"),
                "created": options.get("created"),
                "imageId": held,
                "source": "local",
                "bytes": size,
            },
        )
        channel.send("info", "loaded %s (%d bytes): %s (%s)" % (image, size, loaded, held))
        return
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import (  # pylint: disable=import-outside-toplevel
        load_credentials,
        resolve_digests,
    )

    probe = {"components": [{"name": "image", "image": image}]}
    resolved, _resolution = resolve_digests(
        probe, load_credentials({}), options.get("insecure_registries") or [], {}, True, 15.0
    )
    digest = resolved.get(image)
    _remember(path, books, image, {"digest": digest, "source": "registry"})
    channel.send("info", "resolved %s to %s" % (image, digest))


def compose(argv, stdin, stdout, environ):
    channel = _protocol.Channel(stdout, stdin, environ)
    cancelled = {"flag": False}

    def cancel(_signum, _frame):
        cancelled["flag"] = True

    try:
        parsed = _arguments.parse_argv(argv)
        _dependencies.require(parsed["command"])
        if parsed["command"] == "metadata":
            stdout.write(json.dumps(_arguments.METADATA, indent=1).encode("utf-8") + b"\n")
            stdout.flush()
            return 0
        for name, value in sorted(parsed["unknown"].items()):
            channel.send("debug", "ignoring unknown option --%s=%s" % (name, value))
        signal.signal(signal.SIGTERM, cancel)
        signal.signal(signal.SIGINT, cancel)
        if parsed["command"] == "up":
            up(parsed, channel, cancelled)
        elif parsed["command"] in ("down", "stop"):
            down(parsed, channel, cancelled, stop=parsed["command"] == "stop")
        elif parsed["command"] == "pull":
            pull(parsed, channel)
        else:
            raise StellaError("unsupported", "stella compose %s is not implemented" % parsed["command"])
        return 0
    except StellaError as exc:
        report_error(channel, error_line(exc.code, exc.reason))
        return 1
    except Exception as exc:  # pylint: disable=broad-except
        report_error(channel, "internal_error: %s: %s" % (type(exc).__name__, exc))
        return 1


def report_error(channel, text):
    """The failure as an ``error`` message, or on stderr when this Compose does not announce ``error``."""
    try:
        channel.send("error", text)
    except StellaError:
        sys.stderr.write("stella compose: %s\n" % text)
