"""The per-run directory shared by the byte transports, and reclaiming what killed runs left.

Every run has one directory ``<base>/zoo-<run_id>/`` (``base`` defaults to
:func:`tempfile.gettempdir`): nng's ``<stream>.ipc`` sockets, tcp's ``<stream>.tcp`` port
files and shm's ``<stream>.shm`` notification sockets live there. The process that creates
the run (the controller, ``create=True``) writes its pid to ``owner.pid``; a later run calls
:func:`reclaim_stale_run_dirs`, which removes every ``zoo-*`` directory whose owner pid is
no longer alive (a run killed with SIGKILL never reaches its clean-up).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile

log = logging.getLogger(__name__)
OWNER_FILE = "owner.pid"
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_`` (for file and segment names)."""
    return _SAFE.sub("_", text)


def run_dir(run_id: str, base_dir: str | None = None) -> str:
    """``<base_dir or tempdir>/zoo-<run_id>`` (the path nng has always used)."""
    return os.path.join(base_dir or tempfile.gettempdir(), f"zoo-{run_id}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a killed child not yet reaped counts as dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # no /proc (not Linux): trust kill(0)


def create_run_dir(run_id: str, base_dir: str | None = None) -> str:
    """Create the run directory (if needed) and record this process as its owner; return its path."""
    path = run_dir(run_id, base_dir)
    os.makedirs(path, exist_ok=True)
    owner = os.path.join(path, OWNER_FILE)
    if not os.path.exists(owner):
        tmp = f"{owner}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, owner)
    return path


def reclaim_stale_run_dirs(base_dir: str | None = None) -> list[str]:
    """Remove the ``zoo-*`` run directories whose ``owner.pid`` names a dead process.

    Directories without an owner file (being created right now, or made by hand) are left
    alone. Returns the removed paths.
    """
    base = base_dir or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        if not name.startswith("zoo-"):
            continue
        path = os.path.join(base, name)
        try:
            with open(os.path.join(path, OWNER_FILE)) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if not pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.info("reclaimed run directory %s of dead process %d", path, pid)
    return removed
