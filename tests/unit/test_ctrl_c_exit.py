"""Every Ctrl-C exit of ``zoo`` says so: one line ``error: interrupted (Ctrl-C)`` and status 130.

A flake of ``test_interrupt.py::...[1s]``: ``zoo train`` exited 130 with empty stderr. Typer
(0.29) turns a KeyboardInterrupt that reaches it into ``Exit(130)`` and prints nothing; the CLI
caught Ctrl-C only while the command ran (:meth:`zoo.cli.ZooGroup.invoke`), not while typer
parsed the command line (``make_context``, where typer imports its parameter modules). And on
Python 3.11 a Ctrl-C inside ``__set_name__`` (a class with a ``cached_property`` being created
by an import) arrives as ``RuntimeError`` raised from the KeyboardInterrupt: a traceback, status 1.
"""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from typer.core import TyperGroup

import zoo.cli
from zoo.__main__ import run
from zoo.core.stopping import CTRL_C, StopRequested, ctrl_c_handler, from_ctrl_c


@pytest.fixture
def entry_point(monkeypatch):
    """``zoo list`` through :func:`zoo.__main__.run`; the signal handlers and hook it sets are restored."""
    monkeypatch.setattr(sys, "argv", ["zoo", "list"])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    previous = signal.getsignal(signal.SIGINT)
    yield run
    signal.signal(signal.SIGINT, previous)


def _set_name_error() -> RuntimeError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:  # how Python 3.11's type_new wraps it
            raise RuntimeError("Error calling __set_name__ on 'cached_property' instance 'data' in 'X'") from exc
    except RuntimeError as exc:
        return exc


def _raises(exc_factory):
    def raise_(*args, **kwargs):
        raise exc_factory()
    return raise_


@pytest.mark.parametrize("exc", [KeyboardInterrupt, _set_name_error], ids=["KeyboardInterrupt", "RuntimeError"])
def test_ctrl_c_while_typer_parses_the_command_line_prints_the_line(entry_point, monkeypatch, capsys, exc):
    monkeypatch.setattr(TyperGroup, "parse_args", _raises(exc))
    with pytest.raises(SystemExit) as stop:
        entry_point()
    assert stop.value.code == 130
    assert capsys.readouterr() == ("", "error: interrupted (Ctrl-C)\n")


def test_ctrl_c_raised_as_a_runtime_error_while_the_command_runs_prints_the_line(entry_point, monkeypatch, capsys):
    monkeypatch.setattr(TyperGroup, "invoke", _raises(_set_name_error))
    with pytest.raises(SystemExit) as stop:
        entry_point()
    assert stop.value.code == 130
    assert capsys.readouterr() == ("", "error: interrupted (Ctrl-C)\n")


def test_ctrl_c_raised_as_a_runtime_error_while_importing_the_cli_prints_the_line(entry_point, monkeypatch, capsys):
    monkeypatch.setattr(zoo.cli, "main", _raises(_set_name_error))
    with pytest.raises(SystemExit) as stop:
        entry_point()
    assert stop.value.code == 130
    assert capsys.readouterr() == ("", "error: interrupted (Ctrl-C)\n")


def test_a_second_ctrl_c_cannot_cut_the_line(entry_point, monkeypatch, capsys):
    """SIGINT is ignored before the line is written: a KeyboardInterrupt raised while rich writes
    it would reach typer, which exits 130 and prints nothing (or half the line)."""
    seen = []
    monkeypatch.setattr(TyperGroup, "invoke", _raises(KeyboardInterrupt))
    monkeypatch.setattr(zoo.cli, "_error", lambda message: seen.append((message, signal.getsignal(signal.SIGINT))))
    with pytest.raises(SystemExit) as stop:
        entry_point()
    assert stop.value.code == 130
    assert seen == [("interrupted (Ctrl-C)", signal.SIG_IGN)]


def test_other_errors_are_not_taken_for_ctrl_c():
    assert from_ctrl_c(KeyboardInterrupt()) is True
    assert from_ctrl_c(StopRequested(signal.SIGTERM)) is True
    assert from_ctrl_c(_set_name_error()) is True
    assert from_ctrl_c(RuntimeError("x")) is False
    try:  # a KeyboardInterrupt only in the context (an error while handling one) is not a stop
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("clean-up failed") from None
    except ValueError as exc:
        assert from_ctrl_c(exc) is False


def test_the_package_imports_nothing_before_the_entry_point_handles_ctrl_c():
    """``python -m zoo`` imports the package ``zoo`` before :func:`zoo.__main__.run`: a Ctrl-C while
    it imported pluggy (for ``zoo.hookimpl``) printed a traceback (seen at 0.03 s under load)."""
    code = ("import sys; before = set(sys.modules); import zoo, zoo.__main__; "
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('zoo', 'pluggy', 'typing')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out == "['zoo', 'zoo.__main__']\n"
    import zoo

    assert zoo.hookimpl.project_name == "zoo"


def test_an_error_after_ctrl_c_ends_as_ctrl_c_not_as_bad_input(entry_point, monkeypatch, capsys):
    """A Ctrl-C inside an import during ``zoo train``'s transport check came out as ``TypeError:
    expected a message argument``, reported as a bad setting (``error: streams.inference.transport=
    'auto': the transport failed to load or build: ...``, status 2; test_interrupt[1s] under load).
    zoo's SIGINT handler records the Ctrl-C, and any failure after it ends as the Ctrl-C."""
    def check_then_fail(*args, **kwargs):
        try:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the handler run() installed: Ctrl-C now
        except KeyboardInterrupt:  # swallowed by a library, which raises something else instead
            pass
        raise zoo.cli._fail("streams.inference.transport='auto': the transport failed to load or build: "
                            "TypeError: expected a message argument")

    monkeypatch.setattr(TyperGroup, "invoke", check_then_fail)
    with pytest.raises(SystemExit) as stop:
        entry_point()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # stopping: set by the Ctrl-C line
    assert stop.value.code == 130
    assert capsys.readouterr() == ("", "error: interrupted (Ctrl-C)\n")
    assert from_ctrl_c(TypeError("expected a message argument")) is True
    CTRL_C.clear()
    assert from_ctrl_c(TypeError("expected a message argument")) is False


def test_zoos_handler_records_the_ctrl_c_and_raises_keyboard_interrupt():
    assert not CTRL_C.is_set()
    with pytest.raises(KeyboardInterrupt):
        ctrl_c_handler(signal.SIGINT, None)
    assert CTRL_C.is_set()
    CTRL_C.clear()
