"""A 20-target deployment job from one controller, on thin lab targets (``lab/lab.sh thin up``; issue 32).

Twenty thin targets (sshd-only containers on the lab's own engine, each with its own hostname, address and
work directory; docs/lab.md) are started once for the module and removed at its end. The job runs through
the real ``ansible-playbook`` with strategy ``rolling`` in four batches of five, and the second batch fails
on its first target (a post-deploy hook that fails on that hostname only, as in test_job_fleet.py). What a
thin target proves is the controller's side: twenty SSH hosts, their plans, records and rollbacks in one
job; one engine underneath means nothing here is about engine isolation (docs/lab.md).

v1 is deployed first to the ten targets of batches 1 and 2 only (``stella_hosts``): they are the ones the
failing job changes and rolls back, and the targets of batches 3 and 4 then have nothing of the
application at all, so "never touched" is literal (no container of their project on the engine, no
project directory on the target).

The releases publish no port and ask for no probe (thinkit.ThinFleetJob): the containers' healthcheck
gates each deployment. The engine is the lab's (Engine 20.10), so the preflight gate is lowered to it.

Fails (never skips) when the lab is not running: run ``make lab`` first.
"""

from __future__ import annotations

import json
import re
import os

import pytest

import labkit
import thinkit
from fleetkit import PHASES, ROLLBACK_PHASES, web

from ansible_collections.stellaops.runtime.plugins.plugin_utils.evidence.rollback import verify_rollback_evidence

COUNT, BATCH = 20, 5
ROLLED_BACK_SUFFIX = " (auto-rollback restored the retained previous revision)"
ENGINE_GATE = {"stella_min_engine_version": "20.10.0"}

# Starting the targets and the two jobs take about 1.5 minutes on two idle cores; the bound leaves room for
# a loaded machine and still fails a hung run long before the integration default (15 minutes).
pytestmark = pytest.mark.timeout(480, method="signal")


@pytest.fixture(scope="module")
def thin_fleet(lab):  # pylint: disable=unused-argument
    """Twenty thin targets ``it<pid>-scale-001``..``-020``, in batch order; removed at the end."""
    thinkit.remove_orphans()
    prefix = thinkit.session_prefix("scale")
    try:
        yield thinkit.start_thin(COUNT, prefix)
    finally:
        thinkit.stop_thin(prefix)


def batches_of(names):
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


def assert_reverse_batch_order(rollback_batches, done, rollback_order, deployed_batches):
    """The rollback ran batch 2's targets before batch 1's: the planned rollback batches, every completion
    time of the first rollback batch before every one of the second, and the rollback evidence's order."""
    assert rollback_batches == [deployed_batches[1], deployed_batches[0]], rollback_batches
    assert max(done[n] for n in deployed_batches[1]) < min(done[n] for n in deployed_batches[0]), done
    seen = [
        {e["target"]["targetName"] for e in rollback_order if e["batchIndex"] == index}
        for index in sorted({e["batchIndex"] for e in rollback_order})
    ]
    assert seen == [set(deployed_batches[1]), set(deployed_batches[0])], seen


# The facts a job run can leave on a host, and what the job playbook is run inside to read them after it.
JOB_FACTS = (
    "stella_job_start",
    "stella_job_run",
    "stella_job_ssh",
    "stella_job_ssh_args",
    "stella_job_ssh_run",
    "stella_job_targets",
    "stella_job_inputs",
    "stella_job_target",
    "stella_job_finish",
    "stella_job_closed",
    "stella_job_rollback",
)
HELD_BY_HOSTS = """
- name: The job
  ansible.builtin.import_playbook: stellaops.runtime.job

- name: What each host holds of the job after it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write it
      ansible.builtin.copy:
        dest: %(dest)s
        mode: "0600"
        content: >-
          {{ {'localhost': {'stella_job_start': stella_job_start | default('(not set)'), 'stella_job_run': stella_job_run,
                            'stella_job_inputs': stella_job_inputs | default('(not set)')},
              'targets': dict(stella_job_run.targetOrder | zip(stella_job_run.targetOrder | map('extract', hostvars)
                | map('stella_held', %(names)s)))} | to_json }}
"""


def held_by_hosts_playbook(tmp_path):
    """A playbook that runs the job, then writes ``held.json``: per target, which of :data:`JOB_FACTS` it holds
    as its own (set on it, not an inventory or extra variable) and whose plan its ``stella_job_target`` is."""
    plugins = tmp_path / "filter_plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "held.py").write_text(
        "def held(hostvars, names):\n"
        "    own = {n: hostvars[n] for n in names if n in hostvars}\n"
        "    plan = own.get('stella_job_target') or {}\n"
        "    return {'job': sorted(own), 'planFor': (plan.get('target') or {}).get('name')}\n\n\n"
        "class FilterModule:\n"
        "    def filters(self):\n"
        "        return {'stella_held': held}\n"
    )
    path = tmp_path / "job_held.yml"
    path.write_text(HELD_BY_HOSTS % {"dest": tmp_path / "held.json", "names": json.dumps(list(JOB_FACTS))})
    return str(path)


def test_twenty_thin_targets_rolling_failure_in_batch_two_skips_the_rest_and_rolls_back_in_reverse(
    lab, thin_fleet, tmp_path
):  # pylint: disable=redefined-outer-name
    fj = thinkit.ThinFleetJob(lab, thin_fleet, tmp_path, "scale", labkit.free_port())
    names = fj.names
    planned = batches_of(names)
    changed, untouched = names[: 2 * BATCH], names[2 * BATCH :]
    failing = planned[1][0]
    assert len({t["address"] for t in thin_fleet}) == len({t["hostname"] for t in thin_fleet}) == COUNT
    try:
        # ---- v1 on the ten targets of batches 1 and 2: two batches of five; after the job, what each host
        # holds of it (held_by_hosts)
        v1 = fj.run(
            fj.release(strategy_config={"batchSize": BATCH}),
            extra=dict(ENGINE_GATE, stella_hosts=",".join(changed)),
            playbook=held_by_hosts_playbook(tmp_path),
        )
        assert v1.rc == 0, v1.output[-4000:]
        held = json.loads((tmp_path / "held.json").read_text())
        # no target holds the job's plan, its summary or another target's plan: only its own plan (and the
        # SSH arguments of its own connection)
        assert sorted(held["targets"]) == sorted(changed), held["targets"]
        for name, facts in held["targets"].items():
            assert facts == {
                "job": ["stella_job_ssh_args", "stella_job_ssh_run", "stella_job_target"],
                "planFor": name,
            }, (name, facts)
        # localhost keeps the job's summary, not the plans it handed out nor the inputs it planned from
        assert held["localhost"]["stella_job_start"] is None
        assert held["localhost"]["stella_job_inputs"] is None
        assert "plans" not in held["localhost"]["stella_job_run"]
        assert held["localhost"]["stella_job_run"]["targetOrder"] == changed
        rec1 = fj.job(v1.job_id)
        assert rec1["status"] == "Succeeded", rec1["reason"]
        assert rec1["batches"] == planned[:2] and sorted(rec1["targets"]) == sorted(changed)
        projects = {n: rec1["targets"][n]["projectName"] for n in changed}
        assert len(set(projects.values())) == len(changed), projects  # one Compose project per target
        state1 = fj.states(rec1)
        for name in changed:
            facts = web(state1[name])
            assert facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"]), name
            assert facts["stella"]["stella.target.name"] == name
            assert json.loads(state1[name]["sticker"])["jobId"] == v1.job_id

        # ---- v2 on all twenty, rolling in batches of five; a post-deploy hook fails on batch 2's first target
        hook = {
            "name": "check-host",
            "phase": "post-deploy",
            "command": 'test "$(hostname)" != %s' % fj.by_name[failing]["hostname"],
        }
        v2 = fj.run(
            fj.release("app_v2", "2.0.0", strategy_config={"batchSize": BATCH}, hooks=[hook]), extra=ENGINE_GATE
        )
        assert v2.rc != 0, v2.output[-4000:]
        rec2 = fj.job(v2.job_id)
        assert rec2["batches"] == planned and rec2["targetOrder"] == names
        assert [t["projectName"] for t in rec2["targets"].values()].count(projects[failing]) == 1

        # the job failed with the failed target's code, then its automatic rollback restored what it changed
        failed = rec2["targets"][failing]
        assert failed["statusBeforeRollback"] == "Failed"
        assert failed["reason"].startswith("post-deploy hook check-host failed"), failed["reason"]
        assert rec2["code"] == failed["code"] and rec2["code"], (rec2["code"], failed["code"])
        assert rec2["reason"] == "target %s: %s%s" % (failing, failed["reason"], ROLLED_BACK_SUFFIX)
        assert fj.statuses(v2.job_id) == ["Pending", "Running", "Failed", "RollingBack", "RolledBack"]
        assert (rec2["status"], rec2["promotion"], rec2["isRollback"]) == ("RolledBack", "Failed", True)
        assert [e["kind"] for e in rec2["events"]] == ["RollbackStarted", "RollbackCompleted"]
        gates = sorted(rec2["gates"], key=lambda g: g["batch"])
        assert [(g["batch"], g["proceed"], g["failedTargets"]) for g in gates] == [(0, True, []), (1, False, [failing])]

        # batches 3 and 4: Skipped, never started, nothing of the application on the engine or the target
        for name in untouched:
            target = rec2["targets"][name]
            assert (target["status"], target["phases"]) == ("Skipped", []), (name, target["status"])
            assert "rollback" not in target and "statusBeforeRollback" not in target, name
            assert target["reason"].startswith("not started: strategy gate closed after batch 2"), target["reason"]
            assert thinkit.engine_containers("com.docker.compose.project", target["projectName"]) == [], name
            assert not fj.project_dir_exists(name, target["projectName"]), name

        # batches 1 and 2: every target changed by v2 rolled back and verified, batch 2 before batch 1
        rollback = rec2["rollback"]
        assert (rollback["attempted"], rollback["automatic"], rollback["status"]) == (True, True, "succeeded")
        for name in changed:
            target = rec2["targets"][name]
            assert target["status"] == "RolledBack", (name, target["status"])
            if name != failing:
                assert target["statusBeforeRollback"] == "Succeeded", name
                assert [p["status"] for p in target["phases"]] == ["succeeded"] * len(PHASES), name
            assert [p["name"] for p in target["rollbackPhases"]] == ROLLBACK_PHASES, name
            assert all(p["status"] == "succeeded" for p in target["rollbackPhases"]), target["rollbackPhases"]
            assert (target["currentDigest"], target["rollback"]["rollbackDigest"]) == (
                fj.digests["app_v2"],
                fj.digests["app_v1"],
            ), name
        with open(os.path.join(fj.evidence_dir, "jobs", v2.job_id, "rollback-evidence.json"), encoding="utf-8") as fh:
            evidence = json.load(fh)
        assert verify_rollback_evidence(evidence) == []
        assert (evidence["proofStatus"], evidence["orderProofStatus"]) == ("complete", "complete")
        assert all(e["status"] == "succeeded" for e in evidence["rollbackOrder"])
        done = {n: rec2["targets"][n]["rollback"]["completedAt"] for n in changed}
        assert_reverse_batch_order(rollback["batches"], done, evidence["rollbackOrder"], planned)
        # ... and the same check refuses a forward order (batch 1 restored first), so it is not vacuous
        forward_done = dict(done)
        for first, second in zip(planned[0], planned[1]):
            forward_done[first], forward_done[second] = done[second], done[first]
        forward_order = [dict(e, batchIndex=1 - e["batchIndex"]) for e in evidence["rollbackOrder"]]
        for args in (
            (planned[:2], done, evidence["rollbackOrder"]),
            (rollback["batches"], forward_done, evidence["rollbackOrder"]),
            (rollback["batches"], done, forward_order),
        ):
            with pytest.raises(AssertionError):
                assert_reverse_batch_order(*args, planned)

        # on the engine: each of the ten runs v1 again (digest, every stella label, the v1 sticker byte for byte)
        state2 = fj.states({"targetOrder": changed, "targets": rec2["targets"]})
        for name in changed:
            facts = web(state2[name])
            assert facts["running"], name
            assert facts["ref"] == "%s@%s" % (fj.refs["app_v1"], fj.digests["app_v1"]), name
            assert facts["stella"] == web(state1[name])["stella"], name
            assert state2[name]["sticker"] == state1[name]["sticker"], name
    finally:
        fj.cleanup()


def control_sockets(directory):
    """The SSH masters' control sockets Ansible left in ``directory`` (ANSIBLE_SSH_CONTROL_PATH_DIR)."""
    return sorted(str(p) for p in directory.iterdir() if p.is_socket()) if directory.exists() else []


def control_path(line):
    """The ``ControlPath`` an SSH command line names."""
    match = re.search(r'ControlPath="?([^" ]+)', line)
    return match.group(1) if match else None


def raw_check_commands(output, address):
    """The readiness check's SSH command lines (``-vvv``) for the target at ``address``."""
    return [
        line
        for line in output.splitlines()
        if "SSH: EXEC ssh" in line and " %s " % address in line and "true" in line.split(" %s " % address, 1)[1]
    ]


def test_the_job_keeps_its_ssh_connections_for_its_length_unless_the_operator_chose_ssh_args(lab, thin_fleet, tmp_path):  # pylint: disable=redefined-outer-name
    """With Ansible's own ssh_args (ControlPersist=60s) the job opens each target's SSH master for its length
    (ControlPersist=30m) and closes it when it ends; a target whose inventory sets ansible_ssh_args, and a
    run whose ANSIBLE_SSH_ARGS is set, keep the operator's choice, and the job leaves those masters alone."""
    pair = thin_fleet[-2:]  # never touched by the test above (batch 4)
    fj = thinkit.ThinFleetJob(lab, pair, tmp_path, "scale-ssh", labkit.free_port())
    chosen, default = pair
    operator_args = "-C -o ControlMaster=auto -o ControlPersist=119s"
    cp = tmp_path / "cp"
    env = {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp)}
    try:
        first = fj.run(
            fj.release(strategy_config={"batchSize": 2}),
            extra=ENGINE_GATE,
            verbose=True,
            env=env,
            overrides={chosen["name"]: {"ansible_ssh_args": operator_args}},
        )
        assert first.rc == 0, first.output[-4000:]
        assert fj.job(first.job_id)["status"] == "Succeeded"
        kept = raw_check_commands(first.output, default["address"])
        assert kept and all("ControlPersist=30m" in line for line in kept), kept
        own = raw_check_commands(first.output, chosen["address"])
        assert own and all("ControlPersist=119s" in line and "30m" not in line for line in own), own
        assert "ServerAliveInterval=15 -o ServerAliveCountMax=4" in kept[0], kept[0]  # keep-alives
        # the job closed the master it kept; the operator's master is left to its own ControlPersist
        left = control_sockets(cp)
        assert len(left) == 1, left
        assert thinkit.ssh_master_alive(left[0]), left
        assert control_path(own[0]) == left[0] != control_path(kept[0]), (own[0], kept[0], left)

        # ANSIBLE_SSH_ARGS set: no target's master is changed or closed by the job
        env_args = dict(env, ANSIBLE_SSH_ARGS="-C -o ControlMaster=auto -o ControlPersist=118s")
        second = fj.run(fj.release(strategy_config={"batchSize": 2}), extra=ENGINE_GATE, verbose=True, env=env_args)
        assert second.rc == 0, second.output[-4000:]
        assert all(r[1] == 0 for r in second.recap.values()), second.recap  # a no-op
        assert "ControlPersist=30m" not in second.output
        assert all("ControlPersist=118s" in line for line in raw_check_commands(second.output, default["address"]))
        left = control_sockets(cp)
        assert len(left) == 2 and all(thinkit.ssh_master_alive(s) for s in left), left
    finally:
        for socket in control_sockets(cp):
            thinkit.ssh_master_exit(socket)
        fj.cleanup()


def test_a_job_whose_planning_fails_records_nothing_closes_its_connections_and_says_why(lab, thin_fleet, tmp_path):  # pylint: disable=redefined-outer-name
    """An image tag that does not resolve fails the planning: no job is recorded and no target is touched,
    the SSH masters the readiness check opened for the job are closed, and the job's outcome carries the
    planning task's own code and reason."""
    pair = thin_fleet[-2:]
    fj = thinkit.ThinFleetJob(lab, pair, tmp_path, "scale-plan", labkit.free_port())
    release = fj.release(strategy_config={"batchSize": 2})
    missing = fj.refs["app_v1"].rsplit(":", 1)[0] + ":no-such-tag-" + os.urandom(4).hex()
    release["components"][0]["image"] = missing
    cp = tmp_path / "cp"
    try:
        run = fj.run(release, extra=ENGINE_GATE, env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp)})
        assert run.rc != 0, run.output[-4000:]
        assert run.job_ids == [], run.job_ids
        shown = re.search(r"job \(not planned\) Failed: planning failed: ([a-z_]+): (.+)", run.output)
        assert shown, run.output[-4000:]
        assert shown.group(1) != "job_not_planned", shown.group(0)
        assert missing.rsplit(":", 1)[1] in shown.group(2), shown.group(0)
        # the readiness check's masters were opened for the job, and the job closed them
        assert "Close the connection to this target" in run.output
        assert control_sockets(cp) == [], control_sockets(cp)
        # nothing of the application on the engine or in the targets' work directories
        assert thinkit.engine_containers("stella.application", fj.application) == []
    finally:
        for socket in control_sockets(cp):
            thinkit.ssh_master_exit(socket)
        fj.cleanup()
