"""lab/lab.sh's background starts: a process just started is never taken for one that is not running.

Until a background child has exec'd its command, its /proc cmdline is the script's own, setsid's or nohup's
(or empty, mid-exec); a check by command line made in that window called a live registry "not running" and
the lab set-up gave up on it.
"""

import pathlib
import subprocess

LAB_SH = pathlib.Path(__file__).resolve().parents[2] / "lab" / "lab.sh"


def _bash(script, tmp_path):
    return subprocess.run(
        ["bash", "-c", f'source "{LAB_SH}"\nset +e\n{script}'],
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": str(tmp_path), "STELLA_LAB_STATE": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_spawned_process_is_running_as_soon_as_spawn_returns(tmp_path):
    # 200 starts, each checked at once (running, and running the command itself rather than setsid or
    # nohup before it), with no delay that would hide the window.
    # The needle is built at run time: the test's own bash -c text must not contain it.
    res = _bash(
        """
        needle="stella-$((6 * 7))-needle" miss=0
        for ((n = 0; n < 200; n++)); do
          spawn "$STATE/p.pid" "$needle" "$STATE/p.log" bash -c 'sleep 5; :' "$needle"
          argv0=$(tr '\\0' '\\n' <"/proc/$(<"$STATE/p.pid")/cmdline" | head -n 1)
          pid_running "$STATE/p.pid" "$needle" && [[ $argv0 == bash ]] || miss=$((miss + 1))
          kill "$(<"$STATE/p.pid")" 2>/dev/null
        done
        echo "miss=$miss"
        """,
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "miss=0"


def test_spawn_returns_when_the_process_exits_at_once(tmp_path):
    res = _bash('spawn "$STATE/q.pid" never-there "$STATE/q.log" false; echo "rc=$?"', tmp_path)
    assert res.stdout.strip() == "rc=0", res.stderr


def test_wait_failed_says_the_process_exited_and_shows_its_log(tmp_path):
    res = _bash(
        """
        needle="stella-$((6 * 7))-exit"
        spawn "$STATE/r.pid" "$needle" "$STATE/r.log" bash -c 'echo bind: address already in use; exit 3' "$needle"
        sleep 0.5
        wait_failed "registry plain" "$STATE/r.pid" "$needle" "$STATE/r.log" "GET /v2/ does not answer"
        """,
        tmp_path,
    )
    assert res.returncode == 1
    assert "bind: address already in use" in res.stderr
    assert "[lab] error: registry plain exited before it answered: GET /v2/ does not answer" in res.stderr


def test_wait_failed_says_a_live_process_does_not_answer(tmp_path):
    res = _bash(
        """
        needle="stella-$((6 * 7))-live"
        spawn "$STATE/s.pid" "$needle" "$STATE/s.log" bash -c 'sleep 30; :' "$needle"
        wait_failed "registry plain" "$STATE/s.pid" "$needle" "$STATE/s.log" "GET /v2/ does not answer"
        """,
        tmp_path,
    )
    try:
        assert res.returncode == 1
        assert "[lab] error: registry plain (pid " in res.stderr
        assert "runs but GET /v2/ does not answer" in res.stderr
    finally:
        pid = (tmp_path / "s.pid").read_text().strip()
        subprocess.run(["kill", pid], check=False)
