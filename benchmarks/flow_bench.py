"""Trained env steps per wall-clock second under several sample-flow settings, runs interleaved.

Each variant is ``NAME=PYTHON[:KEY=VALUE,KEY=VALUE...]``: the Python interpreter whose ``zoo``
runs it (e.g. a virtual environment holding another checkout, for a before/after comparison)
and ``--set`` overrides. Runs go round-robin over the variants (``--runs`` rounds), so a load
that changes over time hits every variant alike. From each run's ``metrics.jsonl``:

- env steps/s and trained env steps/s: the difference between the last and the first update
  rows over the difference of their ``time_s`` (wall time since the first update);
  ``trained_env_steps`` where the rows have it, else updates x the env steps one update takes
  (``trainer.batch_samples`` agent-slot samples of ``sample_length`` steps, one agent per env);
- dropped: ``(dropped_samples + actor_dropped_samples) / (those + samples trained on)`` at the
  last update row;
- the mean and largest policy lag over the update rows.

Prints one line per run and, per variant, the median of each figure with all values.

Example (the "No wasted env steps" section of RESULTS.md)::

    python benchmarks/flow_bench.py --env CartPole-v1 --steps 30000 --runs 3 \\
        --variant before=/tmp/before/.venv/bin/python --variant lag1=python:trainer.max_policy_lag=1 \\
        --variant default=python
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_variant(text: str) -> tuple[str, str, list[str]]:
    name, _, rest = text.partition("=")
    python, _, sets = rest.partition(":")
    if not name or not python:
        raise SystemExit(f"--variant {text!r}: expected NAME=PYTHON[:KEY=VALUE,...]")
    return name, ("python" if python == "python" else python), [s for s in sets.split(",") if s]


def figures(run_dir: str) -> dict[str, float]:
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    updates = [r for r in rows if r["type"] == "update"]
    if len(updates) < 2:
        raise RuntimeError(f"{run_dir}: fewer than 2 updates")
    per_update = cfg["trainer"]["batch_samples"] * cfg["sample_length"]

    def trained(r):
        return r["trained_env_steps"] if "trained_env_steps" in r else r["updates"] * per_update

    first, last = updates[0], updates[-1]
    dt = last["time_s"] - first["time_s"]
    used = last.get("trained_samples", last["updates"] * cfg["trainer"]["batch_samples"])
    dropped = last.get("dropped_samples", 0) + last.get("actor_dropped_samples", 0)
    return {"env_steps_per_s": (last["env_steps"] - first["env_steps"]) / dt,
            "trained_env_steps_per_s": (trained(last) - trained(first)) / dt,
            "dropped": dropped / (dropped + used) if dropped + used else 0.0,
            "lag_mean": statistics.fmean(r["policy_lag_mean"] for r in updates),
            "lag_max": max(r["policy_lag_max"] for r in updates),
            "updates": len(updates)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", default="ppo")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--steps", type=int, default=30_000, help="env-step budget of each run")
    ap.add_argument("--runs", type=int, default=3, help="rounds over the variants")
    ap.add_argument("--variant", action="append", required=True, help="NAME=PYTHON[:KEY=VALUE,...]")
    ap.add_argument("--set", action="append", default=[], dest="common", help="override for every variant")
    args = ap.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    with tempfile.TemporaryDirectory(prefix="zoo-flow-bench-") as root:
        for r in range(args.runs):
            for name, python, sets in variants:
                run = f"{name}-{r}"
                cmd = [sys.executable if python == "python" else python, "-m", "zoo", "train", args.algo,
                       "--env", args.env, "--steps", str(args.steps), "--name", run, "--set", f"runs_dir={root}",
                       "--set", "log.tensorboard=false", "--set", "log.interval_s=30"]
                for s in [*args.common, *sets]:
                    cmd += ["--set", s]
                started = time.monotonic()
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=root)  # no checkout on sys.path
                if done.returncode != 0:
                    raise SystemExit(f"{run} failed ({done.returncode}):\n{done.stderr[-3000:]}")
                f = figures(os.path.join(root, run))
                results[name].append(f)
                print(f"{run}: {f['env_steps_per_s']:.0f} env steps/s, {f['trained_env_steps_per_s']:.0f} trained env "
                      f"steps/s, dropped {100 * f['dropped']:.1f}%, lag mean {f['lag_mean']:.2f} max {f['lag_max']}, "
                      f"{f['updates']} updates, {time.monotonic() - started:.0f} s", flush=True)
    for name, runs in results.items():
        def med(key, fmt="{:.0f}"):
            values = [x[key] for x in runs]
            return f"{fmt.format(statistics.median(values))} ({', '.join(fmt.format(v) for v in values)})"

        print(f"{name}: env steps/s {med('env_steps_per_s')}; trained env steps/s {med('trained_env_steps_per_s')}; "
              f"dropped fraction {med('dropped', '{:.3f}')}; lag mean {med('lag_mean', '{:.2f}')}")


if __name__ == "__main__":
    main()
