"""What every worker process shares: start-up, stop handling, the control stream.

Workers are started with the ``spawn`` method (nng aborts after ``fork``), rebuild the
plugin registry themselves, ignore SIGINT (the controller owns Ctrl-C) and stop when
they receive SIGTERM. An exception in a worker is sent to the controller as an
``error`` message with the traceback, and the process exits with status 1.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from zoo.core.env import EnvSpec

log = logging.getLogger("zoo.worker")
_HOST = socket.gethostname()


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
    """``"module:function"`` to run instead of the role's default (:data:`ROLE_ENTRIES`)."""
    stop: bool = False
    registry: Any = field(default=None, repr=False)
    control: Any = field(default=None, repr=False)
    meter: Any = field(default=None, repr=False)  # zoo.core.health.Meter: its totals ride on heartbeats
    _last_heartbeat: float = 0.0

    def transport(self, stream: str):
        from zoo.core.streams import transport_for

        return transport_for(self.registry, self.cfg, stream, self.run_id)

    def send_control(self, kind: str, timeout: float = 1.0, **meta: Any) -> bool:
        """Send a meta-only message to the controller; False if it could not be delivered."""
        return self.control.send({}, {"type": kind, "role": self.role, "index": self.index, "attempt": self.attempt,
                                     **meta}, timeout)

    def heartbeat(self, every_s: float = 1.0, **meta: Any) -> None:
        """At most every ``every_s`` seconds: a ``heartbeat`` with ``meta``, the pid, host,
        monotonic clock (``clock_s``) and the :attr:`meter`'s totals (:mod:`zoo.core.health`)."""
        now = time.monotonic()
        if now - self._last_heartbeat >= every_s:
            self._last_heartbeat = now
            if self.meter is not None:
                meta.update(self.meter.report())
            self.send_control("heartbeat", timeout=0.05, pid=os.getpid(), host=_HOST, clock_s=now, **meta)


def make_env(ctx: WorkerContext, seed: int):
    """Build one environment of the experiment (imports the env plugin's module)."""
    from zoo.core.config import resolve_env

    component, arg = resolve_env(ctx.registry, ctx.cfg.env_name)
    return component.load()(arg, ctx.cfg.env, seed)


ROLE_ENTRIES = {
    "actor": "zoo.core.workers.actor:run",
    "policy": "zoo.core.workers.policy:run",
    "trainer": "zoo.core.workers.trainer:run",
}
"""What each role runs: ``function(ctx)``, returning when the worker is done or ``ctx.stop``."""


def worker_main(ctx: WorkerContext) -> None:
    """Entry point of every worker process (target of ``multiprocessing.Process``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _stop(signum, frame):
        ctx.stop = True

    signal.signal(signal.SIGTERM, _stop)
    logging.basicConfig(level=os.environ.get("ZOO_LOG_LEVEL", "WARNING"),
                        format=f"[{ctx.role} {ctx.index}] %(levelname)s %(message)s")
    from zoo.core.plugins import get_registry

    ctx.registry = get_registry()
    ctx.control = ctx.transport("control").pusher("control")
    from zoo.core.health import Meter

    ctx.meter = Meter(ctx.role)
    code = 0
    try:
        from zoo.core.registry import load_object

        load_object(ctx.entry or ROLE_ENTRIES[ctx.role])(ctx)
    except Exception:  # noqa: BLE001 - reported to the controller, then exit non-zero
        tb = traceback.format_exc()
        if not ctx.send_control("error", timeout=2.0, traceback=tb):
            print(tb, file=sys.stderr, flush=True)  # the controller is gone: keep the traceback
        code = 1
    finally:
        ctx.control.close()
    sys.exit(code)
