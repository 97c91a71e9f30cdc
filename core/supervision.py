"""Supervision: the workers of one run, started, watched, restarted and stopped through a launcher.

:class:`Supervisor` keeps one :class:`Worker` record per ``(role, index)`` of the graph: its
:class:`~zoo.core.launcher.WorkerHandle`, its attempt (0, then 1, 2... after restarts), when
it last reported on the control stream, whether it is inside a declared long operation
(``busy``), and the traceback of its ``error`` message. Control messages of an older
attempt are ignored.

A worker has **failed** (:meth:`Supervisor.failure`) when

- its process ended with a non-zero code, or reported an ``error`` (its traceback is kept);
- it ended with code 0 before the run ended (any kind but the one that leads the run, the
  trainer, whose 0 is the end);
- it sent nothing within ``supervision.start_timeout_s`` of its start, or is still in its
  ``start-up`` after that long;
- it has been busy in one operation longer than ``supervision.busy_timeout_s`` (if > 0);
- it has sent nothing for ``supervision.heartbeat_timeout_s`` (hung: the main loop reports
  at least every second, a busy worker's background thread too; see
  :mod:`zoo.core.workers.base`).

What a failure leads to is the worker's kind's restart policy (:mod:`zoo.core.kinds`). A
failed worker of a ``restartable`` kind (actors, policy workers) is killed (if still running)
and started again after a backoff (``restart_backoff_s``, doubled for each further restart of
that worker, at most ``restart_backoff_max_s``), up to ``supervision.max_restarts`` times per
worker; one of a ``from-checkpoint`` kind (the trainer) up to ``supervision.trainer_restarts``
times, continuing from the run's last checkpoint; one of a ``never`` kind not at all. Each
restart is returned to the caller as a :class:`Restart` (the controller prints it, writes a
``restart`` row to ``metrics.jsonl`` and tells the live display). One failure more stops the
run: :meth:`Supervisor.check` raises :class:`WorkerCrashed`; so does the failure of a worker
whose handle says ``restartable`` is False (the ``ray`` launcher: its node died, and with it
the placement its streams were chosen for).

Stopping (:meth:`Supervisor.stop_all`): every worker is asked to stop (SIGTERM for local
processes). Workers of every kind but the leading one (actors, policy workers, plugins'
kinds) get :data:`STOP_GRACE_S` seconds, then are killed. Each trainer (the leading kind)
finishes its update and writes its checkpoint and ``end`` row however long that
takes, up to ``supervision.stop_timeout_s``; it is killed sooner only when it stops
reporting for ``heartbeat_timeout_s`` (hung) — its busy heartbeats show it is still working.
A second Ctrl-C during that wait (``now`` of :meth:`Supervisor.stop_all`) kills every worker
at once: the update under way is abandoned (:mod:`zoo.core.stopping`).
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from zoo.core.launcher import Launcher, WorkerHandle

STOP_GRACE_S = 5.0
"""Seconds workers asked to stop get before they are killed (the leading kind's excepted)."""


class WorkerCrashed(RuntimeError):
    """A worker failed and may not be restarted; ``detail`` holds its traceback or what is
    known of its end, ``reason`` one line."""

    def __init__(self, role: str, index: int, detail: str, reason: str = "") -> None:
        self.role, self.index, self.detail, self.reason = role, index, detail, reason or "failed"
        super().__init__(f"{role} worker {index} crashed:\n{detail}")


@dataclass
class Restart:
    """One restart decided by :meth:`Supervisor.check`: ``restarts`` is that worker's count so
    far (this one included), ``attempt`` the number of the process to come, ``delay_s`` the
    backoff before it starts, ``detail`` the traceback (or "")."""

    role: str
    index: int
    reason: str
    detail: str
    restarts: int
    attempt: int
    delay_s: float


@dataclass
class Worker:
    """What the supervisor knows of one ``(role, index)`` (times: the supervisor's clock, s)."""

    role: str
    index: int
    handle: WorkerHandle | None = None
    attempt: int = 0
    restarts: int = 0
    started: float = 0.0
    last_seen: float | None = None
    busy: str | None = None
    busy_s: float = 0.0
    error: str | None = None
    restart_at: float | None = None


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    """The workers of one run (see the module doc).

    ``make_context(role, index, attempt)`` builds the
    :class:`~zoo.core.workers.base.WorkerContext` a worker is started from; ``sv`` is the
    run's :class:`~zoo.core.config.SupervisionConfig`; ``clock`` gives seconds (monotonic);
    ``kinds``: the run's worker kinds (:mod:`zoo.core.kinds`; default the built-in ones), whose
    restart policies and lead apply to their workers (a role of no kind is never restarted).
    """

    def __init__(self, launcher: Launcher, make_context: Callable[[str, int, int], Any], sv: Any = None,
                 clock: Callable[[], float] = time.monotonic, kinds: Iterable[Any] | None = None,
                 finishers: Iterable[tuple[str, int]] | None = None) -> None:
        from zoo.core.config import SupervisionConfig
        from zoo.core.kinds import by_name, lead_kind

        if kinds is None:
            from zoo.core.workers.kinds import builtin_kinds

            kinds = builtin_kinds()
        self.launcher, self.make_context, self.clock = launcher, make_context, clock
        self.sv = sv if sv is not None else SupervisionConfig()
        self.kinds = by_name(kinds)
        self.lead = (lead_kind(self.kinds.values()).name, 0)
        """``(kind, 0)`` of the worker whose exit with 0 ends the run (trainer 0)."""
        self.finishers = list(finishers) if finishers is not None else [self.lead]
        """The workers that must all exit with 0 for the run to be finished: trainer 0, or with
        named policies every trainable policy's rank 0 (docs/policies.md)."""
        self.workers: dict[tuple[str, int], Worker] = {}
        self.stopped = False

    @property
    def handles(self) -> dict[tuple[str, int], WorkerHandle]:
        return {key: w.handle for key, w in self.workers.items() if w.handle is not None}

    def _launch(self, w: Worker) -> None:
        w.handle = self.launcher.start(self.make_context(w.role, w.index, w.attempt))
        w.started, w.last_seen, w.busy, w.busy_s, w.error, w.restart_at = self.clock(), None, None, 0.0, None, None

    def start_all(self, graph: list[tuple[str, int]]) -> None:
        """Start one worker per ``(role, index)`` of ``graph``, in that order."""
        for role, index in graph:
            w = self.workers[(role, index)] = Worker(role, index)
            self._launch(w)

    def on_message(self, meta: dict[str, Any]) -> None:
        """Take note of one control message of the worker's current attempt."""
        # a message without a role or index names no worker ("" and -1 are no worker's)
        w = self.workers.get((meta.get("role", ""), meta.get("index", -1)))
        if w is None or meta.get("attempt", 0) != w.attempt or w.restart_at is not None:
            return
        w.last_seen = self.clock()
        kind = meta.get("type")
        if kind == "heartbeat":
            w.busy, w.busy_s = meta.get("busy"), float(meta.get("busy_s") or 0.0)
        elif kind == "error":
            w.error = meta.get("traceback", "")
        else:  # any other message comes from the main loop: not busy
            w.busy = None

    def failure(self, w: Worker, now: float) -> tuple[str, str] | None:
        """``(reason, detail)`` when worker ``w`` has failed (see the module doc), else None.
        What the launcher knows of where or why it ended (:meth:`WorkerHandle.end_note`, e.g. its
        Ray node) is added to the reason in parentheses."""
        found = self._failure(w, now)
        if found is None or w.handle is None:
            return found
        note = getattr(w.handle, "end_note", lambda: "")()
        return found if not note else (f"{found[0]} ({note})", found[1])

    def _failure(self, w: Worker, now: float) -> tuple[str, str] | None:
        sv = self.sv
        if w.error is not None:  # whether or not its process has ended yet
            return "raised an exception", w.error
        code = w.handle.exitcode() if w.handle is not None else None
        if code is not None:
            if code == 0:
                return None if self.leads(w) else ("exited before the run ended", "")
            return _exit_reason(code), "(no traceback: killed by a signal?)"
        if w.last_seen is None or w.busy == "start-up":
            if now - w.started > sv.start_timeout_s:
                return (f"did not finish starting within supervision.start_timeout_s={sv.start_timeout_s:g} s"
                        + ("" if w.last_seen is not None else " (no message at all)"), "")
            return None
        if w.busy is not None and sv.busy_timeout_s > 0 and w.busy_s > sv.busy_timeout_s:
            return (f"busy in {w.busy!r} for {w.busy_s:.0f} s, over supervision.busy_timeout_s="
                    f"{sv.busy_timeout_s:g} s", "")
        if now - w.last_seen > sv.heartbeat_timeout_s:
            return (f"no heartbeat for {now - w.last_seen:.0f} s (supervision.heartbeat_timeout_s="
                    f"{sv.heartbeat_timeout_s:g} s): hung", "")
        return None

    def leads(self, w: Worker) -> bool:
        """Whether ``w`` is of the kind that leads the run (the trainers)."""
        kind = self.kinds.get(w.role)
        return kind is not None and kind.lead

    def allowed(self, w: Worker) -> int:
        """How many restarts worker ``w`` may have in all (its kind's restart policy)."""
        kind = self.kinds.get(w.role)
        return 0 if kind is None else kind.restarts_allowed(self.sv)

    def check(self, poll: Callable[[float], Any] = lambda timeout: None) -> list[Restart]:
        """Find failed workers, restart those allowed to, start restarts whose backoff is over.

        ``poll(timeout)`` receives control messages (through :meth:`on_message`): called once
        when a worker died without its ``error`` message yet (it may still be in flight).

        Returns:
            the restarts decided now (each to be reported), in graph order.

        Raises:
            WorkerCrashed: a worker failed and has no restart left.
        """
        out: list[Restart] = []
        now = self.clock()
        for w in self.workers.values():
            if w.restart_at is not None:
                if now >= w.restart_at:
                    w.attempt += 1
                    self._launch(w)
                continue
            failed = self.failure(w, now)
            if failed is None:
                continue
            code = w.handle.exitcode() if w.handle is not None else None
            if code not in (None, 0) and w.error is None:
                poll(0.5)
                failed = self.failure(w, self.clock()) or failed
            reason, detail = failed
            restartable = getattr(w.handle, "restartable", True)  # False: e.g. the worker's Ray node died
            if w.restarts >= self.allowed(w) or not restartable:
                limit = (f" (restarted {w.restarts} times already: the limit)"
                         if self.allowed(w) and restartable else "")
                raise WorkerCrashed(w.role, w.index, detail or reason, reason + limit)
            if w.handle is not None and w.handle.alive():
                w.handle.kill()
                w.handle.wait(5.0)
            w.restarts += 1
            delay = min(self.sv.restart_backoff_s * 2 ** (w.restarts - 1), self.sv.restart_backoff_max_s)
            w.restart_at = now + delay
            out.append(Restart(w.role, w.index, reason, detail, w.restarts, w.attempt + 1, delay))
        return out

    def trainer_finished(self) -> bool:
        """The leading worker (trainer 0; named policies: every trainable policy's rank 0,
        :attr:`finishers`) exited with code 0: it reached the budget (its ``done``
        control message can be lost: nng drops what is still queued when the sender closes at once)."""
        for key in self.finishers:
            w = self.workers.get(key)
            if not (w is not None and w.handle is not None and w.restart_at is None and w.handle.exitcode() == 0
                    and w.error is None):
                return False
        return True

    def crashed(self, poll: Callable[[float], Any] = lambda timeout: None) -> WorkerCrashed | None:
        """:meth:`check`, returning the crash instead of raising it (restarts are not reported)."""
        try:
            self.check(poll)
        except WorkerCrashed as crash:
            return crash
        return None

    def stop_all(self, poll: Callable[[float], Any] = lambda timeout: None,
                 waiting: Callable[[float], None] = lambda limit_s: None,
                 now: Callable[[], bool] | None = None) -> bool:
        """Stop every worker as the module doc says (idempotent). ``poll(timeout)`` keeps control
        messages flowing while the trainer finishes; ``waiting(limit_s)`` is called once when the
        trainer is still running after :data:`STOP_GRACE_S` (to tell the user why). Once ``now()``
        is True (a second Ctrl-C) every worker still running is killed at once: the trainer's
        update and checkpoint under way are abandoned. Returns whether that happened."""
        if self.stopped:
            return False
        self.stopped = True
        stop_now = now or (lambda: False)
        # (worker, its handle): nothing starts a worker once stopped, so the handles stay these
        live = [(w, w.handle) for w in self.workers.values() if w.handle is not None]
        for _, h in live:
            h.stop()
        others = [h for w, h in live if not self.leads(w)]
        trainers = [(w, h) for w, h in live if self.leads(w)]
        start = self.clock()
        _wait_all(others, STOP_GRACE_S, now)
        for h in others:
            h.kill()
        told = False
        while not stop_now() and any(h.alive() for _, h in trainers):
            t = self.clock()
            for w, h in trainers:
                silent = t - (w.last_seen if w.last_seen is not None else w.started)
                if h.alive() and (t - start > self.sv.stop_timeout_s or silent > self.sv.heartbeat_timeout_s):
                    h.kill()
            if not told and t - start > STOP_GRACE_S:
                told = True
                waiting(self.sv.stop_timeout_s)
            poll(0.2)
            for _, h in trainers:
                h.wait(0.05 / len(trainers))
        abandoned = stop_now() and any(h.alive() for _, h in live)
        for _, h in live if abandoned else ():
            if h.alive():
                h.kill()
        _wait_all([h for _, h in live], 2.0)
        for _, h in live:  # nothing outlives the run
            if h.alive():
                h.kill()
        self.launcher.close()
        return abandoned


def _wait_all(handles: list[WorkerHandle], timeout: float, now: Callable[[], bool] | None = None) -> None:
    """Wait up to ``timeout`` s for every handle to end; with ``now``, in 0.1-s slices, and no
    longer once ``now()`` is True."""
    deadline = time.monotonic() + timeout
    for handle in handles:
        while (left := deadline - time.monotonic()) > 0 and not (now is not None and now()):
            if handle.wait(left if now is None else min(0.1, left)) is not None or now is None:
                break
