"""``zoo watch RUN``: the live display of a run started elsewhere, read from its run folder.

The controller of a run rewrites ``<run_dir>/live.json`` every ``log.interval_s`` seconds
(format: ``docs/live.md``). ``zoo watch`` reads it every ``refresh_s`` seconds and draws
what ``zoo train`` draws on its own terminal (progress, figures, the workers table, the
bottleneck); when stdout is not a terminal it prints the plain status line of each new
status instead. It stops, exit code 0, when the run is over (:func:`run_over`). A run that
does not exist yet is waited for (:func:`wait_for_run`, up to :data:`NO_LIVE_WAIT_S`).
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from zoo.core.rundir import RunNotFound, find_run_dir, pid_alive
from zoo.display import Display, _tail_rows, final_status, format_status_line

__all__ = ["NO_LIVE_WAIT_S", "RunNotFound", "find_run_dir", "pid_alive", "read_json", "run_over", "wait_for_run",
           "watch"]

NO_LIVE_WAIT_S = 60.0
"""How long ``zoo watch`` waits for the run folder to appear, then for a first ``live.json``
when nothing says the run is over."""
OTHER_HOST_STALE_S = 60.0
"""A controller on another host (its pid cannot be checked) whose ``live.json`` has not changed
for this long, and for 10 of its intervals, is taken as gone."""


def read_json(path: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing, unreadable or not an object."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _metrics_ended(run_dir: Path) -> bool:
    """metrics.jsonl's last ``end`` or ``update`` row is an ``end`` row (the trainer's last)."""
    rows = _tail_rows(str(run_dir / "metrics.jsonl"), 1 << 16) or []
    last = next((r for r in reversed(rows) if r.get("type") in ("end", "update")), None)
    return last is not None and last.get("type") == "end"


def run_over(run_dir: Path, live: dict[str, Any] | None, status: dict[str, Any] | None, now: float,
             alive: Callable[[Any], bool] = pid_alive, host: str | None = None) -> str | None:
    """Why the run in ``run_dir`` is over, or None while it runs.

    In order: ``status.json`` (``status``) says finished, stopped or crashed, or says running
    with a controller pid gone from this host; ``live.json`` (``live``) has ``"ended": true``
    (unless ``status.json`` still says running with its controller alive on this host: its
    outcome comes next);
    ``live.json`` has not changed for 3 of its intervals (at least 10 s) and its controller pid
    is gone from this host (on another host: :data:`OTHER_HOST_STALE_S`); with neither file,
    ``metrics.jsonl`` ends with its ``end`` row. ``now``: unix seconds.
    """
    host = host or socket.gethostname()
    if status is not None:
        state = status.get("status")
        if state in ("finished", "stopped", "crashed"):
            why = status.get("reason")
            worker = status.get("failed_worker") or {}
            if worker:
                why = f"{worker.get('role')} worker {worker.get('index')} failed" + (f": {why}" if why else "")
            return state + (f" ({why})" if why else "")
        if state == "running" and status.get("host") == host and not alive(status.get("pid")):
            return "crashed (controller gone)"
    if live is not None:
        if live.get("ended"):
            if status is not None and status.get("status") == "running" and status.get("host") == host \
                    and alive(status.get("pid")):
                return None  # the controller writes status.json's outcome right after live.json's last snapshot
            return "ended"
        controller = live.get("controller") or {}
        interval = float(live.get("interval_s") or 5.0)
        age = now - float(live.get("time") or 0.0)
        if controller.get("host") == host:
            if age > max(3 * interval, 10.0) and not alive(controller.get("pid")):
                return "controller gone"
        elif age > max(10 * interval, OTHER_HOST_STALE_S):
            return f"live.json unchanged for {age:.0f} s (controller on {controller.get('host')})"
    elif status is None and _metrics_ended(run_dir):
        return "finished (metrics.jsonl has its end row)"
    return None


def _duration(seconds: float) -> str:
    """``75`` -> ``1m15s``, ``3725`` -> ``1h02m05s``, ``9`` -> ``9s``."""
    total = int(max(0.0, seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def watch_note(run_dir: Path, live: dict[str, Any], now: float) -> str:
    """The line ``zoo watch`` shows above the workers, e.g. ``zoo watch runs/r1: live.json
    written 2s ago by controller pid 4242 on host1; run time 1m15s`` (``now``: unix seconds;
    run time up to that write)."""
    written = float(live.get("time") or now)
    controller = live.get("controller") or {}
    note = (f"zoo watch {run_dir}: live.json written {_duration(now - written)} ago by controller pid "
            f"{controller.get('pid')} on {controller.get('host')}")
    if isinstance(live.get("started"), (int, float)):
        note += f"; run time {_duration(written - live['started'])}"
    return note


def wait_for_run(target: str, runs_dir: str | os.PathLike, console: Console, wait_s: float = NO_LIVE_WAIT_S,
                 refresh_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Path:
    """The run folder ``target`` names (:func:`find_run_dir`), waiting up to ``wait_s`` seconds
    for it to appear: ``zoo watch`` started right after ``zoo train``, which claims the folder
    and writes its ``config.json`` only once its config is resolved (seconds, torch's import).
    While it waits it prints one line that stays on the screen, ``waiting for runs/NAME to
    start (up to 60 s) ...``.

    Raises:
        RunNotFound: ``target`` is a file or ``wait_s`` <= 0 (at once), or no run folder appeared
            within ``wait_s``.
    """
    deadline = None
    while True:
        try:
            return find_run_dir(target, runs_dir)
        except RunNotFound as exc:
            if Path(target).is_file() or wait_s <= 0:
                raise
            if deadline is None:
                deadline = clock() + wait_s
                console.print(f"waiting for {target} to start (up to {wait_s:.0f} s) ...", markup=False,
                              highlight=False, soft_wrap=True)
            elif clock() >= deadline:
                raise RunNotFound(f"{exc} (waited {wait_s:.0f} s for it to start)") from None
        sleep(refresh_s)


def watch(run_dir: Path, console: Console | None = None, refresh_s: float = 1.0,
          no_live_wait_s: float = NO_LIVE_WAIT_S) -> tuple[int, str]:
    """Show the run in ``run_dir`` until it is over.

    Returns:
        ``(exit code, last line)``: ``(0, "run ended: <why>")`` when the run is over; ``(1,
        message)`` when no ``live.json`` appeared within ``no_live_wait_s`` seconds and nothing
        says the run is over (not a run started by this Zoo, or its controller never started).
    """
    console = console if console is not None else Console()
    live_path, status_path = run_dir / "live.json", run_dir / "status.json"
    display = Display(console, title=run_dir.name)
    started = time.monotonic()
    shown_time = shown_status = None
    with display:
        while True:
            live, status = read_json(live_path), read_json(status_path)
            now = time.time()
            if live is not None:  # the note first: the frames drawn below carry it
                display.note = watch_note(run_dir, live, now)
            if live is not None and live.get("time") != shown_time:
                shown_time = live.get("time")
                if live.get("status") and live["status"] != shown_status:
                    shown_status = live["status"]
                    display(shown_status)
                display.show_live(live)
            why = run_over(run_dir, live, status, now)
            if why is not None:
                break
            if live is None and time.monotonic() - started > no_live_wait_s:
                return 1, (f"no live.json in {run_dir} after {no_live_wait_s:.0f} s, and nothing says the run is "
                           "over: was it started by a Zoo that writes live.json, and is its controller running?")
            time.sleep(refresh_s)
    if live is None:  # a run that never wrote live.json: its last counters from metrics.jsonl
        last = final_status(None, str(run_dir / "metrics.jsonl"))
        if last is not None:
            console.print(format_status_line(last), markup=False, highlight=False, soft_wrap=True)
    return 0, "run ended" if why == "ended" else f"run ended: {why}"
