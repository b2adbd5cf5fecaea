# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the ``stella`` commands that read the job store share (docs/stella-command.md): the store they
read, the one their options choose (``--store LOCATION``, the Compose provider's options ``--compose-project
P [--service S] [--state-directory DIR]``, ``STELLA_JOB_STORE`` or the default: provider/location.py),
opened only when it is there (:func:`existing_store`: they never create one), their parsing, and their one
error line ``stella <command>: <code>: <reason>`` (credentials of a DSN redacted) with exit status 1 when
the store or the job cannot be read; 2 is a usage error. The commands: ``stella report`` (report),
``stella health`` (health), ``stella interrupt`` and ``stella close`` (close), ``stella prune`` (prune),
``stella list`` and ``show`` (jobs), ``stella evidence`` (evidence).
"""

from __future__ import annotations

import argparse
import contextlib
import os

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError, redact_url
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import error_line
from ansible_collections.stellaops.runtime.plugins.plugin_utils.provider import location as _location
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

STORE_HELP = _location.STORE_HELP

# What a missing store's error line adds, by the rule that chose the store (``--store`` adds nothing).
MISSING_HINTS = {
    "default": "the default store; --store, --compose-project or $%s choose another" % _location.STORE_ENV,
    _location.STORE_ENV: "from $%s" % _location.STORE_ENV,
}


@contextlib.contextmanager
def existing_store(location, source=None):
    """The job store at ``location``, closed when the block ends; ``job_store_missing`` when a SQLite
    store is not there (these commands never create one). ``source``: the rule that chose it."""
    path = _job_store.missing_sqlite(location)
    if path:
        hint = MISSING_HINTS.get(source, source) if source not in (None, "--store") else None
        raise StellaError(
            "job_store_missing", "no job store at %s%s" % (os.path.expanduser(path), " (%s)" % hint if hint else "")
        )
    store = _job_store.open_store(location)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def chosen_store(options, environ=None):
    """The existing job store the parsed store options choose (``location.resolve``)."""
    where = _location.resolve(options, environ)
    with existing_store(where.location, where.source) as store:
        yield store


def parse_command(parser, argv, provider_options=True):
    """``(options, None)``, or ``(None, exit status)`` after ``-h`` or a usage error. The parser gets the
    Compose provider's store options unless ``provider_options`` is false (it has them already)."""
    if provider_options:
        _location.add_options(parser, store=False)
    try:
        options = parser.parse_args(argv)
        problem = _location.usage_error(options)
        if problem:
            parser.error(problem)
        return options, None
    except SystemExit as exc:
        return None, exc.code


def fail_line(stderr, command, exc):
    """The one error line of a failed command: ``stella COMMAND: CODE: REASON; next: HINT``."""
    stderr.write("stella %s: %s\n" % (command, error_line(exc.code, redact_url(str(exc.reason)))))
    return 1


def bounded(kind, parse, low, high):
    """An argparse type: ``parse(text)`` from ``low`` up to (not including) ``high``, else a usage error."""

    def convert(text):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not %s: %r" % (kind, text)) from None
        if not low <= value < high:
            raise argparse.ArgumentTypeError("%s from %s up to %s, not %s" % (kind, low, high, text))
        return value

    return convert
