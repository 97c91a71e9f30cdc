"""`zoo watch`: finding the run folder, knowing when a run is over, showing a finished run."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from zoo.watch import RunNotFound, find_run_dir, run_over, wait_for_run, watch, watch_note

NOW = 1_700_000_100.0
ALIVE = lambda pid: pid == 111  # noqa: E731 - only pid 111 "runs" on this host in these tests


def live(time=NOW - 1.0, ended=False, pid=111, host="here", interval_s=5.0, **extra):
    return {"format": 1, "time": time, "ended": ended, "controller": {"pid": pid, "host": host},
            "interval_s": interval_s, "workers": [], **extra}


def status(state, pid=111, host="here", reason=None, failed=None):
    return {"status": state, "pid": pid, "host": host, "started": NOW - 60, "ended": None if state == "running" else NOW,
            "exit_code": None, "reason": reason, "failed_worker": failed}


@pytest.mark.parametrize("live_json, status_json, expected", [
    (live(), None, None),                                            # fresh and its controller runs
    (live(ended=True), None, "ended"),                               # the controller wrote its last snapshot
    (live(time=NOW - 16.0), None, None),                             # 16 s old, but pid 111 still runs
    (live(time=NOW - 16.0, pid=222), None, "controller gone"),       # 16 s > 3 x 5 s and pid 222 is gone
    (live(time=NOW - 9.0, pid=222), None, None),                     # 9 s < max(3 x 5 s, 10 s): not stale yet
    (live(time=NOW - 59.0, host="far"), None, None),                 # another host: its pid cannot be checked
    (live(time=NOW - 61.0, host="far"), None, "live.json unchanged for 61 s (controller on far)"),
    (live(), status("finished", reason="budget reached"), "finished (budget reached)"),
    (live(), status("stopped", reason="Ctrl-C"), "stopped (Ctrl-C)"),
    (live(), status("crashed", reason="exit code 1", failed={"role": "actor", "index": 1, "detail": "boom"}),
     "crashed (actor worker 1 failed: exit code 1)"),
    (live(), status("running", pid=222), "crashed (controller gone)"),
    (live(ended=True), status("running"), None),                     # its outcome is being written: wait
    (live(ended=True), status("running", host="far"), "ended"),
    (live(), status("running", pid=222, host="far"), None),
    (None, None, None),                                              # nothing yet (no metrics either)
])
def test_run_over(tmp_path, live_json, status_json, expected):
    assert run_over(tmp_path, live_json, status_json, NOW, alive=ALIVE, host="here") == expected


def test_a_run_without_live_json_is_over_when_metrics_end(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"type": "update", "env_steps": 64}) + "\n")
    assert run_over(tmp_path, None, None, NOW, alive=ALIVE, host="here") is None
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"type": "end", "env_steps": 70, "episodes": 2}) + "\n")
    assert run_over(tmp_path, None, None, NOW, alive=ALIVE, host="here") == "finished (metrics.jsonl has its end row)"


def test_find_run_dir(tmp_path):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "config.json").write_text("{}")
    (tmp_path / "runs" / "bare").mkdir()
    assert find_run_dir(str(tmp_path / "runs" / "r1")) == tmp_path / "runs" / "r1"
    assert find_run_dir("r1", tmp_path / "runs") == tmp_path / "runs" / "r1"
    with pytest.raises(RunNotFound, match=r"^run folder 'r2' does not exist \(nor '.*/runs/r2'\)"):
        find_run_dir("r2", tmp_path / "runs")
    with pytest.raises(RunNotFound, match=r"^'.*/runs/bare' is not a run folder: it holds no config.json"):
        find_run_dir("bare", tmp_path / "runs")


def test_a_missing_run_given_as_a_path_is_not_also_looked_up_under_runs_dir(tmp_path):
    # Before: "run folder 'runs/x' does not exist (nor 'runs/runs/x')".
    with pytest.raises(RunNotFound) as info:
        find_run_dir("runs/x", "runs")
    assert str(info.value) == ("run folder 'runs/x' does not exist; give a run folder such as runs/NAME, "
                               "or the name of a run in 'runs'")


class FakeClock:
    """A clock that ``sleep`` advances; ``on_sleep(n)`` runs at the n-th sleep (no real waiting)."""

    def __init__(self, on_sleep=lambda n: None):
        self.t, self.sleeps, self.on_sleep = 0.0, 0, on_sleep

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps += 1
        self.t += s
        self.on_sleep(self.sleeps)


def test_watch_waits_for_a_run_that_has_not_started_yet(tmp_path):
    # `zoo watch runs/r1` seconds after `zoo train`, before it wrote config.json: before, exit 2.
    run_dir = tmp_path / "runs" / "r1"

    def train_starts(n):
        if n == 3:  # zoo train claims the folder, then writes config.json
            run_dir.mkdir(parents=True)
        if n == 5:
            (run_dir / "config.json").write_text("{}")

    clock, out = FakeClock(train_starts), io.StringIO()
    got = wait_for_run(str(run_dir), "runs", Console(file=out, width=300), wait_s=60, clock=clock, sleep=clock.sleep)
    assert got == run_dir and clock.sleeps == 5
    assert out.getvalue() == f"waiting for {run_dir} to start (up to 60 s) ...\n"  # printed once, and it stays


def test_watch_gives_up_waiting_for_a_run_after_its_bound(tmp_path):
    clock = FakeClock()
    with pytest.raises(RunNotFound) as info:
        wait_for_run("r9", tmp_path, Console(file=io.StringIO()), wait_s=60, refresh_s=1, clock=clock,
                     sleep=clock.sleep)
    assert clock.sleeps == 60
    assert str(info.value) == (f"run folder 'r9' does not exist (nor '{tmp_path / 'r9'}'); give a run folder such "
                               f"as runs/NAME, or the name of a run in '{tmp_path}' (waited 60 s for it to start)")


def test_watch_a_finished_run_prints_its_last_status_and_returns_0(tmp_path):
    snap = live(time=NOW, ended=True, status={"env_steps": 3200, "budget_env_steps": 3200, "episodes": 9})
    (tmp_path / "live.json").write_text(json.dumps(snap))
    out = io.StringIO()
    assert watch(tmp_path, Console(file=out, width=200), refresh_s=0.01) == (0, "run ended")
    assert out.getvalue() == "env_steps=3,200/3,200 (100.0%) episodes=9\n"  # not a terminal: the plain line


def test_watch_a_run_from_before_live_json_shows_its_end_row(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"type": "end", "env_steps": 70, "episodes": 2}) + "\n")
    out = io.StringIO()
    code, line = watch(tmp_path, Console(file=out, width=200), refresh_s=0.01)
    assert (code, line) == (0, "run ended: finished (metrics.jsonl has its end row)")
    assert out.getvalue() == "env_steps=70 episodes=2\n"


def test_watch_gives_up_when_no_live_json_comes(tmp_path):
    code, line = watch(tmp_path, Console(file=io.StringIO()), refresh_s=0.01, no_live_wait_s=0.0)
    assert code == 1 and line.startswith(f"no live.json in {tmp_path} after 0 s")


def test_zoo_watch_of_a_missing_folder_is_a_one_line_error_exit_2(tmp_path):
    missing = tmp_path / "nope"
    proc = subprocess.run([sys.executable, "-m", "zoo", "watch", str(missing), "--wait", "0"], capture_output=True, text=True,
                          timeout=60, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"error: run folder '{missing}' does not exist; give a run folder such as "
                                        "runs/NAME, or the name of a run in 'runs'"]


def test_watch_note_says_how_old_the_snapshot_is_and_the_run_time():
    snap = live(time=NOW - 2.0, started=NOW - 2.0 - 3725)
    assert watch_note(Path("runs/r1"), snap, NOW) == (
        "zoo watch runs/r1: live.json written 2s ago by controller pid 111 on here; run time 1h02m05s")
    del snap["started"]
    assert watch_note(Path("runs/r1"), snap, NOW + 73) == (
        "zoo watch runs/r1: live.json written 1m15s ago by controller pid 111 on here")
