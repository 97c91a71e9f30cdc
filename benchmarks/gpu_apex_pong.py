"""Ape-X DQN on Pong on a GPU machine: the time and env steps to a mean return of 19 within 3M env steps.

    python benchmarks/gpu_apex_pong.py                       # defaults below, stops at 19 or 3M env steps
    python benchmarks/gpu_apex_pong.py --dry-run             # the zoo command it would run, nothing started
    python benchmarks/gpu_apex_pong.py --actors 12 --set algo.lr=2e-4 --out apex-pong.json

Issue 24's target: Ape-X reaches a return of 19 on Pong within 3M env steps (RLlib's tuned Ape-X
does it in under 40 minutes on 4 GPUs). One ``zoo train apex-dqn --env atari:Pong`` run with the
learner and the policy worker on CUDA (``algo.device=cuda``, ``policy.device=cuda``) and the
actors on the CPU cores (``--actors``, default one per core less two for the policy worker and
the trainer, ``--envs`` each, Ape-X's per-env epsilons ``0.4 ** (1 + 7 i / (N - 1))`` over all
of them), on apex-dqn's Atari presets with the replay and learner scaled up (:data:`ALGO`): a
prioritised replay of 1M transitions (frames stored once: 6.8 GiB of host memory),
learning after 50,000, batches of 128 with 8 replayed samples per inserted one (DQN's ratio: 3M
env steps give 187,500 gradient steps), 3-step double dueling Q, lr 1e-4, target every 2,500
gradient steps. Checkpoints only when the run stops (each holds the replay).

Measured, from the run's ``metrics.jsonl`` as it is written (polled every second):

- **mean-100**: the mean return of the last 100 finished episodes of all envs, the exploring
  ones included (as RLlib's ``episode_reward_mean``); the **time to 19** is wall seconds from
  launching ``zoo train`` (start-up included) to the first mean-100 >= ``--target``, with the
  env steps there; the run is stopped there (Ctrl-C, as a user would), at ``--steps`` env steps
  (its budget) or at ``--limit`` seconds;
- **env steps/s**: the run's own mean (``mean_env_steps_per_s`` of its last update row) and
  the rate after learning started (env steps and seconds from the first update with gradient
  steps to the last), with gradient steps/s over the same span.

Prints one line per minute and a summary; writes the figures to ``--out`` (JSON, default
``gpu_apex_pong.json``). Without a usable CUDA device it stops at once (exit 2) with one line
saying why, before starting anything; ``--dry-run`` needs no GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

from peers import _stop  # noqa: E402
from time_to_return import MeanTracker, Tail, parse_zoo_row  # noqa: E402

TARGET = 19.0
STEPS = 3_000_000
WINDOW = 100
RUN = "apex-pong-gpu"
ALGO = {
    "algo.capacity": 1_000_000, "algo.learning_starts": 50_000, "algo.batch_size": 128,
    "algo.samples_per_insert": 8, "algo.lr": 1e-4, "algo.adam_eps": 1.5e-4, "algo.n_step": 3, "algo.gamma": 0.99,
    "algo.target_period": 2_500, "algo.max_grad_norm": 10, "algo.device": "cuda",
}
"""The learner: apex-dqn's Atari presets (double, dueling, prioritised alpha 0.6, beta 0.4 -> 1)
with a replay of 1M and batches of 128 at DQN's 8 replayed samples per inserted one."""


def cuda_problem() -> str | None:
    """Why this machine cannot run the benchmark (no torch CUDA build, no device), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch in this environment"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!s}); run it on a GPU machine")
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command line (its test builds the zoo command from these)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cores = os.cpu_count() or 1
    parser.add_argument("--actors", type=int, default=max(1, cores - 2),
                        help="actor workers (default: one per core less two)")
    parser.add_argument("--envs", type=int, default=8, help="envs per actor (default 8, 2 ring groups of 4)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"env-step budget (default {STEPS:,})")
    parser.add_argument("--target", type=float, default=TARGET, help=f"mean return to reach (default {TARGET:g})")
    parser.add_argument("--window", type=int, default=WINDOW, help=f"episodes in the mean (default {WINDOW})")
    parser.add_argument("--limit", type=float, default=3600.0, help="stop after this many seconds (default 3600)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                        help="extra zoo option, after the script's (repeatable)")
    parser.add_argument("--out", default="gpu_apex_pong.json", metavar="FILE", help="the figures, JSON")
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="keep the run here (default: a temporary folder, removed at the end)")
    parser.add_argument("--dry-run", action="store_true", help="print the zoo command and exit; starts nothing")
    return parser


def check_args(args: argparse.Namespace) -> str | None:
    """The first bad option, in words (None: all good)."""
    if args.actors < 1 or args.envs < 2 or args.envs % 2:
        return "--actors >= 1 and an even --envs >= 2 are needed"
    if args.steps < 1 or args.window < 1 or args.limit <= 0:
        return "--steps >= 1, --window >= 1 and --limit > 0 are needed"
    return None


def zoo_command(args: argparse.Namespace, runs_dir: str, python: str = sys.executable) -> list[str]:
    """``python -m zoo train apex-dqn --env atari:Pong ...`` for ``args``: 32 env columns of 32 steps
    per update whatever the actors, so an update inserts 1,024 transitions and takes 64 gradient
    steps of 128."""
    sets = {"runs_dir": runs_dir, "policy.device": "cuda", "actors.count": args.actors,
            "actors.envs_per_actor": args.envs, "actors.ring_size": 2, "sample_length": 32,
            "trainer.batch_samples": 32, "trainer.checkpoint_interval": 10**9, "trainer.checkpoint_interval_s": 0,
            **ALGO}
    argv = [python, "-m", "zoo", "train", "apex-dqn", "--env", "atari:Pong", "--steps", str(args.steps),
            "--seed", str(args.seed), "--name", RUN]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    for o in args.overrides:
        argv += ["--set", o]
    return argv


class Progress:
    """What the run's ``metrics.jsonl`` says so far: the mean-``window`` returns
    (:class:`MeanTracker`, stamped with the seconds since launch) and the rates from its update
    rows (``env_steps``, ``time_s``, ``gradient_steps``, ``mean_env_steps_per_s``)."""

    def __init__(self, target: float, window: int, max_steps: int) -> None:
        self.tracker = MeanTracker(target, window, max_steps)
        self.last: dict[str, Any] | None = None
        self.first_learning: dict[str, Any] | None = None  # the first update row with gradient steps
        self.gradient_steps = 0.0  # since (and including) that row

    def add(self, line: str, now: float) -> None:
        """Count one ``metrics.jsonl`` line read ``now`` seconds after the launch."""
        got = parse_zoo_row(line)
        if got is not None:
            self.tracker.add(now, *got)
            return
        try:
            row = json.loads(line)
        except ValueError:
            return
        if not isinstance(row, dict) or row.get("type") != "update":
            return
        self.last = row
        if self.first_learning is None and row.get("gradient_steps", 0) > 0:
            self.first_learning = row
        if self.first_learning is not None:
            self.gradient_steps += float(row.get("gradient_steps", 0))

    def result(self) -> dict[str, Any]:
        """The JSON figures (``None`` where nothing was seen yet)."""
        out: dict[str, Any] = {**self.tracker.result(), "env_steps_per_s": None,
                               "learning_env_steps_per_s": None, "gradient_steps_per_s": None}
        out["best_mean"] = out.pop("best_mean20")
        if self.last is not None:
            out["env_steps"] = max(out["env_steps"], int(self.last.get("env_steps", 0)))
            out["env_steps_per_s"] = self.last.get("mean_env_steps_per_s")
        a, b = self.first_learning, self.last
        if a is not None and b is not None and b["time_s"] > a["time_s"]:
            span = b["time_s"] - a["time_s"]
            out["learning_env_steps_per_s"] = (b["env_steps"] - a["env_steps"]) / span
            out["gradient_steps_per_s"] = (self.gradient_steps - float(a.get("gradient_steps", 0))) / span
        return out


def run(args: argparse.Namespace, runs_dir: str) -> dict[str, Any]:
    """Launch the run, follow it until the target, its end or ``--limit``; stop it (Ctrl-C)."""
    progress = Progress(args.target, args.window, args.steps)
    tail = Tail(Path(runs_dir, RUN, "metrics.jsonl"))
    log = open(Path(runs_dir, "zoo-train.log"), "w")
    began = time.monotonic()
    proc = subprocess.Popen(zoo_command(args, runs_dir), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    next_print = 60.0
    try:
        while True:
            exited = proc.poll() is not None  # before the read: rows written before the exit are read
            now = time.monotonic() - began
            for line in tail.lines():
                progress.add(line, now)
            if progress.tracker.reached is not None:
                ended = "target"
                break
            if exited:
                ended = f"exit {proc.returncode}"
                break
            if now >= args.limit:
                ended = "limit"
                break
            if now >= next_print:
                r = progress.result()
                mean = progress.tracker.best
                print(f"{now:6.0f} s: {r['env_steps']:,} env steps, {r['episodes']} episodes, "
                      f"best mean-{args.window} {'n/a' if mean is None else f'{mean[0]:.1f}'}, "
                      f"{r['env_steps_per_s'] or 0:,.0f} env steps/s", flush=True)
                next_print += 60.0
            time.sleep(1.0)
        wall = time.monotonic() - began
    finally:
        _stop(proc)
        log.close()
    return {**progress.result(), "ended": ended, "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem:
        parser.error(problem)
    if args.dry_run:
        print(" ".join(zoo_command(args, args.runs_dir or "<temporary folder>", "python")))
        return 0
    problem = cuda_problem()
    if problem:
        print(f"gpu_apex_pong.py needs a CUDA GPU: {problem}.", file=sys.stderr)
        return 2
    import torch

    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="zoo-apex-pong-")
    os.makedirs(runs_dir, exist_ok=True)
    try:
        result = run(args, runs_dir)
    finally:
        if args.runs_dir is None:
            shutil.rmtree(runs_dir, ignore_errors=True)
    result.update(target=args.target, window=args.window, steps_budget=args.steps, actors=args.actors,
                  envs_per_actor=args.envs, cores=os.cpu_count(), gpu=torch.cuda.get_device_name(0),
                  command=zoo_command(args, runs_dir, "python"))
    reached = result["seconds_to_target"]
    print(f"Ape-X on Pong, {args.actors} actors x {args.envs} envs, {result['gpu']}: "
          + (f"mean-{args.window} >= {args.target:g} after {reached / 60:.1f} min and {result['steps_at_target']:,} "
             "env steps" if reached is not None else f"mean-{args.window} never reached {args.target:g}")
          + f" (best {result['best_mean'] if result['best_mean'] is None else round(result['best_mean'], 1)}); "
          f"{result['env_steps']:,} env steps in {result['wall_s'] / 60:.1f} min, "
          f"{result['env_steps_per_s'] or 0:,.0f} env steps/s (after learning started: "
          f"{result['learning_env_steps_per_s'] or 0:,.0f} env steps/s, {result['gradient_steps_per_s'] or 0:,.1f} "
          f"gradient steps/s of {ALGO['algo.batch_size']}); ended: {result['ended']}; figures in {args.out}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0 if reached is not None and result["steps_at_target"] <= args.steps else 1


if __name__ == "__main__":
    sys.exit(main())
