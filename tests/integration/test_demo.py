"""The main job on its embedded default (`make demo`): deploys, probes, prints where the evidence is; a
second run changes nothing; `make demo-down` (``stella_demo_state=absent``) removes it again."""

from __future__ import annotations

import json
import os
import re
import subprocess

from ansible_run import COLLECTIONS, ROOT, VENV_BIN


def run_demo(evidence_dir, *extra):
    argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=" + os.path.join(VENV_BIN, "python"),
            "-e", "stella_evidence_dir=" + str(evidence_dir)] + list(extra) + ["stellaops.runtime.demo"]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def recap(output):
    match = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-2000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


def containers(project):
    out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project=" + project],
                         capture_output=True, text=True, check=True).stdout.split()
    return sorted(out)


def test_demo_deploys_probes_and_is_idempotent(lab, tmp_path):
    first = run_demo(tmp_path / "evidence")
    assert recap(first)["failed"] == 0
    evidence = re.search(r"evidence:\s+(\S+/deployment\.json) \(succeeded\)", first)
    assert evidence, first[-3000:]
    record = json.loads(open(evidence.group(1)).read())
    assert record["status"] == "succeeded" and all(v is not False for v in record["successBoundary"].values())
    assert record["health"]["probe"]["healthProbe.status"] == "passed"
    for label in ("compose lock:", "version sticker:", "apply manifest:", "health probes:"):
        assert label in first
    project = record["projectName"]
    before = containers(project)
    assert len(before) == 3

    second = run_demo(tmp_path / "evidence")
    assert recap(second)["changed"] == 0 and recap(second)["failed"] == 0
    assert containers(project) == before
    assert "take it down:    make demo-down" in second

    down = run_demo(tmp_path / "evidence", "-e", "stella_demo_state=absent")  # what `make demo-down` runs
    assert recap(down)["changed"] == 1 and recap(down)["failed"] == 0
    assert containers(project) == [] and "compose lock:" not in down
    again = run_demo(tmp_path / "evidence", "-e", "stella_demo_state=absent")
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0


def test_make_demo_down_runs_the_demo_playbook_with_state_absent():
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    recipe = makefile.split("\ndemo-down:", 1)[1].split("\n\n", 1)[0]
    assert "-e stella_demo_state=absent stellaops.runtime.demo" in recipe
