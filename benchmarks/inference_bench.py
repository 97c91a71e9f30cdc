"""CPU cost of one inference forward pass, float32 next to bfloat16 autocast, in one run.

    python benchmarks/inference_bench.py [--repeats 40]

For the Nature CNN (PPO on Atari, uint8 [N, 4, 84, 84]) and the hide-and-seek entity policy
(MAPPO, entity attention + LSTM 256, a real quadrant observation), on one torch thread:
CPU milliseconds per forward pass (``time.process_time``, so other load on the machine
disturbs it little) and microseconds per observation (agent step), for several batch
sizes. ``bfloat16`` is what ``--set policy.precision=bfloat16`` runs: ``torch.autocast``
with the dense and convolution weights stored in bfloat16 once
(:func:`zoo.core.workers.policy.cast_for_precision`).
"""
from __future__ import annotations

import argparse
import platform
import time
from copy import deepcopy

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


def precisions(net: torch.nn.Module) -> dict:
    """``{precision: (network, context)}`` as the policy worker runs them."""
    from zoo.core.workers.policy import cast_for_precision, inference_autocast

    out = {}
    for name in ("float32", "bfloat16"):
        copy = deepcopy(net)
        cast_for_precision(copy, name)
        out[name] = (copy, lambda name=name: inference_autocast(name, "cpu"))
    return out


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
        for name, (net, ctx) in precisions(cnn).items():
            with torch.inference_mode(), ctx():
                ms = cpu_ms(lambda: net(x), args.repeats)
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
        for name, (net, ctx) in precisions(policy).items():
            with torch.no_grad(), ctx():
                ms = cpu_ms(lambda: net.act(o, state=state), args.repeats)
            print(f"{'entity+lstm':14}{n:6}{name:>11}{ms:9.2f}{ms / n * 1e3:8.0f}")


if __name__ == "__main__":
    main()
