"""Sampling throughput of Zoo's pipeline next to raw environment stepping, in one run.

(a) raw: ``--raw-processes`` processes (default: one per core, i.e. the same cores the
    pipeline uses) each step ``actors.envs_per_actor`` environments (same preprocessing)
    with random actions — no inference, no transport;
(b) zoo: the real dataflow (actor workers + policy worker + trainer with
    ``trainer.learn=false``, which counts and discards samples), so the figure is
    env stepping + batched inference + transports. With ``--learn`` the trainer trains
    as in a real run: the whole pipeline (issue 5's measure).

Both report env steps/s, frames/s and agent steps/s (env steps x agents, for
multi-agent envs) measured after a warm-up, and (b)/(a).

    python benchmarks/sampling_bench.py --env atari:Pong --seconds 30
    python benchmarks/sampling_bench.py --algo mappo --env hide-and-seek --learn --seconds 120 --warmup 30
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import time


def _raw_worker(env_name: str, n_envs: int, seconds: float, warmup: float, seed: int, out) -> None:
    import numpy as np

    from zoo.core.plugins import get_registry

    registry = get_registry()
    from zoo.core.config import resolve_env

    component, arg = resolve_env(registry, env_name)
    cfg_cls = component.option("config")
    envs = [component.load()(arg, cfg_cls() if cfg_cls else None, seed + i) for i in range(n_envs)]
    space = envs[0].spec.action_space
    A = envs[0].spec.num_agents
    rng = np.random.default_rng(seed)
    for env in envs:
        env.reset(seed=int(rng.integers(1 << 30)))
    steps, start, counted_from = 0, time.monotonic(), None
    while True:
        now = time.monotonic()
        if counted_from is None and now - start >= warmup:
            counted_from, steps = now, 0
        if now - start >= warmup + seconds:
            break
        for env in envs:
            action = np.stack([space.sample() for _ in range(A)])
            _, _, term, trunc, info = env.step(action)
            if np.all(term | trunc):
                env.reset()
            steps += 1
    out.put(steps / (time.monotonic() - counted_from))


def raw_rate(env_name: str, processes: int, n_envs: int, seconds: float, warmup: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_raw_worker, args=(env_name, n_envs, seconds, warmup, 1000 * i, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    total = sum(out.get() for _ in procs)
    for p in procs:
        p.join()
    return total


def zoo_rate(env_name: str, algo: str, seconds: float, warmup: float, overrides: list[str],
             learn: bool = False) -> tuple[float, object]:
    from zoo.core.config import build_config
    from zoo.core.controller import run
    from zoo.core.plugins import get_registry

    cfg = build_config(get_registry(), algo, env_name, steps=10**9, name=f"bench-sampling-{int(time.time())}",
                       overrides=[f"trainer.learn={str(learn).lower()}", "log.interval_s=0.5", "log.tensorboard=false",
                                  "runs_dir=/tmp/zoo-bench-runs", *overrides])
    points: list[tuple[float, int]] = []

    def on_status(status: dict) -> None:
        now = time.monotonic()
        points.append((now, status["env_steps"]))
        if points and now - points[0][0] > warmup + seconds:
            raise KeyboardInterrupt  # stop the run: the controller cleans up

    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        run(cfg, cfg.spec, on_status)
    first = next(p for p in points if p[0] - points[0][0] >= warmup)
    last = points[-1]
    return (last[1] - first[1]) / (last[0] - first[0]), cfg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="atari:Pong")
    parser.add_argument("--algo", default="ppo")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--learn", action="store_true", help="train as in a real run (whole pipeline)")
    parser.add_argument("--raw-processes", type=int, default=mp.cpu_count(),
                        help="processes for raw stepping (default: one per core)")
    args = parser.parse_args()
    zoo, cfg = zoo_rate(args.env, args.algo, args.seconds, args.warmup, args.overrides, args.learn)
    raw = raw_rate(args.env, args.raw_processes, cfg.actors.envs_per_actor, args.seconds, args.warmup)
    fs, agents = cfg.spec.frame_skip, cfg.spec.num_agents
    print(f"machine: {platform.machine()}, {mp.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{args.algo} on {args.env}: {cfg.actors.count} actors x {cfg.actors.envs_per_actor} envs "
          f"(ring {cfg.actors.ring_size}), inference transport {cfg.streams.inference.transport}, "
          f"precision {cfg.policy.precision}, frame-skip {fs}, {agents} agent(s); raw: {args.raw_processes} processes")
    label = "zoo pipeline (training)" if args.learn else "zoo sampling (no train)"
    print(f"{'':26}{'env steps/s':>14}{'frames/s':>12}{'agent steps/s':>15}")
    print(f"{'raw stepping':26}{raw:14,.0f}{raw * fs:12,.0f}{raw * agents:15,.0f}")
    print(f"{label:26}{zoo:14,.0f}{zoo * fs:12,.0f}{zoo * agents:15,.0f}")
    print(f"ratio zoo / raw: {zoo / raw:.2f}")


if __name__ == "__main__":
    main()
