"""Conformance checks any launcher can run — built-in or third-party.

Usage (a third-party launcher registered as ``"mylauncher"``)::

    from zoo.core.testing.launcher_checks import CHECKS, LauncherUnderTest
    for name, check in CHECKS.items():
        with LauncherUnderTest("mylauncher") as lut:
            check(lut)

``tests/contract/test_launchers.py`` runs every check over every registered launcher.
Each check starts tiny workers (no torch, no environment: :func:`beat_worker` and its
siblings below, run by :func:`zoo.core.workers.base.worker_main` through
``WorkerContext.entry``) that talk to this process over a real control stream.

=================  ===========================================================================
check              contract
=================  ===========================================================================
start_stop         a started worker runs ``worker_main`` with its context (its heartbeat
                   arrives with its role, index and attempt); while it runs ``alive()`` is
                   True and ``exitcode()`` None; ``stop()`` ends it with exit code 0;
                   ``stop()``/``kill()`` after the end are no-ops
exit_codes         a worker that returns exits 0; one that raises exits 1 and its traceback
                   arrives as an ``error`` control message
kill_and_restart   ``kill()`` ends a worker that ignores stop requests (exit code -9); the same
                   (role, index) started again as attempt 1 runs (its heartbeat says attempt 1)
                   and stops with 0
=================  ===========================================================================

Every wait is bounded (at most :data:`START_S` for a worker to start, :data:`EXIT_S` for it to
end); the checks assert exact values only, no timings. ``close()`` kills what is left and
removes the control stream's files.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

START_S = 90.0
"""Longest wait for a started worker's first message (spawn + imports on a loaded machine)."""
EXIT_S = 30.0
"""Longest wait for a worker to exit after it was asked to stop, returned, raised or was killed."""


# ----------------------------------------------------------------------------- tiny workers
def beat_worker(ctx) -> None:
    """Heartbeat every 0.1 s until asked to stop, then return (exit 0)."""
    while not ctx.stop:
        ctx.heartbeat(every_s=0.1)
        time.sleep(0.02)


def return_worker(ctx) -> None:
    """Send one ``status`` message and return (exit 0)."""
    ctx.send_control("status", timeout=2.0, said="bye")


def raise_worker(ctx) -> None:
    """Raise at once (exit 1, traceback sent to the controller)."""
    raise RuntimeError("raised on purpose by the launcher check")


def deaf_worker(ctx) -> None:
    """Heartbeat forever, ignoring stop requests (only a kill ends it)."""
    while True:
        ctx.heartbeat(every_s=0.1)
        time.sleep(0.02)


_HERE = __name__


class LauncherUnderTest:
    """A launcher built from the registry, with a control stream to hear its workers."""

    def __init__(self, name: str, registry=None) -> None:
        from zoo.core.config import ExperimentConfig
        from zoo.core.plugins import get_registry
        from zoo.core.streams import CONTROL, transport_for

        self.name = name
        self.registry = registry or get_registry()
        self.cfg = ExperimentConfig(algo_name="ppo", env_name="CartPole-v1", launcher=name)
        self.run_id = f"lch{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.run_dir = tempfile.mkdtemp(prefix="zoo-launcher-check-")
        self.transport = transport_for(self.registry, self.cfg, CONTROL, self.run_id, create=True)
        self.control = self.transport.puller(CONTROL)
        self.launcher = self.registry.get("launcher", name).load()(self.cfg)
        self.handles: list[Any] = []
        self.messages: list[dict[str, Any]] = []

    def __enter__(self) -> LauncherUnderTest:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, worker: Callable, role: str = "check", index: int = 0, attempt: int = 0):
        """Start ``worker`` (one of this module's tiny workers) through the launcher."""
        from zoo.core.workers.base import WorkerContext

        ctx = WorkerContext(role, index, self.cfg, None,  # type: ignore[arg-type]  # its workers build no env
                            self.run_id, self.run_dir, attempt=attempt,
                            entry=f"{_HERE}:{worker.__name__}")
        handle = self.launcher.start(ctx)
        self.handles.append(handle)
        return handle

    def wait_message(self, kind: str, role: str, index: int, attempt: int = 0, timeout: float = START_S) -> dict:
        """The first control message of ``kind`` from that worker and attempt (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for meta in self.messages:
                if (meta.get("type"), meta.get("role"), meta.get("index"), meta.get("attempt", 0)) \
                        == (kind, role, index, attempt):
                    return meta
            msg = self.control.recv(min(0.2, max(0.0, deadline - time.monotonic())))
            if msg is not None:
                self.messages.append(msg[1])
        raise AssertionError(f"no {kind!r} message from {role} {index} attempt {attempt} within {timeout} s "
                             f"(launcher {self.name!r})")

    def ends_with(self, handle: Any, expected: int, what: str) -> None:
        """Wait up to :data:`EXIT_S` for ``handle`` to end; AssertionError naming the code it ended
        with (None: still running), the seconds waited and the launcher's end note otherwise."""
        asked = time.monotonic()
        code = handle.wait(EXIT_S)
        waited = time.monotonic() - asked
        assert code == expected, (f"{what}: ended with {code} (expected {expected}) after {waited:.1f} s "
                                  f"of waiting (None: still running at the {EXIT_S} s limit); launcher {self.name!r}: "
                                  f"{getattr(handle, 'end_note', lambda: '')()}")

    def close(self) -> None:
        for handle in self.handles:
            if handle.exitcode() is None:
                handle.kill()
                handle.wait(EXIT_S)
        self.launcher.close()
        self.control.close()
        self.transport.cleanup()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def check_start_stop(lut: LauncherUnderTest) -> None:
    handle = lut.start(beat_worker, "check", 3)
    beat = lut.wait_message("heartbeat", "check", 3)
    assert (beat["role"], beat["index"], beat["attempt"]) == ("check", 3, 0)
    assert handle.alive() is True and handle.exitcode() is None
    assert (handle.role, handle.index) == ("check", 3)
    assert handle.pid is None or isinstance(handle.pid, int)
    assert isinstance(handle.host, str) and handle.host
    handle.stop()
    lut.ends_with(handle, 0, "the worker asked to stop")
    assert handle.alive() is False and handle.exitcode() == 0
    handle.stop()  # no-ops once ended
    handle.kill()
    assert handle.exitcode() == 0


def check_exit_codes(lut: LauncherUnderTest) -> None:
    ok = lut.start(return_worker, "check", 0)
    bad = lut.start(raise_worker, "check", 1)
    assert lut.wait_message("status", "check", 0)["said"] == "bye"
    error = lut.wait_message("error", "check", 1)
    assert "RuntimeError: raised on purpose by the launcher check" in error["traceback"]
    lut.ends_with(ok, 0, "the worker that returned")
    lut.ends_with(bad, 1, "the worker that raised")


def check_kill_and_restart(lut: LauncherUnderTest) -> None:
    first = lut.start(deaf_worker, "check", 2)
    lut.wait_message("heartbeat", "check", 2)
    first.kill()
    lut.ends_with(first, -9, "the killed worker")
    second = lut.start(beat_worker, "check", 2, attempt=1)
    assert lut.wait_message("heartbeat", "check", 2, attempt=1)["attempt"] == 1
    assert second.alive() is True
    second.stop()
    lut.ends_with(second, 0, "the restarted worker asked to stop")


CHECKS: dict[str, Callable[[LauncherUnderTest], None]] = {
    "start_stop": check_start_stop,
    "exit_codes": check_exit_codes,
    "kill_and_restart": check_kill_and_restart,
}
