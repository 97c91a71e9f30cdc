"""Milliseconds per gradient step of apex-dqn's update alone (no actors, no transport), at its
CartPole-v1 presets: batch 64, 16 replayed per inserted transition (32 gradient steps per batch of
16 x 8), prioritised replay of 50,000, double dueling Q of two ReLU layers of 128.

    python benchmarks/apex_update_ms.py [--threads 1] [--updates 100]

Random 4-float observations and rewards (the cost does not depend on them); 20 warm-up updates
(the replay warms past ``learning_starts``), then ``--updates`` timed ones. Prints the mean ms per
gradient step over the timed updates: the sum-tree's sampling and priority updates, the forward
and backward passes, gradient clipping and Adam (benchmarks/RESULTS.md, DQN fourth to sixth sittings).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig

T, B = 16, 8


def batch(seed: int) -> dict:
    """A random ``[T, B]`` batch in the trainer's layout (10% terminations, no truncation)."""
    rng = np.random.default_rng(seed)
    return {"obs": {"obs": rng.standard_normal((T + 1, B, 4)).astype(np.float32)},
            "action": rng.integers(0, 2, (T, B)), "reward": rng.standard_normal((T, B)).astype(np.float32),
            "terminated": rng.random((T, B)) < 0.1, "truncated": np.zeros((T, B), bool),
            "active": np.ones((T, B), bool), "policy_version": np.zeros((T, B), np.int64),
            "final_obs": {"obs": np.zeros((0, 4), np.float32)}, "final_index": np.zeros((0, 2), np.int64)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--updates", type=int, default=100, help="timed updates (32 gradient steps each)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = ApeXConfig(lr=1e-3, adam_eps=1e-8, n_step=3, batch_size=64, samples_per_insert=16.0, capacity=50_000,
                     learning_starts=1_000, target_period=100, max_grad_norm=10.0, huber_delta=0.0, hidden=128)
    spec = EnvSpec("CartPole-like", ("agent_0",), {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)},
                   spaces.Discrete(2))
    algo = ApeX(cfg, spec, seed=0)
    for i in range(20):
        algo.update(batch(i))
    steps0, start = algo.gradient_steps, time.perf_counter()
    for i in range(args.updates):
        algo.update(batch(20 + i))
    steps = algo.gradient_steps - steps0
    print(f"{1000 * (time.perf_counter() - start) / steps:.3f} ms per gradient step ({steps} steps, "
          f"{args.threads} thread(s))")


if __name__ == "__main__":
    main()
