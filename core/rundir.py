"""The run folder: claimed atomically, its ``status.json``, rows the controller adds to ``metrics.jsonl``.

- :func:`claim_run_dir` creates ``<runs_dir>/<name>`` with ``os.mkdir`` (never reusing a
  folder): two runs can never share one. A default name (``<algo>-<env>-<YYYYmmdd-HHMMSS>``)
  that is taken — runs started in the same second — gets a short random suffix
  (``-3fa2``); an explicit ``--name`` that exists is refused.
- :func:`write_status` writes ``status.json`` atomically (a temporary file in the same
  folder, fsync, ``os.replace``): ``{"status": "running" | "finished" | "stopped" | "crashed",
  "pid", "host", "started", "ended", "exit_code", "reason", "failed_worker"}`` (times: unix
  seconds); a resumed run's also ``"segments"`` (this one included) and ``"earlier_s"`` (the
  wall time of the segments before this one, :func:`earlier_segments`). ``"running"`` with a
  pid that is no longer alive on that host means the controller died.
- :func:`discard_run_dir` removes a folder this process claimed for a run that was refused
  before the controller started (a transport or the launcher refusing the settings, Ctrl-C
  during start-up; no ``status.json`` yet): a refused run leaves no ``config.json`` or
  ``graph.json`` behind. :func:`snapshot_files` and :func:`restore_files` do the same for a
  resumed run refused before its segment started: its files are as they were.
- :func:`launch_failed` records in ``status.json`` a run that failed before any worker
  started (``crashed``), unless it was a refusal (see above: nothing ran).
- :func:`append_row` adds one JSON row to ``metrics.jsonl`` with a single ``write(2)`` on an
  ``O_APPEND`` descriptor, as the trainer's writer does: Linux appends each such write whole
  at the end of a regular file, so rows of the controller (``restart``) and of the trainer
  never interleave inside a line.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SUFFIX_TRIES = 100


class RunNotFound(ValueError):
    """The run a user named is not a run folder; the one-line message says what was looked for."""


def find_run_dir(target: str | os.PathLike, runs_dir: str | os.PathLike = "runs") -> Path:
    """The run folder ``target`` names, for every command that takes a run (``zoo eval``,
    ``plot``, ``watch``, ``resume``): a folder path, else a run name under ``runs_dir``. It
    must hold ``config.json``, which the controller writes as it claims the folder.

    Raises:
        RunNotFound: neither exists, ``target`` is a file, or the folder holds no ``config.json``.
    """
    path, named = Path(target), Path(runs_dir) / str(target)
    for candidate in (path, named):
        if candidate.is_dir():
            if not (candidate / "config.json").is_file():
                raise RunNotFound(f"{str(candidate)!r} is not a run folder: it holds no config.json "
                                  "(was it made by `zoo train`?)")
            return candidate
    if path.exists():
        raise RunNotFound(f"{str(target)!r} is not a run folder (a directory holding config.json)")
    nor = f" (nor {str(named)!r})" if named != path and len(path.parts) == 1 else ""  # a name, not a path
    raise RunNotFound(f"run folder {str(target)!r} does not exist{nor}; give a run folder such as runs/NAME, "
                      f"or the name of a run in {str(runs_dir)!r}")


def pid_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie (a killed child not yet
    reaped counts as dead). Not an int > 0: False. Another user's process: alive. Without
    ``/proc`` (not Linux) ``kill(pid, 0)`` alone decides."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def is_default_name(cfg) -> bool:
    """True when ``cfg.name`` has the default form ``<algo>-<env>-<YYYYmmdd-HHMMSS>``."""
    from zoo.core.config import sanitize_name

    stem = re.escape(sanitize_name(f"{cfg.algo_name}-{cfg.env_name}"))
    return re.fullmatch(stem + r"-\d{8}-\d{6}", cfg.name) is not None


def claim_run_dir(cfg, unique: bool | None = None) -> str:
    """Create the run folder ``<cfg.runs_dir>/<cfg.name>`` atomically and return its path.

    ``unique`` (default: :func:`is_default_name`): when the folder exists, try
    ``<name>-<4 hex digits>`` instead (``cfg.name`` is updated); else refuse.

    Raises:
        FileExistsError: the folder exists and ``unique`` is False (the message says what to do).
        OSError: ``runs_dir`` cannot be created or written.
    """
    if unique is None:
        unique = is_default_name(cfg)
    os.makedirs(cfg.runs_dir, exist_ok=True)
    base = cfg.name
    for attempt in range(SUFFIX_TRIES if unique else 1):
        name = base if attempt == 0 else f"{base}-{secrets.token_hex(2)}"
        path = os.path.join(cfg.runs_dir, name)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        cfg.name = name
        return path
    raise FileExistsError(f"run directory {os.path.join(cfg.runs_dir, base)!r} already exists; "
                          "pass --name NEW or remove it")


def discard_run_dir(run_dir: str | os.PathLike) -> None:
    """Remove ``run_dir`` and what it holds: only for a folder :func:`claim_run_dir` just
    created for a run that never started a worker (its ``config.json``, ``graph.json``,
    resolver and placement files). Errors are ignored: the refusal is what gets reported."""
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)


RUN_FILES = ("config.json", "graph.json", "status.json")
"""The files a segment's start rewrites: what :func:`snapshot_files` keeps for a refused resume."""


def snapshot_files(run_dir: str | os.PathLike, names: tuple[str, ...] = RUN_FILES) -> dict[str, bytes | None]:
    """The bytes of each file ``names`` in ``run_dir`` (None: absent), for :func:`restore_files`."""
    out: dict[str, bytes | None] = {}
    for name in names:
        try:
            out[name] = Path(run_dir, name).read_bytes()
        except FileNotFoundError:
            out[name] = None
    return out


def restore_files(run_dir: str | os.PathLike, snapshot: dict[str, bytes | None]) -> None:
    """Put back the files of a :func:`snapshot_files` snapshot (each written atomically: a
    temporary file, fsync, rename; one absent then is removed): a resume refused before any
    worker started leaves the run as it was, its ``config.json`` not rewritten with the refused
    options, its ``status.json`` not marked as a crash of a segment that never ran."""
    for name, data in snapshot.items():
        path = os.path.join(run_dir, name)
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically: temporary file in the same folder, fsync, rename."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def earlier_segments(path: str) -> dict[str, Any]:
    """``{"segments", "earlier_s"}`` for the next segment of the run whose ``status.json`` is
    ``path``: how many segments ran before it (a resumed run: 1 + its resumes) and their wall
    time in seconds, the previous ``status.json``'s own plus its ``earlier_s`` (a segment
    whose controller died without writing ``ended`` adds nothing). ``{}`` for a new run."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(old, dict):
        return {}
    earlier = float(old.get("earlier_s") or 0.0)
    started, ended = old.get("started"), old.get("ended")
    if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
        earlier += max(0.0, float(ended) - float(started))
    return {"segments": int(old.get("segments") or 1) + 1, "earlier_s": earlier}


class RunStatus:
    """``<run_dir>/status.json`` of one run (see the module doc)."""

    def __init__(self, run_dir: str) -> None:
        self.path = os.path.join(run_dir, "status.json")
        self.data: dict[str, Any] = {"status": "running", "pid": os.getpid(), "host": socket.gethostname(),
                                     "started": time.time(), "ended": None, "exit_code": None, "reason": None,
                                     "failed_worker": None, **earlier_segments(self.path)}

    def start(self) -> None:
        write_json_atomic(self.path, self.data)

    def end(self, status: str, exit_code: int, reason: str, failed_worker: dict[str, Any] | None = None) -> None:
        self.data.update(status=status, ended=time.time(), exit_code=exit_code, reason=reason,
                         failed_worker=failed_worker)
        write_json_atomic(self.path, self.data)


def launch_failed(run_dir: str, exc: BaseException) -> None:
    """Record in ``status.json`` that the run failed before any worker started (``crashed``, exit
    code 1, the reason), so that ``zoo runs`` does not show it as unknown. Not for a refusal
    (:class:`~zoo.core.launcher.LaunchError`, :class:`~zoo.core.transport.TransportError`,
    Ctrl-C): nothing ran, so the CLI removes a new run's folder (a refused run leaves nothing)
    and puts a resumed run's files back as they were (:func:`restore_files`)."""
    from zoo.core.launcher import LaunchError
    from zoo.core.transport import TransportError

    if isinstance(exc, (LaunchError, TransportError, KeyboardInterrupt)):
        return
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    status = RunStatus(run_dir)
    status.data["started"] = time.time()
    status.end("crashed", 1, f"the launch failed: {type(exc).__name__}: {first}".rstrip(": "))


def append_row(path: str, row: dict[str, Any]) -> None:
    """Append ``row`` as one JSON line to ``path`` with a single ``O_APPEND`` write (see the module doc)."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def append_missing_restarts(path: str, rows: list[dict[str, Any]]) -> None:
    """Append each ``restart`` row of ``rows`` that ``path`` no longer holds (a resumed trainer
    cuts ``metrics.jsonl`` back to its checkpoint); rows are known by (role, index, restarts)."""
    with open(path) as f:
        kept = {(r.get("role"), r.get("index"), r.get("restarts")) for r in map(json.loads, f)
                if r.get("type") == "restart"}
    for row in rows:
        if (row["role"], row["index"], row["restarts"]) not in kept:
            append_row(path, row)


def last_row(path: str) -> dict[str, Any] | None:
    """The last complete JSON row of ``path`` (None if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _count(n: Any) -> str:
    """``1280`` -> ``"1,280"`` as the status lines write counts; anything else as it is."""
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else str(n)


def what_was_saved(run_dir: str) -> str:
    """One true sentence on what a stopped run left: the final checkpoint and ``end`` row, an
    earlier checkpoint, or none (checked on disk); with named policies one clause per trainable
    policy (its ``checkpoints/<policy>/latest.pt`` and its own ``end`` row)."""
    from zoo.core.checkpoint import latest_path, trainable_policies

    metrics = os.path.join(run_dir, "metrics.jsonl")
    policies = trainable_policies(run_dir)
    if policies == [""]:
        ckpt = latest_path(run_dir)
        end = last_row(metrics)
        if end is not None and end.get("type") == "end" and os.path.exists(ckpt):
            return (f"the trainer wrote its final checkpoint ({ckpt}, policy version {end.get('policy_version')}, "
                    f"{_count(end.get('env_steps'))} env steps) and the end row of metrics.jsonl")
        if os.path.exists(ckpt):
            return (f"the trainer did not finish (no end row); the last checkpoint is {ckpt}, written "
                    f"{time.strftime('%H:%M:%S', time.localtime(os.path.getmtime(ckpt)))}")
        return f"no checkpoint was written; metrics so far are in {run_dir}"
    ends = _end_rows(metrics)
    parts = []
    for policy in policies:
        ckpt = latest_path(run_dir, policy)
        end = ends.get(policy)
        if end is not None and os.path.exists(ckpt):
            parts.append(f"policy {policy}: final checkpoint {ckpt} (policy version {end.get('policy_version')}, "
                         f"{_count(end.get('env_steps'))} env steps) and its end row")
        elif os.path.exists(ckpt):
            parts.append(f"policy {policy}: did not finish (no end row); last checkpoint {ckpt}, written "
                         f"{time.strftime('%H:%M:%S', time.localtime(os.path.getmtime(ckpt)))}")
        else:
            parts.append(f"policy {policy}: no checkpoint written")
    return "; ".join(parts) + f"; metrics are in {metrics}"


def stop_reasons(run_dir: str, policies: Iterable[str]) -> list[str]:
    """Why each of ``policies`` (endpoint tags, "" the implicit policy; in sorted order) ended
    early: the ``reason`` of its last ``end`` row in ``run_dir``'s ``metrics.jsonl`` where that
    row carries ``stop_when`` (docs/looking-at-runs.md, "Stopping early"); a policy whose last
    ``end`` row has none (its budget ended it) or that has no ``end`` row adds nothing.

    The controller reads it for the policies whose ``done`` message, which carries the same
    reason, did not arrive: nng drops what is still queued when a trainer exits at once, and
    the trainer writes its ``end`` row (unbuffered) before it sends ``done`` and exits."""
    ends = _end_rows(os.path.join(run_dir, "metrics.jsonl"))
    return [str(ends[p]["reason"]) for p in sorted(policies)
            if p in ends and ends[p].get("stop_when") and ends[p].get("reason")]


def _end_rows(path: str) -> dict[str, dict[str, Any]]:
    """Each policy's last ``end`` row in ``path`` (key ``""``: rows without ``policy``)."""
    ends: dict[str, dict[str, Any]] = {}
    try:
        with open(path, "rb") as f:
            for line in f:
                if b'"end"' not in line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and row.get("type") == "end":
                    ends[str(row.get("policy", ""))] = row
    except OSError:
        pass
    return ends
