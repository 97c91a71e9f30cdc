"""Signal handling of the controller and the CLI entry point (zoo.core.stopping, zoo.__main__)."""
import os
import signal
import subprocess
import sys

from zoo.core.stopping import StopRequested, signals_stop_the_run


def test_sighup_ignored_at_start_stays_ignored_and_sigterm_still_stops():
    # nohup starts the process with SIGHUP ignored: a closed terminal must not stop the run.
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_stop_the_run():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                raise AssertionError("SIGTERM did not stop")
            except StopRequested as stop:
                assert stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_sighup_stops_when_not_ignored():
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with signals_stop_the_run():
            try:
                os.kill(os.getpid(), signal.SIGHUP)
                raise AssertionError("SIGHUP did not stop")
            except StopRequested as stop:
                assert stop.signum == signal.SIGHUP
    finally:
        signal.signal(signal.SIGHUP, before)


def test_the_entry_point_takes_sigint_back_when_started_with_it_ignored():
    # zoo.__main__.run installs Python's handler before anything else; `zoo.cli.main` replaced
    # here by a report of the disposition it runs under.
    code = ("import signal, sys, types; import zoo.__main__ as m; "
            "sys.modules['zoo.cli'] = types.SimpleNamespace(main=lambda: print(signal.getsignal(signal.SIGINT) "
            "is signal.default_int_handler)); m.run()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert (out.returncode, out.stdout.strip()) == (0, "True"), out.stderr
