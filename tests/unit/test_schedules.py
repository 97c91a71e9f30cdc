"""Schedules over the run's budget run on time: the first update at the configured value,
the schedule's position restored on resume (CleanRL ``ppo.py``:
``frac = 1 - (update - 1) / num_updates``, applied before each update)."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tests.unit.trainer_harness import TrainerThread, fake_host, make_sample, trainer_config
from zoo.core.workers.trainer import schedule_progress

T, ENVS = 16, 2  # a pushed sample: T steps of ENVS envs (32 env steps); 2 samples make a batch
BATCH_STEPS = 2 * T * ENVS  # 64 env steps per update
OVERRIDES = ("sample_length=16", "trainer.batch_samples=4", "algo.epochs=2", "algo.minibatches=2",
             "algo.lr=0.001", "algo.anneal_lr=true", "algo.anneal_lr_steps=0")


def lrs(run_dir: str) -> list[float]:
    return [json.loads(line)["lr"] for line in open(os.path.join(run_dir, "metrics.jsonl"))
            if json.loads(line)["type"] == "update"]


def train(t: TrainerThread, first_update: int, last_update: int) -> None:
    """Push the two samples of each update and wait until it is done (the receiver never
    counts a later batch's env steps before an update: the schedule must not depend on that)."""
    for u in range(first_update, last_update + 1):
        for i in (2 * u - 2, 2 * u - 1):
            t.push(*make_sample(i, T, ENVS, 1))
        t.wait_status(updates=u)


def test_schedule_progress_counts_the_updates_done_at_this_batch_size():
    assert [schedule_progress(u, 64, 256) for u in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert schedule_progress(9, 64, 256) == 1.0
    assert schedule_progress(0, 64, 0) == 1.0


@pytest.mark.parametrize("resume", [False, True])
def test_lr_annealed_over_4_updates_is_1e3_then_quarters_down(tmp_path, resume):
    """lr 1e-3 annealed to 0 over a budget of 4 updates: 1e-3, 7.5e-4, 5e-4, 2.5e-4; across a
    stop after update 2 and a resume the position comes from the restored update count."""
    host = fake_host()
    cfg = trainer_config(host, "ppo", str(tmp_path), 1, OVERRIDES)
    cfg = dataclasses.replace(cfg, env_steps=4 * BATCH_STEPS)
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    t = TrainerThread(host, cfg, run_dir)
    if resume:
        train(t, 1, 2)
        t.stop()
        assert t.error is None
        t = TrainerThread(host, cfg, run_dir, resume=1)
        train(t, 3, 4)
    else:
        train(t, 1, 4)
    t.join()  # the budget is reached: the trainer ends by itself
    assert t.error is None
    assert lrs(run_dir) == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4], rel=1e-12, abs=0)
