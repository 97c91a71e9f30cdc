"""Ctrl-C in the first seconds of ``zoo train`` (issue 16, item 5): no traceback, exit 130,
nothing left behind, whatever start-up was doing (importing, building the config and the
probe env, starting workers that are still importing their modules, running).

A terminal sends SIGINT to its whole foreground process group: the CLI and every worker it
has started. The test starts ``zoo train`` in a session of its own and signals that group. A Ctrl-C that
lands in the milliseconds in which a worker is forked can be lost (see
``plugins/launchers/local/launcher.py``); the test then presses it again, as a user would.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from zoo.core.testing.cli import finish, mark_env, marked_processes, nothing_left, rows, start, title, wait_for

pytestmark = pytest.mark.integration


def _wait_for(moment: str, proc, mark: str, started: float, run: Path) -> None:
    if moment.endswith("s"):  # a delay after the start, in seconds: the moment under test, not a wait
        time.sleep(max(0.0, float(moment[:-1]) - (time.monotonic() - started)))
    elif moment == "workers-starting":  # the CLI and a first worker, which is still importing
        wait_for(lambda: len(marked_processes(mark)) >= 2, 300, "a first worker", proc, poll_s=0.02)
    else:  # "running": every worker is in its loop, the trainer has updated
        wait_for(lambda: rows(run, "update"), 300, "the first update row", proc, poll_s=0.02)
        # the first update may hold one actor's samples alone while the other still imports (its
        # title comes with its loop): wait for the 4 workers' titles too
        wait_for(lambda: sum(title(p).startswith("zoo: ") for p in marked_processes(mark) if p != proc.pid) >= 4,
                 300, "the 4 workers' titles", proc, poll_s=0.02)


@pytest.mark.parametrize("moment", ["0.3s", "1s", "2s", "workers-starting", "running"])
def test_ctrl_c_early_prints_no_traceback_and_leaves_nothing(tmp_path, moment):
    mark = uuid.uuid4().hex
    started = time.monotonic()
    # as from a terminal (SIGINT at its default, even if we ignore it), in a session of its own
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "50000", "--name", "early",
                 "--set", f"runs_dir={tmp_path}", "--set", "log.tensorboard=false", env=mark_env(mark),
                 new_session=True)
    _wait_for(moment, proc, mark, started, tmp_path / "early")  # (a CLI left running is killed after the test)
    titles = sorted(title(pid) for pid in marked_processes(mark) if pid != proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    for _ in range(3):  # pressed again if it landed in the milliseconds a worker is forked (it can be lost)
        try:
            proc.wait(30)
            break
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
    out, err = finish(proc, 300)
    assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
    # 130 with one line; or, in the few milliseconds before Python installs its Ctrl-C handler,
    # killed by SIGINT itself, silently; or (rarely, in the first second) killed by SIGINT after
    # that one line: Python ends by SIGINT when an interrupt was left pending at exit
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert err.strip() in ("", "error: interrupted (Ctrl-C)") or proc.returncode == 130, (proc.returncode, err)
    if proc.returncode == 130:
        assert "interrupted (Ctrl-C)" in err and "Aborted" not in err
    nothing_left(proc, mark)
    if moment == "running":  # every worker names its role, index and run in ps (setproctitle)
        assert [t for t in titles if t.startswith("zoo: ")] == [
            "zoo: actor 0 early", "zoo: actor 1 early", "zoo: policy 0 early", "zoo: trainer 0 early"], titles
