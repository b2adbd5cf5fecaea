"""Drift on a real lab target (one thin target of the session, reached over SSH): a job deploys one
application, the ``stellaops.runtime.verify`` playbook finds it in sync, twice, without changing anything on
the target (containers and files compared before and after); then the target is changed by hand and each
change is found and named: a stopped container (the target's health ``degraded``, code ``runtime_drift``, as
``stella health`` shows it, and ``stella verify --live`` exits 3), an edited lock, another image run under
the project's labels, a removed service. Every check records in the job store only; none changes the target.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import io
import json
import os
import shlex

import labkit
import thinkit

from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import drift as _drift_cli
from ansible_collections.stellaops.runtime.plugins.plugin_utils.command import health as _health_cli

ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}
WORK = "/var/lib/stella/projects"
VERIFY = "stellaops.runtime.verify"
FILES = ("compose.stella.lock.yml", "stella.version.json", "apply-manifest.json")


class Drift(thinkit.ThinFleetJob):
    """The application's one target, its project and the verify playbook."""

    project = None

    def shell(self, script):
        return labkit.ssh(self.fleet[0], script).stdout

    def verify(self, **extra):
        """The verify playbook for this test's project (``project=None``: every project found)."""
        variables = {"stella_projects": [self.project]} if extra.pop("named", True) else {}
        variables.update(extra)
        return self.run(None, extra=variables, playbook=VERIFY, timeout=180)

    def snapshot(self):
        """What a read-only check must leave as it is: the project's containers and its directory."""
        containers = self.state(self.names[0], self.project)["containers"]
        facts = [
            {
                "id": c["Id"],
                "image": c["Image"],
                "state": {k: c["State"][k] for k in ("Status", "Running", "StartedAt", "FinishedAt", "Pid")},
                "restarts": c["RestartCount"],
                "labels": c["Config"]["Labels"],
            }
            for c in containers
        ]
        directory = shlex.quote(os.path.join(WORK, self.project))
        listing = self.shell(
            "cd %s && find . -printf '%%p %%s %%T@ %%m\\n' | sort && sha256sum %s" % (directory, " ".join(FILES))
        )
        return facts, listing

    def container(self, service="web"):
        found = [
            c
            for c in self.state(self.names[0], self.project)["containers"]
            if c["Config"]["Labels"].get("com.docker.compose.service") == service
        ]
        assert len(found) == 1, found
        return found[0]["Id"]


def line_of(run, verdict, name, project):
    """The verify playbook's line for ``name`` and ``project``, as it printed it."""
    head = '"%s %s project %s' % (verdict, name, project)
    found = [line.strip().rstrip(",").strip('"') for line in run.output.splitlines() if line.strip().startswith(head)]
    assert found, "no %s line for %s in:\n%s" % (verdict, name, run.output[-4000:])
    return found[0]


def test_verify_finds_a_deployed_target_in_sync_read_only_then_names_each_drift(lab, thin_pair, tmp_path):  # pylint: disable=redefined-outer-name
    fj = Drift(lab, thin_pair[:1], tmp_path, "drift", labkit.free_port())
    name = fj.names[0]
    impostor = "stella-drift-%s" % fj.application
    try:
        run = fj.run(fj.release("app_v1", "1.0.0", strategy_config={"batchSize": 1}), extra=ENGINE_GATE)
        assert run.rc == 0, run.output[-4000:]
        record = fj.job(run.job_id)
        assert record["status"] == "Succeeded", (record["code"], record["reason"])
        fj.project = record["targets"][name]["projectName"]
        target_id = record["targets"][name]["targetId"]

        # ---- in sync, twice, and nothing on the target changed (the second run finds every project itself)
        before = fj.snapshot()
        first = fj.verify()
        assert first.rc == 0, first.output[-4000:]
        assert line_of(first, "in_sync", name, fj.project) == "in_sync %s project %s" % (name, fj.project)
        second = fj.verify(named=False)
        assert second.rc == 0, second.output[-4000:]
        line_of(second, "in_sync", name, fj.project)
        assert fj.snapshot() == before
        assert fj.health() == {target_id: "healthy"}

        # ---- a stopped container: drifted, the play fails after recording it, stella health shows why
        web = fj.container()
        fj.shell("docker stop -t 1 %s >/dev/null" % web)
        stopped = fj.verify()
        assert stopped.rc != 0 and "runtime_drift: %s no longer run" % name in stopped.output, stopped.output[-3000:]
        assert line_of(stopped, "drifted", name, fj.project).endswith(": stopped web")
        assert fj.health() == {target_id: "degraded"}
        out = io.StringIO()
        assert _health_cli.health(["--store", fj.store_path], stdout=out) == 0
        row = [r for r in out.getvalue().splitlines() if r.startswith(target_id)][0]
        assert " degraded " in row and row.endswith(
            "runtime_drift: project %s drifted from job %s: stopped web" % (fj.project, run.job_id)
        )
        # the switch that leaves a scheduled run green still records
        assert fj.verify(stella_verify_fail_on_drift=False).rc == 0

        # ---- stella verify --live: the same check through ansible-runner, exit 3
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps(fj.inventory()))
        out, err = io.StringIO(), io.StringIO()
        rc = _drift_cli.live(
            [fj.project, "--inventory", str(inventory), "--store", fj.store_path], stdout=out, stderr=err
        )
        assert (rc, err.getvalue()) == (3, ""), out.getvalue()
        assert out.getvalue() == "drifted %s project %s: stopped web\n" % (name, fj.project)

        # ---- started again: in sync, the status the job gave is back
        fj.shell("docker start %s >/dev/null" % web)
        assert fj.verify().rc == 0
        assert fj.health() == {target_id: "healthy"}

        # ---- the lock edited
        lock = shlex.quote(os.path.join(WORK, fj.project, FILES[0]))
        fj.shell("cp -p %s /tmp/%s.lock && echo '# edited by hand' >> %s" % (lock, fj.application, lock))
        edited = fj.verify()
        assert edited.rc != 0
        assert ": lock sha256:" in line_of(edited, "drifted", name, fj.project)
        fj.shell("cp -p /tmp/%s.lock %s" % (fj.application, lock))

        # ---- another image run under the project's labels, its label naming the recorded digest
        v1, v2 = fj.digests["app_v1"], fj.digests["app_v2"]
        fj.shell(
            "docker pull -q %s >/dev/null && docker run -d --name %s --label stella.project=%s "
            "--label stella.component=web --label stella.image.digest=%s %s >/dev/null"
            % (fj.refs["app_v2"], impostor, fj.project, v1, fj.refs["app_v2"])
        )
        other = fj.verify()
        assert other.rc != 0
        assert line_of(other, "drifted", name, fj.project).endswith(
            ": digest of web %s.. != recorded %s.." % (v2[:19], v1[:19])
        )
        fj.shell("docker rm -f %s >/dev/null" % impostor)

        # ---- a service removed
        fj.shell("docker rm -f %s >/dev/null" % web)
        missing = fj.verify()
        assert missing.rc != 0
        assert line_of(missing, "drifted", name, fj.project).endswith(": missing web")
    finally:
        labkit.ssh(fj.fleet[0], "docker rm -f %s >/dev/null 2>&1; true" % impostor, check=False)
        fj.cleanup()
