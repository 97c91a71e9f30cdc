"""What every worker process shares: start-up, stop handling, heartbeats, the control stream.

Workers are started by the run's launcher (:mod:`zoo.core.launcher`) in a fresh interpreter
(spawn: nng aborts after ``fork``), rebuild the plugin registry themselves, ignore SIGINT and
SIGHUP (the controller owns Ctrl-C and the terminal) and stop when they receive SIGTERM:
``ctx.stop`` becomes True and the role's loop ends at its next check. An exception in a
worker is sent to the controller as an ``error`` message with the traceback, and the
process exits with status 1.

Heartbeats (what the supervisor watches, :mod:`zoo.core.supervision`):

- the role's main loop calls :meth:`WorkerContext.heartbeat` on every pass; it sends a
  ``heartbeat`` control message at most once a second. A loop stuck somewhere (a hung
  ``env.step``, a deadlock) stops sending, and the supervisor fails the worker after
  ``supervision.heartbeat_timeout_s``;
- around a long operation that is not stuck (a trainer update, a checkpoint) the role says
  so with ``with ctx.busy("update"):``; a background thread then sends a heartbeat every
  second carrying ``busy`` (the operation's name) and ``busy_s`` (seconds in it). These prove
  only that the process lives; the supervisor bounds them by ``supervision.busy_timeout_s``
  (0 = no limit). Start-up (imports, building envs and networks) counts as the operation
  ``start-up`` until the first :meth:`heartbeat`, bounded by ``supervision.start_timeout_s``.

The controller gone: every worker exits by itself, however the controller died (SIGKILL
included). On Linux the kernel sends SIGTERM when the parent dies (``PR_SET_PDEATHSIG``);
the background thread also checks every 0.25 s that the controller's pid is still its parent
(or, for workers not started as its children, still alive on this host). An orphaned worker
stops like on SIGTERM; one that is not gone :data:`ORPHAN_GRACE_S` seconds later (hung), or
``supervision.stop_timeout_s`` later when busy (a trainer finishing its update), exits at once.
Either way it leaves the run through its transports: the last process of the run to leave
removes the run's transport resources (shared-memory segments, socket files), which the dead
controller can no longer do.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from zoo.core.env import EnvSpec
from zoo.core.rundir import pid_alive

log = logging.getLogger("zoo.worker")
_HOST = socket.gethostname()

HEARTBEAT_S = 1.0
"""A worker reports at least this often while healthy (main loop, or the busy thread)."""
PULSE_S = 0.25
"""How often the background thread checks the controller and the busy state."""
ORPHAN_GRACE_S = 5.0
"""Seconds an orphaned worker that is not busy gets to stop by itself before it exits at once."""
START_UP = "start-up"
_PR_SET_NAME, _PR_SET_PDEATHSIG = 15, 1


@dataclass
class WorkerContext:
    """Everything a worker needs, picklable for ``spawn``."""

    role: str
    index: int
    cfg: Any  # zoo.core.config.ExperimentConfig
    spec: EnvSpec
    run_id: str
    run_dir: str
    attempt: int = 0
    """0 for the first process of this (role, index), n for its n-th restart."""
    entry: str = ""
    """``"module:function"`` the worker runs (the controller sets its kind's entry); empty: the
    entry of the kind named ``role`` (:func:`entry_of`)."""
    controller_pid: int = 0
    """The controller's pid (0: not watched), with ``controller_host`` its host name."""
    controller_host: str = ""
    stop: bool = False
    orphaned: bool = False
    """True once the controller is gone (see the module doc)."""
    policy: str = ""
    """The named policy a policy worker or trainer serves: what its endpoint names carry
    (:func:`zoo.core.graph.endpoint`); "" for the run's implicit policy and for other kinds.
    Its ``cfg`` and ``spec`` are then that policy's view (:func:`zoo.core.policies.policy_view`)."""
    local: int = -1
    """Its index within its policy (trainer rank, policy worker m of the policy); -1: ``index``."""
    streams: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """The transport (name, options) each stream resolved to for this run (``auto`` resolved
    from the placement; :func:`zoo.core.placement.resolve_streams`); a stream not in it uses the config."""
    curriculum_stage: int = -1
    """The run's curriculum stage when this worker was started (docs/curriculum.md): an actor's envs
    start their first episodes at it; -1: the run has no curriculum."""
    registry: Any = field(default=None, repr=False)
    control: Any = field(default=None, repr=False)
    meter: Any = field(default=None, repr=False)  # zoo.core.health.Meter: its totals ride on heartbeats
    resolver: Any = field(default=None, repr=False)
    _last_heartbeat: float = 0.0
    _busy: str | None = None
    _busy_since: float = 0.0
    _lock: Any = field(default=None, repr=False)
    _transports: list = field(default_factory=list, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(registry=None, control=None, meter=None, _lock=None, _transports=[])
        return state

    @property
    def rank(self) -> int:
        """Its index within its policy (:attr:`local`), or :attr:`index` where that is unset."""
        return self.local if self.local >= 0 else self.index

    def transport(self, stream: str):
        """The transport of ``stream`` (its listeners publish through the run's resolver)."""
        from zoo.core.resolver import resolver_from_config
        from zoo.core.streams import transport_for

        if self.resolver is None:
            self.resolver = resolver_from_config(self.registry, self.cfg)
        t = transport_for(self.registry, self.cfg, stream, self.run_id, choice=self.streams.get(stream),
                          resolver=self.resolver)
        self._transports.append(t)
        return t

    def send_control(self, kind: str, timeout: float = 1.0, **meta: Any) -> bool:
        """Send a meta-only message to the controller; False if it could not be delivered.
        Safe from the worker's threads (one lock)."""
        msg = {"type": kind, "role": self.role, "index": self.index, "attempt": self.attempt, **meta}
        with self._lock or contextlib.nullcontext():
            return self.control.send({}, msg, timeout)

    def heartbeat(self, every_s: float = HEARTBEAT_S, **meta: Any) -> None:
        """Call on every pass of the role's main loop: proves progress (see the module doc).
        At most every ``every_s`` seconds it sends a ``heartbeat`` with ``meta``, the pid, host,
        monotonic clock (``clock_s``) and the :attr:`meter`'s totals (:mod:`zoo.core.health`)."""
        if self._busy == START_UP:
            self._busy = None
        now = time.monotonic()
        if now - self._last_heartbeat >= every_s:
            self._last_heartbeat = now
            if self.meter is not None:
                meta.update(self.meter.report())
            self.send_control("heartbeat", timeout=0.05, pid=os.getpid(), host=_HOST, clock_s=now, **meta)

    @contextlib.contextmanager
    def busy(self, name: str):
        """Inside the block the worker is known to be in a long operation ``name`` (e.g.
        ``"update"``): a background thread heartbeats for it (see the module doc)."""
        previous, since = self._busy, self._busy_since
        self._busy, self._busy_since = name, time.monotonic()
        try:
            yield
        finally:
            self._busy, self._busy_since = previous, since
            self._last_heartbeat = 0.0  # report progress at once when the loop resumes

    def cleanup_transports(self) -> None:
        """Leave the run after the controller died: through every transport this worker built
        (the control stream's included), drop this process's hold on the run and, if it is the
        last process of the run to leave, remove the run's transport resources (segments,
        socket files) and its resolver keys. Transports without ``leave()`` clean up at once.
        A worker that removed them while another still ran would see that one re-create them
        (idempotent)."""
        last = True
        for t in self._transports:
            try:
                leave = getattr(t, "leave", None)
                if leave is None:
                    t.cleanup()
                elif not leave():
                    last = False
            except Exception:  # noqa: BLE001 - best effort, the process is leaving
                log.exception("transport clean-up failed")
        if self.resolver is not None and last:
            try:
                self.resolver.clear(self.run_id)
            except Exception:  # noqa: BLE001 - best effort, the process is leaving
                log.exception("resolver clean-up failed")


def make_env(ctx: WorkerContext, seed: int, seated: bool = False):
    """Build one environment of the experiment (imports the env plugin's module).

    ``seated``: for a worker that seats its players itself (the eval manager), an env option
    ``random_seats`` (the ``pettingzoo`` plugin's: the order of play drawn each episode) is
    turned off, and an env config with an ``evaluation()`` method is replaced by what it
    returns (the options an evaluation plays with: the ``pettingzoo`` plugin's leave out
    ``opening_moves``)."""
    import dataclasses

    from zoo.core.config import resolve_env

    component, arg = resolve_env(ctx.registry, ctx.cfg.env_name)
    env_cfg = ctx.cfg.env
    if seated and dataclasses.is_dataclass(env_cfg) and getattr(env_cfg, "random_seats", False):
        env_cfg = dataclasses.replace(env_cfg, random_seats=False)  # type: ignore[type-var]
    evaluation = getattr(env_cfg, "evaluation", None) if seated else None
    if callable(evaluation):
        env_cfg = evaluation()
    return component.load()(arg, env_cfg, seed)


def set_title(ctx: WorkerContext) -> str:
    """Name this process ``zoo: <role> <index> <run name>`` in ``ps``/``top`` (setproctitle);
    returns the title. The run name is the run directory's last part.

    ``SPT_NOENV=1``: setproctitle then writes only over the command line (about 110
    characters for a spawned worker; a longer title is cut there) and leaves the process's
    environment block, which ``/proc/PID/environ`` shows, intact.
    """
    title = f"zoo: {ctx.role} {ctx.index} {os.path.basename(os.path.normpath(ctx.run_dir))}"
    os.environ.setdefault("SPT_NOENV", "1")
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:  # a dependency of Zoo; without it only the title is missing
        pass
    return title


def entry_of(ctx: WorkerContext) -> str:
    """What the worker runs, ``"module:function"``: ``ctx.entry``, else the entry of its kind
    (``ctx.role``) in the registry (:mod:`zoo.core.kinds`); ``function(ctx)`` returns when the
    worker is done or ``ctx.stop``."""
    if ctx.entry:
        return ctx.entry
    from zoo.core.kinds import by_name, worker_kinds

    return by_name(worker_kinds(ctx.registry))[ctx.role].entry


def _prctl(option: int, arg: Any) -> None:
    """``prctl(2)`` on Linux; nothing elsewhere (the pulse thread still watches the parent)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
        except (OSError, AttributeError):
            pass


class _Pulse(threading.Thread):
    """The background thread: busy heartbeats and the controller watch (see the module doc)."""

    def __init__(self, ctx: WorkerContext) -> None:
        super().__init__(name="zoo-pulse", daemon=True)
        self.ctx = ctx
        self.done = threading.Event()
        self.is_child = ctx.controller_pid != 0 and os.getppid() == ctx.controller_pid
        self.watch = ctx.controller_pid != 0 and (self.is_child or ctx.controller_host == socket.gethostname())
        self.orphan_since: float | None = None
        self.last_sent = 0.0

    def controller_gone(self) -> bool:
        if not self.watch:
            return False
        if self.is_child:
            return os.getppid() != self.ctx.controller_pid
        return not pid_alive(self.ctx.controller_pid)

    def run(self) -> None:
        ctx = self.ctx
        while not self.done.wait(PULSE_S):
            now = time.monotonic()
            if self.orphan_since is None and self.controller_gone():
                self.orphan_since, ctx.orphaned, ctx.stop = now, True, True
                print(f"zoo: {ctx.role} worker {ctx.index}: the controller (pid {ctx.controller_pid}) is gone; "
                      "stopping", file=sys.stderr, flush=True)
            if self.orphan_since is not None:
                grace = ctx.cfg.supervision.stop_timeout_s if ctx._busy not in (None, START_UP) else ORPHAN_GRACE_S
                if now - self.orphan_since > grace:
                    print(f"zoo: {ctx.role} worker {ctx.index}: still running {grace:.0f} s after its controller "
                          "died; exiting now", file=sys.stderr, flush=True)
                    ctx.cleanup_transports()
                    os._exit(3)
                continue  # nobody listens to heartbeats any more
            if ctx._busy is not None and now - self.last_sent >= HEARTBEAT_S:
                self.last_sent = now
                try:
                    ctx.send_control("heartbeat", timeout=0.05, busy=ctx._busy,
                                     busy_s=round(now - ctx._busy_since, 1))
                except Exception:  # noqa: BLE001 - a closed control endpoint at exit
                    pass


def worker_main(ctx: WorkerContext) -> None:
    """Entry point of every worker process (what a launcher runs; see the module doc)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(_PR_SET_NAME, f"zoo-{ctx.role}-{ctx.index}"[:15].encode())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a launcher may start it with SIGINT blocked
    set_title(ctx)

    def _stop(signum, frame):
        ctx.stop = True

    signal.signal(signal.SIGTERM, _stop)
    logging.basicConfig(level=os.environ.get("ZOO_LOG_LEVEL", "WARNING"),
                        format=f"[{ctx.role} {ctx.index}] %(levelname)s %(message)s")
    from zoo.core.plugins import get_registry

    ctx._lock = threading.Lock()
    ctx._busy, ctx._busy_since = START_UP, time.monotonic()
    ctx.registry = get_registry()
    ctx.control = ctx.transport("control").pusher("control")
    from zoo.core.health import Meter

    ctx.meter = Meter(ctx.role)
    pulse = _Pulse(ctx)
    pulse.start()
    code = 0
    try:
        from zoo.core.registry import load_object

        load_object(entry_of(ctx))(ctx)
    except Exception:  # noqa: BLE001 - reported to the controller, then exit non-zero
        tb = traceback.format_exc()
        if ctx.orphaned or not ctx.send_control("error", timeout=2.0, traceback=tb):
            print(tb, file=sys.stderr, flush=True)  # the controller is gone: keep the traceback
        code = 1
    finally:
        pulse.done.set()
        pulse.join(1.0)
        ctx.control.close()
        # The kernel's SIGTERM (parent death) may end the loop before the pulse thread saw it.
        if ctx.orphaned or pulse.controller_gone():
            ctx.cleanup_transports()
    # Everything was closed above; the interpreter's own finalisation (torch, nng) takes seconds
    # on a loaded machine and holds nothing of ours, so the process ends here.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

