"""Cost of one training step, float32 next to bfloat16 autocast (and channels-last), interleaved.

    python benchmarks/train_precision_bench.py [--rounds 6] [--steps 5] [--threads 1] [--nets cnn,mlp,entity]

A training step is what PPO's minibatch loop does (:meth:`zoo.plugins.algorithms.ppo.ppo.PPO.update`):
the network's forward pass on a minibatch (``evaluate``: log-probabilities, entropies, values),
a loss, the backward pass and one Adam step. Networks:

- ``cnn``: PPO's Nature CNN actor-critic on Atari frames (uint8 ``[256, 4, 84, 84]``, 6 actions);
- ``mlp``: PPO's CartPole actor-critic (two tanh MLPs of 64, or each ``--mlp-hidden`` width; 4
  inputs, 2 actions), minibatch 256;
- ``entity``: MAPPO's hide-and-seek entity policy (attention + LSTM 256) on chunks of 10 steps x 64
  slots of a real quadrant observation (``algo.chunk_length`` 10, the reference setting);
- ``update`` (not in the default list): PPO's whole update at the Pong workload, a batch of 128 x 8
  Atari steps, 4 epochs x 4 minibatches, the values and GAE included (:func:`ppo_update`).

Variants: ``float32``; ``bfloat16`` (the forward pass under ``torch.autocast(dtype=bfloat16)``,
outputs cast to float32 before the loss, as ``algo.precision=bfloat16`` runs it); for the CNN
also ``bf16+cl`` and ``f32+cl``: the same with the network's weights and the input frames in
channels-last memory format, and ``bf16+cl-in`` and ``f32+cl-in``: the input frames alone in
channels-last (the weights as they are). The variants run interleaved: each round times ``--steps`` steps of
every variant in turn (one warm-up step each first), so load from other processes spreads over
all of them; per variant the median over rounds of the CPU milliseconds per step
(``time.process_time``) and of the wall milliseconds, and the median of the per-round ratios to
float32.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import numpy as np
import torch


def _atari_spec():
    from gymnasium import spaces

    from zoo.core.env import EnvSpec

    return EnvSpec("bench-atari", ("a",), {"obs": spaces.Box(0, 255, (4, 84, 84), np.uint8)}, spaces.Discrete(6))


def _cartpole_spec():
    from gymnasium import spaces

    from zoo.core.env import EnvSpec

    return EnvSpec("bench-cartpole", ("a",), {"obs": spaces.Box(-5, 5, (4,), np.float32)}, spaces.Discrete(2))


def ppo_step(net: torch.nn.Module, obs: dict[str, torch.Tensor], action: torch.Tensor, precision: str,
             channels_last: str = "") -> Callable[[], None]:
    """One PPO-like step on ``net`` (an ActorCritic): forward, loss, backward, Adam. ``channels_last``:
    ``"all"`` (weights and frames), ``"input"`` (the frames only), ``""`` (neither)."""
    from zoo.core.devices import training_autocast

    if channels_last == "all":
        net.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, eps=1e-5)
    if channels_last:
        obs = {k: v.contiguous(memory_format=torch.channels_last) for k, v in obs.items()}

    def step() -> None:
        with training_autocast(precision, "cpu"):
            logp, entropy, value = net.evaluate(obs, action)
        logp, entropy, value = logp.float(), entropy.float(), value.float()
        loss = -(logp * 0.5).mean() - 0.01 * entropy.mean() + 0.5 * (value ** 2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
        opt.step()

    return step


def entity_step(precision: str) -> Callable[[], None]:
    """One MAPPO step of the hide-and-seek entity policy on 64 chunks of 10 steps."""
    from zoo.core.devices import training_autocast
    from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig, chunk_time
    from zoo.plugins.envs.hide_and_seek.zoo_env import make

    env = make("quadrant", None, 0)
    obs, _ = env.reset(seed=0)
    torch.manual_seed(0)
    policy = MAPPO.build_policy(MAPPOConfig(policy="entity", value_norm="popart"), env.spec)
    a, L, M = env.spec.num_agents, 10, 64
    o = {k: chunk_time(torch.as_tensor(np.repeat(v, M // a, axis=0))[None].repeat(L, *([1] * v.ndim)), L)
         for k, v in obs.items()}
    action = torch.zeros(L, M, *env.spec.action_space.shape, dtype=torch.int64)
    state0 = policy.zero_state(M)
    reset = torch.zeros(L, M, dtype=torch.bool)
    mask = torch.ones(L, M, dtype=torch.bool)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4, eps=1e-5)

    def step() -> None:
        with training_autocast(precision, "cpu"):
            ev = policy.evaluate(o, action, state0, reset, mask)
        loss = -(ev["logp"].float() * 0.5).mean() - 0.01 * ev["entropy"].float().mean() \
            + 0.5 * (ev["value"].float() ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def ppo_update(precision: str) -> Callable[[], None]:
    """One whole :meth:`PPO.update` at the Pong workload's batch (128 steps x 8 envs of uint8 frames,
    the Atari presets' 4 epochs x 4 minibatches of 256), values and GAE included."""
    from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

    rng = np.random.default_rng(0)
    T, B = 128, 8
    batch = {"obs": {"obs": rng.integers(0, 255, (T + 1, B, 4, 84, 84), dtype=np.uint8)},
             "action": rng.integers(0, 6, (T, B)).astype(np.int64),
             "reward": rng.normal(size=(T, B)).astype(np.float32),
             "terminated": np.zeros((T, B), bool), "truncated": np.zeros((T, B), bool),
             "logp": np.full((T, B), np.log(1 / 6), np.float32)}
    algo = PPO(PPOConfig(precision=precision, epochs=4, minibatches=4), _atari_spec(), 0)
    return lambda: algo.update(batch) and None


def variants(nets: list[str], hidden: list[int]) -> dict[str, dict[str, Callable[[], None]]]:
    """``{network: {variant: step}}``."""
    from zoo.plugins.algorithms.ppo.networks import ActorCritic

    out: dict[str, dict[str, Callable[[], None]]] = {}
    rng = np.random.default_rng(0)
    if "cnn" in nets:
        torch.manual_seed(0)
        base = ActorCritic(_atari_spec())
        obs = {"obs": torch.from_numpy(rng.integers(0, 255, (256, 4, 84, 84), dtype=np.uint8))}
        action = torch.from_numpy(rng.integers(0, 6, 256))
        out["nature-cnn"] = {name: ppo_step(deepcopy(base), obs, action, prec, cl) for name, prec, cl in (
            ("float32", "float32", ""), ("bfloat16", "bfloat16", ""),
            ("bf16+cl", "bfloat16", "all"), ("f32+cl", "float32", "all"),
            ("bf16+cl-in", "bfloat16", "input"), ("f32+cl-in", "float32", "input"))}
    for h in hidden if "mlp" in nets else ():
        torch.manual_seed(0)
        base = ActorCritic(_cartpole_spec(), hidden=h)
        obs = {"obs": torch.from_numpy(rng.standard_normal((256, 4), dtype=np.float32))}
        action = torch.from_numpy(rng.integers(0, 2, 256))
        out[f"mlp-{h}"] = {name: ppo_step(deepcopy(base), obs, action, name)
                           for name in ("float32", "bfloat16")}
    if "update" in nets:
        out["ppo-update"] = {name: ppo_update(name) for name in ("float32", "bfloat16")}
    if "entity" in nets:
        out["entity+lstm"] = {name: entity_step(name) for name in ("float32", "bfloat16")}
    return out


def measure(steps: dict[str, Callable[[], None]], rounds: int, n: int) -> dict[str, Any]:
    """Interleaved rounds; per variant the CPU and wall ms per step of every round."""
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    wall: dict[str, list[float]] = {k: [] for k in steps}
    for fn in steps.values():
        fn()  # warm-up (allocator, oneDNN primitives)
    for _ in range(rounds):
        for name, fn in steps.items():
            fn()
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                fn()
            cpu[name].append((time.process_time() - c0) / n * 1e3)
            wall[name].append((time.perf_counter() - w0) / n * 1e3)
    return {"cpu": cpu, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--nets", default="cnn,mlp,entity")
    parser.add_argument("--mlp-hidden", default="64", help="hidden widths of the MLP, e.g. 64,128,256,512")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from zoo.core.devices import cpu_bf16_facts

    cap, flags = cpu_bf16_facts()
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} (CPU capability {cap}, bf16 flags {sorted(flags) or 'none'}), "
          f"{args.threads} thread(s); load average {os.getloadavg()[0]:.2f}")
    print(f"{'network':13}{'variant':>11}{'cpu ms':>9}{'min-max':>15}{'wall ms':>9}{'x f32 (cpu)':>12}")
    for net, steps in variants(args.nets.split(","), [int(h) for h in args.mlp_hidden.split(",")]).items():
        res = measure(steps, args.rounds, args.steps)
        base = res["cpu"]["float32"]
        for name in steps:
            c = res["cpu"][name]
            ratio = statistics.median(x / b for x, b in zip(c, base, strict=True))
            print(f"{net:13}{name:>11}{statistics.median(c):9.1f}{f'{min(c):.1f}-{max(c):.1f}':>15}"
                  f"{statistics.median(res['wall'][name]):9.1f}{ratio:12.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
