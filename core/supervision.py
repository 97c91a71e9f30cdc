"""Supervision: the worker table of one run, started, watched and stopped through a launcher.

:class:`Supervisor` holds one :class:`~zoo.core.launcher.WorkerHandle` per ``(role, index)``
of the graph, records the ``error`` control messages (tracebacks) of each worker, and
decides when the run has failed: a worker exited with a non-zero code or reported an
error, or a worker other than the trainer exited before the run ended.

Stopping (:meth:`Supervisor.stop_all`): every worker is asked to stop (SIGTERM for local
processes), waited for up to ``grace_s`` seconds, and the ones still running are killed.
"""
from __future__ import annotations

from typing import Any, Callable

from zoo.core.launcher import Launcher, WorkerHandle

STOP_GRACE_S = 5.0
"""Seconds :meth:`Supervisor.stop_all` waits for workers asked to stop before killing them."""


class WorkerCrashed(RuntimeError):
    """A worker failed; ``detail`` holds its traceback or what is known of its end."""

    def __init__(self, role: str, index: int, detail: str) -> None:
        self.role, self.index, self.detail = role, index, detail
        super().__init__(f"{role} worker {index} crashed:\n{detail}")


class Supervisor:
    """The workers of one run (see the module doc).

    ``make_context(role, index, attempt)`` builds the
    :class:`~zoo.core.workers.base.WorkerContext` a worker is started from.
    """

    def __init__(self, launcher: Launcher, make_context: Callable[[str, int, int], Any]) -> None:
        self.launcher, self.make_context = launcher, make_context
        self.handles: dict[tuple[str, int], WorkerHandle] = {}
        self.errors: dict[tuple[str, int], str] = {}
        self.stopped = False

    def start_all(self, graph: list[tuple[str, int]]) -> None:
        """Start one worker per ``(role, index)`` of ``graph``, in that order."""
        for role, index in graph:
            self.handles[(role, index)] = self.launcher.start(self.make_context(role, index, 0))

    def on_message(self, meta: dict[str, Any]) -> None:
        """Take note of one control message (an ``error`` keeps its traceback)."""
        if meta.get("type") == "error":
            self.errors[(meta["role"], meta["index"])] = meta.get("traceback", "")

    def trainer_finished(self) -> bool:
        """The trainer exited with code 0: it reached the budget (its ``done`` control message
        can be lost: nng drops what is still queued when the sender closes at once)."""
        handle = self.handles.get(("trainer", 0))
        return handle is not None and handle.exitcode() == 0 and ("trainer", 0) not in self.errors

    def crashed(self, poll: Callable[[float], Any] = lambda timeout: None) -> WorkerCrashed | None:
        """The first failed worker, or None. ``poll(timeout)`` receives control messages: called
        once when a worker died without its ``error`` message yet (it may be in flight)."""
        for (role, index), handle in self.handles.items():
            code = handle.exitcode()
            if code not in (None, 0) or (role, index) in self.errors:
                if (role, index) not in self.errors:
                    poll(0.5)
                detail = self.errors.get((role, index)) or f"exit code {code} (no traceback: killed by a signal?)"
                return WorkerCrashed(role, index, detail)
            if code == 0 and role != "trainer":
                return WorkerCrashed(role, index, "exited before the run ended")
        return None

    def stop_all(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ask every worker to stop, wait up to ``grace_s`` s, kill the rest (idempotent)."""
        if self.stopped:
            return
        self.stopped = True
        handles = list(self.handles.values())
        for handle in handles:
            handle.stop()
        _wait_all(handles, grace_s)
        for handle in handles:
            if handle.alive():
                handle.kill()
        _wait_all(handles, 1.0)
        self.launcher.close()


def _wait_all(handles: list[WorkerHandle], timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    for handle in handles:
        handle.wait(max(0.0, deadline - time.monotonic()))
