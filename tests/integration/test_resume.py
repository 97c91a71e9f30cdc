"""Resume and non-finite values end to end, through the real CLI and worker processes.

Each run uses the fake ``fake-counting`` env (a test plugin on PYTHONPATH), stops by
itself within seconds and checks that no worker process is left behind.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import torch

from zoo.core.checkpoint import load_checkpoint, nonfinite_tensors
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import marked_processes, read_metrics, zoo

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[2] / "tests" / "plugins" / "zoo-fakes"
# PPO's vector presets on fake-counting: 2 actors x 4 envs (2 per ring group), samples of 32
# steps, 8 samples (512 env steps) per update.
SMALL = ("--set", "algo.epochs=2")


def test_a_nan_reward_is_reported_by_its_actor_and_the_checkpoint_keeps_finite_weights(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(FAKES, ZOO_TEST_MARK=mark)
    # every env returns a NaN reward on its 300th step: after about 4 updates (8 envs x 64 steps each)
    result = zoo("train", "ppo", "--env", "fake-counting", "--name", "nan", "--steps", "20000",
                 "--set", f"runs_dir={tmp_path}",
                 "--set", "env.nan_reward_at=300", "--set", "trainer.checkpoint_interval=1", *SMALL,
                 env=env, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "actor worker " in result.stderr
    assert "NonFiniteEnvError: env fake-counting (actor " in result.stderr
    assert "returned a non-finite reward (nan) at its env step 300" in result.stderr
    assert marked_processes(mark) == []
    updates = [r for r in read_metrics(tmp_path / "nan") if r["type"] == "update"]
    assert updates and all(r["pg_loss"] == r["pg_loss"] for r in updates)  # no NaN statistic: none trained on
    ckpt = load_checkpoint(str(tmp_path / "nan" / "checkpoints" / "latest.pt"))
    assert nonfinite_tensors(ckpt["algorithm"]["policy"]) == []
    assert ckpt["policy_version"] == updates[-1]["policy_version"]  # the last finite weights


def test_zoo_resume_continues_the_counters_and_metrics_of_a_finished_run(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(FAKES, ZOO_TEST_MARK=mark)
    first = zoo("train", "ppo", "--env", "fake-counting", "--name", "r", "--steps", "2000",
                "--set", f"runs_dir={tmp_path}", *SMALL, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = read_metrics(tmp_path / "r")
    ckpt = load_checkpoint(str(tmp_path / "r" / "checkpoints" / "latest.pt"))
    n = [r["updates"] for r in before if r["type"] == "update"][-1]
    assert ckpt["updates"] == n >= 1 and 2000 <= ckpt["env_steps"] < 2000 + 512  # the budget, within one batch

    refused = zoo("resume", "r", "--runs-dir", str(tmp_path), "--steps", "4000", "--set", "sample_length=16",
                  env=env, timeout=300)
    assert refused.returncode == 2 and "sample_length: 32 -> 16" in refused.stderr

    second = zoo("train", "--resume", str(tmp_path / "r"), "--steps", "4000", env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"from its checkpoint at update {n} (policy version {n}, {ckpt['env_steps']:,} of 4,000 env steps), " \
           "resume #1" in second.stdout
    assert marked_processes(mark) == []
    rows = read_metrics(tmp_path / "r")
    assert rows[:len(before) - 1] == before[:-1]  # the first segment's rows, without its `end` row
    kinds = [r["type"] for r in rows]
    assert kinds.count("end") == 1 and kinds[-1] == "end" and kinds[len(before) - 1] == "resume"
    updates = [r["updates"] for r in rows if r["type"] == "update"]
    assert updates == list(range(1, len(updates) + 1)) and updates[-1] > n
    assert json.loads((tmp_path / "r" / "config.json").read_text())["env_steps"] == 4000
    final = load_checkpoint(str(tmp_path / "r" / "checkpoints" / "latest.pt"))
    assert (final["updates"], final["resumes"]) == (updates[-1], 1) and final["env_steps"] >= 4000
    # Adam's step count continued: each update is 2 epochs x 1 minibatch = 2 steps
    assert all(float(s["step"]) == 2.0 * updates[-1] for s in final["algorithm"]["optimizer"]["state"].values())
    policy = final["algorithm"]["policy"]
    assert isinstance(policy, dict) and torch.is_tensor(next(iter(policy.values())))
