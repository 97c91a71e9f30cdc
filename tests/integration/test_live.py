"""The live display of `zoo train` and `zoo watch`, in a real terminal (tmux), read from the screen.

One run in a private tmux server: `zoo train` in one window, `zoo watch` of its run folder in
another; both screens must list every worker by role and index with its pid and heartbeat
age, and the bottleneck. Actor 1 is then killed (SIGKILL): both screens show its restart.
Ctrl-C then stops the run; `zoo watch` sees it end and exits 0.
Bounded: each wait has a deadline, the tmux server is killed and nothing may be left behind.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import leftovers, marked_processes, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tmux") is None,
                       reason="tmux is not installed: these tests read a real terminal's screen through tmux "
                              "(.ci/run installs it; locally: apt-get install tmux)"),
]
WORKERS = ("trainer 0", "policy 0", "actor 0", "actor 1")


def read_live(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def measured(live) -> bool:
    """Every worker has a pid and every actor an env-step rate (two heartbeats arrived)."""
    return bool(live) and len(live["workers"]) == 4 and all(w["pid"] for w in live["workers"]) and all(
        w["env_steps_per_s"] is not None for w in live["workers"] if w["role"] == "actor")


def shows_every_worker(screen: str) -> bool:
    """Each worker's line: role and index, pid, heartbeat age (``actor 1   12462   0.9 s ago``)."""
    return all(re.search(rf"^\s*{name}\s+\d+\s+\d+\.\d s ago", screen, re.M) for name in WORKERS)


def measured_screen(screen: str) -> str | None:
    """The screen once it shows every worker measured: actors' rates and waits, the trainer's
    samples per update, the policy worker's batch, and the bottleneck."""
    needed = ("env steps/s", "waits for actions", "samples/update", "rows · latency", "bottleneck: ")
    return screen if shows_every_worker(screen) and all(n in screen for n in needed) else None


def test_live_display_and_zoo_watch_show_every_worker_in_a_terminal(tmp_path):
    mark = uuid.uuid4().hex
    server = f"zoo-test-{mark[:12]}"  # a private tmux server: killing it touches nothing else
    env = subprocess_env(ZOO_TEST_MARK=mark)

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", server, *args], check=True, capture_output=True, text=True,
                              env=env, timeout=30).stdout

    def screen(window: str) -> str:
        return tmux("capture-pane", "-p", "-t", f"live:{window}")

    run_dir = tmp_path / "watched"
    zoo = f"{sys.executable} -m zoo"
    controller_pid = None
    try:
        # A budget far beyond the test: the run ends with Ctrl-C, whatever the machine's speed.
        tmux("new-session", "-d", "-s", "live", "-n", "train", "-x", "200", "-y", "50",
             f"{zoo} train ppo --env CartPole-v1 --steps 100000000 --name watched --set runs_dir={tmp_path} "
             f"--set log.interval_s=1 --set supervision.restart_backoff_s=0.2; echo TRAIN-EXIT=$?; sleep 120")
        try:
            live = wait_for(lambda: (lambda j: j if measured(j) else None)(read_live(run_dir / "live.json")), 300,
                            "live.json with every worker measured")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nthe train screen:\n{screen('train')}") from None
        controller_pid = live["controller"]["pid"]
        # the actors' inference round trips, summed: counted in the histogram and their percentiles in order
        rt = wait_for(lambda: (lambda j: j["totals"] if j and j["totals"].get("round_trip_ms") else None)(
            read_live(run_dir / "live.json")), 120, "live.json with the actors' round-trip percentiles")
        assert len(rt["round_trip_counts"]) == 18 and sum(rt["round_trip_counts"]) > 0, rt
        assert 0 < rt["round_trip_ms"]["p50"] <= rt["round_trip_ms"]["p90"] <= rt["round_trip_ms"]["p99"], rt
        tmux("new-window", "-d", "-t", "live", "-n", "watch",
             f"{zoo} watch {run_dir} --refresh 0.2; echo WATCH-EXIT=$?; sleep 120")
        train_screen = wait_for(lambda: measured_screen(screen("train")), 120, "the train screen's worker table")
        watch_screen = wait_for(lambda: measured_screen(screen("watch")), 120, "the watch screen's worker table")
        for text in (train_screen, watch_screen):
            assert re.search(r"^bottleneck: (trainer|inference|inference-latency|env)-bound: ", text, re.M), text
        assert f"zoo watch {run_dir}: live.json written" in watch_screen and "; run time " in watch_screen
        # a restart: actor 1 killed; the supervisor restarts it and both screens count it
        victim = next(w["pid"] for w in live["workers"] if (w["role"], w["index"]) == ("actor", 1))
        os.kill(victim, signal.SIGKILL)
        restarted = re.compile(r"^\s*actor 1\s+(\d+)\s+\d+\.\d s ago\s+1 \(last: killed by SIGKILL\)", re.M)
        for window in ("train", "watch"):  # its new process (pid) heartbeats, its restart counted
            wait_for(lambda window=window: any(int(m.group(1)) != victim for m in restarted.finditer(screen(window))),
                     120, f"the {window} screen to show actor 1 restarted")
        tmux("send-keys", "-t", "live:train", "C-c")
        wait_for(lambda: "TRAIN-EXIT=130" in screen("train"), 300, "zoo train to stop")
        end = wait_for(lambda: (lambda s: s if "WATCH-EXIT=" in s else None)(screen("watch")), 120,
                       "zoo watch to exit 0")
        assert "WATCH-EXIT=0" in end and "run ended: stopped (Ctrl-C)" in end
        assert shows_every_worker(end)  # the last frame stays on screen
    finally:
        subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=30)
    wait_for(lambda: not marked_processes(mark), 60, "every process of the run to exit")
    assert controller_pid is not None and leftovers(controller_pid) == []
