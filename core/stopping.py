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
"""
from __future__ import annotations

import contextlib
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
