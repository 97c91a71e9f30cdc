"""CPU cost of one inference forward pass, float32 next to bfloat16 autocast, in one run.

    python benchmarks/inference_bench.py [--repeats 40]

For the Nature CNN (PPO on Atari, uint8 [N, 4, 84, 84]) and the hide-and-seek entity policy
(MAPPO, entity attention + LSTM 256, a real quadrant observation), on one torch thread:
CPU milliseconds per forward pass (``time.process_time``, so other load on the machine
disturbs it little) and microseconds per observation (agent step), for several batch
sizes. ``bfloat16`` is what ``--set policy.precision=bfloat16`` runs (``torch.autocast``).
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import time

import numpy as np
import torch


def cpu_ms(fn, repeats: int) -> float:
    """CPU milliseconds per call of ``fn`` (3 warm-up calls first)."""
    for _ in range(3):
        fn()
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats * 1e3


def precisions():
    return {"float32": contextlib.nullcontext, "bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, 1 thread")
    print(f"{'network':14}{'batch':>6}{'precision':>11}{'ms/pass':>9}{'us/obs':>8}")

    from zoo.plugins.algorithms.ppo.networks import NatureCNN

    cnn = NatureCNN((4, 84, 84)).eval()
    for n in (4, 8, 16, 32):
        x = {"obs": torch.from_numpy(np.random.default_rng(0).integers(0, 255, (n, 4, 84, 84), dtype=np.uint8))}
        for name, ctx in precisions().items():
            with torch.inference_mode(), ctx():
                ms = cpu_ms(lambda: cnn(x), args.repeats)
            print(f"{'nature-cnn':14}{n:6}{name:>11}{ms:9.2f}{ms / n * 1e3:8.0f}")

    from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig
    from zoo.plugins.envs.hide_and_seek.zoo_env import make

    env = make("quadrant", None, 0)
    obs, _ = env.reset(seed=0)
    policy = MAPPO.build_policy(MAPPOConfig(policy="entity", value_norm="popart"), env.spec).eval()
    a = env.spec.num_agents
    for n in (16, 32, 64):
        o = {k: torch.as_tensor(np.repeat(v, n // a, axis=0)) for k, v in obs.items()}
        state = policy.zero_state(n)
        for name, ctx in precisions().items():
            with torch.no_grad(), ctx():
                ms = cpu_ms(lambda: policy.act(o, state=state), args.repeats)
            print(f"{'entity+lstm':14}{n:6}{name:>11}{ms:9.2f}{ms / n * 1e3:8.0f}")


if __name__ == "__main__":
    main()
