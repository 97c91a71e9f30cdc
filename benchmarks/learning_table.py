"""Learning runs side by side: the return reached at given env steps, the wall time to a return.

    python benchmarks/learning_table.py RUN... [--at 100000,200000,...] [--last 100] [--reach 10,20]

For each run folder (``zoo train ... --name NAME``): the env steps it trained, its wall seconds
(the trainer's ``time_s`` of its last update or end row) and env steps per second; the mean
**return** (the episode rows' ``return``: for Atari the whole game's score, all lives,
unclipped, docs/looking-at-runs.md) of the last ``--last`` episodes that ended at or before
each ``--at`` env-step mark; the final mean of the last ``--last`` episodes; and, for each
``--reach`` value R, the first env steps and wall seconds at which that trailing mean reached R
(``-`` if never). Printed as a markdown table, one row per run, in the order given.
``--plot FILE.png`` also draws each run's trailing mean against env steps (``--x time``: wall
seconds), one colour per variant (the run name without its ``-sN`` seed suffix). The trailing
mean is over episodes, so runs whose episode rows come at different granularities (the env
steps of an episode row are those of the update that took it: with 2 data-parallel trainers,
one value per update) are smoothed alike; ``zoo plot --smooth`` averages over plotted points
instead, which there gives the coarser run a longer window.

Runs are read with :func:`zoo.plotting.load_run` (``zoo plot`` reads the same rows); draw the
curves with ``zoo plot RUN... --out FILE.png`` (seed groups become a mean with a +-std band) and
``--x time`` for wall time.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def trailing_means(returns: np.ndarray, last: int) -> np.ndarray:
    """Mean of the last ``last`` values ending at each index (fewer at the start)."""
    csum = np.concatenate([[0.0], np.cumsum(returns)])
    idx = np.arange(1, len(returns) + 1)
    lo = np.maximum(0, idx - last)
    return (csum[idx] - csum[lo]) / (idx - lo)


def curve(run_dir: str, last: int):
    """``(run, env steps, wall seconds, trailing means)`` of a run's episode rows, ordered by env steps."""
    from zoo.plotting import load_run, series

    run = load_run(run_dir)
    steps, rets = series(run, "return", "env_steps")
    times, _ = series(run, "return", "time")
    order = np.argsort(steps, kind="stable")
    steps, rets, times = steps[order], rets[order], times[order]
    return run, steps, times, trailing_means(rets, last)


def run_row(run_dir: str, at: list[int], last: int, reach: list[float]) -> list[str]:
    run, steps, times, means = curve(run_dir, last)
    ends = [r for kind in ("end", "update") for r in run.rows.get(kind, []) if r.get("time_s") is not None]
    final_steps = max((int(r.get("env_steps", 0)) for r in ends), default=int(steps[-1]) if len(steps) else 0)
    wall = max((float(r["time_s"]) for r in ends), default=float("nan"))
    cells = [run.name, f"{final_steps:,}", f"{wall:,.0f}", f"{final_steps / wall:,.0f}" if wall == wall else "-"]
    for mark in at:
        i = np.searchsorted(steps, mark, side="right") - 1
        cells.append(f"{means[i]:.1f}" if i >= 0 else "-")
    cells.append(f"{means[-1]:.1f}" if len(means) else "-")
    for value in reach:
        hit = np.nonzero(means >= value)[0]
        cells.append(f"{int(steps[hit[0]]):,} / {times[hit[0]]:,.0f} s" if len(hit) else "-")
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--at", default="100000,200000,300000,400000,500000",
                        help="env-step marks, comma-separated")
    parser.add_argument("--last", type=int, default=100, help="episodes in the trailing mean (default 100)")
    parser.add_argument("--reach", default="", help="returns to time, comma-separated")
    parser.add_argument("--plot", default="", help="also draw the trailing means to this PNG file")
    parser.add_argument("--x", default="env_steps", choices=("env_steps", "time"), help="the picture's x axis")
    args = parser.parse_args(argv)
    at = [int(float(x)) for x in args.at.split(",") if x]
    reach = [float(x) for x in args.reach.split(",") if x]
    marks = [f"{m // 1000}k" if m % 1000 == 0 else f"{m:,}" for m in at]
    head = ["run", "env steps", "wall s", "env steps/s", *(f"mean-{args.last} @{m}" for m in marks),
            f"final mean-{args.last}", *(f"reach {v:g}: env steps / wall" for v in reach)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for run in args.runs:
        print("| " + " | ".join(run_row(run, at, args.last, reach)) + " |")
    if args.plot:
        plot(args.runs, args.last, args.x, args.plot)
    return 0


def plot(runs: list[str], last: int, x: str, out: str) -> None:
    """One line per run, coloured by variant (the name without ``-sN``), to ``out``."""
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours: dict[str, str] = {}
    for run_dir in runs:
        run, steps, times, means = curve(run_dir, last)
        variant = re.sub(r"-s\d+$", "", run.name)
        first = variant not in colours
        colour = colours.setdefault(variant, f"C{len(colours)}")
        ax.plot(steps if x == "env_steps" else times, means, color=colour, lw=1.2,
                label=variant if first else "_nolegend_")
    ax.set_xlabel("env steps" if x == "env_steps" else "wall seconds")
    ax.set_ylabel(f"return, mean of the last {last} episodes")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
