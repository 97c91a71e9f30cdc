"""Two teams with different networks: does each team learn? (issue 22, "Show that it works").

A PettingZoo env whose two teams see different observation sizes (``mpe2``'s
``simple_adversary_v3``: the adversary sees 8 numbers, the good agents 10; or
``simple_tag_v3``), trained with one MAPPO policy per team (``adversary`` for the agents
``adversary_*``, ``good`` for ``agent_*``; docs/policies.md). The claim to check: *each team's
final return beats the same run in which that team's policy is frozen at its initial weights*.
Per seed, three runs of one config, budget and seed:

- ``both``: both policies train;
- ``adversary-init``: ``policies.adversary.trainable = false``, ``weights = "init"`` (the
  adversary keeps the seeded initial weights ``both`` starts it from; the good team trains);
- ``good-init``: the same for the good team.

Team T's *final return* is the mean of the episode rows' ``<T>_return`` (its agents' mean
return per episode) over the last ``--last`` episodes of a run. T learned when its final return
in ``both`` is above that in ``T-init`` (the other team trains in both). Returns are the env's
rewards summed over an episode of 25 steps (MPE).

Usage (the runs are interleaved by seed, so a machine's load affects every variant alike)::

    python benchmarks/two_teams.py run --runs-dir RUNS --steps 300000 --seeds 1 2 3
    python benchmarks/two_teams.py report --runs-dir RUNS --out benchmarks/two_teams.png

``run`` trains (``python -m zoo train mappo ...``, one run at a time; ``--env``,
``--set KEY=VALUE`` for every run); a run whose ``status.json`` says finished is skipped, so
an interrupted ``run`` continues (a run folder left unfinished stops it, naming the folder:
``zoo resume`` it, or remove it). ``report`` prints a markdown table per team (final return
per seed, mean +- std over seeds (``ddof=0``), and the difference; a run whose ``status.json``
does not say finished shows its value marked unfinished, with its env steps, and is left out
of the mean, the std and the count of seeds won), writes it to ``--out``
with the suffix ``.md``, and writes ``--out``: one panel per team, its return against env
steps in ``both`` and in ``T-init`` (each run's episode rows averaged per env-step value,
then over a window of ``--smooth`` of those points; the mean over seeds with a band of +- one
standard deviation). A tiny check that everything runs: ``run --steps 400 --seeds 1`` then
``report``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

TEAMS = ("adversary", "good")
VARIANTS = ("both", "adversary-init", "good-init")
CONFIG = """\
# written by benchmarks/two_teams.py: one MAPPO policy per team ({variant})
[policies.adversary]
algo = "mappo"
{adversary}
[policies.good]
algo = "mappo"
{good}
[[agents]]
match = "adversary_*"
policy = "adversary"
[[agents]]
match = "agent_*"
policy = "good"
"""
FROZEN_AT_INIT = 'trainable = false\nweights = "init"'


def config_text(variant: str) -> str:
    """The TOML of ``variant`` (``both``, ``adversary-init`` or ``good-init``)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
    frozen = variant.removesuffix("-init") if variant != "both" else None
    return CONFIG.format(variant=variant, **{t: FROZEN_AT_INIT if t == frozen else "" for t in TEAMS})


def run_name(variant: str, seed: int) -> str:
    return f"two-teams-{variant}-s{seed}"


def read_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return rows


def finished(run_dir: Path) -> bool:
    """Whether the run wrote ``status.json`` saying finished."""
    try:
        return json.loads((run_dir / "status.json").read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def train(args: argparse.Namespace) -> int:
    runs = Path(args.runs_dir).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        for variant in VARIANTS:
            name = run_name(variant, seed)
            if finished(runs / name):
                print(f"{name}: finished already, skipped", flush=True)
                continue
            if (runs / name).exists():
                print(f"{runs / name} exists but did not finish: zoo resume it, or remove it", file=sys.stderr)
                return 2
            config = runs / f"{name}.toml"
            config.write_text(config_text(variant))
            cmd = [sys.executable, "-m", "zoo", "train", "mappo", "--env", args.env, "--config", str(config),
                   "--steps", str(args.steps), "--seed", str(seed), "--name", name, "--set", f"runs_dir={runs}"]
            for extra in args.set or []:
                cmd += ["--set", extra]
            print("$ " + " ".join(cmd), flush=True)
            done = subprocess.run(cmd, check=False)
            if done.returncode != 0:
                print(f"{name}: zoo train exited {done.returncode}", file=sys.stderr, flush=True)
                return done.returncode
    return 0


def team_points(rows: list[dict], team: str) -> tuple[np.ndarray, np.ndarray]:
    """``(env steps, return)`` of ``team``: the episode rows' ``<team>_return``, averaged over the
    rows that share one env-step value (one sample may end many episodes), in env-step order."""
    eps = [r for r in rows if r.get("type") == "episode" and isinstance(r.get(f"{team}_return"), (int, float))]
    if not eps:
        return np.zeros(0), np.zeros(0)
    from zoo.plotting import mean_per_x

    return mean_per_x(np.array([float(r["env_steps"]) for r in eps]),
                      np.array([float(r[f"{team}_return"]) for r in eps]))


def final_return(rows: list[dict], team: str, last: int) -> float | None:
    """The mean of ``<team>_return`` over the last ``last`` episode rows (None: no episode)."""
    values = [float(r[f"{team}_return"]) for r in rows
              if r.get("type") == "episode" and isinstance(r.get(f"{team}_return"), (int, float))][-last:]
    return float(np.mean(values)) if values else None


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{np.mean(values):.2f} +- {np.std(values):.2f}"


def table(runs: Path, seeds: list[int], last: int) -> str:
    """The markdown tables of the report (module docstring)."""
    out = []
    for team in TEAMS:
        frozen = f"{team}-init"
        out += [f"**{team}** (final return: mean of `{team}_return` over the last {last} episodes)", "",
                f"| seed | both train | {team} frozen at init | difference |", "|---|---|---|---|"]
        trained, still, diffs, partial = [], [], [], []
        for seed in seeds:
            cells = []
            for variant in ("both", frozen):
                run_dir = runs / run_name(variant, seed)
                rows = read_rows(run_dir)
                value = final_return(rows, team, last)
                if value is not None and not finished(run_dir):
                    partial.append(run_dir.name)
                    steps = max((int(r["env_steps"]) for r in rows if isinstance(r.get("env_steps"), int)), default=0)
                    cells.append((None, f"{value:.2f} (unfinished, {steps:,} env steps)"))
                else:
                    cells.append((value, _cell(value)))
            (a, a_text), (b, b_text) = cells
            d = a - b if a is not None and b is not None else None
            trained += [a] if a is not None else []
            still += [b] if b is not None else []
            diffs += [d] if d is not None else []
            out.append(f"| {seed} | {a_text} | {b_text} | {_cell(d)} |")
        out += [f"| mean +- std | {_mean_std(trained)} | {_mean_std(still)} | {_mean_std(diffs)} |",
                "", f"{team} beats its frozen self in {sum(d > 0 for d in diffs)} of {len(diffs)} seeds."]
        if partial:
            out.append(f"Not finished (left out of the mean, std and count): {', '.join(partial)}.")
        out.append("")
    return "\n".join(out)


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` points (fewer at the start)."""
    c = np.concatenate([[0.0], np.cumsum(y)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def plot(runs: Path, seeds: list[int], out: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    for i, team in enumerate(TEAMS):
        ax = fig.add_subplot(1, len(TEAMS), i + 1)
        for variant, label, colour in (("both", "both teams train", "C0"),
                                       (f"{team}-init", f"{team} frozen at its initial weights", "C3")):
            curves = []
            for seed in seeds:
                x, y = team_points(read_rows(runs / run_name(variant, seed)), team)
                if len(x):
                    curves.append((x, smooth(y, window)))
            if not curves:
                continue
            lo, hi = max(c[0][0] for c in curves), min(c[0][-1] for c in curves)
            grid = np.unique(np.concatenate([c[0] for c in curves]))
            grid = grid[(grid >= lo) & (grid <= hi)]
            if not grid.size:
                continue
            stack = np.stack([np.interp(grid, cx, cy) for cx, cy in curves])
            mean, std = stack.mean(0), stack.std(0)
            ax.plot(grid, mean, color=colour, lw=1.3, label=f"{label} ({len(curves)} seed{'s' * (len(curves) > 1)})")
            ax.fill_between(grid, mean - std, mean + std, color=colour, alpha=0.2, lw=0)
        ax.set_title(f"{team} team", fontsize=10)
        ax.set_xlabel("env steps (calls to env.step)")
        ax.set_ylabel(f"{team} return per episode (mean over its agents)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def report(args: argparse.Namespace) -> int:
    runs = Path(args.runs_dir).resolve()
    seeds = args.seeds or sorted({int(p.name.rsplit("-s", 1)[1]) for p in runs.glob("two-teams-both-s*")
                                  if p.is_dir() and p.name.rsplit("-s", 1)[1].isdigit()})
    if not seeds:
        print(f"no runs two-teams-both-s<SEED> in {runs}", file=sys.stderr)
        return 2
    text = table(runs, seeds, args.last)
    print(text)
    out = Path(args.out)
    plot(runs, seeds, out, args.smooth)
    out.with_suffix(".md").write_text(text + "\n")
    print(f"curves: {out}; table: {out.with_suffix('.md')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train the three variants for each seed")
    r.add_argument("--runs-dir", required=True)
    r.add_argument("--env", default="pettingzoo:mpe2.simple_adversary_v3",
                   help="pettingzoo:mpe2.simple_adversary_v3 (default) or pettingzoo:mpe2.simple_tag_v3")
    r.add_argument("--steps", type=int, default=300_000, help="budget in env steps of each run")
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="zoo train --set for every run")
    p = sub.add_parser("report", help="print the per-team table and write the curves")
    p.add_argument("--runs-dir", required=True)
    p.add_argument("--seeds", type=int, nargs="*", help="default: every seed with a 'both' run")
    p.add_argument("--last", type=int, default=100, help="episodes the final return is the mean of")
    p.add_argument("--smooth", type=int, default=20, help="moving-average window, in env-step points")
    p.add_argument("--out", default=os.path.join("benchmarks", "two_teams.png"))
    args = parser.parse_args(argv)
    return train(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    sys.exit(main())
