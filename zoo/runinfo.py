"""Reading a run directory: its config, metrics, status and checkpoints.

A run directory ``<runs_dir>/<name>/`` holds (written by ``zoo train``):

- ``config.json``: the resolved experiment config (``algo_name``, ``env_name``, ``seed``,
  ``algo``, ``env``, budgets, ``env_spec`` with ``frame_skip``);
- ``metrics.jsonl``: one JSON object per line; ``type`` is ``episode`` (``env_steps``,
  ``return``, ``length`` and the env's per-episode statistics), ``update`` (counters,
  ``time_s``, ``episode_return_mean``, the algorithm's losses), ``end`` (the final
  counters), or another kind added later (rows of unknown types are kept and ignored by
  the readers below);
- ``status.json`` (``docs/looking-at-runs.md``): ``running``, ``finished``, ``stopped`` or
  ``crashed``, the controller's pid and host, start and end times, the failed worker;
- ``checkpoints/latest.pt`` (and ``policy-v<version>.pt`` snapshots); with named policies
  (``config.json``'s ``policies``, ``docs/policies.md``) ``checkpoints/<policy>/latest.pt``,
  and the trainers' rows carry ``"policy": <policy>``.

Everything here only reads; nothing imports torch. Errors a user can fix raise
:class:`RunError` (the CLI prints it on one line and exits 2).
"""
from __future__ import annotations

import gzip
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.core.rundir import RunNotFound, find_run_dir, pid_alive

CONFIG = "config.json"
METRICS = "metrics.jsonl"
STATUS = "status.json"
CHECKPOINTS = "checkpoints"
HISTORY = "history"
LATEST = "latest.pt"
STATUSES = ("running", "finished", "stopped", "crashed")
RECENT_EPISODES = 20  # as the trainer's episode_return_mean

__all__ = ["PolicyInfo", "RunError", "RunInfo", "resolve_run", "resolve_target", "read_config", "read_metrics",
           "run_info", "find_runs", "latest_checkpoint"]


class RunError(ValueError):
    """A run folder or checkpoint the user named cannot be used (one line, says why)."""


def _default_runs_dir() -> Path:
    return Path("runs")


def resolve_run(name: str | os.PathLike) -> Path:
    """The run directory ``name`` names: a path to a folder holding ``config.json``, or a
    bare run name looked up under ``./runs/`` (:func:`zoo.core.rundir.find_run_dir`).

    Raises:
        RunError: no such folder, or it holds no ``config.json`` (not a run folder).
    """
    try:
        return find_run_dir(name, _default_runs_dir())
    except RunNotFound as exc:
        raise RunError(str(exc)) from None


def resolve_target(target: str | os.PathLike) -> tuple[Path, Path]:
    """``(run_dir, checkpoint)`` for ``zoo eval RUN_OR_CHECKPOINT``.

    A folder is a run directory and its checkpoint ``checkpoints/latest.pt``; a file is a
    checkpoint, whose run directory is the folder above its ``checkpoints/`` folder (a named
    policy's ``checkpoints/<policy>/`` folder included), or above ``history/<policy>/`` for a
    kept version (:mod:`zoo.core.history`), or the folder holding it.

    Raises:
        RunError: no such file or folder, not a run folder, or the run has no checkpoint yet.
    """
    path = Path(target)
    if path.is_file():
        parent = path.parent
        if parent.name == CHECKPOINTS:
            run_dir = parent.parent
        elif parent.parent.name == CHECKPOINTS and (parent.parent.parent / CONFIG).is_file():
            run_dir = parent.parent.parent  # checkpoints/<policy>/FILE of a run of named policies
        elif parent.parent.name == HISTORY:  # a kept version, history/<policy>/v<version>.pt (docs/history.md)
            run_dir = parent.parent.parent
        else:
            run_dir = parent
        if not (run_dir / CONFIG).is_file():
            raise RunError(f"checkpoint {str(target)!r} is not inside a run folder (no {CONFIG} in "
                           f"{str(run_dir)!r}); name the run whose config to use with --run RUN")
        return run_dir, path
    run_dir = resolve_run(target)
    ckpt = run_dir / CHECKPOINTS / LATEST
    pbt = _pbt_table(run_dir)
    if pbt is not None and not ckpt.is_file():
        from zoo.core.pbt import member_names

        first = member_names(str(pbt.get("policy", "default")), int(pbt["members"]))[0]
        raise RunError(f"run {str(target)!r} is a PBT population (pbt.members={pbt['members']}), a checkpoint per "
                       f"member: name one, e.g. {run_dir / CHECKPOINTS / first / LATEST}")
    if not ckpt.is_file():
        raise RunError(f"run {str(target)!r} has no checkpoint yet ({ckpt} does not exist); the trainer "
                       "writes one every trainer.checkpoint_interval updates and at the end")
    return run_dir, ckpt


def _pbt_table(run_dir: Path) -> dict[str, Any] | None:
    """The ``pbt`` table of the run's ``config.json`` when it ran a population, else None."""
    try:
        pbt = json.loads((run_dir / CONFIG).read_text()).get("pbt")
    except (OSError, ValueError, AttributeError):
        return None
    return pbt if isinstance(pbt, dict) and pbt.get("members") else None


def read_config(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's ``config.json`` as a dict.

    Raises:
        RunError: missing or not valid JSON.
    """
    path = Path(run_dir) / CONFIG
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunError(f"{str(run_dir)!r} is not a run folder: it holds no {CONFIG}") from None
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: not valid JSON ({exc})") from None


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every row of ``metrics.jsonl`` (or, in an archived run folder, of its gzipped copy
    ``metrics.jsonl.gz``) in file order ([] when there is none yet).

    A last line cut short (a run still writing, or killed mid-line) is skipped; any other
    line that is not a JSON object is skipped as well.
    """
    path = Path(run_dir) / METRICS
    try:
        text = path.read_text()
    except FileNotFoundError:
        try:  # an archived run: gzip -9 metrics.jsonl
            with gzip.open(path.with_name(METRICS + ".gz"), "rt") as f:
                text = f.read()
        except FileNotFoundError:
            return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """``checkpoints/latest.pt`` if it exists, else the newest ``policy-v*.pt``, else None."""
    folder = Path(run_dir) / CHECKPOINTS
    latest = folder / LATEST
    if latest.is_file():
        return latest
    snapshots = sorted(folder.glob("policy-v*.pt"))
    return snapshots[-1] if snapshots else None


def _budget_env_steps(cfg: dict[str, Any]) -> int | None:
    """The run's budget in env steps from ``config.json`` (frames / frame_skip, rounded up)."""
    if cfg.get("env_steps"):
        return int(cfg["env_steps"])
    if cfg.get("frames"):
        skip = max(1, int((cfg.get("env_spec") or {}).get("frame_skip", 1)))
        return -(-int(cfg["frames"]) // skip)
    return None


@dataclass
class PolicyInfo:
    """One named policy of a run, as ``zoo runs`` shows it (None where unknown).

    ``version``, ``env_steps``: its trainer's last ``update`` or ``end`` row (None for a frozen
    policy, which writes none); ``return_mean``: the mean of the episode rows' ``<name>_return``
    (its agents' mean return) over the last :data:`RECENT_EPISODES`; ``checkpoint``: its
    ``checkpoints/<name>/latest.pt`` when it exists.
    """

    name: str
    algo: str | None = None
    trainable: bool = True
    version: int | None = None
    env_steps: int | None = None
    return_mean: float | None = None
    checkpoint: Path | None = None
    checkpoint_mtime: float | None = None


def _policy_infos(run_dir: Path, cfg: dict[str, Any], rows: list[dict[str, Any]],
                  recent: list[dict[str, Any]]) -> list[PolicyInfo]:
    """Every named policy of ``config.json``, in declaration order (``[]``: none named); a
    population's members (its ``pbt`` table), each with its own episodes' return."""
    named = cfg.get("policies")
    pbt: dict[str, Any] = cfg.get("pbt") if isinstance(cfg.get("pbt"), dict) else {}  # type: ignore[assignment]
    members = bool(pbt.get("members")) and not named
    if members:  # a population: its members (docs/pbt.md)
        from zoo.core.pbt import member_names

        named = {m: {"algo_name": cfg.get("algo_name")}
                 for m in member_names(str(pbt.get("policy", "default")), int(pbt["members"]))}
    if not isinstance(named, dict) or not named:
        return []
    last: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("type") in ("end", "update") and r.get("policy") in named:
            last[str(r["policy"])] = r
    out = []
    for name, saved in named.items():
        saved = saved if isinstance(saved, dict) else {}
        pol = PolicyInfo(name=str(name), algo=saved.get("algo_name"),
                         trainable=saved.get("trainable", True) is not False)
        row = last.get(pol.name, {})
        if isinstance(row.get("policy_version"), (int, float)):
            pol.version = int(row["policy_version"])
        if isinstance(row.get("env_steps"), (int, float)):
            pol.env_steps = int(row["env_steps"])
        if members:  # a member's own envs' episodes, logged by its trainer
            own = [r for r in rows if r.get("type") == "episode" and r.get("policy") == name][-RECENT_EPISODES:]
            values = [float(r["return"]) for r in own if isinstance(r.get("return"), (int, float))]
        else:
            values = [float(r[f"{name}_return"]) for r in recent
                      if isinstance(r.get(f"{name}_return"), (int, float))]
        if values:
            pol.return_mean = sum(values) / len(values)
        ckpt = Path(run_dir) / CHECKPOINTS / pol.name / LATEST
        if ckpt.is_file():
            pol.checkpoint = ckpt
            try:
                pol.checkpoint_mtime = ckpt.stat().st_mtime
            except OSError:
                pass
        out.append(pol)
    return out


@dataclass
class RunInfo:
    """What ``zoo runs`` shows for one run directory (None where unknown).

    ``status``: one of :data:`STATUSES`, or ``unknown`` (no ``status.json`` and no ``end``
    row: a run older than status files that was killed, or one still running);
    ``detail``: why (``reason`` of ``status.json``; for a failed worker its role, index and
    the last line of its error, e.g. the exception of a traceback; ``controller gone``);
    ``env_steps``: the last counter logged (named policies: the most of their last counts, the
    run's env steps, as every trainable policy receives every env step); ``return_mean``: the last
    ``episode_return_mean`` (mean return of the trainer's recent episodes); ``team_returns``:
    for envs that log per-team returns (episode fields ``<team>_return``), each team's mean
    over the last :data:`RECENT_EPISODES` episode rows (with named policies, not theirs:
    ``policies`` has them); ``policies``: the run's named policies (:class:`PolicyInfo`; empty
    for a run of one implicit policy); ``checkpoint``: ``checkpoints/latest.pt`` (named
    policies: the newest of their ``checkpoints/<policy>/latest.pt``);
    ``duration_s``: wall time from start to end (or to now while running), summed over the
    segments of a resumed run (``status.json``'s ``earlier_s``).
    """

    path: Path
    name: str
    algo: str | None = None
    env: str | None = None
    status: str = "unknown"
    detail: str | None = None
    env_steps: int | None = None
    budget_env_steps: int | None = None
    return_mean: float | None = None
    duration_s: float | None = None
    checkpoint: Path | None = None
    checkpoint_mtime: float | None = None
    failed_worker: dict[str, Any] | None = field(default=None)
    team_returns: dict[str, float] = field(default_factory=dict)
    policies: list[PolicyInfo] = field(default_factory=list)


def _last_line(text: Any) -> str:
    """The last non-empty line of ``text`` (a traceback's exception line)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """``status.json`` of ``run_dir`` as a dict; None when missing, unreadable or not an object."""
    try:
        data = json.loads((run_dir / STATUS).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def run_info(run_dir: str | os.PathLike, now: float | None = None) -> RunInfo:
    """Summarise one run directory (see :class:`RunInfo`).

    Status: from ``status.json`` when present; ``running`` whose controller pid no longer
    exists on this host is shown as ``crashed`` (``controller gone``). Without
    ``status.json``: an ``end`` row in ``metrics.jsonl`` means ``finished`` when its
    ``env_steps`` reached the budget and ``stopped`` when it did not; no ``end`` row is
    ``unknown``.
    """
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    info = RunInfo(path=run_dir, name=run_dir.name)
    try:
        cfg = read_config(run_dir)
    except RunError:
        cfg = {}
    info.algo, info.env = cfg.get("algo_name"), cfg.get("env_name")
    info.budget_env_steps = _budget_env_steps(cfg)
    rows = read_metrics(run_dir)
    end = next((r for r in reversed(rows) if r.get("type") == "end"), None)
    for r in reversed(rows):
        if isinstance(r.get("env_steps"), (int, float)) and r.get("type") in ("end", "update", "episode"):
            info.env_steps = int(r["env_steps"])
            break
    for r in reversed(rows):
        if r.get("type") in ("end", "update") and isinstance(r.get("episode_return_mean"), (int, float)):
            info.return_mean = float(r["episode_return_mean"])
            break
    recent = [r for r in rows if r.get("type") == "episode"][-RECENT_EPISODES:]
    info.policies = _policy_infos(run_dir, cfg, rows, recent)
    counted = [p.env_steps for p in info.policies if p.env_steps is not None]
    if counted:  # the run's env steps (the actors'): the most any trainable policy received
        info.env_steps = max(counted)
    own = {f"{p.name}_return" for p in info.policies}
    for key in sorted({k for r in recent for k in r if k.endswith("_return") and k not in own}):
        values = [float(r[key]) for r in recent if isinstance(r.get(key), (int, float))]
        if values:
            info.team_returns[key.removesuffix("_return")] = sum(values) / len(values)
    status = read_status(run_dir)
    if status is not None:
        info.status = str(status["status"]) if status.get("status") in STATUSES else "unknown"
        info.detail = status.get("reason")
        info.failed_worker = status.get("failed_worker") or None
        started, ended = status.get("started"), status.get("ended")
        if info.status == "running" and status.get("host") == socket.gethostname() \
                and isinstance(status.get("pid"), int) and not pid_alive(status["pid"]):
            info.status, info.detail = "crashed", "controller gone"
            ended = None
        if isinstance(started, (int, float)):
            earlier = float(status.get("earlier_s") or 0.0)  # a resumed run: its earlier segments
            if isinstance(ended, (int, float)):
                info.duration_s = earlier + float(ended) - float(started)
            elif info.status == "running":
                info.duration_s = earlier + now - float(started)
        if info.failed_worker:
            w = info.failed_worker
            where = f"{w.get('role', '?')} {w.get('index', '?')}"
            info.detail = f"{where} failed" + (f": {_last_line(w['detail'])}" if w.get("detail") else "")
    elif end is not None:
        budget = info.budget_env_steps
        # an end row before the budget that says stop_when held (docs/looking-at-runs.md) finished too
        reached = budget is None or int(end.get("env_steps", 0)) >= budget or bool(end.get("stop_when"))
        info.status = "finished" if reached else "stopped"
        info.detail = "budget reached" if reached else "ended before its budget (no status.json)"
    else:
        info.detail = "no status.json, no end row"
    if info.duration_s is None:
        for r in reversed(rows):
            if r.get("type") in ("end", "update") and isinstance(r.get("time_s"), (int, float)):
                info.duration_s = float(r["time_s"])
                break
    kept = [p for p in info.policies if p.checkpoint is not None]
    if kept:
        newest = max(kept, key=lambda p: p.checkpoint_mtime or 0.0)
        info.checkpoint, info.checkpoint_mtime = newest.checkpoint, newest.checkpoint_mtime
        return info
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None:
        info.checkpoint = ckpt
        try:
            info.checkpoint_mtime = ckpt.stat().st_mtime
        except OSError:
            pass
    return info


def find_runs(folder: str | os.PathLike) -> list[Path]:
    """Run directories (folders holding ``config.json``) directly under ``folder``, or
    ``folder`` itself when it is one; sorted by name.

    Raises:
        RunError: ``folder`` does not exist or is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise RunError(f"runs folder {str(folder)!r} does not exist; give the folder your runs were written to: "
                       "zoo runs PATH (zoo train writes to ./runs unless --set runs_dir=PATH)")
    if (folder / CONFIG).is_file():
        return [folder]
    return sorted((p for p in folder.iterdir() if p.is_dir() and (p / CONFIG).is_file()), key=lambda p: p.name)
