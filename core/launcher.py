"""The launcher interface: how the controller starts, watches and stops worker processes.

A launcher plugin (hook ``register_launchers``) registers ``factory(cfg) -> Launcher``;
``zoo train ... --launcher NAME`` (config key ``launcher``, default ``local``) picks it.
The controller talks to workers only through this interface and the control stream, so
a launcher for another engine (a cluster scheduler, Ray) needs no controller change.

What a launcher must do:

- :meth:`Launcher.start` starts one worker process from its
  :class:`~zoo.core.workers.base.WorkerContext` (picklable) and returns a
  :class:`WorkerHandle` at once, without waiting for the worker to be ready. The process
  must run :func:`zoo.core.workers.base.worker_main` with that context, in a fresh
  interpreter (spawn, never fork: nng aborts after ``fork``), with the same Python
  environment (Zoo and its plugins importable).
- The same ``(role, index)`` may be started again after its previous process ended
  (a restart by the supervisor, :mod:`zoo.core.supervision`); ``ctx.attempt`` tells the
  attempts apart.
- :meth:`Launcher.host_of` says, before anything starts, on which host a worker will run
  (default: this host); handles' ``host`` must agree with it.
- :meth:`Launcher.describe` (optional) says what the launcher chose, for ``graph.json``.
- :meth:`Launcher.close` is called once, after every handle reported an exit code (or was
  killed); it releases what the launcher itself holds (connections, temporary files).

What a handle must do (all methods are called from the controller's thread only, and
must return promptly: none of them may block longer than its ``timeout``):

- :meth:`WorkerHandle.exitcode`: None while the process runs; afterwards its exit status:
  0 (finished or stopped cleanly), a positive code (1: an exception, reported with its
  traceback on the control stream), or ``-N`` when signal ``N`` ended it (as
  :attr:`multiprocessing.Process.exitcode`).
- :meth:`WorkerHandle.stop`: ask the worker to stop; the local launcher sends SIGTERM, which
  the worker turns into ``ctx.stop = True`` (it finishes what it is doing, closes its
  endpoints and exits 0). Idempotent; a no-op once the process ended.
- :meth:`WorkerHandle.kill`: end it at once (SIGKILL). Idempotent.
- :meth:`WorkerHandle.wait`: wait up to ``timeout`` seconds for the exit; returns
  :meth:`exitcode`.
- ``pid`` (int or None where the engine has none) and ``host`` (host name) say where the
  worker runs, for messages, ``status.json`` and the live display; :meth:`WorkerHandle.end_note`
  may add what the launcher knows of the end (a lost node), which failures then name.

Workers always exit by themselves when the controller is gone (SIGKILL included): see
:func:`zoo.core.workers.base.worker_main`. A launcher on another engine must keep that true
(the local launcher's processes watch their parent).

``zoo.core.testing.launcher_checks`` holds the conformance checks every launcher passes.
"""
from __future__ import annotations

import abc
import socket
from typing import Any


class WorkerHandle(abc.ABC):
    """One started worker process (see the module doc for the contract)."""

    role: str
    index: int
    pid: int | None = None
    host: str = ""

    @abc.abstractmethod
    def exitcode(self) -> int | None:
        """None while running; else 0, a positive exit status, or ``-signal``."""

    def alive(self) -> bool:
        """True while the process runs."""
        return self.exitcode() is None

    @abc.abstractmethod
    def stop(self) -> None:
        """Ask the worker to stop cleanly (SIGTERM for local processes); idempotent."""

    @abc.abstractmethod
    def kill(self) -> None:
        """End the worker at once (SIGKILL for local processes); idempotent."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the process to end; returns :meth:`exitcode`."""

    def end_note(self) -> str:
        """What the launcher knows of where or why the worker ended, added to its failure's
        reason (e.g. ``"Ray node 10.0.0.7/1a2b3c4d5e6f died"``); ``""`` when nothing."""
        return ""

    def describe(self) -> str:
        """``"pid 1234 on host"`` (or ``"on host"`` without a pid), for messages."""
        where = f"on {self.host}" if self.host else ""
        return f"pid {self.pid} {where}".strip() if self.pid is not None else where


class Launcher(abc.ABC):
    """Starts the worker processes of one run (see the module doc for the contract)."""

    name: str = ""

    @abc.abstractmethod
    def start(self, ctx: Any) -> WorkerHandle:
        """Start one worker running ``worker_main(ctx)``; returns without waiting for it.

        Raises:
            LaunchError: the process could not be started (the message says why).
        """

    def host_of(self, role: str, index: int) -> str:
        """The host worker ``(role, index)`` will run on, known before any worker starts: the
        controller picks each stream's transport from it (:mod:`zoo.core.placement`; ``auto``
        is shm within a host). Default: this host (``socket.gethostname()``)."""
        return socket.gethostname()

    def controller_host(self) -> str:
        """The host of the controller (this process) in the same terms as :meth:`host_of`.
        Default: this host (``socket.gethostname()``)."""
        return socket.gethostname()

    def describe(self) -> dict[str, Any]:
        """What the launcher chose for this run, JSON-serialisable: ``graph.json``'s ``launcher``
        entry adds it to the launcher's name (the ``ray`` launcher: resources, GPU shares and
        GPU ids per worker). Default: nothing more."""
        return {}

    def close(self) -> None:  # noqa: B027  (optional: a launcher with nothing of its own to release keeps this)
        """Release the launcher's own resources (after every worker ended)."""


class LaunchError(RuntimeError):
    """A launcher could not start a worker."""


def launcher_for(registry: Any, cfg: Any) -> Launcher:
    """The launcher ``cfg.launcher`` names, built from its registered factory.

    Raises:
        UnknownComponentError: no launcher of that name (closest names suggested).
    """
    return registry.get("launcher", cfg.launcher).load()(cfg)
