"""A Ctrl-C Python cannot raise (inside an import-system weakref callback) is delivered again,
not printed as "Exception ignored ..." and lost (a CI failure of test_interrupt at 0.3 s)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
import types

from zoo.__main__ import redeliver_stop


def test_an_unraisable_keyboard_interrupt_is_sent_again_as_its_signal_and_printed_nowhere(capsys):
    got = []
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        redeliver_stop(types.SimpleNamespace(exc_value=KeyboardInterrupt(), exc_type=KeyboardInterrupt))
        stop = KeyboardInterrupt(signal.SIGTERM)
        stop.signum = signal.SIGTERM  # the controller's StopRequested carries the signal it came from
        redeliver_stop(types.SimpleNamespace(exc_value=stop, exc_type=type(stop)))
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:  # delivered by a thread, once the hook has returned
            time.sleep(0.01)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert got == [signal.SIGINT, signal.SIGTERM]
    assert capsys.readouterr() == ("", "")


def test_other_unraisable_exceptions_go_to_the_default_hook(monkeypatch):
    seen = []
    monkeypatch.setattr("sys.__unraisablehook__", seen.append)
    args = types.SimpleNamespace(exc_value=ValueError("x"), exc_type=ValueError)
    redeliver_stop(args)
    assert seen == [args]


RAISED_IN_A_FINALISER = """
import signal, sys, time
from zoo.__main__ import redeliver_stop
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.unraisablehook = redeliver_stop
class Resource:
    def __del__(self):
        raise KeyboardInterrupt  # a Ctrl-C landing in a finaliser, run in the main thread
try:
    r = Resource()
    del r
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pass
    print("lost")
except KeyboardInterrupt:
    print("raised")
"""


def test_a_ctrl_c_unraisable_in_the_main_thread_is_raised_after_the_hook_not_printed_and_lost():
    """``signal.raise_signal`` ran the handler inside the hook: "Exception ignored in
    sys.unraisablehook" with a traceback, and the Ctrl-C lost (seen in test_interrupt under load:
    a traceback, and the run stopped only by the second Ctrl-C 30 s later)."""
    done = subprocess.run([sys.executable, "-c", RAISED_IN_A_FINALISER], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "raised\n", "")
