"""A curriculum cleared in order (issue 23 item 5, docs/curriculum.md).

Trains ``zoo train ppo --env fake-stages`` (the test env whose stage s asks for s + 1 right
actions in a row; a uniformly random policy clears stage s with probability 2^-(s+1)) with
``[curriculum] advance_when = "mean_return >= 0.9", over_episodes = 100`` for each seed, then
reads each run's ``curriculum`` and ``episode`` rows and writes:

- ``benchmarks/curriculum_stages.png``: the mean return of the last 200 episodes over env
  steps, with a dashed line at each stage switch;
- ``benchmarks/data/curriculum/summary.json``: per seed, the env steps, policy version and
  updates of every switch and the final mean return per stage (what RESULTS.md quotes).

Usage (from the repository root)::

    python benchmarks/curriculum_stages.py --seeds 1 2 3 --steps 20000
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "plugins" / "zoo-fakes"


def train(runs_dir: Path, seed: int, steps: int) -> Path:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))
    name = f"stages-s{seed}"
    cmd = [sys.executable, "-m", "zoo", "train", "ppo", "--env", "fake-stages", "--name", name, "--seed", str(seed),
           "--steps", str(steps), "--set", f"runs_dir={runs_dir}", "--set", "algo.epochs=2",
           "--set", "curriculum.advance_when=mean_return >= 0.9", "--set", "curriculum.over_episodes=100"]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return runs_dir / name


def summarise(run: Path) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    switches = [{k: r[k] for k in ("stage", "stage_name", "env_steps", "policy_version", "updates")}
                for r in rows if r["type"] == "curriculum"]
    episodes = [r for r in rows if r["type"] == "episode"]
    last = {}
    for stage in sorted({r["curriculum_stage"] for r in episodes}):
        returns = [r["return"] for r in episodes if r["curriculum_stage"] == stage][-200:]
        last[str(stage)] = {"episodes": sum(r["curriculum_stage"] == stage for r in episodes),
                            "last_200_mean_return": round(sum(returns) / len(returns), 3)}
    return {"switches": switches, "per_stage": last,
            "curve": [(r["env_steps"], r["return"], r["curriculum_stage"]) for r in episodes]}


def plot(summaries: dict[int, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (seed, s) in enumerate(summaries.items()):
        x, y, _ = (np.array(v, float) for v in zip(*s["curve"], strict=True))
        window = 200
        smooth = np.convolve(y, np.ones(window) / window, mode="valid")
        line, = ax.plot(x[window - 1:], smooth, label=f"seed {seed}")
        for sw in s["switches"][1:]:
            ax.axvline(sw["env_steps"], color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.text(sw["env_steps"], 0.03 + 0.05 * i, f" {sw['stage_name']}", color=line.get_color(), fontsize=7,
                    ha="left", transform=ax.get_xaxis_transform())
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (mean of the last 200)")
    ax.set_title("PPO on fake-stages: stage switches (dashed) when mean_return >= 0.9 over 100 episodes", fontsize=9)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "curriculum_stages.png"))
    args = ap.parse_args()
    summaries = {}
    with tempfile.TemporaryDirectory(prefix="zoo-curriculum-") as tmp:
        for seed in args.seeds:
            summaries[seed] = summarise(train(Path(tmp), seed, args.steps))
    plot(summaries, Path(args.out))
    data = ROOT / "benchmarks" / "data" / "curriculum"
    data.mkdir(parents=True, exist_ok=True)
    slim = {seed: {k: v for k, v in s.items() if k != "curve"} for seed, s in summaries.items()}
    (data / "summary.json").write_text(json.dumps({"steps": args.steps, "seeds": slim}, indent=1) + "\n")
    print(json.dumps(slim, indent=1))


if __name__ == "__main__":
    main()
