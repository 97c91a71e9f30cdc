"""``python -m zoo`` and the ``zoo`` console script.

:func:`run` imports the CLI inside a ``try``: a Ctrl-C while the (heavy) imports run ends
the command quietly with status 130 instead of a traceback.

Ctrl-C while typer parses the command line is handled by :class:`zoo.cli.ZooGroup` (typer would
end with status 130 and print nothing); a Ctrl-C that arrives wrapped (Python 3.11 raises
``RuntimeError`` from a KeyboardInterrupt in ``__set_name__``) counts as Ctrl-C
(:func:`zoo.core.stopping.from_ctrl_c`).

A Ctrl-C that lands while Python runs a callback it cannot raise from (a weakref callback of
the import system, a ``__del__``) would be printed as "Exception ignored in ..." with a
traceback and lost; :func:`redeliver_stop` delivers it again instead, where it can be raised.

Ctrl-C always stops ``zoo``: :func:`run` installs its SIGINT handler
(:func:`zoo.core.stopping.ctrl_c_handler`: Python's KeyboardInterrupt, and a record that Ctrl-C
came, so that an error a library makes of it ends as Ctrl-C too) and unblocks SIGINT first,
whatever it inherited. Python
leaves SIGINT ignored when the process starts with it ignored (a background job of a
non-interactive shell: ``zoo train ... &`` in a script), and ``zoo train`` then ignored Ctrl-C
and ``kill -INT``; Go programs (``signal.Notify``) and uvicorn take the signal back the same
way. A run that must survive the terminal's Ctrl-C is started in a session of its own
(``setsid zoo train ...``). SIGHUP ignored at start (``nohup``) stays ignored
(:mod:`zoo.core.stopping`).
"""
import _thread
import signal
import sys
import time


def redeliver_stop(unraisable) -> None:
    """``sys.unraisablehook``: a KeyboardInterrupt (Ctrl-C, or the controller's SIGTERM/SIGHUP
    stop, which carries ``signum``) that Python could not raise is sent again as its signal,
    so the main thread raises it at its next step; anything else goes to the default hook.

    The signal is marked as arrived (``_thread.interrupt_main``) by a thread, once the main thread
    has left this hook: a handler run inside the hook (``signal.raise_signal`` runs it at once;
    Python 3.11 checks for signals after every call) raised its KeyboardInterrupt where it was
    again unraisable: printed as "Exception ignored in sys.unraisablehook" with a traceback, and
    the Ctrl-C lost."""
    exc = unraisable.exc_value
    if not isinstance(exc, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    import threading

    signum = getattr(exc, "signum", signal.SIGINT)
    main = threading.main_thread().ident or 0

    def deliver() -> None:
        while _in_hook(sys._current_frames().get(main)):
            time.sleep(0.001)  # the main thread leaves the hook within microseconds of running again
        _thread.interrupt_main(signum)

    try:
        threading.Thread(target=deliver, name="zoo-redeliver-stop", daemon=True).start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown": ending anyway
        pass


def _in_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code is redeliver_stop.__code__:
            return True
        frame = frame.f_back
    return False


def run() -> None:
    """Entry point: :func:`zoo.cli.main`, with Ctrl-C during start-up a one-line exit 130 (Ctrl-C
    stops it even when it was started with SIGINT ignored: see the module doc)."""
    from zoo.core.stopping import ctrl_c_handler

    signal.signal(signal.SIGINT, ctrl_c_handler)  # even if started with SIGINT ignored; records the Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    sys.unraisablehook = redeliver_stop
    try:
        from zoo.cli import main

        main()
    except Exception as exc:
        from zoo.core.stopping import from_ctrl_c  # here: everything before run() widens the traceback window

        if not from_ctrl_c(exc):  # a RuntimeError raised from a Ctrl-C: see zoo.core.stopping.from_ctrl_c
            raise
        _interrupted()
    except KeyboardInterrupt:
        _interrupted()


def _interrupted() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping already: a second Ctrl-C cannot cut the exit
    print("error: interrupted (Ctrl-C)", file=sys.stderr, flush=True)
    sys.exit(130)


if __name__ == "__main__":
    run()
