"""`zoo train` end to end, through the real CLI and the multi-process dataflow.

These start worker processes (spawn) and take minutes; each stops by itself (a budget
or a bounded wait) and checks that no process or transport file is left behind.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.procs import processes_with_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BOOM_PLUGIN = ROOT / "tests" / "plugins" / "zoo-boom"


def zoo(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def marked_processes(mark: str) -> list[int]:
    """PIDs of live processes whose environment holds ``ZOO_TEST_MARK=mark`` (the CLI's workers)."""
    return processes_with_env("ZOO_TEST_MARK", mark)

def leftovers(pid: int) -> list[str]:
    """Transport files and shared-memory segments of runs controlled by ``pid``."""
    return glob.glob(f"/dev/shm/*zoo-{pid}-*") + glob.glob(f"/tmp/zoo-{pid}-*")


def rolling_mean_reached(episodes: list[dict], window: int, threshold: float, max_steps: int) -> float:
    """The best mean return over ``window`` consecutive episodes ending within ``max_steps``."""
    returns = [e["return"] for e in episodes if e["env_steps"] <= max_steps]
    return max(np.mean(returns[i - window:i]) for i in range(window, len(returns) + 1))


def test_ppo_cartpole_reaches_450_within_200k_env_steps(tmp_path):
    result = zoo("train", "ppo", "--env", "CartPole-v1", "--seed", "1", "--name", "cartpole",
                 "--set", f"runs_dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(tmp_path / "cartpole")
    episodes = [r for r in rows if r["type"] == "episode"]
    updates = [r for r in rows if r["type"] == "update"]
    best = rolling_mean_reached(episodes, 20, 450, 200_000)
    print(f"best 20-episode mean return within 200k env steps: {best:.1f}; final: "
          f"{np.mean([e['return'] for e in episodes[-20:]]):.1f}; updates {len(updates)}")
    assert best >= 450
    # The run stops at the budget: the last update lies within one batch (8 samples x 32 steps) of it,
    # and the final checkpoint counts every env step consumed.
    assert 200_000 - 8 * 32 <= updates[-1]["env_steps"] < 200_000 + 8 * 32
    import torch

    ckpt = torch.load(tmp_path / "cartpole" / "checkpoints" / "latest.pt", weights_only=False)
    assert 200_000 <= ckpt["env_steps"] < 200_000 + 8 * 32
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))


def test_ppo_atari_pong_100k_frames_writes_metrics_events_checkpoint(tmp_path):
    result = zoo("train", "ppo", "--env", "atari:Pong", "--frames", "100000", "--name", "pong",
                 "--set", f"runs_dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "pong"
    config = json.loads((run / "config.json").read_text())
    assert json.dumps(config).count('"frame_skip": 4') >= 1
    assert '"sticky_action_prob": 0.25' in json.dumps(config)
    rows = read_metrics(run)
    updates = [r for r in rows if r["type"] == "update"]
    assert updates and all(u["frames"] == 4 * u["env_steps"] for u in updates)
    assert all(np.isfinite(u["pg_loss"]) and np.isfinite(u["v_loss"]) for u in updates)
    games = [r for r in rows if r["type"] == "episode"]
    # Pong's raw score lies in [-21, 21]; a lost life is not logged as an episode (Pong has none).
    assert all(-21 <= g["return"] <= 21 for g in games)
    assert glob.glob(str(run / "tensorboard" / "events.out.tfevents.*"))
    import torch

    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["policy_version"] == updates[-1]["policy_version"]
    # 100,000 frames = 25,000 env steps at frame-skip 4; the run stops at the first update that
    # reaches it (the trainer counts env steps with the batch they come in: docs/flow.md), so
    # within one update's env steps of it (8 samples x 128 steps = 1,024 with the Pong preset).
    per_update = updates[-1]["env_steps"] - updates[-2]["env_steps"]
    assert per_update == 1024
    assert 25_000 <= ckpt["env_steps"] < 25_000 + per_update and ckpt["frames"] == 4 * ckpt["env_steps"]
    assert "optimizer" in json.dumps(list(ckpt["algorithm"].keys()))


def test_ctrl_c_stops_every_worker_and_leaves_nothing(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(ZOO_TEST_MARK=mark)
    proc = subprocess.Popen([sys.executable, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1",
                             "--name", "interrupted", "--set", f"runs_dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # 5 s into the run, and at least one update written (start-up on a loaded machine is slow)
        metrics = tmp_path / "interrupted" / "metrics.jsonl"
        started = time.monotonic()
        while time.monotonic() - started < 60 and not (metrics.exists() and '"update"' in metrics.read_text()):
            time.sleep(0.2)
        time.sleep(max(0.0, 5 - (time.monotonic() - started)))
        assert len(marked_processes(mark)) >= 5  # the CLI, trainer, policy worker, 2 actors
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "interrupted" in err
    deadline = time.monotonic() + 10
    while marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked_processes(mark) == []
    assert leftovers(proc.pid) == []
    # What was written survives: the config and every metrics line parse.
    assert json.loads((tmp_path / "interrupted" / "config.json").read_text())["algo_name"] == "ppo"
    assert any(r["type"] == "update" for r in read_metrics(tmp_path / "interrupted"))
    assert (tmp_path / "interrupted" / "checkpoints" / "latest.pt").exists()  # written on the way out
    # zoo runs calls it stopped (status.json; without one, the end row before the budget)
    listing = zoo("runs", str(tmp_path), env={**env, "COLUMNS": "200"}, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "stopped" in next(line for line in listing.stdout.splitlines() if "│ interrupted" in line)


def test_env_that_raises_makes_train_fail_with_the_actor_and_message(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(BOOM_PLUGIN, ZOO_TEST_MARK=mark)
    # No restarts (supervision.max_restarts=0): the first failure ends the run.
    result = zoo("train", "ppo", "--env", "boom", "--name", "boom", "--set", f"runs_dir={tmp_path}",
                 "--set", "supervision.max_restarts=0", env=env, timeout=60)  # must report the crash
    assert result.returncode == 1
    assert "RuntimeError: boom" in result.stderr
    assert "actor worker " in result.stderr and "failed (raised an exception); stopping the run." in result.stderr
    assert marked_processes(mark) == []
    status = json.loads((tmp_path / "boom" / "status.json").read_text())
    assert (status["status"], status["exit_code"], status["failed_worker"]["role"]) == ("crashed", 1, "actor")
    assert "RuntimeError: boom" in status["failed_worker"]["detail"]
    # zoo runs names the worker that crashed and its error, on the run's line
    listing = zoo("runs", str(tmp_path), env={**env, "COLUMNS": "250"}, timeout=120)
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if "│ boom" in line)
    assert "crashed: actor " in row and " failed: RuntimeError: boom" in row  # a traceback's last line


def test_an_env_that_always_raises_is_restarted_max_restarts_times_then_the_run_fails(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(BOOM_PLUGIN, ZOO_TEST_MARK=mark)
    result = zoo("train", "ppo", "--env", "boom", "--name", "boom", "--set", f"runs_dir={tmp_path}",
                 "--set", "actors.count=1", "--set", "supervision.max_restarts=2",
                 "--set", "supervision.restart_backoff_s=0.1", env=env, timeout=120)
    assert result.returncode == 1
    restarts = [r for r in read_metrics(tmp_path / "boom") if r["type"] == "restart"]
    assert [(r["role"], r["index"], r["restarts"], r["reason"]) for r in restarts] == [
        ("actor", 0, 1, "raised an exception"), ("actor", 0, 2, "raised an exception")]
    assert "failed (raised an exception (restarted 2 times already: the limit)); stopping the run." in result.stderr
    assert result.stderr.count("RuntimeError: boom") == 3  # each failure's traceback is printed
    assert marked_processes(mark) == []
