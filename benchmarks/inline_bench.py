"""Inline inference against a policy worker: end-to-end throughput, runs interleaved.

    python benchmarks/inline_bench.py [--env CartPole-v1] [--algo ppo] [--steps 60000] [--repeats 3]
                                      [--set KEY=VALUE ...]

Runs ``zoo train ALGO --env ENV --steps N --seed 1`` through the real CLI (worker processes,
the presets, the default ``auto`` transport) ``--repeats`` times with ``policy.inline=false``
(the remote path: one policy worker) and ``policy.inline=true`` (no policy worker),
alternating, so both see the same machine load. Each ``--set`` is passed to both.

For each run, from ``metrics.jsonl``: **env steps/s** = env steps between the first and the
last update row / the trainer's time between them (start-up excluded: rates over wall time
since the first update; with ``--set trainer.learn=false``, a sampling-only run without update
rows: env steps of the ``end`` row / its ``time_s``, the trainer's time since it started);
**trained env steps/s** the same with ``trained_env_steps`` when the
rows carry it (the trainer's count of env steps whose samples it trained on); the samples
dropped as too stale (``dropped_samples``, agent-slot samples) and the final update's mean
policy lag; **CPU core-ms per 1,000 env steps**: the CPU time (user + system) of the whole
``zoo train`` process tree (the CLI and every worker, all reaped: ``RUSAGE_CHILDREN``) over
the run, start-up included, divided by its env steps (a measure of the work done that
machine load does not inflate as it does wall time); the load average (1 min) when the
run started. Prints one Markdown table with every run and the medians.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_once(algo: str, env: str, steps: int, inline: bool, extra: list[str], runs_dir: str, name: str) -> dict:
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "zoo", "train", algo, "--env", env, "--steps", str(steps), "--seed", "1",
           "--name", name, "--set", f"runs_dir={runs_dir}", "--set", f"policy.inline={str(inline).lower()}"]
    for item in extra:
        cmd += ["--set", item]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (Path(runs_dir) / name / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if r["type"] == "update"]
    # trainer.learn=false writes no update rows: the end row, from the trainer's start (start-up partly included)
    first, last = (updates[0], updates[-1]) if updates else ({"env_steps": 0, "time_s": 0.0}, rows[-1])
    dt_s = last["time_s"] - first["time_s"]
    out = {"inline": inline, "load": load, "updates": len(updates),
           "env_steps_per_s": (last["env_steps"] - first["env_steps"]) / dt_s,
           "trained_env_steps_per_s": ((last["trained_env_steps"] - first["trained_env_steps"]) / dt_s
                                       if "trained_env_steps" in last and "trained_env_steps" in first else None),
           "dropped_samples": last.get("dropped_samples"), "policy_lag_mean": last.get("policy_lag_mean"),
           "return": last.get("episode_return_mean"), "cpu_s": cpu_s,
           "cpu_ms_per_1k_env_steps": 1e6 * cpu_s / rows[-1]["env_steps"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algo", default="ppo")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--steps", type=int, default=60000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", dest="extra", action="append", default=[])
    args = ap.parse_args()
    started = dt.datetime.now(dt.timezone.utc)
    print(f"# {started:%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}; zoo train {args.algo} --env {args.env} --steps {args.steps} --seed 1 "
          + " ".join(f"--set {e}" for e in args.extra), flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="zoo-inline-bench-") as runs:
        for i in range(args.repeats):
            for inline in (False, True):
                r = run_once(args.algo, args.env, args.steps, inline, args.extra, runs, f"r{i}-{int(inline)}")
                results.append(r)
                print(json.dumps(r), flush=True)
    print("\n| policy.inline | run | env steps/s | trained env steps/s | CPU core-ms / 1k env steps | dropped samples "
          "| policy lag (mean, last update) | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for inline in (False, True):
        mine = [r for r in results if r["inline"] is inline]
        for i, r in enumerate(mine):
            trained = f"{r['trained_env_steps_per_s']:,.0f}" if r["trained_env_steps_per_s"] is not None else "n/a"
            print(f"| {str(inline).lower()} | {i + 1} | {r['env_steps_per_s']:,.0f} | {trained} | "
                  f"{r['cpu_ms_per_1k_env_steps']:,.0f} | {r['dropped_samples']} | {r['policy_lag_mean'] or 0:.2f} | "
                  f"{r['load']:.1f} |")
        med = statistics.median(r["env_steps_per_s"] for r in mine)
        trained = [r["trained_env_steps_per_s"] for r in mine if r["trained_env_steps_per_s"] is not None]
        cpu = statistics.median(r["cpu_ms_per_1k_env_steps"] for r in mine)
        print(f"| {str(inline).lower()} | **median** | **{med:,.0f}** | "
              f"{f'**{statistics.median(trained):,.0f}**' if trained else 'n/a'} | **{cpu:,.0f}** | | | |")


if __name__ == "__main__":
    main()
