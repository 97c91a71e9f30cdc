"""Reproducible seeds end to end (issue 14, item 6): two ``zoo train`` runs with seed 3 record the
same episodes, a run with seed 4 others.

A deterministic configuration: one actor with one ring group (one inference request in flight,
so the policy worker's batches are the same every time), one policy worker, and
``trainer.learn=false`` (the weights stay those the trainer built from its derived seed, so no
update arriving at a timing-dependent moment changes the actions). The envs' first resets use
the derived env seeds and actions are sampled from the policy worker's derived torch seed, so
every episode's length and return (what the actor recorded, logged by the trainer) and the env
step at which it ended are the same in both runs.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

DETERMINISTIC = ("--set", "actors.count=1", "--set", "actors.envs_per_actor=2", "--set", "actors.ring_size=1",
                 "--set", "sample_length=32", "--set", "trainer.batch_samples=2", "--set", "trainer.learn=false",
                 "--set", "log.tensorboard=false")


def episodes(tmp_path, name: str, seed: int) -> list[tuple[int, float, int]]:
    result = subprocess.run([sys.executable, "-m", "zoo", "train", "ppo", "--env", "CartPole-v1", "--steps", "1024",
                             "--seed", str(seed), "--name", name, "--set", f"runs_dir={tmp_path}", *DETERMINISTIC],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r["return"], r["length"]) for r in rows if r["type"] == "episode"]


def test_two_runs_with_seed_3_record_the_same_episodes_and_seed_4_others(tmp_path):
    first, second, other = episodes(tmp_path, "s3a", 3), episodes(tmp_path, "s3b", 3), episodes(tmp_path, "s4", 4)
    # 1,024 env steps of CartPole with an untrained policy: episodes of about 10-50 steps, 2 envs
    assert len(first) >= 20
    assert first == second
    assert other[:10] != first[:10]
