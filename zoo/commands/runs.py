"""``zoo runs [DIR]``: a table of the runs in a runs folder (default ``./runs``).

Columns: name, algorithm, env, status (``running``, ``finished``, ``stopped``,
``crashed``; ``unknown`` for a run with neither ``status.json`` nor an ``end`` row), env
steps (of the budget), last mean return (the trainer's ``episode_return_mean``: the mean
return of its most recent episodes; with per-team returns, each team's over the last 20
episodes), duration, last checkpoint (and its age). A run of named policies has one more row
per policy under its own (``policy NAME``: its algorithm, ``version N`` or ``frozen``, its
last env steps, its agents' mean return over the last 20 episodes, its
``<policy>/latest.pt``); a run of one policy has one row, as before. A crashed
run names the worker that failed (role and index) or ``controller gone``. How the status
is read: :func:`zoo.runinfo.run_info`.
"""
from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from zoo.runinfo import RunError, find_runs, run_info

STYLE = {"running": "cyan", "finished": "green", "stopped": "yellow", "crashed": "bold red", "unknown": "dim"}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _age(mtime: float | None, now: float) -> str:
    if mtime is None:
        return ""
    return f" ({_duration(max(0.0, now - mtime))} ago)"


def runs_table(folder: Path, now: float | None = None) -> Table:
    """The rich table of every run under ``folder``.

    Raises:
        RunError: ``folder`` does not exist.
    """
    now = time.time() if now is None else now
    table = Table(title=f"Zoo runs in {folder}", title_justify="left")
    for column in ("name", "algorithm", "env", "status", "env steps", "last mean return", "duration",
                   "last checkpoint"):
        table.add_column(column, no_wrap=column in ("env steps", "duration"), min_width=8,
                         justify="right" if column in ("env steps", "last mean return", "duration") else "left")
    for path in find_runs(folder):
        info = run_info(path, now)
        status = Text(info.status, style=STYLE.get(info.status, ""))
        if info.detail and info.status in ("crashed", "stopped", "unknown"):
            status.append(f": {info.detail}", style="dim" if info.status != "crashed" else "red")
        steps = "-" if info.env_steps is None else f"{info.env_steps:,}"
        if info.budget_env_steps:
            steps += f" / {info.budget_env_steps:,}"
        ret = "-" if info.return_mean is None else f"{info.return_mean:.2f}"
        if info.team_returns:
            ret += " (" + ", ".join(f"{t} {v:.2f}" for t, v in info.team_returns.items()) + ")"
        ckpt = "-" if info.checkpoint is None else _checkpoint_name(info.checkpoint) + _age(info.checkpoint_mtime, now)
        table.add_row(Text(info.name, style="bold"), info.algo or "?", info.env or "?", status, steps, ret,
                      _duration(info.duration_s), Text(ckpt))
        for pol in info.policies:
            state = Text("frozen", style="dim") if not pol.trainable else Text(
                "no update yet" if pol.version is None else f"version {pol.version:,}")
            ckpt = "-" if pol.checkpoint is None else _checkpoint_name(pol.checkpoint) + _age(pol.checkpoint_mtime, now)
            table.add_row(Text(f"  policy {pol.name}"), pol.algo or "?", "", state,
                          "-" if pol.env_steps is None else f"{pol.env_steps:,}",
                          "-" if pol.return_mean is None else f"{pol.return_mean:.2f}", "", Text(ckpt))
    return table


def _checkpoint_name(path: Path) -> str:
    """``latest.pt``; a named policy's ``lead/latest.pt``."""
    return f"{path.parent.name}/{path.name}" if path.parent.name != "checkpoints" else path.name


def runs_command(
    folder: Path | None = typer.Argument(None, help="Runs folder (default ./runs), or one run folder."),
) -> None:
    """List runs: name, algorithm, env, status, env steps, last mean return, duration, checkpoint."""
    from zoo.cli import _console, _fail

    folder = folder if folder is not None else Path("runs")
    try:
        table = runs_table(folder)
    except RunError as exc:
        raise _fail(str(exc)) from None
    console = _console()
    if not table.row_count:
        console.print(f"no runs in {folder} (folders holding config.json)")
        return
    console.print(table)
