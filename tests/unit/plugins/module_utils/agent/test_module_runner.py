"""agent/module.py settle_when_hung_up: ``run_command`` waits for a command whose pipes have all ended instead
of asking the selector again for a second (the race after ``timeout(1)`` closes its output)."""

from __future__ import annotations

import os

from ansible_collections.stellaops.runtime.plugins.module_utils.agent import module as _module


class Command:
    """What ``run_command`` hands the callback: a Popen-like object over two real pipes."""

    def __init__(self, hung_up):
        self.pipes = [os.pipe(), os.pipe()]
        self.stdout = os.fdopen(self.pipes[0][0], "rb")
        self.stderr = os.fdopen(self.pipes[1][0], "rb")
        self.waited = 0
        self.answers = [None]
        for _read, write in self.pipes:
            if hung_up:
                os.close(write)
        self.writers = [] if hung_up else [write for _read, write in self.pipes]

    def poll(self):
        return self.answers.pop(0) if self.answers else 0

    def wait(self):
        self.waited += 1
        return 0

    def close(self):
        self.stdout.close()
        self.stderr.close()
        for write in self.writers:
            os.close(write)


def test_a_command_whose_pipes_all_ended_is_waited_for():
    cmd = Command(hung_up=True)
    try:
        _module.settle_when_hung_up(cmd)
        assert cmd.poll() == 0 and cmd.waited == 1
    finally:
        cmd.close()


def test_a_command_that_still_holds_a_pipe_is_only_polled():
    cmd = Command(hung_up=False)
    try:
        _module.settle_when_hung_up(cmd)
        assert cmd.poll() is None and cmd.waited == 0
    finally:
        cmd.close()


def test_one_pipe_still_open_is_not_a_hang_up():
    read_a, write_a = os.pipe()
    read_b, write_b = os.pipe()
    os.close(write_a)
    try:
        assert _module._hung_up([read_a, read_b]) is False  # pylint: disable=protected-access
        os.close(write_b)
        write_b = None
        assert _module._hung_up([read_a, read_b]) is True  # pylint: disable=protected-access
    finally:
        for fd in (read_a, read_b, write_b):
            if fd is not None:
                os.close(fd)


def test_the_runner_passes_the_callback_to_run_command():
    seen = {}

    class Module:
        params = {"docker_host": None}

        @staticmethod
        def run_command(argv, environ_update=None, before_communicate_callback=None):
            seen.update(argv=argv, env=environ_update, callback=before_communicate_callback)
            return 0, "", ""

    assert _module.command_runner(Module())(["docker", "ps"]) == (0, "", "")
    assert seen["callback"] is _module.settle_when_hung_up and seen["env"] == {"LC_ALL": "C"}
