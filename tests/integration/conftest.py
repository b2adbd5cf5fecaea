"""Session fixtures for the Docker lab (``make lab``): ``lab``, ``target`` and ``target_factory``.

Targets are named per pytest process (``it<pid>-<suffix>``, hostname ``<suffix>``) so parallel sessions
never share or stop each other's targets; every target a session starts is removed when the session ends.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import labkit
import pgkit
import thinkit


@pytest.fixture(scope="session")
def lab():
    """The lab description (.lab/lab.json); the test fails with 'run make lab' when it is absent."""
    try:
        return labkit.load_lab()
    except labkit.LabNotRunning as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def pg_passfile(lab, tmp_path_factory):  # pylint: disable=redefined-outer-name
    """The lab PostgreSQL password in a pgpass file named by ``PGPASSFILE`` for this session and its children."""
    path = pgkit.pgpass(lab, str(tmp_path_factory.mktemp("pg") / "pgpass"))
    previous = os.environ.get("PGPASSFILE")
    os.environ["PGPASSFILE"] = path
    yield path
    if previous is None:
        os.environ.pop("PGPASSFILE", None)
    else:
        os.environ["PGPASSFILE"] = previous


@pytest.fixture(params=["sqlite", "postgresql"])
def job_store_location(request, tmp_path, lab, pg_passfile):  # pylint: disable=redefined-outer-name,unused-argument
    """A new empty job store on each backend: a SQLite file, or a fresh database on the lab's PostgreSQL."""
    if request.param == "sqlite":
        yield str(tmp_path / "jobs.sqlite3")
        return
    with pgkit.fresh_database(lab) as dsn:
        yield dsn


class TargetFactory:
    """Starts DinD targets for the session and removes them all at the end."""

    def __init__(self) -> None:
        self.prefix = "it%d" % os.getpid()
        self.started: dict[str, dict] = {}

    def __call__(self, suffix: str, compose: bool = True, image: str | None = None) -> dict:
        name = "%s-%s" % (self.prefix, suffix)
        target = labkit.start_target(name, compose=compose, hostname=suffix, image=image)
        self.started[name] = target
        return target

    def stop(self, target: dict) -> None:
        labkit.stop_target(target["name"])
        self.started.pop(target["name"], None)

    def close(self) -> None:
        errors = []
        for name in list(self.started):
            try:
                labkit.stop_target(name)
            except AssertionError as exc:  # keep removing the others
                errors.append(str(exc))
            self.started.pop(name, None)
        if errors:
            raise AssertionError("could not remove lab targets:\n" + "\n".join(errors))


def _remove_orphans() -> None:
    """Remove targets left by pytest sessions that died (``it<pid>-*`` whose pid is gone)."""
    proc = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=stella.lab=target", "--format", '{{.Label "stella.lab.name"}}'],
        capture_output=True,
        text=True,
        check=False,
    )
    for name in proc.stdout.split():
        match = re.match(r"^it(\d+)-", name)
        if match and not os.path.exists("/proc/%s" % match.group(1)):
            labkit.stop_target(name)


@pytest.fixture(scope="session")
def target_factory():
    """``target_factory(suffix, compose=True, image=None)`` starts target ``it<pid>-<suffix>`` with hostname
    ``suffix`` from target image ``image`` (``None``/``"bookworm"``: Engine 20.10; ``"trixie"``: Engine 26.1).

    Every target it started is removed at the end of the session.

    Needs no other fixture (test modules may override ``lab`` with a narrower scope).
    """
    try:
        labkit.load_lab()
    except labkit.LabNotRunning as exc:
        pytest.fail(str(exc), pytrace=False)
    _remove_orphans()
    factory = TargetFactory()
    yield factory
    factory.close()


@pytest.fixture(scope="session")
def fleet(target_factory):  # pylint: disable=redefined-outer-name
    """Four Debian 13 targets (Engine 26.1), in batch order, shared by the fleet and traffic tests
    (each test deploys its own application)."""
    return [target_factory("fleet%d" % i, image="trixie") for i in range(1, 5)]


@pytest.fixture(scope="session")
def target(target_factory):  # pylint: disable=redefined-outer-name
    """One DinD target host with Compose v2, shared by the session."""
    return target_factory("main")


@pytest.fixture(scope="session")
def thin_pair(lab):  # pylint: disable=redefined-outer-name,unused-argument
    """Two thin targets of this pytest session (``it<pid>-pair-001``, ``-002``), shared by the job tests that
    deploy an application of their own to one or two targets (claims, variables, a first canary, a silent
    target); removed at the end."""
    thinkit.remove_orphans()
    prefix = thinkit.session_prefix("pair")
    try:
        yield thinkit.start_thin(2, prefix)
    finally:
        thinkit.stop_thin(prefix)
