"""Milliseconds per gradient step of apex-dqn's update alone (no actors, no transport), at its
presets for one of two envs:

- ``--env cartpole`` (the default): CartPole-v1's presets, batch 64, 16 replayed per inserted
  transition (32 gradient steps per batch of 16 x 8), prioritised replay of 50,000, double dueling
  Q of two ReLU layers of 128;
- ``--env pong``: the Atari presets on Pong's observations (4 stacked 84x84 uint8 frames, 6
  actions): batch 64, 8 replayed per inserted transition (32 gradient steps per batch of 32 x 8),
  double dueling Q on the Nature CNN, frames stored once; a replay of 20,000 transitions (the
  presets' 100,000 only changes which rows are sampled, not the work per step) and learning after
  2,000.

    python benchmarks/apex_update_ms.py [--env cartpole|pong] [--threads 1] [--updates 100]
        [--channels-last] [--compile] [--bfloat16]

Levers measured against the plain update: ``--channels-last`` lays the Nature CNN's frames out
channels-last (:func:`zoo.plugins.algorithms.precision.use_channels_last`, as PPO does on the
CPU); ``--compile`` wraps both networks' ``q`` in ``torch.compile``; ``--bfloat16`` runs each
update under ``torch.autocast("cpu", torch.bfloat16)`` (what ``algo.precision=bfloat16`` does
for PPO's forward passes; apex-dqn has no such option).

Random observations and rewards (the cost does not depend on them); warm-up updates until the
replay is past ``learning_starts`` and 2 updates beyond, then ``--updates`` timed ones. Prints the
mean ms per gradient step over the timed updates: the sum-tree's sampling and priority updates,
the forward and backward passes, gradient clipping, Adam, and each update's insertion with its
initial priorities (benchmarks/RESULTS.md: DQN fourth to sixth sittings; "Ape-X on Pong: the
bootstrap forward without a graph").
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.apex.apex import ApeX, ApeXConfig
from zoo.plugins.algorithms.precision import use_channels_last

WORKLOADS = {
    # env: (T, B, observation space, actions, config)
    "cartpole": (16, 8, spaces.Box(-np.inf, np.inf, (4,), np.float32), 2,
                 dict(lr=1e-3, adam_eps=1e-8, n_step=3, batch_size=64, samples_per_insert=16.0, capacity=50_000,
                      learning_starts=1_000, target_period=100, max_grad_norm=10.0, huber_delta=0.0, hidden=128)),
    "pong": (32, 8, spaces.Box(0, 255, (4, 84, 84), np.uint8), 6,
             dict(lr=1e-4, adam_eps=1.5e-4, n_step=3, batch_size=64, samples_per_insert=8.0, capacity=20_000,
                  learning_starts=2_000, target_period=1_000, max_grad_norm=10.0)),
}


def batch(env: str, step: int) -> dict:
    """A random ``[T, B]`` batch in the trainer's layout, drawn from seed ``step`` (no truncation;
    CartPole: 10% terminations). Pong's observations are frame stacks that continue each other
    across batches (row ``t`` of batch ``step`` holds frames ``step * T + t .. + 3`` of its env), as
    the atari env's do, so no episode ends inside."""
    T, B, space, n, _ = WORKLOADS[env]
    rng = np.random.default_rng(step)
    if env == "pong":
        frames = np.array([[np.random.default_rng([f, b]).integers(0, 256, (84, 84), dtype=np.uint8)
                            for b in range(B)] for f in range(step * T, step * T + T + 4)])  # [T + 4, B, 84, 84]
        obs = np.stack([frames[t:t + 4].transpose(1, 0, 2, 3) for t in range(T + 1)])  # [T + 1, B, 4, 84, 84]
        terminated = np.zeros((T, B), bool)  # stacks continue each other: no episode ends inside
    else:
        obs = rng.standard_normal((T + 1, B, 4)).astype(np.float32)
        terminated = rng.random((T, B)) < 0.1
    return {"obs": {"obs": obs}, "action": rng.integers(0, n, (T, B)),
            "reward": rng.standard_normal((T, B)).astype(np.float32),
            "terminated": terminated, "truncated": np.zeros((T, B), bool),
            "active": np.ones((T, B), bool), "policy_version": np.zeros((T, B), np.int64),
            "final_obs": {"obs": np.zeros((0, *space.shape), space.dtype)}, "final_index": np.zeros((0, 2), np.int64)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=sorted(WORKLOADS), default="cartpole", help="the presets measured")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--updates", type=int, default=100, help="timed updates (32 gradient steps each)")
    parser.add_argument("--channels-last", action="store_true", help="channels-last frames in the Nature CNN")
    parser.add_argument("--compile", action="store_true", help="torch.compile both networks' q")
    parser.add_argument("--bfloat16", action="store_true", help="each update under bfloat16 autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    T, B, space, n, cfg = WORKLOADS[args.env]
    spec = EnvSpec(args.env, ("agent_0",), {"obs": space}, spaces.Discrete(n))
    algo = ApeX(ApeXConfig(**cfg), spec, seed=0)
    if args.channels_last:
        use_channels_last(algo.policy, "cpu")
        use_channels_last(algo.target, "cpu")
    if args.compile:
        algo.policy.q = torch.compile(algo.policy.q)  # type: ignore[method-assign]
        algo.target.q = torch.compile(algo.target.q)  # type: ignore[method-assign]
    warmup = -(-cfg["learning_starts"] // (T * B)) + 2

    def update(i: int) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bfloat16):
            algo.update(batch(args.env, i))

    for i in range(warmup):
        update(i)
    steps0, start = algo.gradient_steps, time.perf_counter()
    for i in range(args.updates):
        update(warmup + i)
    steps = algo.gradient_steps - steps0
    levers = [f for f in ("channels_last", "compile", "bfloat16") if getattr(args, f)]
    print(f"{args.env}: {1000 * (time.perf_counter() - start) / steps:.3f} ms per gradient step ({steps} steps, "
          f"{args.threads} thread(s); {', '.join(levers) or 'plain'})")


if __name__ == "__main__":
    main()
