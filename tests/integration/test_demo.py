"""The main job on its embedded default (`make demo`): deploys, probes, prints where the evidence is; a
second run changes nothing; `make demo-down` (``stella_demo_state=absent``) removes it again."""

from __future__ import annotations

import json
import os
import re
import subprocess

from ansible_run import COLLECTIONS, ROOT, VENV_BIN


def run_demo(evidence_dir, *extra):
    argv = (
        [
            os.path.join(VENV_BIN, "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + os.path.join(VENV_BIN, "python"),
            "-e",
            "stella_job_store=" + os.path.join(os.path.dirname(str(evidence_dir)), "jobs.sqlite3"),
            "-e",
            "stella_evidence_dir=" + str(evidence_dir),
        ]
        + list(extra)
        + ["stellaops.runtime.demo"]
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def recap(output):
    match = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-2000:]
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


def containers(project):
    out = subprocess.run(
        ["docker", "ps", "-q", "--no-trunc", "--filter", "label=com.docker.compose.project=" + project],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(out)


def printed(output, label):
    match = re.search(r"%s:\s+([^\s\",]+)" % re.escape(label), output)
    assert match, output[-3000:]
    return match.group(1)


def test_demo_deploys_probes_and_is_idempotent(lab, tmp_path):
    first = run_demo(tmp_path / "evidence")
    assert recap(first)["failed"] == 0
    job = printed(first, "job")
    evidence = printed(first, "evidence")
    assert re.search(r"/%s/[^/]+/deployment\.json\Z" % re.escape(job), evidence), evidence
    with open(evidence, "rb") as handle:
        first_bytes = handle.read()
    record = json.loads(first_bytes)
    assert record["status"] == "succeeded" and all(v is not False for v in record["successBoundary"].values())
    assert record["health"]["probe"]["healthProbe.status"] == "passed" and record["deploymentId"] == job
    job_json = json.loads(open(printed(first, "job evidence")).read())
    assert (job_json["jobId"], job_json["status"]) == (job, "Succeeded")
    assert printed(first, "report").endswith("/jobs/%s/report.html" % job)
    assert "job %s" % job in first  # the job's text
    for label in ("compose lock:", "version sticker:", "apply manifest:", "health probes:"):
        assert label in first
    project = record["projectName"]
    before = containers(project)
    assert len(before) == 3

    # a second run is a new job that changes nothing; the first job's evidence stays as it was
    second = run_demo(tmp_path / "evidence")
    assert recap(second)["changed"] == 0 and recap(second)["failed"] == 0
    assert printed(second, "job") != job
    assert containers(project) == before
    assert "take it down:    make demo-down" in second
    with open(evidence, "rb") as handle:
        assert handle.read() == first_bytes

    down = run_demo(tmp_path / "evidence", "-e", "stella_demo_state=absent")  # what `make demo-down` runs
    assert recap(down)["changed"] == 1 and recap(down)["failed"] == 0
    assert containers(project) == [] and "compose lock:" not in down
    again = run_demo(tmp_path / "evidence", "-e", "stella_demo_state=absent")
    assert recap(again)["changed"] == 0 and recap(again)["failed"] == 0


def test_make_demo_down_runs_the_demo_playbook_with_state_absent():
    makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    recipe = makefile.split("\ndemo-down:", 1)[1].split("\n\n", 1)[0]
    assert "-e stella_demo_state=absent stellaops.runtime.demo" in recipe
