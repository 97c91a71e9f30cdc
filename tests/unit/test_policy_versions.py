"""A policy version counts changes of the policy's parameters (core/algorithm.py, ``policy_changed``):
a replay algorithm's update that takes no gradient step (its warm-up before ``learning_starts``)
counts as an update but keeps the version and publishes nothing. The real trainer worker on
samples the test makes (tests/unit/trainer_harness.py)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config

T, ENVS = 16, 2  # a sample: 16 steps of 2 envs (32 transitions); a batch: 2 samples (64 transitions)
CASES = {
    # the replay is empty at update 1: no gradient step (its credit carries); steps from update 2 on
    "apex-dqn": ("sample_length=16", "trainer.batch_samples=4", "algo.batch_size=8", "algo.samples_per_insert=3",
                 "algo.capacity=100", "algo.learning_starts=40", "algo.target_period=5"),
    # learning_starts=100: update 1 leaves 64 transitions (still warming up, actions uniform); update 2
    # takes steps and clears the warm-up flag
    "sac": ("env.box_actions=true", "sample_length=16", "trainer.batch_samples=4", "algo.batch_size=8",
            "algo.samples_per_insert=3", "algo.capacity=100", "algo.learning_starts=100", "algo.hidden=16"),
    "r2d2": ("sample_length=16", "trainer.batch_samples=4", "algo.sequence_length=8", "algo.burn_in=2",
             "algo.hidden=8", "algo.lstm=8", "algo.batch_size=4", "algo.samples_per_insert=2", "algo.capacity=20",
             "algo.learning_starts=8", "algo.target_period=5"),
}


@pytest.mark.parametrize("algo", sorted(CASES))
def test_an_update_without_a_gradient_step_keeps_the_policy_version(tmp_path, algo):
    host = fake_host()
    cfg = trainer_config(host, algo, str(tmp_path), 1, CASES[algo])
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    subscriber = t.transports[1].subscriber("parameter")
    for i in range(8):  # 4 updates of 2 samples
        sample, meta = make_sample(i, T, ENVS, 1, box_actions=algo == "sac")
        if algo == "r2d2":
            sample["rnn_state"] = np.random.default_rng(1000 + i).normal(size=(T, ENVS, 2, 8)).astype(np.float32)
        t.push(sample, meta)
    status = t.wait_status(updates=4, env_steps=8 * T * ENVS)
    latest = subscriber.latest(5.0)
    t.stop()
    subscriber.close()
    assert t.error is None
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    updates = [r for r in rows if r["type"] == "update"]
    # was [1, 2, 3, 4]: update 1 took no gradient step, yet made version 1
    assert [(r["updates"], r["policy_version"], r["gradient_steps"] > 0) for r in updates] == [
        (1, 0, False), (2, 1, True), (3, 2, True), (4, 3, True)]
    # the samples were acted with version 0 (make_sample): the lag grows only once the weights change
    # (it read 0, 1, 2, 3 when every update made a version)
    assert [r["policy_lag_max"] for r in updates] == [0, 0, 1, 2]
    assert status["policy_version"] == 3
    assert latest is not None and latest[1]["policy_version"] == 3  # the newest weights published
    if algo == "sac":  # acted uniformly until the update whose insert reached learning_starts
        assert [r["warmup"] for r in updates] == [1.0, 0.0, 0.0, 0.0]
