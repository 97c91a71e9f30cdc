"""The per-run directory shared by the byte transports, run locks, and reclaiming what
killed runs left.

Every run has one directory ``<base>/zoo-<run_id>/`` (``base`` defaults to
:func:`tempfile.gettempdir`): nng's ``<stream>.ipc`` sockets, shm's ``<stream>.shm``
notification sockets and the ``files`` resolver's ``keys/`` live there.

**Ownership is a lock, not a pid.** Every process of a run holds a shared advisory lock
(``fcntl.flock(LOCK_SH)``) on the run's lock file, ``<run dir>/owner.lock``, from its first
endpoint until it exits (:func:`hold_lock`): the controller from ``create=True``, workers
from their first endpoint. The kernel drops a process's lock when it dies, however it dies,
in whatever PID namespace it runs. A later run (:func:`reclaim_stale_run_dirs`) removes a
run directory only when it can take the lock *exclusively* (:func:`claim_lock`): then no
process of that run is alive. A pid proves nothing here: pids are reused, and two PID
namespaces (containers) that share ``/tmp`` or ``/dev/shm`` each have their own pid 4242.

Races: :func:`hold_lock` locks, then checks that the path still names the file it locked
(a reclaimer may have removed it in between) and starts again if not; a reclaimer removes
the run's resources *while* holding the exclusive lock, so a holder waits for it and then
creates a fresh lock file. Directories from Zoo versions before the lock (an ``owner.pid``
file and no ``owner.lock``) are reclaimed by the old rule: their owner pid is dead.
"""
from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import tempfile
import threading

from zoo.core.rundir import pid_alive  # noqa: F401  (re-exported: reclaim and shm use it)

log = logging.getLogger(__name__)
OWNER_FILE = "owner.pid"
"""The owner-pid file of run directories made before run locks (read by the legacy rule only)."""
LOCK_FILE = "owner.lock"
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def safe_name(text: str) -> str:
    """``text`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_`` (for file and segment names)."""
    return _SAFE.sub("_", text)


def run_dir(run_id: str, base_dir: str | None = None) -> str:
    """``<base_dir or tempdir>/zoo-<run_id>`` (the path nng has always used)."""
    return os.path.join(base_dir or tempfile.gettempdir(), f"zoo-{run_id}")


UNIX_PATH_LIMIT = 107
"""The longest Unix socket path in bytes (``sun_path`` holds 108, with its terminating NUL)."""
SOCKET_NAME_RESERVE = 24
"""Bytes a run's socket folder leaves for ``/<endpoint>.<suffix>``: an endpoint name of up to
19 characters (``inference-12``, ``sample-hiders-3``) plus ``.ipc``/``.shm``. A longer name
still fails alone, when its socket is made (nng: :class:`~zoo.core.transport.TransportError`
naming the path)."""


def check_socket_dir(run_id: str, base_dir: str | None = None) -> str:
    """The run's socket folder (:func:`run_dir`), checked before any worker starts: every
    ``<folder>/<endpoint>.ipc`` path must fit the kernel's 107-byte Unix socket limit, with
    :data:`SOCKET_NAME_RESERVE` bytes kept for the endpoint's file name.

    Raises:
        zoo.core.transport.TransportError: the folder is too long, naming it, its length
            and the fix (a shorter ``TMPDIR``); a long ``TMPDIR`` otherwise surfaced as
            nng's bare ``AddressInvalid`` in the controller.
    """
    from zoo.core.transport import TransportError

    path = run_dir(run_id, base_dir)
    size = len(path.encode())
    if size + SOCKET_NAME_RESERVE > UNIX_PATH_LIMIT:
        where = "base_dir" if base_dir else "TMPDIR (the temporary folder)"
        room = UNIX_PATH_LIMIT - SOCKET_NAME_RESERVE - len(os.path.basename(path)) - 1
        raise TransportError(
            f"the run's socket folder {path!r} is {size} bytes long: with its endpoint names (up to "
            f"{SOCKET_NAME_RESERVE} bytes) it passes the {UNIX_PATH_LIMIT}-byte limit of a Unix socket path; "
            f"set {where} to a folder of at most {room} bytes, e.g. TMPDIR=/tmp")
    return path


def _same_file(fd: int, path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    fst = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (fst.st_ino, fst.st_dev)


_held: dict[str, int] = {}  # lock path -> fd holding LOCK_SH, for this process's lifetime
_held_mutex = threading.Lock()


def hold_lock(path: str) -> None:
    """Hold a shared lock on ``path`` (created, with its folder, if missing) until this process
    exits or calls :func:`release_lock`; idempotent and cheap when already held.

    Blocks only while a reclaimer holds the lock exclusively (it is removing a dead run's
    resources, a few milliseconds). The descriptor is close-on-exec and not inherited by
    spawned processes: each process of a run holds its own lock.

    Raises:
        OSError: the folder or the file cannot be created.
    """
    with _held_mutex:
        fd = _held.get(path)
        if fd is not None:
            if _same_file(fd, path):
                return
            os.close(fd)  # the file was removed (the run was cleaned up): lock the new one
            del _held[path]
        while True:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_SH)
            if _same_file(fd, path):
                _held[path] = fd
                return
            os.close(fd)  # a reclaimer removed it between open and flock: start again


def release_lock(path: str) -> None:
    """Drop this process's lock on ``path`` if it holds one (the run's clean-up calls it)."""
    with _held_mutex:
        fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def claim_lock(path: str) -> int | bool | None:
    """Try to take ``path``'s lock exclusively, without waiting.

    Returns:
        a file descriptor holding the exclusive lock (no process holds the run: the caller
        removes its resources, then the lock file, then closes the descriptor); False when
        a live process holds it (or it was replaced meanwhile); None when there is no lock
        file.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        return False  # cannot even open it (another user's run): never reclaim it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    if not _same_file(fd, path):
        os.close(fd)
        return False
    return fd


def leave_run(lock_paths: list[str], remove) -> bool:
    """This process leaves a run whose controller is gone: drop its locks on ``lock_paths``,
    then call ``remove()`` only if no other process of the run holds any of them.

    Whoever leaves last removes the run's resources (segments, run directory): a process that
    removed them while a fellow worker still ran would see that worker re-create the lock file
    or the directory with its next endpoint, and leave them behind. ``remove()`` runs while
    this process holds every lock exclusively (:func:`claim_lock`), so no worker can start
    holding the run in between.

    Returns:
        True when ``remove()`` ran (this process was the last one), else False.
    """
    for path in lock_paths:
        release_lock(path)
    claimed: list[int] = []
    try:
        for path in lock_paths:
            fd = claim_lock(path)
            if fd is False:
                return False  # a live process of the run holds it: it removes when it leaves
            if fd is not None:
                claimed.append(fd)
        remove()
        return True
    finally:
        for fd in claimed:
            os.close(fd)


def lock_path(run_id: str, base_dir: str | None = None) -> str:
    """``<run dir>/owner.lock``."""
    return os.path.join(run_dir(run_id, base_dir), LOCK_FILE)


def create_run_dir(run_id: str, base_dir: str | None = None) -> str:
    """Create the run directory (if needed) and hold its lock (:func:`hold_lock`); return its path."""
    path = run_dir(run_id, base_dir)
    hold_lock(os.path.join(path, LOCK_FILE))
    return path


def remove_run_dir(run_id: str, base_dir: str | None = None) -> None:
    """Remove the run directory and drop this process's lock on it (a transport's ``cleanup()``)."""
    path = run_dir(run_id, base_dir)
    shutil.rmtree(path, ignore_errors=True)
    release_lock(os.path.join(path, LOCK_FILE))


def reclaim_stale_run_dirs(base_dir: str | None = None) -> list[str]:
    """Remove the ``zoo-*`` run directories that no live process holds.

    A directory with an ``owner.lock`` is removed only while this process holds that lock
    exclusively (:func:`claim_lock`); one with only an ``owner.pid`` (made before run locks)
    when that pid is dead; one with neither (being created right now, or made by hand) is
    left alone. Returns the removed paths.
    """
    base = base_dir or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        if not name.startswith("zoo-"):
            continue
        path = os.path.join(base, name)
        claimed = claim_lock(os.path.join(path, LOCK_FILE))
        if claimed is False:
            continue
        if claimed is None:
            if not _legacy_owner_dead(path):
                continue
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                os.close(claimed)
        removed.append(path)
        log.info("reclaimed run directory %s (no live process holds it)", path)
    return removed


def _legacy_owner_dead(path: str) -> bool:
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return False
    return not pid_alive(pid)


def default_resolver(base_dir: str | None = None):
    """The resolver a transport uses when it is given none: the built-in ``files`` resolver
    rooted at ``base_dir``, whose keys live in this run directory (``keys/``)."""
    from zoo.plugins.resolvers.files.resolver import FilesResolver

    return FilesResolver(root=base_dir)
