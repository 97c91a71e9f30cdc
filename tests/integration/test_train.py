"""`zoo train` end to end, through the real CLI and the multi-process dataflow.

These start worker processes (spawn) and take minutes; each stops by itself (a budget
or a bounded wait) and checks that no process or transport file is left behind.
"""
from __future__ import annotations

import glob
import json
import signal
import uuid
from pathlib import Path

import numpy as np
import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import (
    best_rolling_mean,
    finish,
    marked_processes,
    nothing_left,
    read_metrics,
    rows,
    start,
    wait_for,
    zoo,
)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BOOM_PLUGIN = ROOT / "tests" / "plugins" / "zoo-boom"


def test_ppo_cartpole_reaches_450_within_200k_env_steps(tmp_path):
    # The preset's budget (200k) bounds the run; stop_when ends it once a 20-episode mean reached 450
    # (the budget's own stop is test_resume's first run, within one batch).
    result = zoo("train", "ppo", "--env", "CartPole-v1", "--seed", "1", "--name", "cartpole",
                 "--set", f"runs_dir={tmp_path}", "--set", "stop_when=mean_return >= 450")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(tmp_path / "cartpole")
    episodes = [r for r in rows if r["type"] == "episode"]
    updates = [r for r in rows if r["type"] == "update"]
    best = best_rolling_mean(episodes, 20, 200_000)
    end = rows[-1]
    print(f"best 20-episode mean return within 200k env steps: {best:.1f}; stopped at {end['env_steps']:,} env "
          f"steps; updates {len(updates)}")
    assert best >= 450
    # it stopped at the first point after the condition held, within one batch (8 samples x 32 steps)
    assert end["type"] == "end" and end["stop_when"] == "mean_return >= 450" and end["stop_value"] >= 450
    held_at = int(end["reason"].rsplit(" at ", 1)[1].split()[0].replace(",", ""))
    assert held_at <= end["env_steps"] < held_at + 8 * 32 and end["env_steps"] < 200_000
    assert "stopped early: stop_when 'mean_return >= 450' held: " in result.stdout
    assert json.loads((tmp_path / "cartpole" / "status.json").read_text())["status"] == "finished"
    import torch

    ckpt = torch.load(tmp_path / "cartpole" / "checkpoints" / "latest.pt", weights_only=False)
    assert ckpt["env_steps"] == end["env_steps"]  # the final checkpoint counts every env step consumed
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))


def test_ppo_atari_pong_writes_metrics_events_checkpoint(tmp_path):
    # 12,000 frames: 3 updates (it was 100,000 frames, 25 updates and ~4-8 min of the suite, for
    # the same checks; Pong learning is measured in benchmarks/, not here)
    result = zoo("train", "ppo", "--env", "atari:Pong", "--frames", "12000", "--name", "pong",
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
    # 12,000 frames = 3,000 env steps at frame-skip 4; the run stops at the first update that
    # reaches it (the trainer counts env steps with the batch they come in: docs/flow.md). A batch
    # is 8 samples x 128 steps = 1,024 env steps with the Pong preset when each sample carries its
    # own group's steps, but a sample carries every env step its actor made since its last push
    # (the other ring group's too, so one message may carry more or fewer than its own), and a
    # batch takes whole messages: under load the updates were seen at 1,024, 2,048 and 3,580.
    # What holds whatever the timing:
    steps = [u["env_steps"] for u in updates]
    assert steps == sorted(set(steps)) and len(steps) >= 2
    assert steps[-2] < 3000 <= steps[-1]
    assert ckpt["env_steps"] == steps[-1] and ckpt["frames"] == 4 * steps[-1]
    assert "optimizer" in json.dumps(list(ckpt["algorithm"].keys()))


def test_ctrl_c_stops_every_worker_and_leaves_nothing(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(ZOO_TEST_MARK=mark)
    proc = start("train", "ppo", "--env", "CartPole-v1", "--name", "interrupted", "--set", f"runs_dir={tmp_path}",
                 env=env)
    # every worker in its loop: an update written and every worker titled (start-up on a loaded machine is slow)
    wait_for(lambda: rows(tmp_path / "interrupted", "update"), 300, "the first update row", proc)
    assert len(wait_for(lambda: (lambda m: m if len(m) >= 5 else None)(marked_processes(mark)), 60,
                        "the CLI, trainer, policy worker and 2 actors", proc)) >= 5
    proc.send_signal(signal.SIGINT)
    _, err = finish(proc, 300)  # the trainer finishes its update and writes its checkpoint
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err
    nothing_left(proc, mark)
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
                 "--set", "supervision.max_restarts=0", env=env, timeout=300)
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
