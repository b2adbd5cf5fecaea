"""The controller's process checks go through psutil (run/process.py), on real processes: a job's run that
is alive, stopped with SIGSTOP, a zombie, reaped, or whose pid was reused; and on a controller where
``/proc`` is not what answers (psutil stands in as macOS would answer)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.hints import next_step
from ansible_collections.stellaops.runtime.plugins.module_utils.host import procfs as _procfs
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import process as _process


def wait_for(check, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_running_process_is_running_and_keeps_its_start(child):
    assert wait_for(lambda: _process.stat(child.pid) is not None)
    status, started = _process.stat(child.pid)
    # whatever a live process is doing: running, sleeping, or "disk-sleep" while it still loads from a
    # busy disk; never one of the states that state() reads as stopped or gone
    assert status not in ("stopped", "tracing-stop", "zombie", "dead")
    assert _process.start_ticks(child.pid) == started
    assert _process.state(child.pid, started) == _process.RUNNING
    # the same number Linux keeps in /proc/PID/stat, so owners recorded before psutil still compare equal
    assert started == _procfs.stat(child.pid)[1]


def test_sigstop_is_stopped_and_sigcont_running_again(child):
    started = _process.start_ticks(child.pid)
    os.kill(child.pid, signal.SIGSTOP)
    assert wait_for(lambda: _process.state(child.pid, started) == _process.STOPPED)
    assert _process.stat(child.pid)[0] == "stopped"
    os.kill(child.pid, signal.SIGCONT)
    assert wait_for(lambda: _process.state(child.pid, started) == _process.RUNNING)


def test_an_exited_process_is_gone_as_a_zombie_and_once_reaped(child):
    started = _process.start_ticks(child.pid)
    child.kill()
    assert wait_for(lambda: (_process.stat(child.pid) or ("dead",))[0] in ("zombie", "dead"))
    assert _process.state(child.pid, started) == _process.GONE  # a zombie until reaped
    child.wait()
    assert _process.stat(child.pid) is None and _process.start_ticks(child.pid) is None
    assert _process.state(child.pid, started) == _process.GONE


def test_a_dead_pid_and_a_reused_pid_are_gone(child):
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    dead = int(done.stdout)
    assert _process.stat(dead) is None or _process.stat(dead)[1] != _process.start_ticks(child.pid)
    assert _process.state(dead, None) == _process.GONE
    started = _process.start_ticks(child.pid)
    assert _process.state(child.pid, started - 1) == _process.GONE  # the pid now names another process


def test_the_job_owner_reads_psutil_not_proc(monkeypatch):
    """As on a macOS controller: nothing under /proc, psutil answers. The owner's checks follow psutil."""
    answers = {"status": "running", "created": 1000.5}

    class OneShot:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class FakeProcess:
        def __init__(self, pid):
            if pid != 4242:
                raise FakePsutil.NoSuchProcess(pid)

        def oneshot(self):
            return OneShot()

        def status(self):
            return answers["status"]

        def create_time(self):
            return answers["created"]

    class FakePsutil:
        class NoSuchProcess(Exception):
            pass

        class AccessDenied(Exception):
            pass

        Process = FakeProcess

        @staticmethod
        def boot_time():
            return 900.0

    monkeypatch.setattr(_process, "_psutil", lambda: FakePsutil)
    monkeypatch.setattr(_procfs, "stat", lambda *a, **k: pytest.fail("the controller read /proc"))
    ticks = int(round(100.5 * os.sysconf("SC_CLK_TCK")))
    assert _job_owner.process_start(4242) == ticks
    owner = {"host": "this", "pid": 4242, "startTicks": ticks}
    assert _job_owner.owner_state(owner) == "running"
    answers["status"] = "stopped"
    assert _job_owner.owner_state(owner) == "stopped"
    answers["status"] = "zombie"
    assert _job_owner.owner_state(owner) == "gone"
    assert _job_owner.owner_state(dict(owner, pid=4243)) == "gone"


def test_without_psutil_the_check_fails_with_the_pip_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    with pytest.raises(StellaError) as caught:
        _process.stat(os.getpid())
    assert caught.value.code == "psutil_missing" and "pip install psutil" in caught.value.reason
    assert next_step("psutil_missing")
