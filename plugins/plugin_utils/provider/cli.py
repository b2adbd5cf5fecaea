# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``stella`` command: the Compose provider of this collection (documentation: docs/provider.md).

``stella compose metadata|up|down|stop ...`` as Compose invokes it. ``up`` runs the deployment job
(``stellaops.runtime.job``) on this host, ``down`` the teardown playbook, ``stop`` the stop playbook,
each through ansible-runner in a fresh private data directory that is removed afterwards. stdout
carries only JSON lines; the one ``error`` line is the last, after cleanup, with exit status 1.
``stella install [--bin-dir DIR]`` puts ``stella`` on PATH and ``docker-stella`` among the Docker CLI
plugins. ``stella list``, ``stella show``, ``stella report``, ``stella health``, ``stella interrupt`` and
``stella prune`` work on a job store (``store.jobs_cli``, ``store.cli``; docs/stella-command.md);
``stella --version`` prints the collection's version.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import secrets
import shutil
import signal
import stat
import sys
import tempfile

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import job_evidence_dir
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.versions import DEFAULT_MIN_COMPOSE, DEFAULT_MIN_ENGINE
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import COLLECTION_ROOT, COLLECTIONS_PATH
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import protocol as _provider
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.location import STORE_FILE

# the Docker CLI plugin's metadata; its Version is the collection's (collection_version)
PLUGIN_METADATA = {"SchemaVersion": "0.1.0", "Vendor": "Stella Ops",
                   "ShortDescription": "Stella Ops runtime: Compose provider (stella compose ...)"}
PLAYBOOKS = {"up": "stellaops.runtime.job", "down": "stellaops.runtime.teardown", "stop": "stellaops.runtime.teardown",
             "relay": "stellaops.runtime.relay"}
RELAY_ACTION = "stellaops.runtime.stella_relay"
JOB_ACTIONS = ("stellaops.runtime.stella_job", "stella_job")
PHASE_WORDS = {"succeeded": "ok", "failed": "failed", "skipped": "skipped"}


def state_dir(parsed):
    base = os.path.expanduser(parsed["options"].get("state_directory") or "~/.local/state/stellaops/provider")
    return os.path.join(base, parsed["project"], parsed["service"] or "service")


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
    import ansible_runner  # pylint: disable=import-outside-toplevel

    private = tempfile.mkdtemp(prefix="stella-provider-")
    try:
        os.chmod(private, stat.S_IRWXU)
        inventory = {"all": {"children": {"stella_targets": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}
        # ansible-playbook of this Python's environment (Compose runs providers with the user's PATH)
        envvars = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
                   "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_PATH, "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_LOCALHOST_WARNING": "0"}
        events = PhaseEvents(channel)
        runner = ansible_runner.run(
            private_data_dir=private, playbook=[{"name": "stella provider: %s" % name,
                                                 "ansible.builtin.import_playbook": name} for name in playbooks],
            inventory=inventory, extravars=extravars, envvars=envvars, quiet=True, event_handler=events,
            cancel_callback=lambda: cancelled["flag"])
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
    port = _provider.host_port(release["components"][0]["ports"])
    return {"URL": "http://localhost:%s/" % port if port else None, "HOST": "localhost", "PORT": port,
            "DIGEST": target.get("currentDigest"), "SLOT": target.get("slot"), "PROJECT": target.get("projectName"),
            "MANIFEST_HASH": target.get("manifestHash")}


def relay_name(parsed):
    return "%s-%s" % (parsed["project"], parsed["service"] or "service")


def relay_plan(parsed, channel, release):
    """The ``stella_relay`` options when Compose announces ``publish-endpoint`` (``None`` otherwise).
    With ``get-relay-info`` the endpoint binds the announced relay-link gateway, pinned to its
    bridge; without a gateway it binds the default bridge's gateway, unpinned, and says so."""
    if (parsed["options"].get("relay") or "auto") == "off" or not channel.can("publish-endpoint"):
        return None
    forwards = _provider.relay_forwards(release["components"][0]["ports"])
    if not forwards:
        channel.send("debug", "publish-endpoint announced, but no TCP port is published on the host: nothing to relay")
        return None
    address, network = (None, None)
    if channel.can("get-relay-info"):
        address, network = _provider.relay_listen(channel.request("get-relay-info"))
    if address:
        channel.send("debug", "relay-link network %s: the relay endpoint binds %s only" % (network, address))
        listen, device = address, "auto"
    else:
        listen, device = "host-gateway", "none"
        channel.send("info", "no relay-link gateway announced: the relay endpoint binds the default bridge gateway, "
                     "not pinned to an interface (any local container can reach it)")
    return {"name": relay_name(parsed), "state": "present", "listen_address": listen, "device": device,
            "forwards": forwards, "state_directory": state_dir(parsed)}


def up(parsed, channel, cancelled):
    options = parsed["options"]
    raw = _provider.raw_environment(options.get("raw_environment"))
    if raw and not channel.can("rawsetenv"):
        raise StellaError("compose_unsupported", "the option raw_environment needs rawsetenv, which this Compose "
                          "does not announce in COMPOSE_PROVIDER_MESSAGES (Compose 2.40.3 aborts on it); use the "
                          "prefixed variables (setenv) instead")
    config = None
    if channel.can("get-service-config"):
        config = _provider.service_config(channel.request("get-service-config"))
    release = _provider.release_from(parsed, config)
    keep = _provider.keep_revisions(options)
    directory = state_dir(parsed)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    relay = relay_plan(parsed, channel, release)
    store = os.path.join(directory, STORE_FILE)
    job_id = "compose-%s-%s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S"),
                                secrets.token_hex(3))
    extravars = {"stella_release": release, "stella_job_id": job_id, "stella_job_store": store,
                 "stella_evidence_dir": os.path.join(directory, "evidence"),
                 "stella_insecure_registries": options.get("insecure_registries") or [],
                 "stella_min_engine_version": options.get("min_engine_version") or DEFAULT_MIN_ENGINE,
                 "stella_min_compose_version": options.get("min_compose_version") or DEFAULT_MIN_COMPOSE,
                 "stella_keep_revisions": keep}
    if relay:
        extravars["stella_relay"] = relay
    channel.send("info", "deploying %s (job %s)" % (release["components"][0]["image"], job_id))
    plays = [PLAYBOOKS["up"]] + ([PLAYBOOKS["relay"]] if relay else [])
    rc, status, failure, results, code = run_playbook(plays, extravars, channel, cancelled)
    record = _job(store, job_id) if os.path.exists(store) else None
    if cancelled["flag"]:
        raise StellaError("cancelled", "cancelled by Compose (job %s %s)" % (
            job_id, (record or {}).get("status", "not started")))
    if record is None:
        raise StellaError(code or "provider_run_failed", "the deployment job did not start: %s" % (
            failure or "ansible-runner %s, rc %s" % (status, rc)))
    if record["status"] != "Succeeded":
        raise StellaError(record.get("code") or "deploy_failed", "job %s %s: %s" % (
            job_id, record["status"], record.get("reason") or "ansible-runner %s" % status))
    if rc != 0 or (relay and RELAY_ACTION not in results):
        raise StellaError("relay_failed" if relay else "provider_run_failed", "job %s succeeded, then: %s" % (
            job_id, failure or "ansible-runner %s, rc %s" % (status, rc)))
    facts = deployment_facts(record, release)
    for line in _provider.setenv_lines(facts):
        channel.send("setenv", line)
    for line in _provider.rawsetenv_lines(raw, facts):
        channel.send("rawsetenv", line)
    for line in _provider.publish_lines((results.get(RELAY_ACTION) or {}).get("endpoints")):
        channel.send("publish-endpoint", line)
    evidence = job_evidence_dir(os.path.join(directory, "evidence"), job_id)
    channel.send("info", "deployed: job %s, evidence %s" % (job_id, evidence))


def project_of(release):
    """The Compose project the job gives this release on this host (as ``_job_plan`` names it)."""
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release import naming as _naming  # pylint: disable=import-outside-toplevel
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.job.plan import target_identity  # pylint: disable=import-outside-toplevel
    named = dict(release, target=target_identity("localhost", {"ansible_connection": "local"}, "ComposeHost"))
    return _naming.project_name(named, _naming.select_slot(named)[0])


def down(parsed, channel, cancelled, stop=False):
    """``down`` removes everything ``up`` created on this host (a no-op when nothing is there);
    ``stop`` stops its containers and keeps them."""
    release = _provider.release_from(parsed, {"image": parsed["options"].get("image") or "unused"})
    extravars = {"stella_teardown_project": project_of(release),
                 "stella_teardown_state": "stopped" if stop else "absent",
                 "stella_work_directory": release["workDirectory"]}
    plays = [PLAYBOOKS["down"]]
    if not stop:  # stop keeps the relay endpoint, so the next up publishes the same one
        plays.append(PLAYBOOKS["relay"])
        extravars["stella_relay"] = {"name": relay_name(parsed), "state": "absent", "state_directory": state_dir(parsed)}
    rc, status, failure, _results, _code = run_playbook(plays, extravars, channel, cancelled)
    if rc != 0:
        raise StellaError("teardown_failed", "%s failed: %s" % (
            "stop" if stop else "down", failure or "ansible-runner %s, rc %s" % (status, rc)))
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


def load_stream(channel, image, docker="docker"):
    """``get-image``: the chunked ``docker save`` tar from Compose, piped into ``docker load`` in
    pieces of 64 KiB. A truncated stream kills the load before it ends, so nothing is tagged."""
    import subprocess  # pylint: disable=import-outside-toplevel

    header = channel.request("get-image", image)
    if header.get("error"):
        raise StellaError("image_stream_refused", "Compose could not stream %s: %s" % (image, header["error"]))
    if header.get("type") != "image-stream" or header.get("encoding") != "chunked":
        raise StellaError("image_stream_invalid", "unexpected answer to get-image: %s" % json.dumps(header)[:200])
    reader = _provider.ChunkedReader(channel.inp)
    load = subprocess.Popen([docker, "load", "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        for piece in reader.chunks():
            load.stdin.write(piece)
    except BaseException:
        load.kill()
        load.communicate()
        raise
    out, err = load.communicate()
    if load.returncode != 0:
        raise StellaError("image_load_failed", "docker load failed: %s" % " ".join(err.decode(errors="replace").split())[:300])
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
    decision = _provider.pull_decision(source, options.get("policy") or "missing", known, options.get("digest"))
    if decision == "up_to_date":
        channel.send("info", "%s is up to date (%s, policy %s)" % (image, known.get("digest"),
                                                                   options.get("policy") or "missing"))
        return
    if decision == "load":
        size, loaded = load_stream(channel, image)
        _remember(path, books, image, {"digest": options.get("digest"), "created": options.get("created"),
                                       "source": "local", "bytes": size})
        channel.send("info", "loaded %s (%d bytes): %s" % (image, size, loaded))
        return
    from ansible_collections.stellaops.runtime.plugins.plugin_utils.release.inputs import (  # pylint: disable=import-outside-toplevel
        load_credentials, resolve_digests)
    probe = {"components": [{"name": "image", "image": image}]}
    resolved, _resolution = resolve_digests(probe, load_credentials({}), options.get("insecure_registries") or [], {},
                                            True, 15.0)
    digest = resolved.get(image)
    _remember(path, books, image, {"digest": digest, "source": "registry"})
    channel.send("info", "resolved %s to %s" % (image, digest))


def compose(argv, stdin, stdout, environ):
    channel = _provider.Channel(stdout, stdin, environ)
    cancelled = {"flag": False}

    def cancel(_signum, _frame):
        cancelled["flag"] = True
    try:
        parsed = _provider.parse_argv(argv)
        if parsed["command"] == "metadata":
            stdout.write(json.dumps(_provider.METADATA, indent=1).encode("utf-8") + b"\n")
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
        report_error(channel, "%s: %s" % (exc.code, exc.reason))
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


def install_parser():
    """``stella install [--bin-dir DIR] [--plugin-dir DIR]``."""
    parser = argparse.ArgumentParser(prog="stella install", description="Put a stella launcher on PATH and the "
                                     "docker-stella Docker CLI plugin in place, both running this collection with "
                                     "this Python (docs/provider.md).")
    parser.add_argument("--bin-dir", metavar="DIR", default="/usr/local/bin",
                        help="where the stella launcher goes (default /usr/local/bin)")
    parser.add_argument("--plugin-dir", metavar="DIR", default=os.path.expanduser("~/.docker/cli-plugins"),
                        help="where the docker-stella CLI plugin goes (default ~/.docker/cli-plugins)")
    return parser


def install(argv):
    """``stella install [--bin-dir DIR] [--plugin-dir DIR]``: a ``stella`` launcher on PATH and the
    ``docker-stella`` CLI plugin, both running this collection with this Python (2 on a usage error)."""
    try:
        options = install_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code
    launcher = ("#!%s\n# stella: the stellaops.runtime Compose provider (written by `stella install`)\n"
                "import sys\nsys.path.insert(0, %r)\n"
                "from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider.cli import main\n"
                "sys.exit(main(sys.argv))\n" % (sys.executable, COLLECTIONS_PATH))
    written = []
    for directory, name in ((options.bin_dir, "stella"), (options.plugin_dir, "docker-stella")):
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(launcher)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    sys.stdout.write("installed %s\n" % ", ".join(written))
    return 0


# ------------------------------------------------------------------------------------ the command line

# ``stella COMMAND``: what ``stella --help`` says of it, and the function that runs it (a module under
# plugin_utils and its name; install and compose are here).
COMMANDS = (("list", "the jobs of a job store, newest first", "store.jobs_cli:list_jobs"),
            ("show", "one job, as the job_show playbook prints it (--follow: until it ends)", "store.jobs_cli:show"),
            ("report", "the HTML evidence report of a job (docs/report.md)", "store.cli:report"),
            ("health", "the health status the job store keeps for each target", "store.cli:health"),
            ("interrupt", "record a job whose controller run is gone as interrupted", "store.cli:interrupt"),
            ("prune", "remove finished jobs past a retention age", "store.cli:prune"),
            ("install", "put stella on PATH and docker-stella among the Docker CLI plugins", None),
            ("compose", "the Compose provider, as Compose runs it (stella compose -h)", None))
SYNOPSIS = """stella [-h] [--version] COMMAND ...
       stella list [--status STATUS] [--project PROJECT] [--limit N] [--json] [STORE]
       stella show JOB [--json] [--follow] [STORE]
       stella report JOB [--evidence-dir DIR] [--output FILE] [STORE]
       stella health [TARGET ...] [--json] [--check] [STORE]
       stella interrupt JOB [--reason TEXT] [STORE]
       stella prune --older-than DAYS [--keep N] [--evidence-dir DIR] [--dry-run] [--json] [STORE]
       stella install [--bin-dir DIR] [--plugin-dir DIR]
       stella compose [--project-name=NAME] metadata|up|down|stop|pull [--option=value ...] [SERVICE]
STORE: --store LOCATION | --compose-project PROJECT [--service SERVICE] [--state-directory DIR]"""
EPILOG = """store: --store, else --compose-project (the Compose provider's store of that project), else
$STELLA_JOB_STORE, else ~/.local/state/stellaops/jobs.sqlite3 (the playbooks' default).
exit status: 0 done; 1 failed (one line `stella COMMAND: CODE: REASON` on stderr; show --follow:
the job did not succeed); 2 usage error; 3 health --check: a target shown is not healthy.
Each command's options: stella COMMAND -h. Documentation: docs/stella-command.md."""
COMPOSE_HELP = ("usage: stella compose [--project-name=NAME] metadata|up|down|stop|pull [--option=value ...] "
                "[SERVICE]\n\nThe Compose provider: Compose runs it for a service with `provider: {type: stella}`; "
                "stdout carries only JSON lines. `stella compose metadata` lists the options (docs/provider.md).\n")


def command_parser():
    """``stella [-h] [--version] COMMAND``: the command's name only; each command parses its own arguments."""
    parser = argparse.ArgumentParser(
        prog="stella", usage=SYNOPSIS, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="The stellaops.runtime command: the job store from a shell, and the Compose provider.\n\n"
                    "commands:\n" + "".join("  %-10s %s\n" % command[:2] for command in COMMANDS))
    parser.add_argument("--version", action="store_true", help="print the collection's version and exit")
    parser.add_argument("command", metavar="COMMAND", nargs="?", choices=[command[0] for command in COMMANDS],
                        help=argparse.SUPPRESS)
    return parser


def collection_version():
    """``(version, metadata file)`` of this collection: ``MANIFEST.json`` of an installed collection, else
    ``galaxy.yml`` of a checkout; ``(None, why)`` when neither can be read."""
    manifest, galaxy = (os.path.join(COLLECTION_ROOT, name) for name in ("MANIFEST.json", "galaxy.yml"))
    try:
        if os.path.isfile(manifest):
            with open(manifest, encoding="utf-8") as handle:
                return str(json.load(handle)["collection_info"]["version"]), manifest
        import yaml  # pylint: disable=import-outside-toplevel
        with open(galaxy, encoding="utf-8") as handle:
            return str(yaml.safe_load(handle)["version"]), galaxy
    except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:
        return None, "no version in %s or %s: %s" % (manifest, galaxy, exc)


def main(argv=None):
    """``stella``: ``compose ...`` is handed to the Compose provider as Compose wrote it; every other
    command parses its own arguments (``stella COMMAND -h``)."""
    argv = list(sys.argv if argv is None else argv)
    args = argv[1:]
    if args[:1] == ["docker-cli-plugin-metadata"]:
        sys.stdout.write(json.dumps(dict(PLUGIN_METADATA, Version=collection_version()[0] or "unknown")) + "\n")
        return 0
    if os.path.basename(argv[0]).startswith("docker-") and args[:1] == ["stella"]:
        args = args[1:]  # `docker stella compose ...` through the CLI plugin
    if args[:1] == ["compose"]:
        if args[1:] in (["-h"], ["--help"]):
            sys.stdout.write(COMPOSE_HELP)
            return 0
        return compose(args, sys.stdin.buffer, sys.stdout.buffer, os.environ)
    parser = command_parser()
    try:
        options = parser.parse_args(args[:1])
        if not options.version and options.command is None:
            parser.error("a command is required")
    except SystemExit as exc:
        return exc.code
    if options.version:
        version, source = collection_version()
        if version is None:
            sys.stderr.write("stella: version_unknown: %s\n" % source)
            return 1
        sys.stdout.write("stella (stellaops.runtime) %s\n" % version)
        return 0
    if options.command == "install":
        return install(args[1:])
    module, function = dict((name, run) for name, _help, run in COMMANDS)[options.command].split(":")
    return getattr(importlib.import_module("ansible_collections.stellaops.runtime.plugins.plugin_utils." + module),
                   function)(args[1:])
