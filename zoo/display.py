"""The live progress display of ``zoo train``, fed by the controller's ``on_status``.

The controller calls ``display(status)`` about every ``log.interval_s`` seconds with a
dict holding (units in the names):

==========================  ===============================================================
key                         meaning
==========================  ===============================================================
``env_steps``               env steps done (int)
``frames``                  frames done = env steps x frame-skip (int)
``budget_env_steps``        the run's budget in env steps (int; 0 or absent: unknown)
``env_steps_per_s``         recent throughput in env steps per second (float)
``frames_per_s``            recent throughput in frames per second (float)
``episode_return_mean``     mean return of recent finished episodes (float, or None if none)
``episodes``                finished episodes (int)
``policy_version``          the trainer's policy version (int)
``policy_lag_mean``         mean policy lag of recent samples, in versions (float)
``policy_lag_max``          largest recent policy lag (int)
``dropped_samples``         samples dropped for exceeding the allowed lag (int)
``actor_dropped_samples``   samples actors dropped because the trainer could not take them (int)
``dropped_fraction``        dropped / (dropped + trained on), agent-slot samples (float, 0..1)
``trained_env_steps``       env steps whose samples the trainer trained on (int)
``trained_env_steps_per_s`` recent trained env steps per second (float)
``trained_samples``         agent-slot samples trained on (int; not shown)
``mean_env_steps_per_s``    env steps per second since the first update (float)
``mean_trained_env_steps_per_s``  the same for trained env steps (float)
``updates``                 trainer updates done (int)
``replay_size``             replay algorithms (apex-dqn, sac, r2d2): transitions or sequences
                            held (int), shown with ``replay_fill`` (fraction of the capacity)
``replay_ratio``            replayed per inserted over the run (float)
``gradient_steps``          gradient steps of the last update (int)
``rate_limit_waits``        waits of the rate limiter (int), when the algorithm reports them
``curriculum_stage``        the curriculum's stage (int, 0-based; docs/curriculum.md), with
                            ``curriculum_stages`` (how many) and ``curriculum_stage_name``:
                            shown as ``stage=1 of 3 (length-2)`` after ``dropped``
``policies``                named policies (``zoo.core.policy_status``): ``{name: entry}``, one
                            row each (:func:`policy_fields`); the keys of one policy (version,
                            updates, trained env steps and samples, mean rates, lag, dropped,
                            losses, replay) are in its entry only; the top level's
                            ``env_steps`` is the most any policy received (the run's)
anything else, numeric      shown too, under its own name (e.g. ``hider_return``);
                            ``type``, ``role``, ``index``, ``time`` are ignored
==========================  ===============================================================

On a terminal it draws a rich progress bar with the figures below it and, from the
controller's health snapshots (:meth:`Display.show_live`, the content of ``live.json``:
``docs/live.md``), a table of every worker (role, index, pid, heartbeat age, restarts, its
rates and load) and the bottleneck in plain words. Otherwise it prints one plain line per
status (see :func:`format_status_line`; with named policies, one more line per policy) and
nothing for the snapshots. Missing keys are skipped.
"""
from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any, TypeGuard

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from zoo.core.health import percent

__all__ = ["Display", "REPLAY_KEYS", "STATUS_KEYS", "final_status", "format_policy_line", "format_status_line",
           "format_summary", "health_view", "policy_fields", "status_extras", "worker_activity"]

STATUS_KEYS = (
    "env_steps", "frames", "budget_env_steps", "env_steps_per_s", "frames_per_s", "episode_return_mean",
    "episodes", "policy_version", "policy_lag_mean", "policy_lag_max", "dropped_samples", "updates",
    "actor_dropped_samples", "dropped_fraction", "trained_env_steps", "trained_env_steps_per_s", "trained_samples",
    "mean_env_steps_per_s", "mean_trained_env_steps_per_s",
)
REPLAY_KEYS = ("replay_size", "replay_fill", "replay_ratio", "gradient_steps", "rate_limit_waits")
"""The replay's figures (``zoo.core.policy_status.STATUS_STATS``), shown after ``updates``."""


def _is_number(value: Any) -> TypeGuard[float]:
    """A real number (int, float, numpy's), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _count(value: Any) -> str:
    """An integer count with thousands separators: 12800 -> ``12,800``."""
    return f"{int(round(float(value))):,}" if _is_number(value) and math.isfinite(float(value)) else str(value)


def _rate(value: Any) -> str:
    """A rate rounded to a whole number with separators: 2100.4 -> ``2,100``."""
    return _count(value)


def _real(value: Any) -> str:
    """A float: ``23.4`` (one decimal from 1 up), ``1,234`` (>= 1000), ``0.0123`` (3 significant)."""
    if value is None:
        return "n/a"
    if not _is_number(value):
        return str(value)
    x = float(value)
    if not math.isfinite(x):
        return str(x)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 1 or x == 0:
        return f"{x:.1f}"
    return f"{x:.3g}"


# Message bookkeeping the controller may leave in a status dict; never shown.
IGNORED_KEYS = ("type", "role", "index", "attempt", "time", "timestamp",
                # a replay trainer's cumulative counters, for `zoo bench` (docs/replay.md): beside
                # the last update's gradient_steps they read as a second, contradicting figure
                "gradient_steps_total", "replayed", "inserted", "rate_limit_wait_s", "rate_limit_held_s",
                # the curriculum's stage: shown as one field, stage (_stage)
                "curriculum_stage", "curriculum_stages")


def status_extras(status: dict[str, Any]) -> dict[str, Any]:
    """The numeric entries of ``status`` not in :data:`STATUS_KEYS`, :data:`REPLAY_KEYS` or
    :data:`IGNORED_KEYS`, in order."""
    return {k: v for k, v in status.items()
            if k not in STATUS_KEYS and k not in REPLAY_KEYS and k not in IGNORED_KEYS and (_is_number(v) or v is None)}


def _lag(s: dict[str, Any]) -> list[tuple[str, str]]:
    if "policy_lag_mean" not in s and "policy_lag_max" not in s:
        return []
    lag = s.get("policy_lag_mean")
    mean = f"{float(lag):.1f}" if _is_number(lag) else "n/a"
    return [("lag", mean + (f"/{_count(s['policy_lag_max'])}" if "policy_lag_max" in s else ""))]


def _dropped(s: dict[str, Any]) -> list[tuple[str, str]]:
    if "dropped_samples" not in s and "actor_dropped_samples" not in s:
        return []
    dropped = _count(int(s.get("dropped_samples") or 0) + int(s.get("actor_dropped_samples") or 0))
    if _is_number(s.get("dropped_fraction")):
        dropped += f" ({100.0 * float(s['dropped_fraction']):.1f}%)"
    return [("dropped", dropped)]


def _stage(s: dict[str, Any]) -> list[tuple[str, str]]:
    """``stage=1 of 3 (length-2)``: the curriculum's stage (0-based), how many, its name."""
    if not _is_number(s.get("curriculum_stage")):
        return []
    text = str(int(s["curriculum_stage"]))
    if _is_number(s.get("curriculum_stages")):
        text += f" of {int(s['curriculum_stages'])}"
    if isinstance(s.get("curriculum_stage_name"), str):
        text += f" ({s['curriculum_stage_name']})"
    return [("stage", text)]


def _replay(s: dict[str, Any]) -> list[tuple[str, str]]:
    """``replay=12,800 (64.0% full) replay_ratio=2.00 gradient_steps=4 rate_limit_waits=3`` parts."""
    out: list[tuple[str, str]] = []
    size, fill = s.get("replay_size"), s.get("replay_fill")
    full = f"{100.0 * float(fill):.1f}% full" if _is_number(fill) else None
    if _is_number(size):
        out.append(("replay", _count(size) + (f" ({full})" if full else "")))
    elif full:
        out.append(("replay", full))
    if _is_number(s.get("replay_ratio")):
        out.append(("replay_ratio", f"{float(s['replay_ratio']):.2f}"))
    for key in ("gradient_steps", "rate_limit_waits"):
        if _is_number(s.get(key)):
            out.append((key, _count(s[key])))
    return out


def _fields(status: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` pairs in display order, skipping absent keys."""
    out: list[tuple[str, str]] = []
    s = status
    if "env_steps" in s:
        total = s.get("budget_env_steps") or 0
        text = _count(s["env_steps"])
        if _is_number(total) and total > 0:
            # The last sample may carry the run past its budget: the share done stops at 100%.
            text += f"/{_count(total)} ({min(100.0, 100.0 * float(s['env_steps']) / float(total)):.1f}%)"
        out.append(("env_steps", text))
    for key, label, fmt in (
        ("trained_env_steps", "trained", _count),
        ("frames", "frames", _count),
        ("env_steps_per_s", "env_steps/s", _rate),
        ("trained_env_steps_per_s", "trained/s", _rate),
        ("frames_per_s", "frames/s", _rate),
        ("episode_return_mean", "return", _real),
        ("episodes", "episodes", _count),
        ("policy_version", "version", _count),
    ):
        if key in s:
            out.append((label, fmt(s[key])))
    out += _lag(s) + _dropped(s) + _stage(s)
    if "updates" in s:
        out.append(("updates", _count(s["updates"])))
    out += _replay(s)
    for key, value in status_extras(s).items():
        out.append((key, _real(value)))
    return out


def _policies(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    policies = status.get("policies")
    return {str(k): v for k, v in policies.items() if isinstance(v, dict)} if isinstance(policies, dict) else {}


def policy_fields(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` pairs of one named policy's entry of a status, in display order:
    ``version``, ``updates``, ``trained`` (the env steps of the samples it trained on), ``return``
    (the mean return of its agents), ``lag``, ``dropped``,
    the replay's figures, then its other numeric keys (its losses) under their own names. A
    frozen policy (``"frozen": true``) has ``frozen`` and its return. Absent keys are skipped."""
    out: list[tuple[str, str]] = []
    for key, label, fmt in (("policy_version", "version", _count), ("updates", "updates", _count),
                            ("trained_env_steps", "trained", _count), ("episode_return_mean", "return", _real)):
        if key in entry:
            out.append((label, fmt(entry[key])))
    if entry.get("frozen"):
        return out
    out += _lag(entry) + _dropped(entry) + _replay(entry)
    for key, value in status_extras(entry).items():
        out.append((key, _real(value)))
    return out


WAITING = "waiting for its first update"


def waiting(entry: dict[str, Any]) -> bool:
    """Whether a trainable policy's entry is from before its first update: nothing heard from
    it yet, or its status says ``updates`` 0 (a fresh run: version 0, nothing trained, no lag).
    Both show :data:`WAITING`, so two policies at the same point read alike."""
    return not entry.get("frozen") and (not entry or entry.get("updates") == 0)


def format_policy_line(name: str, entry: dict[str, Any]) -> str:
    """The plain line of one named policy, e.g. ``policy rest: version=12 updates=12
    trained=2,112 return=-31.2 lag=0.4/1 dropped=0 (0.0%) pg_loss=0.0123 v_loss=0.512``; a frozen policy:
    ``policy opponent: frozen return=-20.0``; before its first update (nothing heard from it
    yet, or a status of update 0: :func:`waiting`): ``policy rest: waiting for its first
    update``, then its return when episodes have it."""
    if waiting(entry):
        ret = [f"{label}={text}" for label, text in policy_fields(entry) if label == "return"]
        return f"policy {name}: " + " ".join([WAITING] + ret)
    parts = ["frozen"] if entry.get("frozen") else []
    parts += [f"{label}={text}" for label, text in policy_fields(entry)]
    return f"policy {name}: " + (" ".join(parts) if parts else WAITING)


def format_status_line(status: dict[str, Any]) -> str:
    """One plain line for a status, e.g.

    ``env_steps=12,800/200,000 (6.4%) trained=12,288 frames=12,800 env_steps/s=2,100
    trained/s=2,010 frames/s=2,100 return=23.4 episodes=12 version=50 lag=0.4/1 dropped=0 (0.0%)
    updates=50``

    followed by any extra numeric keys as ``name=value``. ``dropped`` counts the agent-slot
    samples dropped by the trainer and the actors, with ``dropped_fraction`` in brackets. Counts
    and rates are rounded to whole numbers with thousands separators; a return of None prints
    as ``n/a``; lag is ``mean/max`` in policy versions (mean with one decimal). A replay
    algorithm's figures follow ``updates``: ``replay=12,800 (64.0% full) replay_ratio=2.00
    gradient_steps=4`` (and ``rate_limit_waits=N`` when reported). With named policies
    (``status["policies"]``) one line per policy follows (:func:`format_policy_line`), each
    on its own line.
    """
    line = " ".join(f"{label}={text}" for label, text in _fields(status))
    return "\n".join([line] + [format_policy_line(n, e) for n, e in _policies(status).items()])


def _pct(value: Any) -> str | None:
    return percent(float(value)) if _is_number(value) else None


def worker_activity(row: dict[str, Any]) -> str:
    """What one worker of a ``live.json`` snapshot is doing, in one line, e.g.

    - actor: ``1,050 env steps/s · envs 60% · waits for actions 30% · waits for trainer 5%``
      (an actor running the policy inline, ``"inference": "inline"``: ``runs policy 30%``)
    - policy: ``batch 64.0 rows · latency 3.2 ms · busy 40% · version 12``
    - trainer: ``busy 45% · 8.0 samples/update · 2 samples waiting · 0.50 updates/s``

    (fractions are of the worker's wall-clock time; parts not measured yet are left out;
    ``measuring...`` when none is); a worker inside a long operation adds ``in update for 12 s``.
    A worker of a plugin's kind (``docs/graph.md``), of which nothing is measured, reads
    ``running`` once it has reported.
    """
    parts: list[str] = []
    role = row.get("role")
    if role == "actor":
        if _is_number(row.get("env_steps_per_s")):
            parts.append(f"{_rate(row['env_steps_per_s'])} env steps/s")
        acting = "runs policy" if row.get("inference") == "inline" else "waits for actions"
        for key, label in (("env_frac", "envs"), ("inference_frac", acting), ("push_frac", "waits for trainer")):
            if (text := _pct(row.get(key))) is not None:
                parts.append(f"{label} {text}")
        if row.get("waiting_for"):
            parts.append(f"waiting for {row['waiting_for']}")
    elif role == "policy":
        if _is_number(row.get("batch_rows")):
            parts.append(f"batch {float(row['batch_rows']):.1f} rows")
        if _is_number(row.get("latency_ms")):
            parts.append(f"latency {float(row['latency_ms']):.1f} ms")
        if (text := _pct(row.get("busy_frac"))) is not None:
            parts.append(f"busy {text}")
        if row.get("waiting_for"):
            parts.append(f"waiting for {row['waiting_for']}")
    elif role == "trainer":
        if (text := _pct(row.get("busy_frac"))) is not None:
            parts.append(f"busy {text}")
        if _is_number(row.get("samples_per_update")):
            parts.append(f"{float(row['samples_per_update']):.1f} samples/update")
        if _is_number(row.get("samples_waiting")):
            parts.append(f"{_count(row['samples_waiting'])} samples waiting")
        if _is_number(row.get("updates_per_s")):
            parts.append(f"{float(row['updates_per_s']):.2f} updates/s")
    if role == "policy" and _is_number(row.get("policy_version")):
        parts.append(f"version {_count(row['policy_version'])}")
    if row.get("busy"):
        busy_s = f" for {float(row['busy_s']):.0f} s" if _is_number(row.get("busy_s")) else ""
        parts.append(f"in {row['busy']}{busy_s}")
    if not parts and role not in ("actor", "policy", "trainer") and _is_number(row.get("heartbeat_age_s")):
        return "running"  # a plugin's worker kind: its heartbeats say it lives, nothing more is measured
    return " · ".join(parts) if parts else "measuring..."


def _age(row: dict[str, Any]) -> Text:
    age = row.get("heartbeat_age_s")
    if not _is_number(age):
        return Text("starting", style="dim")
    return Text(f"{float(age):.1f} s ago", style="yellow" if age > 10 else "")


def health_view(snapshot: dict[str, Any], note: str | None = None) -> Group:
    """A rich view of a ``live.json`` snapshot: the bottleneck line, then the workers table
    (worker = role and index, pid, host when there are several, last heartbeat, restarts,
    activity); ``note`` (e.g. where ``zoo watch`` reads from) goes on top."""
    rows = snapshot.get("workers") or []
    hosts = {r.get("host") for r in rows if r.get("host")}
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("worker", no_wrap=True, style="bold")
    table.add_column("pid", no_wrap=True, justify="right")
    if len(hosts) > 1:
        table.add_column("host", no_wrap=True)
    table.add_column("heartbeat", no_wrap=True, justify="right")
    table.add_column("restarts", justify="right")
    table.add_column("activity")
    for r in rows:
        restarts = str(r.get("restarts") or 0)
        if r.get("restarts") and r.get("last_restart"):
            restarts += f" (last: {r['last_restart']})"
        cells: list[Any] = [Text(f"{r.get('role')} {r.get('index')}"), Text(str(r.get("pid") or "-"))]
        if len(hosts) > 1:
            cells.append(Text(str(r.get("host") or "-")))
        cells += [_age(r), Text(restarts, style="red" if r.get("restarts") else ""), Text(worker_activity(r))]
        table.add_row(*cells)
    parts: list[Any] = [Text(note, style="dim")] if note else []
    neck = (snapshot.get("bottleneck") or {}).get("text")
    if neck:  # above the table: on screen however many workers there are
        parts.append(Text.assemble(("bottleneck: ", "bold"), neck))
    if rows:
        parts.append(table)
    return Group(*parts)


class Display:
    """Context manager showing training progress; call it with each status dict.

    Args:
        console: where to draw (default: a new stdout :class:`rich.console.Console`).
        live: draw a live progress bar (True) or print plain lines (False); default: live
            exactly when ``console`` is a terminal.
        title: the progress bar's label (e.g. the run name).

    Usage::

        with Display(title=cfg.name) as display:
            code = run(cfg, spec, on_status=display)
    """

    def __init__(self, console: Console | None = None, *, live: bool | None = None, title: str = "training") -> None:
        self.console = console if console is not None else Console()
        self.live = self.console.is_terminal if live is None else live
        self.title = title
        self.last: dict[str, Any] | None = None
        self.health: dict[str, Any] | None = None
        self.note: str | None = None
        self._progress: Progress | None = None
        self._task: Any = None
        self._live: Live | None = None

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> Display:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[done_text]}/{task.fields[total_text]} env steps"),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task(self.title, total=None, total_text="?", done_text="0")
            self._live = Live(self, console=self.console, refresh_per_second=2, transient=False)
            self._live.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live display (the last frame stays on screen). Safe to call twice."""
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None

    # -- updates ---------------------------------------------------------------------------
    def __call__(self, status: dict[str, Any]) -> None:
        """Show one status (see the module docstring for its keys)."""
        self.last = dict(status)
        if self.live and self._progress is not None:
            total = status.get("budget_env_steps") or None
            done = float(status.get("env_steps", 0) or 0)
            self._progress.update(
                self._task,
                completed=min(done, float(total)) if total else done,  # the bar and its % stop at the budget
                done_text=_count(done),  # the real count, past the budget too
                total=float(total) if total else None,
                total_text=_count(total) if total else "?",
            )
            if self._live is not None:
                self._live.refresh()
        else:
            self.console.print(format_status_line(status), markup=False, highlight=False, soft_wrap=True)

    def catch_up(self, metrics_path: str) -> None:
        """Show the run's final counters when ``metrics.jsonl`` has newer ones than the last
        status shown (:func:`final_status`): after Ctrl-C the trainer's last status often never
        reached the controller, and the last frame stayed at an older version under a message
        naming the checkpoint's."""
        newer = final_status(self.last, metrics_path)
        if newer is not None and newer is not self.last:
            last = self.last or {}
            self({**last, **{k: v for k, v in newer.items() if k in last or k in STATUS_KEYS}})

    def show_live(self, snapshot: dict[str, Any]) -> None:
        """Show a health snapshot (``live.json``'s content) under the figures; nothing in plain mode."""
        self.health = snapshot
        if self._live is not None:
            self._live.refresh()

    def log(self, message: str) -> None:
        """Print a line of text (above the live display when there is one)."""
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    # -- rendering -------------------------------------------------------------------------
    def _table(self) -> Table:
        grid = Table.grid(padding=(0, 2))
        pairs = [(k, v) for k, v in _fields(self.last or {}) if k != "env_steps"]
        per_row = 4
        for _ in range(per_row):
            grid.add_column(justify="right", style="cyan")
            grid.add_column(justify="left")
        for i in range(0, len(pairs), per_row):
            row: list[str] = []
            for label, text in pairs[i:i + per_row]:
                row += [label, text]
            grid.add_row(*row)
        return grid

    def _policy_table(self, policies: dict[str, dict[str, Any]]) -> Table:
        """One row per named policy: its name (``(frozen)``), then a column per figure any has."""
        rows = {name: {k: v for k, v in policy_fields(entry) if not waiting(entry) or k == "return"}
                for name, entry in policies.items()}
        labels: list[str] = []
        for fields in rows.values():
            labels += [label for label in fields if label not in labels]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("policy", no_wrap=True, style="bold")
        for label in labels:
            table.add_column(label, justify="right", no_wrap=True)
        for name, fields in rows.items():
            frozen = policies[name].get("frozen")
            cells = [fields.get(label, "frozen" if frozen and label == "version" else "") for label in labels]
            if waiting(policies[name]):
                name += f" ({WAITING})"
            table.add_row(name + (" (frozen)" if frozen else ""), *cells)
        return table

    def __rich__(self) -> Group:
        parts: list[Any] = []
        if self._progress is not None:
            parts.append(self._progress)
        if self.last:
            parts.append(self._table())
            if policies := _policies(self.last):
                parts.append(self._policy_table(policies))
        if self.health is not None or self.note:
            parts.append(health_view(self.health or {}, self.note))
        return Group(*parts)


def format_summary(status: dict[str, Any] | None, elapsed_s: float, run_dir: str,
                   start: dict[str, Any] | None = None, checkpoints: str = "checkpoints/latest.pt") -> str:
    """The line ``zoo train`` prints when a run reaches its budget, e.g.

    ``done: 200,192 env steps (200,192 frames) in 5m06s, 654 env steps/s, 640 trained env
    steps/s, 0.0% dropped; return=487.2 episodes=612 version=195; run dir runs/ppo-cartpole:
    metrics.jsonl, tensorboard/, checkpoints/latest.pt``

    ``status`` is the last one shown (None: no status came; then only time and run dir);
    ``elapsed_s`` the wall time shown. The rates are the env steps (and trained env steps,
    when the status has them) over that same time, so the line's figures agree (left out
    under 1 s). ``start``: the counters a resumed run started this segment from (its
    checkpoint's ``env_steps``, ``trained_env_steps`` and the segment's ``resume`` number):
    the total comes first, then this segment's steps, time and rates, labelled
    (``done: 300,000 env steps (...); resume #1: 100,000 env steps in 2m30s, 667 env steps/s, ...``).
    Named policies (``status["policies"]``): the env steps are the run's (the actors', the most
    any trainable policy received: :mod:`zoo.core.policy_status`), and what was trained is each
    policy's own, so the run's part has no trained rate or dropped share; each policy's version,
    trained env steps and return follow the run's: ``...; return=-30.5 episodes=60; lead
    version=12 trained=2,304 return=-25.0, opponent frozen return=-40.0``.
    ``dropped`` is ``dropped_fraction``: agent-slot samples dropped (stale at the trainer, or at
    the actors) over those dropped plus those trained on. ``checkpoints``: what the run keeps
    (named policies: ``checkpoints/<policy>/latest.pt``).
    """
    minutes, seconds = divmod(int(round(elapsed_s)), 60)
    took = f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
    head = f"done in {took}"
    if status and _is_number(status.get("env_steps")):
        start = start or {}
        steps = float(status["env_steps"])
        frames = f" ({_count(status['frames'])} frames)" if "frames" in status else ""
        segment = steps - float(start.get("env_steps") or 0)
        rate = f", {_rate(segment / elapsed_s)} env steps/s" if elapsed_s >= 1 else ""
        if _is_number(status.get("trained_env_steps")) and elapsed_s >= 1:
            trained = float(status["trained_env_steps"]) - float(start.get("trained_env_steps") or 0)
            rate += f", {_rate(trained / elapsed_s)} trained env steps/s"
        if _is_number(status.get("dropped_fraction")):
            rate += f", {100.0 * float(status['dropped_fraction']):.1f}% dropped"
        if start.get("env_steps"):
            head = (f"done: {_count(steps)} env steps{frames}; resume #{start.get('resume', 1)}: "
                    f"{_count(segment)} env steps in {took}{rate}")
        else:
            head = f"done: {_count(steps)} env steps{frames} in {took}{rate}"
        shown = [f"{label}={text}" for label, text in _fields(status) if label in ("return", "episodes", "version")]
        if shown:
            head += "; " + " ".join(shown)
        named = [" ".join([name] + (["frozen"] if entry.get("frozen") else [])
                          + [f"{label}={text}" for label, text in policy_fields(entry)
                             if label in ("version", "trained", "return")])
                 for name, entry in _policies(status).items()]
        if named:
            head += "; " + ", ".join(named)
    return f"{head}; run dir {run_dir}: metrics.jsonl, tensorboard/, {checkpoints}"


def _tail_rows(metrics_path: str, tail_bytes: int) -> list[dict[str, Any]] | None:
    """The JSON object rows of the last ``tail_bytes`` of ``metrics_path`` (None: unreadable)."""
    try:
        with open(metrics_path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - tail_bytes))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the first line of the tail may be cut
        if isinstance(row, dict):
            rows.append(row)
    return rows


RUN_KEYS = ("episodes", "episode_return_mean")
"""The run-level keys the episode writer's (the first trainable policy's) ``end``/``update`` row
gives the merged status of named policies; ``env_steps`` and ``frames`` are the most of any
policy's (:data:`zoo.core.policy_status.RUN_MAX`)."""
RECENT_EPISODES = 20  # as the trainer's episode_return_mean


RUN_MAX = ("env_steps", "frames")


def _entry_keys(key: str) -> bool:
    from zoo.core.policy_status import POLICY_KEYS

    return key in POLICY_KEYS or key in REPLAY_KEYS or "loss" in key


def _named_final(shown: dict[str, Any] | None, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The merged status of named policies (``zoo.core.policy_status``) updated from their last
    ``end``/``update`` rows, when any has more env steps than the policy's entry in ``shown``;
    per-policy returns from the last episode rows' ``<P>_return``."""
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row.get("type") in ("end", "update") and row.get("policy") and _is_number(row.get("env_steps")):
            last[str(row["policy"])] = row
    entries = {n: dict(e) for n, e in _policies(shown or {}).items()}
    for name in last:
        entries.setdefault(name, {})
    # the episode writer: the policy whose trainer logs the episode rows, else the first trainable one shown
    writer = next((str(r["policy"]) for r in reversed(rows) if r.get("type") == "episode" and r.get("policy")),
                  next((n for n, e in entries.items() if not e.get("frozen")), None))
    out = {k: v for k, v in (shown or {}).items() if k != "policies"}
    changed = shown is None
    for name, row in last.items():
        entry = entries[name]
        if _is_number(entry.get("env_steps")) and row["env_steps"] <= entry["env_steps"]:
            continue
        changed = True
        entry.update({k: v for k, v in row.items() if _entry_keys(k)})
        if name == writer:
            out.update({k: v for k, v in row.items() if k in RUN_KEYS})
    if not changed:
        return shown
    for key in RUN_MAX:  # the run's progress: the most any trainable policy received
        counts = [float(r[key]) for r in last.values() if _is_number(r.get(key))]
        counts += [float(out[key])] if _is_number(out.get(key)) else []
        if counts:
            out[key] = int(max(counts))
    episodes = [r for r in rows if r.get("type") == "episode"][-RECENT_EPISODES:]
    for name, entry in entries.items():
        values = [float(r[f"{name}_return"]) for r in episodes if _is_number(r.get(f"{name}_return"))]
        if values:
            entry["episode_return_mean"] = sum(values) / len(values)
    out["policies"] = entries
    return out


def final_status(shown: dict[str, Any] | None, metrics_path: str, tail_bytes: int = 1 << 16) -> dict[str, Any] | None:
    """What a run ended with: the last ``end`` or ``update`` row of ``metrics.jsonl`` (the
    trainer writes ``end`` with its final counters) when it has more env steps than the last
    status shown, else ``shown``.

    With named policies (rows carrying ``policy``) the merged status of every policy: each
    policy's entry from its own last row when that has more env steps than the entry shown,
    the run's env steps and frames the most of any policy's, its episodes and return from the
    first policy's (the episode writer's), each policy's return
    from the last 20 episode rows' ``<P>_return`` (a new dict; ``shown`` when nothing is newer).

    The trainer's last status message can be lost (its control socket may close before it
    is delivered); the metrics file is written before it and flushed on exit. Only the last
    ``tail_bytes`` of the file are read; a missing or unreadable file gives ``shown``.
    """
    rows = _tail_rows(metrics_path, tail_bytes)
    if rows is None:
        return shown
    if _policies(shown or {}) or any(r.get("policy") and r.get("type") in ("end", "update") for r in rows):
        return _named_final(shown, rows)
    for row in reversed(rows):
        if row.get("type") in ("end", "update") and _is_number(row.get("env_steps")):
            newer = shown is None or not _is_number(shown.get("env_steps")) or row["env_steps"] > shown["env_steps"]
            return row if newer else shown
    return shown
