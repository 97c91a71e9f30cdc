"""R2D2 learns a memory task a feed-forward Q cannot (issue 24): CartPole-v1 with its velocities hidden.

Each arm trains on ``CartPole-v1`` wrapped in ``MaskVelocity`` (observations: the cart position
and the pole angle only; the cart and pole velocities are zeroed), so a policy must infer the
velocities from the observations it has seen, which a recurrent Q can and a feed-forward Q
cannot:

- ``r2d2``: ``zoo train r2d2`` (recurrent Q, stored state, burn-in; its CartPole presets);
- ``apex-dqn``: ``zoo train dqn`` (the same dueling double Q with n-step prioritised replay,
  without the LSTM; its CartPole presets), the feed-forward control;
- ``r2d2-full`` (optional, ``--arms``): R2D2 on the fully observed env, the ceiling.

It writes ``benchmarks/r2d2_memory.png`` (the mean return of the last 20 episodes over env
steps, every seed) and ``benchmarks/data/r2d2_memory/summary.json`` (per arm and seed: the mean-20
at every 10k env steps, the best mean-20, env steps, wall seconds), which RESULTS.md quotes.

Usage (from the repository root)::

    python benchmarks/r2d2_memory.py --seeds 1 2 3 --steps 60000
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from zoo.plotting import smooth_curve

ROOT = Path(__file__).resolve().parents[1]
MASK = "env.wrappers=zoo.plugins.envs.gym.wrappers:MaskVelocity"
ARMS = {
    "r2d2": ("r2d2", [MASK]),
    "apex-dqn": ("dqn", [MASK]),
    "r2d2-full": ("r2d2", []),
}
WINDOW = 20
MARK = 10_000


def train(runs_dir: Path, arm: str, seed: int, steps: int) -> tuple[Path, float]:
    """Runs one arm for one seed; returns its run folder and wall seconds (start-up included)."""
    algo, sets = ARMS[arm]
    name = f"{arm}-s{seed}"
    cmd = [sys.executable, "-m", "zoo", "train", algo, "--env", "CartPole-v1", "--name", name, "--seed", str(seed),
           "--steps", str(steps), "--set", f"runs_dir={runs_dir}"]
    for s in sets:
        cmd += ["--set", s]
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return runs_dir / name, time.monotonic() - start


def rolling(episodes: list[tuple[int, float]], window: int = WINDOW) -> list[tuple[int, float]]:
    """``(env steps, mean return of the last window episodes)`` at every episode from the window-th on
    (:func:`zoo.plotting.smooth_curve`); none with fewer episodes.

    Example: returns 1..25 at env steps 10, 20, ..., 250 with window 20 -> (200, 10.5), ..., (250, 15.5)."""
    if len(episodes) < window:
        return []
    x, y = smooth_curve(np.array([e[0] for e in episodes]), np.array([e[1] for e in episodes], float), window)
    return list(zip(x.tolist(), y.tolist(), strict=True))


def summarise(run: Path, wall_s: float, steps: int) -> dict:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    episodes = [(int(r["env_steps"]), float(r["return"])) for r in rows if r["type"] == "episode"]
    curve = rolling(episodes)
    at = {}
    for mark in range(MARK, steps + 1, MARK):
        before = [m for s, m in curve if s <= mark]
        at[str(mark)] = round(before[-1], 1) if before else None
    best = max(curve, key=lambda c: c[1]) if curve else (0, 0.0)
    return {"wall_s": round(wall_s, 1), "episodes": len(episodes), "env_steps": episodes[-1][0] if episodes else 0,
            "mean20_at": at, "best_mean20": round(best[1], 1), "best_at_env_steps": best[0], "curve": curve}


def plot(results: dict[str, dict[int, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"r2d2": "tab:blue", "apex-dqn": "tab:red", "r2d2-full": "tab:gray"}
    labels = {"r2d2": "R2D2 (LSTM), velocities hidden", "apex-dqn": "Ape-X DQN (feed-forward), velocities hidden",
              "r2d2-full": "R2D2, fully observed"}
    fig, ax = plt.subplots(figsize=(8, 4))
    for arm, seeds in results.items():
        for i, s in enumerate(seeds.values()):
            if s["curve"]:
                x, y = zip(*s["curve"], strict=True)
                ax.plot(x, y, color=colours[arm], alpha=0.8, linewidth=1, label=labels[arm] if i == 0 else None)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"episode return (mean of the last {WINDOW})")
    ax.set_title("CartPole-v1 with cart and pole velocities hidden (MaskVelocity), one line per seed", fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=60_000)
    ap.add_argument("--arms", nargs="+", default=["r2d2", "apex-dqn"], choices=sorted(ARMS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "r2d2_memory.png"))
    args = ap.parse_args()
    results: dict[str, dict[int, dict]] = {arm: {} for arm in args.arms}
    with tempfile.TemporaryDirectory(prefix="zoo-r2d2-memory-") as tmp:
        for seed in args.seeds:  # interleaved: seed by seed, every arm
            for arm in args.arms:
                run, wall = train(Path(tmp), arm, seed, args.steps)
                results[arm][seed] = summarise(run, wall, args.steps)
                s = results[arm][seed]
                print(f"{arm} seed {seed}: best mean-{WINDOW} {s['best_mean20']} at {s['best_at_env_steps']:,} env "
                      f"steps; {s['wall_s']} s; mean-{WINDOW} every {MARK:,}: {s['mean20_at']}", flush=True)
    plot(results, Path(args.out))
    data = ROOT / "benchmarks" / "data" / "r2d2_memory"
    data.mkdir(parents=True, exist_ok=True)
    slim = {arm: {seed: {k: v for k, v in s.items() if k != "curve"} for seed, s in seeds.items()}
            for arm, seeds in results.items()}
    (data / "summary.json").write_text(json.dumps({"steps": args.steps, "window": WINDOW, "arms": slim}, indent=1)
                                       + "\n")


if __name__ == "__main__":
    main()
