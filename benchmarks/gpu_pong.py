"""End-to-end Pong on a GPU machine: Zoo's frames/s against the raw env ceiling of its CPU cores.

    python benchmarks/gpu_pong.py                          # defaults below, about 4 minutes
    python benchmarks/gpu_pong.py --seconds 120 --set actors.envs_per_actor=16

Issue 13's target: Zoo end to end (training) at least 85% of the frames/s that raw stepping
of the same env, with the same preprocessing, reaches on all the machine's cores (Sample
Factory reports 75%). The policy worker and the trainer run on CUDA (``policy.device=cuda``,
``algo.device=cuda``); the actors step the envs on the CPU cores, one actor per core by
default (``--actors``), ``--envs`` envs each, and one update takes every actor's rollout of
``sample_length`` = 128 steps (``trainer.batch_samples`` = actors x envs), 4 epochs x 4
minibatches. The measurements are ``zoo bench``'s (:mod:`zoo.bench.measure`): the ceiling
(one raw process per core), then the Zoo run measured over ``--seconds`` after ``--warmup``
seconds past the trainer's first status, each role's CPU share and the bottleneck.

Without a usable CUDA device it stops at once (exit 2) saying why, before starting anything.
Prints one table; ``--json FILE`` also writes the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

TARGET = 0.85
"""Zoo's end-to-end frames/s over the raw env ceiling the issue asks for on a GPU machine."""


def cuda_problem() -> str | None:
    """Why this machine cannot run the benchmark (no torch CUDA build, no device), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch==2.13.0 "
                "(pip's default index on Linux) in this environment")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!s}); run it on a GPU machine")
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command line (``benchmarks/gpu_check.py``'s test parses its gpu_pong command with it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = os.cpu_count() or 1
    parser.add_argument("--actors", type=int, default=cores, help="actor workers (default: one per core)")
    parser.add_argument("--envs", type=int, default=8, help="envs per actor (default 8, 2 ring groups of 4)")
    parser.add_argument("--seconds", type=float, default=90.0, help="measured seconds (default 90)")
    parser.add_argument("--warmup", type=float, default=30.0, help="warm-up seconds (default 30)")
    parser.add_argument("--limit", type=float, default=480.0, help="give up on a phase after this many seconds")
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    parser.add_argument("--json", default=None, metavar="FILE")
    return parser


def main() -> None:
    parser = build_parser()
    cores = os.cpu_count() or 1
    args = parser.parse_args()
    problem = cuda_problem()
    if problem:
        print(f"gpu_pong.py needs a CUDA GPU: {problem}.", file=sys.stderr)
        sys.exit(2)
    if args.actors < 1 or args.envs < 2 or args.envs % 2 or args.seconds <= 0 or args.warmup < 0:
        parser.error("--actors >= 1, an even --envs >= 2, --seconds > 0 and --warmup >= 0 are needed")

    import shutil
    import tempfile

    import torch

    from zoo.bench.measure import bench_config
    from zoo.bench.report import format_table
    from zoo.bench.workloads import Workload
    from zoo.commands.bench import run_bench

    n = args.actors * args.envs
    overrides = ("policy.device=cuda", "algo.device=cuda", f"actors.count={args.actors}",
                 f"actors.envs_per_actor={args.envs}", "actors.ring_size=2", f"trainer.batch_samples={n}",
                 "sample_length=128", "algo.epochs=4", "algo.minibatches=4", *args.overrides)
    w = Workload("pong-gpu", "ppo", "atari:Pong", overrides,
                 f"PPO on Pong, policy worker and trainer on {torch.cuda.get_device_name(0)}, {args.actors} actors x "
                 f"{args.envs} envs on {cores} CPU cores, 128 steps per rollout, 4 epochs x 4 minibatches",
                 "PongNoFrameskip-v4", n, 128, 4, 4)
    runs_dir = tempfile.mkdtemp(prefix="zoo-bench-")
    try:
        cfgs = {learn: bench_config(w.algo, w.env, list(overrides), learn=learn, runs_dir=runs_dir,
                                    name=f"gpu-pong-{'train' if learn else 'sampling'}") for learn in (False, True)}
        result = run_bench(w, cfgs, ("ceiling", "train"), args.seconds, args.warmup, args.limit, cores)
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    print(format_table(result))  # with a failed phase's reason in its own line ("train failed: ...")
    if result.get("train") and result["train"].get("of_ceiling") is not None:
        ratio = result["train"]["of_ceiling"]
        print(f"end-to-end frames/s / raw ceiling frames/s: {ratio:.1%} (target >= {TARGET:.0%}): "
              + ("met" if ratio >= TARGET else "missed: the bottleneck line above names what stops it"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if result.get("errors"):
        sys.exit(f"gpu_pong: {len(result['errors'])} phase(s) failed: {', '.join(result['errors'])} (see the table)")


if __name__ == "__main__":
    main()
