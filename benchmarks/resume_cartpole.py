"""Does a resumed run still learn? PPO on CartPole-v1, Ctrl-C at 100,000 env steps, resumed.

    python benchmarks/resume_cartpole.py [--seed 1] [--stop-at 100000] [--runs-dir DIR]

1. ``zoo train ppo --env CartPole-v1 --seed S --name resume-cartpole-S`` (the default budget,
   200,000 env steps) through the real CLI; once ``metrics.jsonl`` shows an update at or past
   ``--stop-at`` env steps the CLI gets SIGINT (Ctrl-C) and stops the run, writing its
   checkpoint.
2. ``zoo resume resume-cartpole-S`` continues it to the same 200,000-step budget.
3. Prints the figures: where the checkpoint stopped (updates, env steps), the best mean
   return of 20 consecutive episodes within 200,000 env steps (the target is 450), the env
   steps at which it first reached 450, whether the update rows run 1..N without a gap or a
   duplicate, the mean returns of the 20 episodes before the stop and after the resume and
   the best mean-20 after it (a resume that lost the optimiser state or the schedule shows
   here as a dip), and the wall time of both segments.

Figures depend on the machine's load and on timing (sample order in the dataflow), as
every CartPole run does.
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stop-at", type=int, default=100_000, help="env steps after which Ctrl-C is sent")
    parser.add_argument("--runs-dir", default=None, help="where the run goes (default: a temporary folder)")
    args = parser.parse_args()
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix="zoo-resume-bench-"))
    name = f"resume-cartpole-{args.seed}"
    run_dir = runs / name
    cmd = [sys.executable, "-m", "zoo"]
    t0 = time.monotonic()
    proc = subprocess.Popen([*cmd, "train", "ppo", "--env", "CartPole-v1", "--seed", str(args.seed), "--name", name,
                             "--set", f"runs_dir={runs}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        if any(r.get("type") == "update" and r["env_steps"] >= args.stop_at for r in rows(run_dir)):
            proc.send_signal(signal.SIGINT)
            break
        time.sleep(0.5)
    _, err = proc.communicate(timeout=120)
    first_s = time.monotonic() - t0
    from zoo.core.checkpoint import load_checkpoint

    ckpt = load_checkpoint(str(run_dir / "checkpoints" / "latest.pt"))
    print(f"segment 1: exit {proc.returncode} after {first_s:.0f} s; checkpoint at update {ckpt['updates']}, "
          f"{ckpt['env_steps']:,} env steps, {ckpt['episodes']} episodes")
    t1 = time.monotonic()
    done = subprocess.run([*cmd, "resume", name, "--runs-dir", str(runs)], capture_output=True, text=True)
    second_s = time.monotonic() - t1
    print(f"segment 2: exit {done.returncode} after {second_s:.0f} s")
    if done.returncode != 0:
        print(done.stderr[-3000:])
    all_rows = rows(run_dir)
    updates = [r["updates"] for r in all_rows if r["type"] == "update"]
    episodes = [r for r in all_rows if r["type"] == "episode" and r["env_steps"] <= 200_000]
    returns = np.array([e["return"] for e in episodes])
    means = np.convolve(returns, np.ones(20) / 20, mode="valid") if len(returns) >= 20 else np.array([0.0])
    reached = np.flatnonzero(means >= 450)
    first = episodes[int(reached[0]) + 19]["env_steps"] if reached.size else None
    final = load_checkpoint(str(run_dir / "checkpoints" / "latest.pt"))
    print(f"update rows 1..{updates[-1]} without gap or duplicate: {updates == list(range(1, len(updates) + 1))}; "
          f"resume rows: {sum(r['type'] == 'resume' for r in all_rows)}; end rows: "
          f"{sum(r['type'] == 'end' for r in all_rows)}")
    print(f"final checkpoint: update {final['updates']}, {final['env_steps']:,} env steps, resumes {final['resumes']}")
    print(f"best mean-20 return within 200,000 env steps: {means.max():.1f}; first >= 450 at "
          f"{first:,} env steps" if first is not None else f"best mean-20 return within 200,000 env steps: "
          f"{means.max():.1f}; 450 not reached")
    seam = next(i for i, r in enumerate(all_rows) if r["type"] == "resume")
    before = [r["return"] for r in all_rows[:seam] if r["type"] == "episode"][-20:]
    after = [r["return"] for r in all_rows[seam:] if r["type"] == "episode"]
    best_after = max((np.mean(after[i - 20:i]) for i in range(20, len(after) + 1)), default=float("nan"))
    print(f"mean return of the last 20 episodes before the stop: {np.mean(before):.1f}; of the first 20 after the "
          f"resume: {np.mean(after[:20]):.1f}; best mean-20 after the resume: {best_after:.1f} "
          f"({len(after)} episodes)")
    print(f"run dir: {run_dir} (kept for inspection)")


if __name__ == "__main__":
    main()
