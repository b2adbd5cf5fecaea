# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella``: find the installed stellaops.runtime collection and run its command.

The pip package carries no collection content. The collection is the one ``ansible-galaxy collection
install`` put on a collections path; ``stella`` looks, in this order, in ``ANSIBLE_COLLECTIONS_PATH``
(``ANSIBLE_COLLECTIONS_PATHS``), the collections path of the Ansible configuration (``ansible.cfg``),
``~/.ansible/collections``, ``/usr/share/ansible/collections``, ``/etc/ansible/collections`` and the
``ansible_collections`` directories on this Python's ``sys.path``, and runs the first one found.
"""

from __future__ import annotations

import os
import sys

COLLECTION = ("stellaops", "runtime")
ENTRY = ("plugins", "plugin_utils", "command", "main.py")
MODULE = "ansible_collections.stellaops.runtime.plugins.plugin_utils.command.main"
DEFAULT_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections", "/etc/ansible/collections")
# `stella` without the collection: one line on stderr and this exit status (a failed command, as every
# `stella COMMAND: CODE: REASON` line).
MISSING_RC = 1
MISSING_CODE = "collection_missing"


def _split(value):
    return [part for part in (value or "").split(os.pathsep) if part]


def _configured_paths():
    """The collections path of the Ansible configuration (ansible.cfg, its environment variables), or none
    when ansible-core cannot say."""
    try:
        from ansible import constants as C  # pylint: disable=import-outside-toplevel
    except Exception:  # pylint: disable=broad-exception-caught
        return []
    return [path for path in (getattr(C, "COLLECTIONS_PATHS", None) or []) if isinstance(path, str)]


def search_paths(environ=None):
    """Where ``stella`` looks for the collection, in order, each once."""
    environ = os.environ if environ is None else environ
    paths = _split(environ.get("ANSIBLE_COLLECTIONS_PATH")) or _split(environ.get("ANSIBLE_COLLECTIONS_PATHS"))
    paths += _configured_paths() + list(DEFAULT_PATHS)
    paths += [entry for entry in sys.path if entry and os.path.isdir(os.path.join(entry, "ansible_collections"))]
    seen, out = set(), []
    for path in paths:
        path = os.path.abspath(os.path.expanduser(path))
        if os.path.basename(path) == "ansible_collections":  # Ansible takes a path given either way
            path = os.path.dirname(path)
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


def find_collection(environ=None):
    """The collections root (the directory holding ``ansible_collections/stellaops/runtime``) of the first
    installed stellaops.runtime on :func:`search_paths`, or ``None``."""
    for root in search_paths(environ):
        if os.path.isfile(os.path.join(root, "ansible_collections", *(COLLECTION + ENTRY))):
            return root
    return None


def main(argv=None):
    """The console script ``stella``: the collection's own ``stella`` command."""
    argv = list(sys.argv if argv is None else argv)
    root = find_collection()
    if root is None:
        sys.stderr.write("stella: %s: the stellaops.runtime collection is not installed on the collections path "
                         "(%s): run ansible-galaxy collection install stellaops.runtime\n" % (
                             MISSING_CODE, os.pathsep.join(search_paths())))
        return MISSING_RC
    if root not in sys.path:
        sys.path.insert(0, root)
    import importlib  # pylint: disable=import-outside-toplevel
    command = importlib.import_module(MODULE)
    return command.main(["stella"] + argv[1:])
