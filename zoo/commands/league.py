"""``zoo league RUN [--runs-dir DIR] [--json]``: the kept versions of each policy of a run, with
their results against the learner (issue 23, item 3; docs/history.md, "Results and ratings").

One table per policy of the run's history store (``history.sqlite``), oldest version first:
version, env steps (when it was kept), rating (Elo points), games (played against the learner),
win rate (the version's: ``(wins + draws / 2) / games``, what ``pfsp`` weighs) and mean return
(the version's mean return over those games). A column with nothing yet shows ``-``. Versions
``keep`` dropped are not listed. ``--json`` prints the same rows as one JSON object
``{policy: [row, ...]}`` (each row: ``version``, ``env_steps``, ``rating``, ``games``, ``wins``,
``draws``, ``win_rate``, ``mean_return``; null where the table shows ``-``).

**The eval manager's results** (docs/history.md, "The eval manager"), when the run had one:
a second table per policy it evaluated, its players (baselines first, then every version it
rated, kept or dropped, oldest first): player (``random``, ``v120``), env steps (a
version's), rating (its eval Elo rating, one game at a time in play order), fit rating (the
Bradley-Terry rating fitted to all the policy's eval games at once, independent of their order:
:func:`zoo.core.ratings.bradley_terry`), games (all its eval games), win rate against
each baseline (``(wins + draws / 2) / games`` of its games against it) and mean return (over
all its eval games). In ``--json`` each version row gains ``eval``: ``{"rating", "games",
"fit_rating", "wins", "draws", "losses", "mean_return", "vs": {opponent: {"games", "wins", "draws",
"losses", "win_rate", "mean_return"}}}`` (null when the eval manager did not rate it; ``vs``
from the version's side, one entry per baseline and past version it played), and the
policy's list starts with one row per baseline: ``{"baseline": name, "version": null,
"eval": {...}}``.
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
            evals = eval_rows(store, name)
            out[name] = [{"version": v.version, "env_steps": v.env_steps, "rating": v.rating, "games": v.games or 0,
                          "wins": v.wins or 0, "draws": v.draws or 0, "win_rate": v.win_rate(),
                          "mean_return": v.mean_return, **({"eval": evals.get(f"v{v.version}")} if evals else {})}
                         for v in store.versions(name)]
            if evals:
                out[name][:0] = [{"baseline": p, "version": None, "eval": e} for p, e in evals.items()
                                 if e["version"] is None]
    return out


def eval_rows(store: Any, policy: str) -> dict[str, dict[str, Any]]:
    """``{player: eval}`` of the eval manager's players of ``policy`` (module docstring), in
    :meth:`zoo.core.history.VersionStore.standings` order; ``{}`` without eval games. Each
    also holds ``version`` and ``env_steps`` (None for a baseline, or a version without a row)."""
    out: dict[str, dict[str, Any]] = {}
    vs: dict[str, dict[str, Any]] = {}
    for r in store.eval_results(policy):
        if r.opponent is not None:
            vs.setdefault(r.player, {})[r.opponent] = {"games": r.games, "wins": r.wins, "draws": r.draws,
                                                       "losses": r.losses, "win_rate": r.win_rate(),
                                                       "mean_return": r.mean_return}
    fitted = store.fitted_ratings(policy)
    for s in store.standings(policy):
        row = store.get(policy, s.version) if s.version is not None else None
        out[s.player] = {"version": s.version, "env_steps": None if row is None else row.env_steps,
                         "rating": s.rating, "fit_rating": fitted.get(s.player), "games": s.games,
                         "wins": s.wins, "draws": s.draws, "losses": s.losses,
                         "mean_return": s.mean_return, "vs": vs.get(s.player, {})}
    return out


def league_tables(rows: dict[str, list[dict[str, Any]]]) -> list[Table]:
    """One rich table per policy of :func:`league_rows`, and one of the eval manager's results
    per policy it evaluated."""
    tables = []
    for policy, all_rows in rows.items():
        versions = [r for r in all_rows if r.get("version") is not None]
        table = Table(title=f"policy {policy}: {len(versions)} kept versions", title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="right", no_wrap=True)
        for r in versions:
            table.add_row(f"{r['version']:,}", f"{r['env_steps']:,}",
                          "-" if r["rating"] is None else f"{r['rating']:.1f}", f"{r['games']:,}",
                          "-" if r["win_rate"] is None else f"{r['win_rate']:.3f}",
                          "-" if r["mean_return"] is None else f"{r['mean_return']:.2f}")
        tables.append(table)
        if any("eval" in r for r in all_rows):
            tables.append(eval_table(policy, all_rows))
    return tables


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def eval_table(policy: str, rows: list[dict[str, Any]]) -> Table:
    """The eval manager's table of ``policy`` (module docstring) from :func:`league_rows`' rows."""
    players = [(r["baseline"], r["eval"]) for r in rows if "baseline" in r]
    baselines = [name for name, _ in players]
    players += [(f"v{r['version']}", r["eval"]) for r in rows if r.get("version") is not None and r.get("eval")]
    table = Table(title=f"policy {policy}: eval manager, {len(players) - len(baselines)} versions rated",
                  title_justify="left")
    for column in ("player", "env steps", "rating", "fit rating", "games", *(f"vs {b}" for b in baselines),
                   "mean return"):
        table.add_column(column, justify="right", no_wrap=True)
    for name, e in players:
        table.add_row(name, _fmt(e["env_steps"], ","), _fmt(e["rating"], ".1f"), _fmt(e.get("fit_rating"), ".1f"),
                      f"{e['games']:,}",
                      *(_fmt((e["vs"].get(b) or {}).get("win_rate"), ".3f") for b in baselines),
                      _fmt(e["mean_return"], ".2f"))
    return table


def league_command(
    run: str = typer.Argument(..., help="The run: its folder (runs/NAME) or its name under --runs-dir."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run names are looked up.", file_okay=False),
    as_json: bool = typer.Option(False, "--json", metavar="", help="Print the rows as JSON ({policy: [row, ...]})."),
) -> None:
    """The kept versions of each policy: version, env steps, rating, games, win rate, mean return;
    and the eval manager's ratings and win rates against each baseline, when the run had one."""
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
