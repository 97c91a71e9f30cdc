"""Learning curves of side-by-side runs: the mean return of the last 20 episodes against env
steps and against wall time, one line per system and seed.

    python benchmarks/peers/plot_curves.py sac-episodes.jsonl --title "SAC on HalfCheetah" \\
        --out benchmarks/sac_halfcheetah_300k.png
    python benchmarks/peers/plot_curves.py zoo-episodes.jsonl cleanrl-episodes.jsonl.gz --seeds 1

Input: the rows ``time_to_return.py --episodes FILE`` writes (``.gz`` read as gzip), one per
episode in the order the system reported it: ``{"system": "zoo" | "zoo-bf16" | "cleanrl",
"seed": 1, "t": seconds since the run's process was launched, "env_steps": N, "return": R}``
(a row without ``seed`` counts as seed 1). Each (system, seed) is one line: its returns'
trailing mean over ``--window`` episodes (:func:`zoo.plotting.smooth_curve`; none before the
window is full), at the env steps (left panel, in thousands) and the minutes (right panel) of
the episode that completes each window. Lines of one system share a colour; its seeds
differ in line style.
"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from zoo.plotting import smooth_curve

LABELS = {"zoo": "Zoo", "zoo-bf16": "Zoo (bfloat16)", "cleanrl": "CleanRL"}
STYLES = ("-", "--", ":", "-.")  # a system's seeds, in first-seen order


def read_episodes(paths: list[Path]) -> OrderedDict[tuple[str, int], dict[str, np.ndarray]]:
    """The episodes of ``paths`` per ``(system, seed)`` in first-seen order, each as float64 arrays
    ``t``, ``env_steps`` and ``return`` in file order.

    Raises:
        ValueError: a row is not JSON or lacks ``system``, ``t``, ``env_steps`` or ``return``
            (naming the file and line).
    """
    runs: OrderedDict[tuple[str, int], list[tuple[float, float, float]]] = OrderedDict()
    for path in paths:
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    key = (str(row["system"]), int(row.get("seed", 1)))
                    runs.setdefault(key, []).append((float(row["t"]), float(row["env_steps"]), float(row["return"])))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{n}: not an episode row of time_to_return.py --episodes "
                                     f"(system, seed, t, env_steps, return): {exc}") from None
    return OrderedDict((key, dict(zip(("t", "env_steps", "return"), np.asarray(rows, dtype=np.float64).T, strict=True)))
                       for key, rows in runs.items())


def plot(runs: OrderedDict[tuple[str, int], dict[str, np.ndarray]], window: int = 20, title: str = ""):
    """The two panels of :func:`read_episodes`'s runs; returns the Figure (not saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    colours: dict[str, str] = {}
    seeds_drawn: dict[str, int] = {}
    for (system, seed), ep in runs.items():
        colour = colours.setdefault(system, f"C{len(colours)}")
        n = seeds_drawn[system] = seeds_drawn.get(system, -1) + 1
        if len(ep["return"]) < window:
            continue
        steps, mean = smooth_curve(ep["env_steps"], ep["return"], window)
        minutes = ep["t"][window - 1:] / 60.0  # the time of the episode that completes each window, as steps
        label = f"{LABELS.get(system, system)} seed {seed}"
        for ax, x in zip(axes, (steps / 1000.0, minutes), strict=True):
            ax.plot(x, mean, color=colour, ls=STYLES[n % len(STYLES)], lw=1.3, label=label)
    for ax, xlabel in zip(axes, ("env steps (thousands)", "wall time (minutes since the run's launch)"), strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"mean return of the last {window} episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("episodes", nargs="+", type=Path, help="time_to_return.py --episodes files (.jsonl or .jsonl.gz)")
    ap.add_argument("--out", type=Path, default=Path("curves.png"))
    ap.add_argument("--title", default="")
    ap.add_argument("--window", type=int, default=20, help="episodes per mean (default 20)")
    ap.add_argument("--seeds", default="", help="comma-separated seeds to draw (default: all)")
    args = ap.parse_args()
    if args.window < 1:
        ap.error("--window must be >= 1")
    try:
        runs = read_episodes(args.episodes)
    except (OSError, ValueError) as exc:
        ap.error(str(exc))
    if args.seeds:
        try:
            keep = {int(s) for s in args.seeds.split(",") if s.strip()}
        except ValueError:
            ap.error(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 1,2,3")
        runs = OrderedDict((k, v) for k, v in runs.items() if k[1] in keep)
    if not runs:
        ap.error("no episodes to draw (check the files and --seeds)")
    plot(runs, args.window, args.title).savefig(args.out, dpi=100)
    for (system, seed), ep in runs.items():
        print(f"{system} seed {seed}: {len(ep['return'])} episodes to {ep['env_steps'].max():,.0f} env steps")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
