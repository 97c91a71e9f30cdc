"""``zoo plot RUN... --out FILE.png``: learning curves of one or many runs (matplotlib, Agg).

What is drawn (x axes, metrics, smoothing, seed groups, named policies and ``--policy``):
:mod:`zoo.plotting`; ``zoo plot RUN --pbt``, a PBT run's members' objective, exploits and
hyperparameters over env steps: :mod:`zoo.population_plot`.
"""
from __future__ import annotations

from pathlib import Path

import typer

X_AXES = ("env_steps", "frames", "time")  # zoo.plotting.X_AXES (not imported here: numpy at every zoo start)


def plot_command(
    runs: list[str] = typer.Argument(..., help="Run folders (or run names under ./runs) to overlay."),
    out: Path = typer.Option(Path("learning-curves.png"), "--out", "-o", help="PNG file to write.", dir_okay=False),
    x: str = typer.Option("env_steps", "--x", metavar="AXIS",
                          help=f"x axis: {', '.join(X_AXES)} (wall time in seconds)."),
    y: list[str] = typer.Option([], "--y", metavar="METRIC",
                                help="Metric to plot (repeatable): a field of the episode or update rows of "
                                     "metrics.jsonl, or rating (the eval manager's Elo rating of each kept version, "
                                     "from history.sqlite; training_rating: from training games). Default: the "
                                     "per-team returns if logged, else return."),
    smooth: int = typer.Option(0, "--smooth", min=0, metavar="ROWS",
                               help="Moving average over this many points, rows sharing an x value averaged into one "
                                    "(1: none; 0: points / 50)."),
    title: str | None = typer.Option(None, "--title", help="Figure title."),
    policy: list[str] = typer.Option([], "--policy", metavar="NAME",
                                     help="Draw only this named policy's lines (repeatable, or a comma list): its "
                                          "return (<NAME>_return) and its own update rows. Default: every policy, "
                                          "each its own line."),
    pbt: bool = typer.Option(False, "--pbt", metavar="",
                             help="A PBT run (pbt.members >= 2): each member's objective over env steps with an "
                                  "arrow at every exploit (from the member it copied), the lineage (who copied "
                                  "whom, when), and one panel per explored hyperparameter, each member's value over "
                                  "env steps (docs/pbt.md). One run; --smooth applies to the objective."),
) -> None:
    """Plot learning curves as a PNG; runs differing only in seed become a mean with a +-std band."""
    from zoo.cli import _console, _fail
    from zoo.plotting import plot_runs
    from zoo.runinfo import RunError

    if out.suffix.lower() != ".png":
        raise _fail(f"--out {str(out)!r}: zoo plot writes PNG files; give a name ending in .png")
    names = [n.strip() for value in policy for n in value.split(",")]
    if any(not n for n in names):
        raise _fail(f"--policy {','.join(policy)!r}: give policy names, one per --policy or separated by commas "
                    "(e.g. --policy lead,rest)")
    if pbt:
        if len(runs) != 1:
            raise _fail(f"--pbt draws one run's population; give one run (got {len(runs)}: {', '.join(runs)})")
        for flag, given in (("--y", y), ("--policy", policy), ("--x", [x] if x != "env_steps" else [])):
            if given:
                raise _fail(f"{flag} {','.join(given)!r}: --pbt draws every member's objective and hyperparameters "
                            f"over env steps; leave out {flag}, or plot without --pbt")
    try:
        if pbt:
            from zoo.population_plot import plot_population

            fig = plot_population(runs[0], smooth=smooth, title=title)
        else:
            fig = plot_runs(runs, y, x=x, smooth=smooth, title=title, policies=list(dict.fromkeys(names)))
    except RunError as exc:
        raise _fail(str(exc)) from None
    try:
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise _fail(f"--out {str(out)!r}: cannot write ({exc.strerror})") from None
    _console().print(f"wrote {out}", highlight=False)
