"""The ``local`` launcher: each worker is a ``multiprocessing`` process (spawn start method).

:meth:`LocalHandle.stop` sends SIGTERM (the worker sets ``ctx.stop`` and leaves its loop),
:meth:`LocalHandle.kill` SIGKILL. Workers are not daemonic (a daemonic process may not
start children) and watch the controller themselves: they exit when it dies, however it
died (:func:`zoo.core.workers.base.worker_main`).
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.util as mp_util
import signal
import socket
import threading
from typing import Any

from zoo.core.launcher import Launcher, LaunchError, WorkerHandle
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
        except KeyboardInterrupt:  # Ctrl-C while it started: nobody holds its handle, so it must not outlive this
            if proc.pid is not None:
                proc.kill()
                proc.join(5.0)
            raise
        return LocalHandle(ctx.role, ctx.index, proc)


@contextlib.contextmanager
def sigint_ignored_by_children():
    """Processes started inside the block hold SIGINT from their first instruction until
    :func:`worker_main` ignores it; a Ctrl-C meanwhile stops this process only once the start
    is complete.

    Ctrl-C reaches every process of the terminal's foreground group: a worker still
    importing its modules (before :func:`worker_main` ignores SIGINT itself) would print a
    ``KeyboardInterrupt`` traceback. A blocked signal stays blocked across ``fork`` and
    ``exec``, so SIGINT is blocked in this thread for the ``fork``/``exec`` call itself
    (``multiprocessing.util.spawnv_passfds``, which the spawn start method calls); the child
    keeps a Ctrl-C pending until :func:`worker_main` sets SIGINT to ignored (which drops it)
    and unblocks it, as multiprocessing's resource tracker does. This process only blocks it:
    a Ctrl-C in that window waits, or goes to another of its threads, and is recorded (it used
    to set SIGINT to ignored there too, and a Ctrl-C in the window was discarded by the
    kernel: under load ``zoo train`` then ran on to its budget). The rest of the block only
    records a Ctrl-C (raising in the middle of ``Process.start`` would leave the child without
    its start-up data: it would die with a traceback) and hands it to the previous handler at
    the end. Main thread only (elsewhere signals cannot be set): then nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    record = lambda signum, frame: caught.append(signum)  # noqa: E731
    real = mp_util.spawnv_passfds

    def spawn_holding_sigint(path, args, passfds):
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return real(path, args, passfds)
        finally:
            if signal.SIGINT not in blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    previous = signal.signal(signal.SIGINT, record)
    mp_util.spawnv_passfds = spawn_holding_sigint
    try:
        yield
    finally:
        mp_util.spawnv_passfds = real
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, None)  # Python's default handler: KeyboardInterrupt
        elif caught and previous == signal.SIG_DFL:
            raise KeyboardInterrupt
