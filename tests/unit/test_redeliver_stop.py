"""A Ctrl-C Python cannot raise (inside an import-system weakref callback) is delivered again,
not printed as "Exception ignored ..." and lost (a CI failure of test_interrupt at 0.3 s)."""
from __future__ import annotations

import signal
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
