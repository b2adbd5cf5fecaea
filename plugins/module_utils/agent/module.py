# Copyright (c) Stella Ops contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# This module_utils is PRIVATE to stellaops.runtime. It may change without notice.

"""What every target-side module shares: option sets, the engine client, running a manager, failures.

The options are documented once in the ``stellaops.runtime.docker`` and ``stellaops.runtime.task``
doc fragments.
"""

from __future__ import annotations

import select
import traceback

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import (
    DEFAULT_COMMAND_TIMEOUT,
    DEFAULT_WAIT_TIMEOUT,
)
from ansible_collections.stellaops.runtime.plugins.module_utils.engine.cli import DockerCli

DOCKER_ARGUMENT_SPEC = dict(
    docker_cli=dict(type="str", default="docker"),
    docker_host=dict(type="str"),
    command_timeout=dict(type="int", default=DEFAULT_COMMAND_TIMEOUT),
)

TASK_ARGUMENT_SPEC = dict(
    payload=dict(type="dict"),
    target=dict(type="dict"),
    work_directory=dict(type="path"),
    wait_timeout=dict(type="int", default=DEFAULT_WAIT_TIMEOUT),
    claim=dict(type="dict"),
    job_store=dict(type="str"),
)


def argument_spec(own, task=False):
    """A module's own options merged with the shared Docker (and agent task) options."""
    spec = dict(DOCKER_ARGUMENT_SPEC)
    if task:
        spec.update(TASK_ARGUMENT_SPEC)
    spec.update(own)
    return spec


def _hung_up(fds):
    """True when every pipe in ``fds`` reports a hang-up: no process holds its write end any more."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP)
    return len({fd for fd, event in poller.poll(0) if event & select.POLLHUP}) == len(fds)


def settle_when_hung_up(cmd):
    """A ``before_communicate_callback`` for ``run_command``: once both pipes are hung up, ``poll()``
    waits for the exit instead of answering ``None``.

    ``run_command`` reads until both pipes end, then asks ``poll()`` twice; when the command exits
    between the two questions (``timeout(1)`` closes its output just before it exits, so this is
    common), it goes back to waiting on no pipe at all, for a whole second. Waiting once nothing can
    write any more is what ``run_command`` means to do there, and it ends at once.
    """
    real_poll = cmd.poll
    fds = [cmd.stdout.fileno(), cmd.stderr.fileno()]

    def poll():
        returncode = real_poll()
        if returncode is None and _hung_up(fds):
            returncode = cmd.wait()
        return returncode

    cmd.poll = poll


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
        return module.run_command(argv, environ_update=environ, before_communicate_callback=settle_when_hung_up)

    return run_command


def engine_client(module, run_command=None):
    """The target's one engine client for this task."""
    return DockerCli(
        run_command or command_runner(module),
        docker=module.params["docker_cli"],
        warn=module.warn,
        timeout=module.params["command_timeout"],
    )


def fail_with(module, exc):
    """A ``StellaError`` as ``fail_json``: stable code, one-line reason, failure phase, evidence, warnings."""
    for warning in getattr(exc, "warnings", None) or ():
        module.warn(warning)
    evidence = dict(exc.evidence or {})
    evidence.pop("failurePhase", None)
    changed = evidence.pop("changed", False)
    if next_step(exc.code):
        evidence.setdefault("next", next_step(exc.code))
    module.fail_json(msg=exc.reason, code=exc.code, failurePhase=exc.phase, changed=changed, **evidence)


def run_task(module, task):
    """Run ``task()`` (it returns ``{"changed", "evidence", "warnings"[, "diff"]}``) and exit the module."""
    try:
        result = task()
    except StellaError as exc:
        fail_with(module, exc)
    except Exception as exc:  # pylint: disable=broad-exception-caught
        module.fail_json(
            msg="unexpected error: %s" % exc,
            code="internal_error",
            next=next_step("internal_error"),
            exception=traceback.format_exc(),
        )
    for warning in result["warnings"]:
        module.warn(warning)
    extra = {"diff": result["diff"]} if "diff" in result else {}
    module.exit_json(changed=result["changed"], **dict(result["evidence"], **extra))
