"""The ``local`` launcher: each worker is a ``multiprocessing`` process (spawn start method).

:meth:`LocalHandle.stop` sends SIGTERM (the worker sets ``ctx.stop`` and leaves its loop),
:meth:`LocalHandle.kill` SIGKILL. Workers are not daemonic (a daemonic process may not
start children) and watch the controller themselves: they exit when it dies, however it
died (:func:`zoo.core.workers.base.worker_main`).
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import socket
import threading
from typing import Any

from zoo.core.launcher import LaunchError, Launcher, WorkerHandle
from zoo.core.workers.base import worker_main


class LocalHandle(WorkerHandle):
    """A spawned :class:`multiprocessing.Process`."""

    def __init__(self, role: str, index: int, proc: Any) -> None:
        self.role, self.index, self.proc = role, index, proc
        self.pid = proc.pid
        self.host = socket.gethostname()

    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def stop(self) -> None:
        if self.proc.exitcode is None:
            self.proc.terminate()

    def kill(self) -> None:
        if self.proc.exitcode is None:
            self.proc.kill()

    def wait(self, timeout: float) -> int | None:
        self.proc.join(max(0.0, timeout))
        return self.proc.exitcode


class LocalLauncher(Launcher):
    """Starts workers as spawned processes of the controller's process."""

    name = "local"

    def __init__(self, cfg: Any = None) -> None:
        self.mp = mp.get_context("spawn")

    def start(self, ctx: Any) -> LocalHandle:
        proc = self.mp.Process(target=worker_main, args=(ctx,), name=f"zoo-{ctx.role}-{ctx.index}", daemon=False)
        try:
            with sigint_ignored_by_children():
                proc.start()
        except OSError as exc:  # e.g. out of processes or memory
            raise LaunchError(f"cannot start {ctx.role} worker {ctx.index}: {exc}") from exc
        return LocalHandle(ctx.role, ctx.index, proc)


@contextlib.contextmanager
def sigint_ignored_by_children():
    """Processes started inside the block ignore SIGINT from their first instruction.

    Ctrl-C reaches every process of the terminal's foreground group: a worker still
    importing its modules (before :func:`worker_main` ignores SIGINT itself) would die with
    a ``KeyboardInterrupt`` traceback. A disposition of ``SIG_IGN`` survives ``exec`` and
    Python keeps an ignored SIGINT ignored, so the child is started while SIGINT is ignored
    here; it is also blocked, so a Ctrl-C meanwhile stays pending (Linux keeps blocked
    signals even when ignored) and reaches this process's own handler when the block ends.
    The child unblocks it once it ignores SIGINT itself. Main thread only (elsewhere signals
    cannot be set): then nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
