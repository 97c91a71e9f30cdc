"""The ``local`` launcher: each worker is a ``multiprocessing`` process (spawn start method).

:meth:`LocalHandle.stop` sends SIGTERM (the worker sets ``ctx.stop`` and leaves its loop),
:meth:`LocalHandle.kill` SIGKILL. Workers are not daemonic (a daemonic process may not
start children) and watch the controller themselves: they exit when it dies, however it
died (:func:`zoo.core.workers.base.worker_main`).
"""
from __future__ import annotations

import multiprocessing as mp
import socket
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
            proc.start()
        except OSError as exc:  # e.g. out of processes or memory
            raise LaunchError(f"cannot start {ctx.role} worker {ctx.index}: {exc}") from exc
        return LocalHandle(ctx.role, ctx.index, proc)
