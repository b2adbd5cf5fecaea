# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella``: :func:`main` (what ``scripts/stella.py``, the launchers ``stella install`` writes and a
pip console script call), ``--help``, ``--version``, the Docker CLI plugin's metadata and
``stella install``. ``stella compose ...`` goes to ``provider.cli.compose`` as Compose wrote it; every
other command to the function :data:`COMMANDS` names, which parses its own arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import error_line
from ansible_collections.stellaops.runtime.plugins.plugin_utils.execution.paths import COLLECTION_ROOT, COLLECTIONS_PATH
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import dependencies as _dependencies

# the Docker CLI plugin's metadata; its Version is the collection's (collection_version)
PLUGIN_METADATA = {
    "SchemaVersion": "0.1.0",
    "Vendor": "Stella Ops",
    "ShortDescription": "Stella Ops runtime: Compose provider (stella compose ...)",
}
# what the launchers ``stella install`` writes import
ENTRY_POINT = "ansible_collections.stellaops.runtime.plugins.plugin_utils.command.main"
ROOT_BIN_DIR = "/usr/local/bin"
USER_BIN_DIR = "~/.local/bin"

# ``stella COMMAND``: what ``stella --help`` says of it, and the function that runs it (a module under
# plugin_utils and its name; install and compose are here).
COMMANDS = (
    ("list", "the jobs of a job store, newest first", "command.jobs:list_jobs"),
    ("show", "one job, as the job_show playbook prints it (--follow: until it ends)", "command.jobs:show"),
    ("report", "the HTML evidence report of a job (docs/report.md)", "command.report:report"),
    (
        "evidence",
        "the evidence documents the job store keeps for a job: listed, or exported",
        "command.evidence:evidence",
    ),
    ("health", "the health status the job store keeps for each target", "command.health:health"),
    (
        "verify",
        "check a job's signed evidence offline, or (--live) that the targets still run what it recorded",
        "command.verify:verify",
    ),
    ("keys", "generate a signing key pair (cosign's key format)", "command.keys:keys"),
    ("sign", "sign an image in a registry, in cosign's tag layout", "command.sign:sign"),
    ("interrupt", "record a job whose controller run is gone as interrupted", "command.close:interrupt"),
    ("close", "close a job whose close did not finish: its evidence written", "command.close:close"),
    ("prune", "remove finished jobs past a retention age", "command.prune:prune"),
    ("install", "put stella on PATH and docker-stella among the Docker CLI plugins", None),
    ("compose", "the Compose provider, as Compose runs it (stella compose -h)", None),
)
SYNOPSIS = """stella [-h] [--version] COMMAND ...
       stella list [--status STATUS] [--project PROJECT] [--limit N] [--json] [STORE]
       stella show JOB [--json] [--follow] [STORE]
       stella report JOB [--evidence-dir DIR] [--output FILE] [STORE]
       stella evidence JOB [--output DIR] [--json] [STORE]
       stella health [TARGET ...] [--json] [--check] [STORE]
       stella verify JOB --key PUB [--evidence-dir DIR] [--json] [STORE]
       stella verify --live [PROJECT ...] [--inventory INV] [--json] [STORE]
       stella keys generate [--output-prefix PREFIX] [--passphrase-file FILE] [--algorithm ALG] [--force]
       stella sign IMAGE@DIGEST --key KEY [--passphrase-file FILE] [--insecure-registry HOST] [--identity REF] [--timeout SECONDS]
       stella interrupt JOB [--reason TEXT] [STORE]
       stella close JOB [--evidence-dir DIR] [--report] [--signing-key KEY] [--passphrase-file FILE] [STORE]
       stella prune --older-than DAYS [--keep N] [--evidence-dir DIR] [--dry-run] [--json] [STORE]
       stella install [--bin-dir DIR] [--plugin-dir DIR]
       stella compose [--project-name=NAME] metadata|up|down|stop|pull [--option=value ...] [SERVICE]
STORE: --store LOCATION | --compose-project PROJECT [--service SERVICE] [--state-directory DIR]"""
EPILOG = """store: --store, else --compose-project (the Compose provider's store of that project), else
$STELLA_JOB_STORE, else ~/.local/state/stellaops/jobs.sqlite3 (the playbooks' default).
exit status: 0 done; 1 failed (one line `stella COMMAND: CODE: REASON` on stderr; show --follow:
the job did not succeed); 2 usage error; 3 health --check: a target shown is not healthy;
verify --live: a target drifted from its last job.
Each command's options: stella COMMAND -h. Documentation: docs/stella-command.md."""
COMPOSE_HELP = (
    "usage: stella compose [--project-name=NAME] metadata|up|down|stop|pull [--option=value ...] "
    "[SERVICE]\n\nThe Compose provider: Compose runs it for a service with `provider: {type: stella}`; "
    "stdout carries only JSON lines. `stella compose metadata` lists the options (docs/provider.md).\n"
)


def is_root():
    return hasattr(os, "geteuid") and os.geteuid() == 0


def default_bin_dir():
    """Where ``stella install`` puts the launcher: ``/usr/local/bin`` for root, ``~/.local/bin`` otherwise."""
    return ROOT_BIN_DIR if is_root() else os.path.expanduser(USER_BIN_DIR)


def install_parser():
    """``stella install [--bin-dir DIR] [--plugin-dir DIR]``."""
    parser = argparse.ArgumentParser(
        prog="stella install",
        description="Put a stella launcher on PATH and the "
        "docker-stella Docker CLI plugin in place, both running this collection with "
        "this Python, once the provider's Python dependencies are there "
        "(docs/provider.md).",
    )
    parser.add_argument(
        "--bin-dir",
        metavar="DIR",
        default=None,
        help="where the stella launcher goes (default %s for root, %s for any other user)"
        % (ROOT_BIN_DIR, USER_BIN_DIR),
    )
    parser.add_argument(
        "--plugin-dir",
        metavar="DIR",
        default=os.path.expanduser("~/.docker/cli-plugins"),
        help="where the docker-stella CLI plugin goes (default ~/.docker/cli-plugins)",
    )
    return parser


def on_path(directory, environ=None):
    """Whether ``directory`` is one of the directories of ``PATH``."""
    wanted = os.path.realpath(directory)
    return any(
        os.path.realpath(os.path.expanduser(entry)) == wanted
        for entry in (environ if environ is not None else os.environ).get("PATH", "").split(os.pathsep)
        if entry
    )


def install(argv):
    """``stella install [--bin-dir DIR] [--plugin-dir DIR]``: a ``stella`` launcher on PATH and the
    ``docker-stella`` CLI plugin, both running this collection with this Python (1 when a dependency
    of the provider is missing, 2 on a usage error)."""
    try:
        options = install_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code
    try:
        _dependencies.require("install")
    except StellaError as exc:
        sys.stderr.write("stella install: %s\n" % error_line(exc.code, exc.reason))
        return 1
    bin_dir = options.bin_dir or default_bin_dir()
    launcher = (
        "#!%s\n# stella: the stellaops.runtime Compose provider (written by `stella install`)\n"
        "import sys\nsys.path.insert(0, %r)\n"
        "from %s import main\n"
        "sys.exit(main(sys.argv))\n" % (sys.executable, COLLECTIONS_PATH, ENTRY_POINT)
    )
    written = []
    for directory, name in ((bin_dir, "stella"), (options.plugin_dir, "docker-stella")):
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(launcher)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    sys.stdout.write("installed %s\n" % ", ".join(written))
    if not on_path(bin_dir):
        sys.stderr.write(
            'stella install: warning: %s is not on PATH: add it (export PATH="%s:$PATH" in your shell '
            "profile) or run %s\n" % (bin_dir, bin_dir, written[0])
        )
    return 0


def command_parser():
    """``stella [-h] [--version] COMMAND``: the command's name only; each command parses its own arguments."""
    parser = argparse.ArgumentParser(
        prog="stella",
        usage=SYNOPSIS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="The stellaops.runtime command: the job store from a shell, and the Compose provider.\n\n"
        "commands:\n" + "".join("  %-10s %s\n" % command[:2] for command in COMMANDS),
    )
    parser.add_argument("--version", action="store_true", help="print the collection's version and exit")
    parser.add_argument(
        "command", metavar="COMMAND", nargs="?", choices=[command[0] for command in COMMANDS], help=argparse.SUPPRESS
    )
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
        from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import cli as _provider_cli  # pylint: disable=import-outside-toplevel

        return _provider_cli.compose(args, sys.stdin.buffer, sys.stdout.buffer, os.environ)
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
    return getattr(
        importlib.import_module("ansible_collections.stellaops.runtime.plugins.plugin_utils." + module), function
    )(args[1:])
