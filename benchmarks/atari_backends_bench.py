"""Atari's two backends side by side (``env.backend=python`` and ``vector``), runs interleaved.

For each repeat and each backend, in turn:

(a) raw stepping: ``--raw-processes`` processes (default: one per core) each step
    ``actors.envs_per_actor`` Pong games with random actions and the run's env options,
    no inference, no transport. Python path: one ``step`` per game; vector backend: one
    ``AtariVector.step`` call for all the process's games (``env.vector_threads`` threads);
(b) Zoo sampling: the real dataflow (actors + policy worker + trainer with
    ``trainer.learn=false``, which counts and discards samples), with the preset's
    ``actors.*`` layout, i.e. env stepping + batched inference + transports.

Prints every value and the medians, in env steps/s (frames/s = 4 x env steps/s).

    python benchmarks/atari_backends_bench.py --repeats 3 --seconds 20 --warmup 10
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _raw_worker(env_name: str, env_cfg, n_envs: int, seconds: float, warmup: float, seed: int, out) -> None:
    import numpy as np

    from zoo.core.config import resolve_env
    from zoo.core.plugins import get_registry

    component, arg = resolve_env(get_registry(), env_name)
    seeds = [seed + i for i in range(n_envs)]
    venv = component.option("vector_factory")(arg, env_cfg, n_envs)
    rng = np.random.default_rng(seed)
    if venv is not None:
        venv.reset(seeds)
        n_actions = venv.spec.action_space.n

        def step() -> int:
            venv.step(rng.integers(0, n_actions, n_envs))
            return n_envs
    else:
        envs = [component.load()(arg, env_cfg, s) for s in seeds]
        for env, s in zip(envs, seeds):
            env.reset(seed=s)
        n_actions = envs[0].spec.action_space.n

        def step() -> int:
            for env, a in zip(envs, rng.integers(0, n_actions, n_envs)):
                _, _, term, trunc, _ = env.step(np.array([a]))
                if term[0] or trunc[0]:
                    env.reset()
            return n_envs
    steps, start, counted_from = 0, time.monotonic(), None
    while True:
        now = time.monotonic()
        if counted_from is None and now - start >= warmup:
            counted_from, steps = now, 0
        if now - start >= warmup + seconds:
            break
        steps += step()
    out.put(steps / (time.monotonic() - counted_from))


def raw_rate(env_name: str, env_cfg, processes: int, n_envs: int, seconds: float, warmup: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_raw_worker, args=(env_name, env_cfg, n_envs, seconds, warmup, 1000 * i, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total


def main() -> None:
    from sampling_bench import zoo_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="atari:Pong")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--backends", default="python,vector")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="extra overrides, both backends")
    parser.add_argument("--raw-processes", type=int, default=mp.cpu_count())
    args = parser.parse_args()
    backends = args.backends.split(",")
    raw: dict[str, list[float]] = {b: [] for b in backends}
    zoo: dict[str, list[float]] = {b: [] for b in backends}
    cfg = None
    for rep in range(args.repeats):
        for b in backends:
            overrides = [f"env.backend={b}", *args.overrides]
            rate, cfg = zoo_rate(args.env, "ppo", args.seconds, args.warmup, overrides)
            zoo[b].append(rate)
            raw[b].append(raw_rate(args.env, cfg.env, args.raw_processes, cfg.actors.envs_per_actor,
                                   args.seconds, args.warmup))
            print(f"repeat {rep + 1} {b:>7}: raw {raw[b][-1]:8,.0f}  zoo sampling {zoo[b][-1]:8,.0f} env steps/s",
                  flush=True)
    print(f"machine: {platform.machine()}, {mp.cpu_count()} cores, Python {platform.python_version()}; "
          f"{cfg.actors.count} actors x {cfg.actors.envs_per_actor} envs (ring {cfg.actors.ring_size}), "
          f"raw: {args.raw_processes} processes x {cfg.actors.envs_per_actor} envs; extra: {args.overrides}")
    for b in backends:
        print(f"{b:>7}: raw median {statistics.median(raw[b]):,.0f} (all: {', '.join(f'{x:,.0f}' for x in raw[b])}); "
              f"zoo sampling median {statistics.median(zoo[b]):,.0f} (all: {', '.join(f'{x:,.0f}' for x in zoo[b])})")


if __name__ == "__main__":
    main()
