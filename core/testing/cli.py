"""Helpers for integration tests that drive the ``zoo`` CLI in subprocesses.

One set of helpers, one timeout behaviour: whatever waits for a process and runs out of time
kills the process's whole tree and fails with the process's output tail; a process that exits
before what a test waits for fails the wait at once, with its exit code and output tail.

- :func:`start` starts ``python -m zoo ARGS`` as a terminal would: SIGINT and SIGHUP at their
  defaults in the child (whatever the test runner ignores), in a process group of its own (a
  shell job), stdout and stderr in anonymous temporary files that can be read while it runs.
- :func:`zoo` runs the CLI to its end (:func:`start`, then :func:`finish`).
- :func:`finish` waits for the end: ``(stdout, stderr)``.
- :func:`interrupt` presses Ctrl-C, as a terminal would, and checks the run ended as it should.
- :func:`wait_for` polls a condition until it holds.
- :func:`marked_processes`, :func:`workers`, :func:`title`: a run's processes, found by the mark
  ``ZOO_TEST_MARK=<mark>`` a test puts in the CLI's environment (the workers inherit it).
- :func:`leftovers`, :func:`nothing_left`: transport files and segments, and processes, left by a run.
- :func:`read_metrics`, :func:`rows`: a run's ``metrics.jsonl``.

Linux only (``/proc``). Imports the standard library only.
"""
from __future__ import annotations

import fcntl
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from zoo.core.testing.procs import processes_with_env, subprocess_env

__all__ = ["CliProcess", "best_rolling_mean", "finish", "interrupt", "kill_started", "kill_tree", "leftovers",
           "mark_env", "marked_processes", "nothing_left", "read_metrics", "rows", "start", "title", "wait_for",
           "workers", "zoo"]

T = TypeVar("T")
MARK = "ZOO_TEST_MARK"
"""The environment variable that marks a run's processes (the CLI and every worker it starts)."""
TAIL = 4000
"""Characters of output shown when a wait fails."""
_STARTED: weakref.WeakSet[CliProcess] = weakref.WeakSet()


class CliProcess(subprocess.Popen):
    """A started ``zoo`` CLI (a :class:`subprocess.Popen`) whose stdout and stderr go to anonymous
    temporary files (opened for appending), so they can be read while it runs and never fill a pipe.

    Attributes:
        mark: the ``ZOO_TEST_MARK`` value in its environment, or None.
        own_group: whether it leads a process group of its own (``os.killpg(proc.pid, ...)`` reaches it
            and every worker, as Ctrl-C in a terminal does).
    """

    mark: str | None
    own_group: bool

    def __init__(self, argv: list[str], *, mark: str | None, own_group: bool, **kwargs: Any) -> None:
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        for f in (self._out, self._err):  # the child appends, whatever our offset is
            fcntl.fcntl(f.fileno(), fcntl.F_SETFL, fcntl.fcntl(f.fileno(), fcntl.F_GETFL) | os.O_APPEND)
        self.mark, self.own_group = mark, own_group
        super().__init__(argv, stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err, **kwargs)
        _STARTED.add(self)

    @staticmethod
    def _read(f) -> str:
        if f.closed:
            return ""
        return os.pread(f.fileno(), os.fstat(f.fileno()).st_size, 0).decode(errors="replace")

    def stdout_text(self) -> str:
        """Everything it wrote to stdout so far."""
        return self._read(self._out)

    def stderr_text(self) -> str:
        """Everything it wrote to stderr so far."""
        return self._read(self._err)

    def tail(self, chars: int = TAIL) -> str:
        """The last ``chars`` characters of its stdout and of its stderr, labelled."""
        return (f"--- stdout (tail) ---\n{self.stdout_text()[-chars:]}\n"
                f"--- stderr (tail) ---\n{self.stderr_text()[-chars:]}")

    def close_files(self) -> None:
        self._out.close()
        self._err.close()


def _as_a_job(ignore_sigint: bool, own_group: bool) -> Callable[[], None]:
    def reset() -> None:  # in the child, before exec: what a terminal's shell gives a foreground job
        if own_group:
            os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return reset


def mark_env(mark: str, *paths: str | Path, **overrides: str | None) -> dict[str, str]:
    """This process's environment with ``ZOO_TEST_MARK=mark``, ``paths`` on ``PYTHONPATH`` (plugin
    folders, see :func:`zoo.core.testing.procs.subprocess_env`) and ``overrides``."""
    env = subprocess_env(*paths)
    for key, value in {**overrides, MARK: mark}.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start(*args: str, env: dict[str, str] | None = None, own_group: bool = True, new_session: bool = False,
          ignore_sigint: bool = False, cwd: str | Path | None = None) -> CliProcess:
    """Start ``python -m zoo ARGS`` as a terminal would.

    Args:
        args: the CLI's arguments (``"train", "ppo", "--env", ...``).
        env: its environment (default: this process's); ``ZOO_TEST_MARK`` in it becomes ``proc.mark``.
        own_group: start it in a process group of its own (a shell job; default). Its tree is then
            also reachable by ``os.killpg(proc.pid, sig)``.
        new_session: start it in a session of its own instead (no controlling terminal).
        ignore_sigint: start it with SIGINT ignored (a background job of a non-interactive shell);
            by default SIGINT, SIGHUP and SIGTERM are at their defaults, whatever this process does.
        cwd: its working folder.
    """
    env = dict(os.environ if env is None else env)
    return CliProcess([sys.executable, "-m", "zoo", *args], mark=env.get(MARK), own_group=own_group or new_session,
                      env=env, cwd=cwd, start_new_session=new_session,
                      preexec_fn=_as_a_job(ignore_sigint, own_group and not new_session))


def _parents() -> dict[int, int]:
    parents = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        parents[int(stat.split("/")[2])] = int(text.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` in the process tree (children first found, then theirs)."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier and p not in found]
        found += below
        frontier = below
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``, every process below it, its process group (when it leads one) and every
    process carrying its mark; then reap it. Processes already gone are skipped."""
    victims = set(descendants(proc.pid))
    mark = getattr(proc, "mark", None)
    if mark:
        victims.update(marked_processes(mark))
    for pid in [proc.pid, *victims]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if getattr(proc, "own_group", False):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def kill_started() -> list[str]:
    """Kill (:func:`kill_tree`) every CLI :func:`start` started that still runs: what a test that failed
    half-way left (``tests/conftest.py`` calls it after each test). The command lines of those killed."""
    killed = []
    for proc in list(_STARTED):
        if proc.poll() is None:
            kill_tree(proc)
            killed.append(repr(proc.args))
    return killed


def _tail(proc: subprocess.Popen | None) -> str:
    return proc.tail() if isinstance(proc, CliProcess) else ""


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Wait up to ``timeout`` s for ``proc`` to exit: its ``(stdout, stderr)``.

    Raises:
        AssertionError: it did not exit in time; its tree was killed, the message holds its output tail.
    """
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        raise AssertionError(f"zoo did not exit within {timeout:g} s (killed with its workers):\n"
                             f"{_tail(proc)}") from None
    finally:
        if proc.poll() is None:  # interrupted (KeyboardInterrupt, a failing test): nothing stays behind
            kill_tree(proc)
    if isinstance(proc, CliProcess):
        if proc.mark is not None:  # what a pipe's end waited for: every process writing to it exits
            _wait_until_gone(proc.mark, EXIT_GRACE_S)
        return proc.stdout_text(), proc.stderr_text()
    return "", ""


def interrupt(proc: subprocess.Popen, timeout: float = 300.0, again_after: float = 60.0) -> tuple[str, str]:
    """Ctrl-C, as a terminal would: SIGINT to ``proc``'s process group (sent once more if it has
    not exited ``again_after`` s later), then :func:`finish` with ``timeout`` s: its ``(stdout, stderr)``.
    ``proc`` must lead a group of its own (:func:`start` with ``own_group`` or ``new_session``).

    Raises:
        AssertionError: it did not exit in time (its tree was killed), it exited with a code other
            than 130 or by a signal other than SIGINT, or its stderr holds a ``Traceback``; the
            message holds the exit code or the end of its stderr.
    """
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(again_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = finish(proc, timeout)
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    return out, err


EXIT_GRACE_S = 30.0
"""How long :func:`finish` waits, after the CLI exited, for the rest of its marked processes to
exit by themselves: multiprocessing's resource tracker, which the spawn start method starts
beside the workers, ends only once it reads the end of its pipe from the exited CLI (a few ms,
seconds on a loaded machine). Reading the output from pipes waited for it implicitly (their
end comes when every process holding them has exited); a test that checks for leftovers right
after :func:`finish` would otherwise see it. What is still there after this is the test's to report."""


def _wait_until_gone(mark: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.05)


def zoo(*args: str, env: dict[str, str] | None = None, timeout: float = 900,
        cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m zoo ARGS`` to its end (:func:`start`, :func:`finish`): its exit code and output.

    Raises:
        AssertionError: it ran past ``timeout`` s (its tree is killed; the message holds its output tail).
    """
    proc = start(*args, env=env, cwd=cwd)
    try:
        out, err = finish(proc, timeout)
    finally:
        proc.close_files()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_for(condition: Callable[[], T], timeout: float, what: str, proc: subprocess.Popen | None = None,
             poll_s: float = 0.2) -> T:
    """Poll ``condition()`` every ``poll_s`` s until it returns something true, and return that.

    Args:
        condition: what to wait for (a metrics row, a status file, a stderr line, the process table).
        timeout: the deadline in seconds; generous (a loaded 2-core machine).
        what: the thing waited for, for the failure message.
        proc: the process that should produce it: if it exits first the wait fails at once.

    Raises:
        AssertionError: ``proc`` exited first (its exit code and output tail in the message), or the
            deadline passed (``proc``'s tree is then killed and its output tail shown).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            value = condition()  # it may have come with the exit
            if value:
                return value
            raise AssertionError(f"zoo exited ({proc.returncode}) before {what}\n{_tail(proc)}")
        if time.monotonic() >= deadline:
            if proc is not None:
                kill_tree(proc)
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}"
                                 + (f" (zoo killed with its workers)\n{_tail(proc)}" if proc is not None else ""))
        time.sleep(poll_s)


def marked_processes(mark: str) -> list[int]:
    """PIDs of live processes whose environment holds ``ZOO_TEST_MARK=mark`` (the CLI and its workers)."""
    return processes_with_env(MARK, mark)


def title(pid: int) -> str:
    """A process's title as ``ps`` shows it (its command line; workers set ``zoo: <role> <index> <run>``),
    ``""`` when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def workers(mark: str) -> dict[str, int]:
    """``{"zoo-actor-0": pid, ...}``: the live workers of the run marked ``mark`` (by their titles)."""
    out = {}
    for pid in marked_processes(mark):
        words = title(pid).split()
        if len(words) >= 3 and words[0] == "zoo:":
            out[f"zoo-{words[1]}-{words[2]}"] = pid
    return out


def leftovers(pid: int) -> list[str]:
    """Transport files and shared-memory segments of the runs controlled by ``pid`` (run ids
    ``<pid>-...``): what a finished run must not leave."""
    return glob.glob(f"/dev/shm/*zoo-{pid}-*") + glob.glob(f"/tmp/zoo-{pid}-*")


def nothing_left(proc: subprocess.Popen, mark: str, timeout: float = 60.0) -> None:
    """Wait up to ``timeout`` s for every process marked ``mark`` to exit (killing and failing when
    some do not), then check that the run controlled by ``proc`` left no transport file or segment."""
    try:
        wait_for(lambda: not marked_processes(mark), timeout, "every process of the run to exit")
    except AssertionError:
        left = {pid: title(pid) for pid in marked_processes(mark)}
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        raise AssertionError(f"processes of the run still alive {timeout:g} s after it ended (killed now): "
                             f"{left}") from None
    assert leftovers(proc.pid) == []


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl`` (a last line still being written is left out).

    Raises:
        FileNotFoundError: there is no metrics.jsonl.
    """
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines(keepends=True)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if i == len(lines) - 1 and not line.endswith("\n"):
                break  # half-written
            raise
    return out


def rows(run_dir: Path, kind: str) -> list[dict]:
    """The rows of type ``kind`` of ``run_dir/metrics.jsonl``; ``[]`` while there is no such file."""
    try:
        return [r for r in read_metrics(run_dir) if r["type"] == kind]
    except FileNotFoundError:
        return []


def best_rolling_mean(episodes: list[dict], window: int, max_steps: int) -> float:
    """The best mean ``return`` over ``window`` consecutive episode rows ending within ``max_steps`` env steps
    (``-inf`` with fewer than ``window`` such episodes)."""
    returns = [e["return"] for e in episodes if e["env_steps"] <= max_steps]
    return max((sum(returns[i - window:i]) / window for i in range(window, len(returns) + 1)), default=float("-inf"))
