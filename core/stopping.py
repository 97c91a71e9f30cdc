"""How the controller (``zoo train``, ``zoo resume``) turns signals into a stop of the run.

Exit codes (:data:`STOPS`): 130 on Ctrl-C (SIGINT), 143 on SIGTERM, 129 on SIGHUP. Inside
:func:`signals_stop_the_run` SIGTERM and SIGHUP raise :class:`StopRequested` (a
KeyboardInterrupt carrying ``signum``), as SIGINT raises KeyboardInterrupt, so the three
stop the run the same way (``docs/supervision.md``, "Stopping").

Inherited dispositions: ``zoo`` installs Python's SIGINT handler at start whatever the
disposition it inherited (:func:`zoo.__main__.run`): a process started with SIGINT ignored
(a background job of a non-interactive shell) still stops on Ctrl-C and ``kill -INT``, as
Go programs and uvicorn do. SIGHUP inherited as ignored (``nohup``) stays ignored: that is
the one thing ``nohup`` asks for.

A second Ctrl-C (:func:`second_ctrl_c_stops_now`): while the run is being stopped the
trainer may finish its update for up to ``supervision.stop_timeout_s``; a further SIGINT
then sets an event the supervisor polls (:meth:`zoo.core.supervision.Supervisor.stop_all`),
which kills every worker at once: the update under way is abandoned, the last complete
checkpoint on disk is kept (checkpoints are replaced atomically), as pip, Docker Compose
and uvicorn do on a second Ctrl-C. SIGTERM and SIGHUP are ignored during the stop (a
terminal closing or a service manager may send them more than once).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

STOPS = {signal.SIGINT: ("Ctrl-C", 130), signal.SIGTERM: ("SIGTERM", 143), signal.SIGHUP: ("SIGHUP", 129)}
"""Signals that stop a run, with their name in messages and the exit code of :func:`zoo.core.controller.run`."""


class StopRequested(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: stop the run exactly like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


CTRL_C = threading.Event()
"""Set by :func:`ctrl_c_handler` when Ctrl-C (SIGINT) arrives in ``zoo``: from then on any error
is the Ctrl-C's (:func:`from_ctrl_c`)."""


RECEIVED: list[int] = []
"""The stop signals zoo's handlers received, in order: SIGINT (:func:`ctrl_c_handler`), SIGTERM
and SIGHUP (inside :func:`signals_stop_the_run`); read by :func:`raise_lost_stop`."""


def ctrl_c_handler(signum: int, frame: object) -> None:
    """``zoo``'s SIGINT handler (installed by :func:`zoo.__main__.run`): records the Ctrl-C in
    :data:`CTRL_C` and :data:`RECEIVED`, then raises KeyboardInterrupt as Python's own handler does."""
    CTRL_C.set()
    RECEIVED.append(signum)
    raise KeyboardInterrupt


def raise_lost_stop() -> None:
    """Raise again a stop signal whose KeyboardInterrupt was lost: :class:`StopRequested` with
    the first signal in :data:`RECEIVED`, if any. The controller's loop calls it on every pass:
    the loop runs only while no stop was raised in it, so a signal recorded then was swallowed
    by code it interrupted (seen: Ctrl-C while ``zoo train`` started its workers ignored, the run
    going on to its budget and exit 0)."""
    if RECEIVED:
        raise StopRequested(RECEIVED[0])


def from_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is a stop (a KeyboardInterrupt, :class:`StopRequested` included), was
    raised from one (its ``__cause__`` chain holds one), or came after a Ctrl-C (:data:`CTRL_C`).

    Python 3.11 wraps an exception raised by ``__set_name__`` in a RuntimeError, so a Ctrl-C that
    lands while an imported module creates a class with a ``functools.cached_property`` arrives
    as ``RuntimeError: Error calling __set_name__ ...`` raised from the KeyboardInterrupt; and a
    Ctrl-C inside an extension module's import can come out as another error with no trace of it
    (seen: ``TypeError: expected a message argument`` from the transport check of ``zoo train``,
    reported as a bad setting with exit status 2)."""
    if CTRL_C.is_set():
        return True
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_stop_the_run():
    """SIGTERM and SIGHUP raise :class:`StopRequested` in the block, as SIGINT raises
    KeyboardInterrupt (main thread only: elsewhere signals cannot be set). A SIGHUP ignored
    when the block starts (``nohup``) stays ignored."""
    if not _main_thread():
        yield
        return

    def stop(signum, frame):
        RECEIVED.append(signum)
        raise StopRequested(signum)

    wanted = [sig for sig in (signal.SIGTERM, signal.SIGHUP)
              if not (sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN)]
    previous = {sig: signal.signal(sig, stop) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def ignoring_stop_signals():
    """SIGINT, SIGTERM and SIGHUP ignored inside the block (main thread only)."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def second_ctrl_c_stops_now():
    """Inside the block a SIGINT sets the yielded :class:`threading.Event` (once set, the stop
    is to abandon the trainer's update: see the module doc) and prints one line saying so;
    SIGTERM and SIGHUP are ignored. Outside the main thread the event is never set."""
    now = threading.Event()
    if not _main_thread():
        yield now
        return

    def again(signum, frame):
        if not now.is_set():
            now.set()
            print("zoo: Ctrl-C again: stopping now (killing every worker; the update under way is abandoned)",
                  file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, again if sig == signal.SIGINT else signal.SIG_IGN) for sig in STOPS}
    try:
        yield now
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def kept_checkpoint(run_dir: str) -> str:
    """What a run stopped at once keeps, in words: ``"kept the last checkpoint PATH (policy
    version V, E env steps)"``, or ``"kept no checkpoint: none written yet"``."""
    what = checkpoint_on_disk(run_dir)
    if what.startswith("policy "):  # named policies: "policy P: checkpoint ..." per policy
        return f"kept the last checkpoint of each policy: {what}"
    return f"kept {what}" if what.startswith("no checkpoint") else f"kept the last {what}"


def checkpoint_on_disk(run_dir: str) -> str:
    """The run's last complete checkpoint, in words: ``"checkpoint PATH (policy version V, E env
    steps)"``, or ``"no checkpoint: none written yet"``; with named policies one such phrase per
    trainable policy, ``"policy P: ..."``, joined by ``"; "``. Reads each ``latest.pt`` with
    ``torch.load(mmap=True)``: its counters only, the tensors are not read."""
    from zoo.core.checkpoint import latest_path, trainable_policies

    policies = trainable_policies(run_dir)
    parts = [_one_checkpoint(latest_path(run_dir, p)) for p in policies]
    if policies == [""]:
        return parts[0]
    return "; ".join(f"policy {p}: {part}" for p, part in zip(policies, parts, strict=True))


def _one_checkpoint(path: str) -> str:
    if not os.path.exists(path):
        return "no checkpoint: none written yet"
    try:
        import torch

        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        steps = ckpt.get("env_steps")
        steps = f"{steps:,}" if isinstance(steps, int) else steps
        return f"checkpoint {path} (policy version {ckpt.get('policy_version')}, {steps} env steps)"
    except Exception as exc:  # noqa: BLE001 - a message only; the file stays as it is
        return f"checkpoint {path} (unreadable: {type(exc).__name__}: {exc})"
