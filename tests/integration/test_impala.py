"""`zoo train impala` end to end: learning, a slowed trainer, parameters that stop arriving.

The trainer is slowed with ``ZOO_TEST_TRAINER_DELAY_S`` (seconds slept before each
update, see :mod:`zoo.core.workers.trainer`). Each run stops by itself at its budget.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import best_rolling_mean, zoo

STALL_WARNING_S = 3.0  # --set policy.stall_warning_s

pytestmark = pytest.mark.integration


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["type"] == "episode"], [r for r in rows if r["type"] == "update"]


def test_impala_cartpole_reaches_450_within_300k_env_steps(tmp_path):
    # 300k bounds the run; stop_when ends it once a 20-episode mean reached 450 (seed 1: 45-52k env steps)
    result = zoo("train", "impala", "--env", "CartPole-v1", "--seed", "1", "--steps", "300000",
                 "--name", "cartpole", "--set", f"runs_dir={tmp_path}", "--set", "stop_when=mean_return >= 450")
    assert result.returncode == 0, result.stderr[-3000:]
    episodes, updates = read_metrics(tmp_path / "cartpole")
    best = best_rolling_mean(episodes, 20, 300_000)
    print(f"best 20-episode mean return within 300k env steps: {best:.1f}; updates {len(updates)}; "
          f"dropped {updates[-1]['dropped_samples']}; max lag {max(u['policy_lag_max'] for u in updates)}")
    assert best >= 450 and updates[-1]["env_steps"] < 300_000
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    assert all(u["policy_lag_max"] <= 16 for u in updates)  # the preset's trainer.max_policy_lag


def test_slowed_trainer_lag_grows_stale_samples_dropped_and_counted_no_deadlock(tmp_path):
    # Every update waits 0.3 s while the actors keep sampling: samples queue up and are
    # older when they are pulled; those more than max_policy_lag = 2 versions old are dropped.
    # The sample stream goes over nng, whose socket buffers queue samples: over shm (the
    # default) the ring's few slots make the actors drop what the trainer cannot take
    # (actor_dropped_samples) before it grows stale, and the trainer's filter sees none.
    env = subprocess_env(ZOO_TEST_TRAINER_DELAY_S="0.3")
    result = zoo("train", "impala", "--env", "CartPole-v1", "--steps", "4000", "--name", "slow",
                 "--set", f"runs_dir={tmp_path}", "--set", "trainer.max_policy_lag=2",
                 "--set", "streams.sample.transport=nng", env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    _, updates = read_metrics(tmp_path / "slow")
    lags = [u["policy_lag_max"] for u in updates]
    dropped = [u["dropped_samples"] for u in updates]
    print(f"updates {len(updates)}; policy_lag_max per update {lags}; dropped {dropped[-1]}")
    assert lags[0] == 0                             # the first batch was sampled with the first weights
    assert 2 in lags and lags.index(1) < lags.index(2)  # the lag grew, one version at a time, up to the limit
    assert all(lag <= 2 for lag in lags)            # no batch holds a sample older than the limit
    assert dropped[-1] > 0 and dropped == sorted(dropped)
    assert dropped[-1] % 2 == 0                     # counted in agent-slot trajectories: 2 per sample message


def test_parameters_that_stop_arriving_raise_a_warning(tmp_path):
    # The trainer sleeps longer than the policy worker's stall threshold before each update. The
    # policy worker does not warn while the first batch is sampled (no update could have come yet);
    # between the first and the second update it serves policy version 1 all along: it warns, once.
    # Budget: exactly two batches (8 trajectories x 16 steps each), so the run ends after update 2.
    delay = STALL_WARNING_S + 10
    env = subprocess_env(ZOO_TEST_TRAINER_DELAY_S=str(delay))
    result = zoo("train", "impala", "--env", "CartPole-v1", "--steps", "256", "--name", "stall",
                 "--set", f"runs_dir={tmp_path}", "--set", f"policy.stall_warning_s={STALL_WARNING_S}", env=env,
                 timeout=2 * delay + 600)
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("zoo: warning from policy worker 0")]
    assert len(warnings) == 1, result.stderr[-3000:]
    assert "no new parameters for" in warnings[0] and "still serving policy version 1" in warnings[0]
    _, updates = read_metrics(tmp_path / "stall")
    assert [u["policy_version"] for u in updates] == [1, 2]
