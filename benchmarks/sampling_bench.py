"""Sampling throughput of Zoo's pipeline next to raw environment stepping, in one run.

(a) raw: ``--raw-processes`` processes (default: one per core, i.e. the same cores the
    pipeline uses) each step ``actors.envs_per_actor`` environments (same preprocessing)
    with random actions — no inference, no transport;
(b) zoo: the real dataflow (actor workers + policy worker + trainer with
    ``trainer.learn=false``, which counts and discards samples), so the figure is
    env stepping + batched inference + transports. With ``--learn`` the trainer trains
    as in a real run: the whole pipeline (issue 5's measure).

(a) and (b) are the measurements of ``zoo bench`` (:mod:`zoo.bench.measure`), which adds the
CPU-work bound, the end-to-end run, each role's CPU share and the bottleneck at a named
workload; this script keeps the free ``--env``/``--algo``/``--set`` choice. Both report env steps/s, frames/s and agent steps/s (env steps x agents, for
multi-agent envs) measured after a warm-up, and (b)/(a).

    python benchmarks/sampling_bench.py --env atari:Pong --seconds 30
    python benchmarks/sampling_bench.py --algo mappo --env hide-and-seek --learn --seconds 120 --warmup 30
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform


def raw_rate(env_name: str, processes: int, n_envs: int, seconds: float, warmup: float, env_cfg=None) -> float:
    """(a): :func:`zoo.bench.measure.raw_ceiling` (the same measurement ``zoo bench`` makes)."""
    from zoo.bench.measure import raw_ceiling

    return raw_ceiling(env_name, env_cfg, processes, n_envs, seconds, warmup).env_steps_per_s


def zoo_rate(env_name: str, algo: str, seconds: float, warmup: float, overrides: list[str],
             learn: bool = False) -> tuple[float, object]:
    """(b): :func:`zoo.bench.measure.measure_run` over ``seconds`` after ``warmup``."""
    import tempfile

    from zoo.bench.measure import bench_config, measure_run
    from zoo.bench.report import rate

    runs_dir = tempfile.mkdtemp(prefix="zoo-bench-")
    cfg = bench_config(algo, env_name, overrides, learn=learn, runs_dir=runs_dir, name="bench-sampling")
    run = measure_run(cfg, seconds=seconds, warmup=warmup, limit_s=warmup + seconds + 600)
    os.rmdir(runs_dir)
    return rate(run.start, run.end, "env_steps", run.t1 - run.t0), cfg


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
    raw = raw_rate(args.env, args.raw_processes, cfg.actors.envs_per_actor, args.seconds, args.warmup, cfg.env)
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
