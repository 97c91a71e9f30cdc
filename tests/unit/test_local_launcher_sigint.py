"""The local launcher's spawn window: workers start with SIGINT held, and a Ctrl-C that lands
while one is forked is not lost (it was: SIGINT was set to ignored for the fork/exec, the kernel
discarded a Ctrl-C landing then, and ``zoo train`` ran on to its budget: test_interrupt
[workers-starting] under load)."""
from __future__ import annotations

import multiprocessing.util as mp_util
import os
import signal
import sys

import pytest

from zoo.plugins.launchers.local.launcher import sigint_ignored_by_children


def test_a_ctrl_c_during_the_fork_is_raised_when_the_start_is_complete(monkeypatch):
    def spawn_and_ctrl_c(path, args, passfds):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C to this process while the worker is forked
        return 12345

    monkeypatch.setattr(mp_util, "spawnv_passfds", spawn_and_ctrl_c)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as zoo's own (conftest restores pytest's)
    with pytest.raises(KeyboardInterrupt):
        with sigint_ignored_by_children():
            assert mp_util.spawnv_passfds("x", ["x"], ()) == 12345  # not raised here: the start completes
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_child_started_in_the_block_holds_sigint_until_it_ignores_it(tmp_path):
    out = tmp_path / "mask"
    code = ("import signal, sys; open(sys.argv[1], 'w').write(repr((signal.SIGINT in "
            "signal.pthread_sigmask(signal.SIG_BLOCK, set()), signal.getsignal(signal.SIGINT) is "
            "signal.default_int_handler)))")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with sigint_ignored_by_children():
        pid = mp_util.spawnv_passfds(sys.executable.encode(), [sys.executable, "-c", code, str(out)], ())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # blocked from its first instruction; Python installed its own handler (nothing is ignored
    # in the child: worker_main sets SIGINT to ignored, which drops a pending Ctrl-C, then unblocks)
    assert out.read_text() == "(True, True)"
