# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What every target-side module shares: the Docker options, the command runner, failure shaping.

The options are documented once in the ``stellaops.runtime.docker`` doc fragment.
"""

from __future__ import annotations

DOCKER_ARGUMENT_SPEC = dict(
    docker_cli=dict(type="str", default="docker"),
    docker_host=dict(type="str"),
)


def argument_spec(own):
    """A module's own options merged with the shared Docker options."""
    spec = dict(DOCKER_ARGUMENT_SPEC)
    spec.update(own)
    return spec


def command_runner(module):
    """``run_command(argv, environ_update=None)`` with ``LC_ALL=C`` and the module's ``docker_host``.

    Always an argv list (never a shell string); returns ``(rc, stdout, stderr)``.
    """
    base = {"LC_ALL": "C"}
    if module.params.get("docker_host"):
        base["DOCKER_HOST"] = module.params["docker_host"]

    def run_command(argv, environ_update=None):
        environ = dict(base)
        environ.update(environ_update or {})
        return module.run_command(argv, environ_update=environ)

    return run_command


def fail_with(module, exc):
    """Turn a ``StellaError`` into ``fail_json``: stable code, one-line reason, failure phase, evidence."""
    evidence = dict(exc.evidence or {})
    evidence.pop("failurePhase", None)
    changed = evidence.pop("changed", False)
    module.fail_json(msg=exc.reason, code=exc.code, failurePhase=exc.phase, changed=changed, **evidence)
