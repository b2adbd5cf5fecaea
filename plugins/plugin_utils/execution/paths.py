# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where this collection is, as it was found (a symbolic link in the collections path is kept), and the
environment of a playbook this Python runs through ansible-runner."""

from __future__ import annotations

import os
import sys

# <collections path>/ansible_collections/stellaops/runtime/plugins/plugin_utils/execution/paths.py
COLLECTION_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3))
# the directory that holds the ``ansible_collections`` package
COLLECTIONS_PATH = os.path.normpath(os.path.join(COLLECTION_ROOT, *[os.pardir] * 3))


def playbook_environment(environ=None):
    """The environment variables of a playbook run through ansible-runner from this Python: its
    ``ansible-playbook`` first on ``PATH`` (Compose runs a provider with the user's ``PATH``), this
    collection on the collections path, no colours, no retry files."""
    environ = os.environ if environ is None else environ
    return {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), environ.get("PATH", "")]),
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS_PATH,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
    }
