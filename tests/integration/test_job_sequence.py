"""One per-target sequence (``roles/deploy`` entry points ``target`` and ``rollback``), over two of the
fleet's Debian 13 lab targets, through the real ``ansible-playbook``:

- a successful ComposeHost target costs at most four tasks that run (the connection check, the apply
  with its preflight inside, the probes, the record), counted from the callback's events, and one
  job-store transaction for its outcome;
- the job record does not depend on any task's or play's name: a copy of the collection whose every
  task and play is renamed (to misleading phase names) records the same job, success, failure and
  rollback alike;
- a failed re-run of the running release rolls back only the targets it changed.

Shares the session's fleet with ``test_job_fleet.py`` (both run in the same pytest session). Fails
(never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import ansible_run as ar
import fleetkit as fl
import labkit
from labkit import free_port

from ansible_collections.stellaops.runtime.plugins.plugin_utils.job import record as _job
from ansible_collections.stellaops.runtime.plugins.plugin_utils.store.sql import open_store

# Ansible's own check of a role's inputs, which it runs before an entry point that declares them.
ARGUMENT_CHECK = ("validate_argument_spec", "ansible.builtin.validate_argument_spec")
NAME_LINE = re.compile(r"^(\s*-\s+name:\s*)(.+)$")
MISLEADING = ("verify", "promote", "cleanup", "deploy", "rollback-post", "preflight")


def renamed_collection(root):
    """A copy of this collection under ``root`` whose every task, block and play (roles and playbooks)
    has another name, each starting with a phase it does not carry; the code is the checkout's own."""
    base = os.path.join(root, "ansible_collections", "stellaops", "runtime")
    os.makedirs(base)
    for name in ("plugins", "meta", "galaxy.yml"):
        os.symlink(os.path.join(ar.ROOT, name), os.path.join(base, name))
    count = 0
    for tree in ("roles", "playbooks"):
        shutil.copytree(os.path.join(ar.ROOT, tree), os.path.join(base, tree))
        for directory, _dirs, files in os.walk(os.path.join(base, tree)):
            for file_name in files:
                if not file_name.endswith(".yml") or os.sep + "meta" in directory:
                    continue
                path = os.path.join(directory, file_name)
                lines = []
                with open(path, encoding="utf-8") as handle:
                    for line in handle:
                        match = NAME_LINE.match(line.rstrip("\n"))
                        if match and "stellaops.runtime." not in match.group(2):
                            count += 1
                            line = '%s"%s | renamed %d"\n' % (
                                match.group(1),
                                MISLEADING[count % len(MISLEADING)],
                                count,
                            )
                        lines.append(line)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.writelines(lines)
    assert count >= 20, "only %d names were found to rename" % count
    return root


def run_job(fj, release, collections=ar.COLLECTIONS):
    """The job playbook with the JSON callback: ``(rc, document, the new job's id)``."""
    before = set(fj.job_ids())
    argv, _env, _run = fj._argv(release, None, None)  # pylint: disable=protected-access
    env = ar.ansible_env({"ANSIBLE_COLLECTIONS_PATH": collections})
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ar.ROOT, timeout=420, check=False)
    try:
        doc = ar._parse_json_callback(proc.stdout)  # pylint: disable=protected-access
    except ValueError:
        raise AssertionError(
            "no JSON from ansible-playbook (rc=%d):\n%s\n%s"
            % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        ) from None
    new = [j for j in fj.job_ids() if j not in before]
    assert len(new) == 1, new
    return proc.returncode, doc, new[0]


def tasks_that_ran(doc, host):
    """The actions of the tasks that ran for ``host`` (not skipped), in order: the job's own steps (run
    once for the whole job or batch, reported under its first host) and Ansible's check of the role's
    inputs aside."""
    return [
        task["task"]["action"]
        for play in doc["plays"]
        for task in play["tasks"]
        if host in task["hosts"]
        and not task["hosts"][host].get("skipped")
        and task["task"]["action"] not in ARGUMENT_CHECK
        and not task["task"]["run_once"]
    ]


def shape(record, fj):
    """What the job recorded, without ids, names and times that differ between runs."""

    def text(value):
        return None if value is None else str(value).replace(fj.application, "APP").replace(record["jobId"], "JOB")

    targets = {}
    for index, name in enumerate(record["targetOrder"]):
        target = record["targets"][name]
        targets[index] = {
            "status": target["status"],
            "code": target.get("code"),
            "reason": text(target.get("reason")),
            "statusBeforeRollback": target.get("statusBeforeRollback"),
            "phases": [(p["name"], p["status"], p.get("detail")) for p in target.get("phases") or []],
            "rollbackPhases": [(p["name"], p["status"]) for p in target.get("rollbackPhases") or []],
            "artifacts": sorted(target.get("artifacts") or {}),
            "evidence": sorted(target.get("evidence") or {}),
        }
    return {
        "status": record["status"],
        "promotion": record["promotion"],
        "code": record["code"],
        "reason": text(record["reason"]).replace(record["targetOrder"][0], "T0").replace(record["targetOrder"][1], "T1")
        if record["reason"]
        else None,
        "events": [e["kind"] for e in record["events"]],
        "targets": targets,
        "rollback": (record.get("rollback") or {}).get("status"),
    }


def history(fj, job_id):
    store = open_store(fj.store_path)
    try:
        return store.history(job_id)
    finally:
        store.close()


def deploy_then_fail(lab, fleet, tmp_path, name, collections):
    """v1 on two targets (one batch), then a v2 whose post-deploy hook fails on the second: the job's
    documents, records and how many times the store changed."""
    fj = fl.FleetJob(lab, fleet[:2], tmp_path / name, name, free_port())
    (tmp_path / name).mkdir()
    try:
        rc1, doc1, job1 = run_job(fj, fj.release(), collections)
        assert rc1 == 0, json.dumps(doc1["stats"])
        hook = {
            "name": "check-host",
            "phase": "post-deploy",
            "command": 'test "$(hostname)" != %s' % fleet[1]["hostname"],
        }
        rc2, doc2, job2 = run_job(fj, fj.release("app_v2", "2.0.0", hooks=[hook]), collections)
        assert rc2 != 0
        return {
            "fj": fj,
            "docs": (doc1, doc2),
            "records": (fj.job(job1), fj.job(job2)),
            "history": (history(fj, job1), history(fj, job2)),
        }
    finally:
        fj.cleanup()


def test_one_sequence_per_target_whatever_its_tasks_are_named(lab, fleet, tmp_path):
    original = deploy_then_fail(lab, fleet, tmp_path, "seq", ar.COLLECTIONS)
    renamed = deploy_then_fail(lab, fleet, tmp_path, "ren", renamed_collection(str(tmp_path / "renamed")))

    # ---- a successful ComposeHost target: four tasks that ran, one transaction for its outcome
    rec1, rec2 = original["records"]
    assert rec1["status"] == "Succeeded", rec1["reason"]
    for name in rec1["targetOrder"]:
        assert tasks_that_ran(original["docs"][0], name) == [
            "ansible.builtin.raw",
            "stellaops.runtime.stella_compose_deploy",
            "stellaops.runtime.stella_probe",
            "stellaops.runtime.stella_job",
        ], name
        assert [p["name"] for p in rec1["targets"][name]["phases"]] == fl.PHASES
    # the job's own transactions (created, started, the gate, the end) and one per target
    assert len(original["history"][0]) == 4 + len(rec1["targetOrder"]), original["history"][0]

    # ---- the failure and the automatic rollback went through the same entry points
    assert (rec2["status"], rec2["promotion"]) == ("RolledBack", "Failed")
    failed = rec2["targets"][rec2["targetOrder"][1]]
    assert [(p["name"], p["status"]) for p in failed["phases"]][-1] == ("post-deploy", "failed")
    assert failed["reason"].startswith("post-deploy hook check-host failed"), failed["reason"]
    assert all(rec2["targets"][n]["status"] == "RolledBack" for n in rec2["targetOrder"])

    # ---- the renamed collection recorded the same jobs
    for before, after in zip(original["records"], renamed["records"]):
        assert shape(after, renamed["fj"]) == shape(before, original["fj"])
    names = {task["task"]["name"] for play in renamed["docs"][1]["plays"] for task in play["tasks"]}
    assert any(re.match(r"^(%s) \| renamed \d+$" % "|".join(map(re.escape, MISLEADING)), n) for n in names), names


def test_a_failed_rerun_rolls_back_only_the_targets_it_changed(lab, fleet, tmp_path):
    """v1 then v2 on two targets (each retains v1); v2's containers go from the second target and its port
    is taken. The same v2 again converges on the first target and fails on the second: the automatic
    rollback must not put v1 back on the first (this job did not change it), and the record says why."""
    fj = fl.FleetJob(lab, fleet[:2], tmp_path, "rerun", free_port())
    first, second = fj.names
    blocker = "blk-%s" % fj.application
    try:
        for image, version in (("app_v1", "1.0.0"), ("app_v2", "2.0.0")):
            done = fj.run(fj.release(image, version))
            assert done.rc == 0, done.output[-4000:]
        record = fj.job(done.job_id)
        before = fl.web(fj.state(first, fj.project(record, first)))
        project = fj.project(record, second)
        labkit.ssh(
            fj.by_name[second],
            "docker compose -p %s down -t 1 && docker run -d --name %s -p %d:8080 %s"
            % (project, blocker, fj.port, fj.refs["app_v1"]),
            timeout=180,
        )

        again = fj.run(fj.release("app_v2", "2.0.0"))
        assert again.rc != 0, again.output[-4000:]
        rec = fj.job(again.job_id)
        unchanged, failed = rec["targets"][first], rec["targets"][second]
        assert unchanged["status"] == "Succeeded" and unchanged.get("unchangedByJob") is True, unchanged
        assert "previousRevisionPath" not in unchanged
        assert rec["rollback"]["skipped"] == {first: _job.UNCHANGED}, rec["rollback"]
        assert unchanged["rollbackSkipped"] == _job.UNCHANGED and "rollbackPhases" not in unchanged
        # the second target, which this job did change, was rolled back (to the v2 it ran before this job,
        # which cannot start while its port is taken: the rollback fails, and says so)
        assert failed["status"] == "Failed" and failed["rollbackPhases"] and failed["rollbackError"], failed
        assert rec["rollback"]["batches"] == [[second]] and "auto-rollback failed" in rec["reason"], rec["reason"]
        # the first target still runs v2 in the very containers it ran before this job
        after = fl.web(fj.state(first, fj.project(rec, first)))
        assert (after["id"], after["startedAt"], after["ref"]) == (before["id"], before["startedAt"], before["ref"])
        assert after["ref"] == "%s@%s" % (fj.refs["app_v2"], fj.digests["app_v2"])
    finally:
        subprocess.run(
            labkit.ssh_argv(fj.by_name[second], "docker rm -f %s" % blocker),
            capture_output=True,
            check=False,
            timeout=120,
        )
        fj.cleanup()
