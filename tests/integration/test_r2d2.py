"""`zoo train r2d2` end to end: it learns CartPole-v1 with the recurrent Q-network, the actors'
recurrent states reach the replay, the rate limiter holds the replay ratio, nothing is dropped."""
from __future__ import annotations

import json

import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.testing.cli import best_rolling_mean, zoo

pytestmark = pytest.mark.integration


def test_r2d2_cartpole_reaches_100_within_40k_env_steps(tmp_path):
    # Measured (2 loaded cores, presets, 20k env steps): the best mean of 20 consecutive episodes
    # (all 8 envs, the epsilon-0.4 env included) was 169 (seed 1), 203 (seed 2), 296 (seed 3), and a
    # 20-episode mean first passed 100 after 9-10k env steps; a run took 2-3 minutes. 40k bounds the
    # run (twice the 20k of those runs: Ape-X DQN's CartPole test, whose runs passed its bar after
    # 6-22k env steps, once missed it within 30k in CI); stop_when ends it at 100.
    result = zoo("train", "r2d2", "--env", "CartPole-v1", "--seed", "1", "--steps", "40000",
                 "--name", "cartpole", "--set", f"runs_dir={tmp_path}", "--set", "stop_when=mean_return >= 100",
                 timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "cartpole" / "metrics.jsonl").read_text().splitlines()]
    episodes = [r for r in rows if r["type"] == "episode"]
    updates = [r for r in rows if r["type"] == "update"]
    best = best_rolling_mean(episodes, 20, 40_000)
    last = updates[-1]
    print(f"best 20-episode mean return within 40k env steps: {best:.1f}; updates {len(updates)}; "
          f"gradient steps {sum(u['gradient_steps'] for u in updates):.0f}; replay {last['replay_size']:.0f} "
          f"sequences; replay ratio {last['replay_ratio']:.2f}")
    assert best >= 100
    assert last["dropped_samples"] == 0 and last["actor_dropped_samples"] == 0
    # 8 columns of 40 steps an update, 3 sequences of 20 per column: 24 sequences; 32 replayed per
    # insert in steps of 16: 48 gradient steps per update once 200 sequences are in (from the 9th update)
    assert [u["sequences"] for u in updates[:10]] == [24.0] * 10
    assert [u["gradient_steps"] for u in updates[:10]] == [0.0] * 8 + [48.0] * 2
    assert last["replay_size"] == min(5_000, 24 * len(updates))
    # the replay stores the actors' LSTM states: not all zero once episodes run past a sequence start
    replay = load_checkpoint(str(tmp_path / "cartpole" / "checkpoints" / "latest.pt"))["algorithm"]["replay"]
    assert replay["data"]["state0"].shape[1:] == (2, 64) and (replay["data"]["state0"] != 0).any()


def test_r2d2_learns_cartpole_with_velocities_hidden(tmp_path):
    # Partially observed: only the cart position and pole angle (MaskVelocity). Measured (2 loaded
    # cores, presets, 40k env steps): the best 20-episode mean was 295, 163 and 288 in three runs of
    # seed 1 (thread timing varies) and 435 (seed 2), a 20-episode mean first passed 100 after about
    # 15.5k env steps; apex-dqn's feed-forward Q on the same env reached 52 (seed 1). 1-8 minutes.
    result = zoo("train", "r2d2", "--env", "CartPole-v1", "--seed", "1", "--steps", "40000", "--name", "masked",
                 "--set", f"runs_dir={tmp_path}", "--set", "env.wrappers=zoo.plugins.envs.gym.wrappers:MaskVelocity",
                 "--set", "stop_when=mean_return >= 120", timeout=1800)  # 40k bounds it; stop_when: at 120
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "masked" / "metrics.jsonl").read_text().splitlines()]
    best = best_rolling_mean([r for r in rows if r["type"] == "episode"], 20, 40_000)
    print(f"velocities hidden: best 20-episode mean return within 40k env steps: {best:.1f}")
    assert best >= 120
