# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which job store a ``stella`` store command reads (docs/stella-command.md); the first that applies:

1. ``--store LOCATION`` (a path, ``sqlite:///path`` or a PostgreSQL DSN);
2. ``--compose-project P [--service S] [--state-directory DIR]``: the store the Compose provider keeps
   for that project and service (``DIR/P/S/jobs.sqlite3``, the layout of :func:`state_dir`;
   ``DIR`` defaults to the provider's ``~/.local/state/stellaops/provider``); without ``--service``,
   the one service of ``P`` that has a store;
3. the ``STELLA_JOB_STORE`` environment variable;
4. the playbooks' default store, ``~/.local/state/stellaops/jobs.sqlite3`` (``sql.DEFAULT_STORE``).
"""

from __future__ import annotations

import collections
import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import arguments as _arguments
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import DEFAULT_STORE

STORE_ENV = "STELLA_JOB_STORE"
STORE_FILE = "jobs.sqlite3"  # the provider's store in its state directory (provider.cli ``up``)
STORE_HELP = "the job store: a path, sqlite:///path or postgresql://... (default: $%s, else %s)" % (
    STORE_ENV,
    DEFAULT_STORE,
)

# ``location``: what the store is opened with; ``source``: which rule chose it, as the commands print it.
Location = collections.namedtuple("Location", "location source")


def add_options(parser, store=True):
    """The store options on ``parser``: ``--store`` (unless ``store`` is false: the parser has it
    already) and the Compose provider's ``--compose-project``, ``--service``, ``--state-directory``."""
    if store:
        parser.add_argument("--store", metavar="LOCATION", help=STORE_HELP)
    group = parser.add_argument_group("the Compose provider's job store (instead of --store)")
    group.add_argument(
        "--compose-project",
        metavar="PROJECT",
        help="read the store the Compose provider keeps for this Compose project (docker compose -p PROJECT)",
    )
    group.add_argument(
        "--service",
        metavar="SERVICE",
        help="the service of PROJECT whose store to read (default: the one service of PROJECT that has a store)",
    )
    group.add_argument(
        "--state-directory",
        metavar="DIR",
        help="the provider's state_directory option (default ~/.local/state/stellaops/provider)",
    )
    return parser


def usage_error(options):
    """What is wrong with the store options given together (pure); ``None`` when nothing is."""
    if options.compose_project is None:
        if options.service is not None or options.state_directory is not None:
            return "--service and --state-directory need --compose-project"
        return None
    if options.store is not None:
        return "--store and --compose-project choose two stores: give one"
    if not _arguments.PROJECT_NAME.match(options.compose_project):  # the names the provider accepts from Compose
        return "--compose-project: not a Compose project name: %r" % options.compose_project
    if options.service is not None and not _arguments.SERVICE_NAME.match(options.service):
        return "--service: not a Compose service name: %r" % options.service
    return None


def state_dir(parsed):
    """The provider's state directory of a parsed request: ``DIR/PROJECT/SERVICE`` (``DIR``: its
    ``state_directory`` option, default ``~/.local/state/stellaops/provider``)."""
    base = os.path.expanduser(parsed["options"].get("state_directory") or "~/.local/state/stellaops/provider")
    return os.path.join(base, parsed["project"], parsed["service"] or "service")


def provider_store(project, service=None, state_directory=None):
    """The provider's store of ``project``'s ``service`` (``service`` ``None``: the store ``up`` keeps for a
    project Compose names no service of)."""
    return os.path.join(
        state_dir({"project": project, "service": service, "options": {"state_directory": state_directory}}), STORE_FILE
    )


def project_services(project, state_directory=None):
    """``{service directory: store path}`` of the provider stores that exist for ``project``."""
    base = os.path.dirname(os.path.dirname(provider_store(project, "-", state_directory)))
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return {}
    return {
        name: os.path.join(base, name, STORE_FILE)
        for name in names
        if os.path.isfile(os.path.join(base, name, STORE_FILE))
    }


def resolve(options, environ=None):
    """The :class:`Location` the parsed store options choose (see the module's rules). A Compose project
    without ``--service`` whose stores are none or several is a ``job_store_missing`` or
    ``job_store_ambiguous`` error."""
    environ = os.environ if environ is None else environ
    if options.store:
        return Location(options.store, "--store")
    if options.compose_project:
        project, service, state = options.compose_project, options.service, options.state_directory
        chosen = "--compose-project %s" % project
        if service is not None:
            return Location(provider_store(project, service, state), chosen + " --service " + service)
        found = project_services(project, state)
        if len(found) == 1:
            ((name, path),) = found.items()
            return Location(path, chosen + " (its one service with a store: %s)" % name)
        base = os.path.dirname(os.path.dirname(provider_store(project, "-", state)))
        if not found:
            raise StellaError(
                "job_store_missing", "the Compose provider keeps no job store for project %s under %s" % (project, base)
            )
        raise StellaError(
            "job_store_ambiguous",
            "the Compose provider keeps job stores for several services of "
            "project %s under %s (%s): choose one with --service" % (project, base, ", ".join(found)),
        )
    if environ.get(STORE_ENV):
        return Location(environ[STORE_ENV], STORE_ENV)
    return Location(DEFAULT_STORE, "default")


def shown(location):
    """The store of a :class:`Location` as the commands print it: a path with ``~`` expanded, a DSN with its
    credentials redacted."""
    return redact_url(os.path.expanduser(location.location))


def describe(location):
    """``LOCATION (SOURCE)``: which store a command read, and the rule that chose it."""
    return "%s (%s)" % (shown(location), location.source)
