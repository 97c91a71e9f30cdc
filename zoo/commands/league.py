"""``zoo league RUN [--runs-dir DIR] [--json]``: the kept versions of each policy of a run, with
their results against the learner (issue 23, item 3; docs/history.md, "Results and ratings").

One table per policy of the run's history store (``history.sqlite``), oldest version first:
version, env steps (when it was kept), rating (Elo points), games (played against the learner),
win rate (the version's: ``(wins + draws / 2) / games``, what ``pfsp`` weighs) and mean return
(the version's mean return over those games). A column with nothing yet shows ``-``. Versions
``keep`` dropped are not listed. ``--json`` prints the same rows as one JSON object
``{policy: [row, ...]}`` (each row: ``version``, ``env_steps``, ``rating``, ``games``, ``wins``,
``draws``, ``win_rate``, ``mean_return``; null where the table shows ``-``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

COLUMNS = ("version", "env steps", "rating", "games", "win rate", "mean return")


def league_rows(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """``{policy: rows}`` of the run's store, policies by name, kept versions oldest first.

    Raises:
        RunError: the run holds no history store (its policies kept no versions).
        HistoryError: the store cannot be read.
    """
    from zoo.core.history import DB_NAME, VersionStore
    from zoo.runinfo import RunError

    if not (run_dir / DB_NAME).is_file():
        raise RunError(f"run {str(run_dir)!r} has no version history ({DB_NAME}): train with "
                       "--set trainer.history.every_updates=N (docs/history.md)")
    with VersionStore(run_dir, readonly=True) as store:
        out: dict[str, list[dict[str, Any]]] = {}
        for name in store.policies():
            out[name] = [{"version": v.version, "env_steps": v.env_steps, "rating": v.rating, "games": v.games or 0,
                          "wins": v.wins or 0, "draws": v.draws or 0, "win_rate": v.win_rate(),
                          "mean_return": v.mean_return} for v in store.versions(name)]
    return out


def league_tables(rows: dict[str, list[dict[str, Any]]]) -> list[Table]:
    """One rich table per policy of :func:`league_rows`."""
    tables = []
    for policy, versions in rows.items():
        table = Table(title=f"policy {policy}: {len(versions)} kept versions", title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="right", no_wrap=True)
        for r in versions:
            table.add_row(f"{r['version']:,}", f"{r['env_steps']:,}",
                          "-" if r["rating"] is None else f"{r['rating']:.1f}", f"{r['games']:,}",
                          "-" if r["win_rate"] is None else f"{r['win_rate']:.3f}",
                          "-" if r["mean_return"] is None else f"{r['mean_return']:.2f}")
        tables.append(table)
    return tables


def league_command(
    run: str = typer.Argument(..., help="The run: its folder (runs/NAME) or its name under --runs-dir."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run names are looked up.", file_okay=False),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON ({policy: [row, ...]})."),
) -> None:
    """The kept versions of each policy: version, env steps, rating, games, win rate, mean return."""
    from zoo.cli import _console, _fail
    from zoo.core.history import HistoryError
    from zoo.core.rundir import RunNotFound, find_run_dir
    from zoo.runinfo import RunError

    try:
        rows = league_rows(find_run_dir(run, runs_dir))
    except (RunNotFound, RunError, HistoryError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    console = _console()
    if not rows:
        console.print(f"no version kept yet in {run}")
        return
    for table in league_tables(rows):
        console.print(table)
