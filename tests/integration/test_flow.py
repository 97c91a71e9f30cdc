"""Backpressure end to end: a slowed trainer holds the actors back, PPO drops nothing, the counts are exact."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start

pytestmark = pytest.mark.integration
CHAOS_PLUGIN = Path(__file__).resolve().parents[2] / "tests" / "plugins" / "zoo-chaos"


def test_a_slowed_trainer_holds_the_actors_back_and_ppo_drops_nothing(tmp_path):
    # PPO's CartPole preset: 2 actors x 4 envs in ring groups of 2, T = 32, a batch of 8 agent-slot
    # samples = 4 messages of 2 envs x 32 steps = 256 env steps per update. Budget 1,280 = 5 updates,
    # each sleeping 1.5 s first (slow-ppo), while the envs could step thousands of env steps a second.
    mark = uuid.uuid4().hex
    proc = start("train", "slow-ppo", "--env", "CartPole-v1", "--steps", "1280", "--name", "slow",
                 "--set", "algo.update_sleep_s=1.5", "--set", "log.interval_s=1", "--set", f"runs_dir={tmp_path}",
                 env=subprocess_env(CHAOS_PLUGIN, ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    rows = read_metrics(tmp_path / "slow")
    updates = [r for r in rows if r["type"] == "update"]
    end, = [r for r in rows if r["type"] == "end"]
    # exact counts: every received sample was trained on, 256 env steps (8 agent-slots) per update
    assert [u["trained_env_steps"] for u in updates] == [256, 512, 768, 1024, 1280]
    assert (end["trained_env_steps"], end["trained_samples"]) == (1280, 40)
    # env steps counted by the trainer: the trained ones, plus (rarely, by timing) what it had
    # received after the last batch when it stopped, within the held-back bound below
    assert 1280 <= end["env_steps"] <= 1280 + 19 * 64
    assert (end["dropped_samples"], end["actor_dropped_samples"], end["dropped_fraction"]) == (0, 0, 0.0)
    # the actors were held back: the env steps they stepped exceed those trained on by at most what
    # the pipeline holds, in messages of 64 env steps: the batch waiting in the trainer (4), the
    # one it is filling (at most 3), the sample stream's shm ring (8 slots), one finished sample
    # blocked in each actor's push (2) and one unfinished sample in each actor's other ring group
    # (2): 19 x 64 = 1,216. Unheld, 7.5 s of sleeping updates would let them step far more.
    live = json.loads((tmp_path / "slow" / "live.json").read_text())
    stepped = sum(w["env_steps"] for w in live["workers"] if w["role"] == "actor")
    assert 1280 <= stepped <= 1280 + 19 * 64
    line = " ".join(out.split())
    steps = f"{end['env_steps']:,}"
    assert f"done: {steps} env steps ({steps} frames)" in line and "trained env steps/s, 0.0% dropped" in line
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
