# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``stella``: find the installed stellaops.runtime collection and run its command.

The pip package carries no collection content. The collection is the one ``ansible-galaxy collection
install`` put on a collections path; ``stella`` looks, in this order, in ``ANSIBLE_COLLECTIONS_PATH``
(``ANSIBLE_COLLECTIONS_PATHS``), the collections path of the Ansible configuration (``ansible.cfg``),
``~/.ansible/collections``, ``/usr/share/ansible/collections``, ``/etc/ansible/collections`` and the
``ansible_collections`` directories on this Python's ``sys.path``, and runs the first one found (the one
Ansible uses).

A collection of another version than this package's is named, with where it lies, on one line of stderr:
a ``warning`` when it runs it (its Python requirements may be another version's), ``collection_incompatible``
and exit status 1 when it cannot (an older collection without the ``stella`` command's module, or one whose
module does not import with this package's requirements).
"""

from __future__ import annotations

import json
import os
import re
import sys

# This package's version: the collection's it was released with (python/pyproject.toml, a test keeps them equal).
VERSION = "0.3.0"

COLLECTION = ("stellaops", "runtime")
ENTRY = ("plugins", "plugin_utils", "command", "main.py")
MODULE = "ansible_collections.stellaops.runtime.plugins.plugin_utils.command.main"
DEFAULT_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections", "/etc/ansible/collections")
# `stella` without the collection: one line on stderr and this exit status (a failed command, as every
# `stella COMMAND: CODE: REASON` line).
MISSING_RC = 1
MISSING_CODE = "collection_missing"
INCOMPATIBLE_CODE = "collection_incompatible"
UPGRADE = "run ansible-galaxy collection install --upgrade stellaops.runtime"


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


def _home(root):
    return os.path.join(root, "ansible_collections", *COLLECTION)


def find_collection(environ=None):
    """The collections root (the directory holding ``ansible_collections/stellaops/runtime``) of the first
    installed stellaops.runtime on :func:`search_paths` (with the ``stella`` command's module or not), or ``None``."""
    for root in search_paths(environ):
        home = _home(root)
        if any(os.path.isfile(os.path.join(home, *parts)) for parts in (ENTRY, ("MANIFEST.json",), ("galaxy.yml",))):
            return root
    return None


def collection_version(root):
    """The version of the stellaops.runtime under ``root``: its ``MANIFEST.json``'s, else its ``galaxy.yml``'s;
    ``None`` when neither says."""
    home = _home(root)
    try:
        with open(os.path.join(home, "MANIFEST.json"), encoding="utf-8") as handle:
            return str(json.load(handle)["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(home, "galaxy.yml"), encoding="utf-8") as handle:
            found = re.search(r"^version:\s*['\"]?([^\s'\"#]+)", handle.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def _order(version):
    """``version`` as comparable numbers (``None`` when it is not ``X.Y.Z``)."""
    try:
        return tuple(int(part) for part in version.split("."))
    except (AttributeError, ValueError):
        return None


def describe(version, home):
    """``stellaops.runtime VERSION at PATH, newer than this stella (stellaops-runtime X)`` (pure)."""
    ours, theirs = _order(VERSION), _order(version)
    word = "another version" if None in (ours, theirs) else ("newer" if theirs > ours else "older")
    return "stellaops.runtime %s at %s, %s than this stella (stellaops-runtime %s)" % (
        version or "of unknown version",
        home,
        word,
        VERSION,
    )


def main(argv=None):
    """The console script ``stella``: the collection's own ``stella`` command."""
    argv = list(sys.argv if argv is None else argv)
    root = find_collection()
    if root is None:
        sys.stderr.write(
            "stella: %s: the stellaops.runtime collection is not installed on the collections path "
            "(%s): run ansible-galaxy collection install stellaops.runtime\n"
            % (MISSING_CODE, os.pathsep.join(search_paths()))
        )
        return MISSING_RC
    version, home = collection_version(root), _home(root)
    pip = "python3 -m pip install 'stellaops-runtime==%s'" % version if version else None
    if not os.path.isfile(os.path.join(home, *ENTRY)):
        newer = None not in (_order(version), _order(VERSION)) and _order(version) > _order(VERSION)
        sys.stderr.write(
            "stella: %s: found %s; this stella cannot run it, it has no %s: %s\n"
            % (INCOMPATIBLE_CODE, describe(version, home), "/".join(ENTRY), pip if newer else UPGRADE)
        )
        return MISSING_RC
    if root not in sys.path:
        sys.path.insert(0, root)
    import importlib  # pylint: disable=import-outside-toplevel

    try:
        command = importlib.import_module(MODULE)
    except ImportError as exc:
        if version == VERSION:
            raise
        sys.stderr.write(
            "stella: %s: found %s; this stella cannot run it: %s: %s\n"
            % (INCOMPATIBLE_CODE, describe(version, home), exc, " or ".join(filter(None, (pip, UPGRADE))))
        )
        return MISSING_RC
    if version != VERSION:
        sys.stderr.write(
            "stella: warning: found %s; runs it%s\n"
            % (describe(version, home), " (for its Python requirements: %s)" % pip if pip else "")
        )
    return command.main(["stella"] + argv[1:])
