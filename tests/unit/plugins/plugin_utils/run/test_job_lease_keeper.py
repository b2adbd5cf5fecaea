"""The keeper of a job's claim lease (docs/job-store.md#claim-lease): its loop on a scripted clock, the
owner states it reads from /proc, and the real keeper process renewing a real SQLite store while a real
owner process runs, is stopped, is resumed and ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.stellaops.runtime.plugins.module_utils.host import procfs as _procfs
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.errors import StellaError
from ansible_collections.stellaops.runtime.plugins.module_utils.contract.vocabulary import utc_timestamp
from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import lease as _job_lease
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store

COLL_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 5, ".build", "collections")
ELSEWHERE = {"host": "controller-b.invalid", "pid": 4242, "startTicks": 1}


class Script:
    """A scripted keeper run: ``states`` is what ``owner_state`` answers at each look (one look per
    poll), ``statuses`` what each renewal answers, except the renewals numbered in ``unreachable``,
    which find the store unreachable. Time moves only in sleep."""

    def __init__(self, states, statuses=(), unreachable=()):
        self.states = list(states)
        self.statuses = list(statuses)
        self.unreachable = set(unreachable)
        self.now = 0.0
        self.renewals = []

    def state(self):
        return self.states.pop(0)

    def renew(self):
        self.renewals.append(self.now)
        if len(self.renewals) in self.unreachable:
            raise StellaError("job_store_failed", "cannot renew: connection refused")
        return self.statuses.pop(0) if self.statuses else "Running"

    def sleep(self, seconds):
        self.now += seconds

    def run(self, lease):
        return _job_lease.keep(self.renew, self.state, lease, clock=lambda: self.now, sleep=self.sleep)


@pytest.mark.parametrize("lease, every", [(900, 300.0), (30, 10.0), (3, 1.0), (1, 1.0)])
def test_a_lease_is_renewed_three_times_per_lease_and_at_most_every_second(lease, every):
    assert _job_lease.renew_every(lease) == every


def test_the_keeper_renews_every_third_of_the_lease_while_the_owner_runs():
    script = Script(["running"] * 25 + ["gone"])
    assert script.run(30) == "owner_gone"
    assert script.renewals == [0.0, 10.0, 20.0]


def test_a_stopped_owner_is_not_renewed_and_a_resumed_one_is_renewed_at_once():
    script = Script(["running"] * 3 + ["stopped"] * 15 + ["running"] * 3 + ["gone"])
    assert script.run(30) == "owner_gone"
    assert script.renewals == [0.0, 18.0]  # due at 10 s, but stopped until 18 s


@pytest.mark.parametrize("status", ["Succeeded", "Failed", "RolledBack", None])
def test_the_keeper_ends_when_the_job_finished_or_is_gone_from_the_store(status):
    script = Script(["running"] * 30, ["Running", status])
    assert script.run(30) == "job_finished"
    assert script.renewals == [0.0, 10.0]


def test_a_store_that_cannot_be_reached_is_tried_again_at_the_next_renewal():
    script = Script(["running"] * 25 + ["gone"], unreachable={1})
    assert script.run(30) == "owner_gone"
    assert script.renewals == [0.0, 10.0, 20.0]


def own_owner():
    return {"host": "this", "pid": os.getpid(), "startTicks": _job_owner.process_start(os.getpid())}


def test_owner_states_read_from_proc():
    assert _job_owner.owner_state(own_owner()) == "running"
    assert _job_owner.owner_state(dict(own_owner(), startTicks=own_owner()["startTicks"] - 1)) == "gone"  # pid reused
    child = subprocess.Popen(["sleep", "60"])
    try:
        owner = {"host": "this", "pid": child.pid, "startTicks": _job_owner.process_start(child.pid)}
        assert _job_owner.owner_state(owner) == "running"
        os.kill(child.pid, signal.SIGSTOP)
        assert wait_for(lambda: _job_owner.owner_state(owner) == "stopped")
        os.kill(child.pid, signal.SIGKILL)
        assert wait_for(lambda: _job_owner.owner_state(owner) == "gone")  # a zombie until reaped
    finally:
        child.kill()
        child.wait()
    assert _job_owner.owner_state(owner) == "gone"


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


OWNER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import lease as _job_lease
from ansible_collections.stellaops.runtime.plugins.plugin_utils.run import owner as _job_owner
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store import sql as _job_store
owner = {"host": "this", "pid": os.getpid(), "startTicks": _job_owner.process_start(os.getpid())}
store = _job_store.open_store(sys.argv[2])  # open while the keeper starts, as in the task's worker
store.get("job-1")
print(_job_lease.start_keeper(sys.argv[2], "job-1", owner, 2), flush=True)
time.sleep(120)
"""


def keeper_ended(pid):
    stat = _procfs.stat(pid)
    return stat is None or stat[0] in ("Z", "X")


@pytest.fixture
def running_job(tmp_path):
    """job-1, Running, with a 2 s claim lease, owned by a run on another controller."""
    location = str(tmp_path / "jobs.sqlite3")
    store = _job_store.open_store(location)
    targets = {"a": {"targetId": "id-a", "targetName": "a", "projectName": "shop"}}
    now = utc_timestamp()
    store.create(
        _job.new_job(
            job_id="job-1",
            job_id_source=None,
            summary={"release": {"id": "r1"}},
            batches=[["a"]],
            targets=targets,
            options={"claimLeaseSeconds": 2},
            now=now,
            owner=ELSEWHERE,
        )
    )
    store.update("job-1", lambda r: _job.start(r, now))
    yield location, store
    store.close()


def start_owner(location):
    """A process standing for the ansible-playbook run: it starts the keeper and waits; the keeper's pid."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, COLL_ROOT, location], stdout=subprocess.PIPE, text=True)
    line = owner.stdout.readline()
    assert line.strip().isdigit(), "the owner did not start a keeper: %r" % line
    return owner, int(line)


def expired(store):
    return _job_owner.lease_expired(store.get("job-1"), utc_timestamp())


def test_the_keeper_process_holds_the_lease_while_its_owner_runs_and_only_then(running_job):
    location, store = running_job
    owner, keeper = start_owner(location)
    try:
        assert wait_for(lambda: store.get("job-1").get("leaseRenewedAt"))
        time.sleep(3.5)  # longer than the lease: the owner runs, so the job is held
        assert not expired(store)
        os.kill(owner.pid, signal.SIGSTOP)  # a run that makes no progress
        assert wait_for(lambda: expired(store), timeout=6)
        assert not keeper_ended(keeper)
        os.kill(owner.pid, signal.SIGCONT)
        assert wait_for(lambda: not expired(store), timeout=4)
        owner.kill()
        owner.wait()
        assert wait_for(lambda: keeper_ended(keeper), timeout=4)  # ends with its owner
    finally:
        owner.kill()
        owner.wait()
    assert store.get("job-1")["status"] == "Running"  # the keeper never changes the job


def test_the_keeper_process_ends_when_its_job_finished(running_job):
    location, store = running_job
    owner, keeper = start_owner(location)
    try:
        assert wait_for(lambda: store.get("job-1").get("leaseRenewedAt"))
        store.update("job-1", lambda r: _job.finish(r, utc_timestamp()))
        assert wait_for(lambda: keeper_ended(keeper), timeout=4)
        assert owner.poll() is None  # its owner still runs
        assert store._read("SELECT job_id FROM job_leases") == []  # pylint: disable=protected-access
    finally:
        owner.kill()
        owner.wait()


def test_a_keeper_that_cannot_be_started_is_reported_as_none(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    assert _job_lease.start_keeper(str(tmp_path / "jobs.sqlite3"), "job-1", own_owner(), 30) is None


def test_the_keeper_finds_the_collection_where_this_one_was_found():
    root = _job_lease.COLLECTIONS_PATH
    assert os.path.isfile(
        os.path.join(root, "ansible_collections", "stellaops", "runtime", "plugins", "plugin_utils", "run", "lease.py")
    )
