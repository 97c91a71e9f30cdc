"""Stale-resource reclaim proves ownership with a lock a live process holds, never with a pid.

The scenario of issue 11: two PID namespaces share ``/dev/shm`` and ``/tmp``; a run in one
of them has pid N, which does not exist in the other. Reclaiming by "owner pid is dead"
deleted that live run's segments and run directory. Here a live run in another PID
namespace (``unshare --pid``, needs root) is never reclaimed; once it is dead, its
leftovers are.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from zoo.transports.shm.segments import list_segments, reclaim_stale_segments, run_prefix, unlink_run_segments
from zoo.transports.sockets.rundir import (
    LOCK_FILE, claim_lock, hold_lock, pid_alive, reclaim_stale_run_dirs, release_lock, run_dir,
)

# Runs as pid 1 of a new PID namespace: makes the next pid there `target`, forks, and the
# child (pid `target`) opens a puller of a fresh shm run — a ring segment named with its pid,
# the run's /dev/shm lock and run directory lock held — prints its pid and waits for stdin
# to close; then it dies without cleaning up, like a SIGKILLed run.
INNER = r"""
import os, sys
target, run_id, base = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(target - 1))
pid = os.fork()
if pid == 0:
    from zoo.transports.shm.transport import ShmTransport
    puller = ShmTransport(run_id, base_dir=base).puller("s")
    print(os.getpid(), flush=True)
    sys.stdin.read()
    os._exit(0)
os.waitpid(pid, 0)
"""


def _free_pid() -> int:
    """A pid no process of this namespace has, well below the last one handed out (not reused soon)."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    for pid in range(max(300, last // 2), 1, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    pytest.skip("no free pid to stage the other namespace's run with")


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or not os.path.isdir("/dev/shm"):
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare --pid --fork --mount-proc`")
def test_a_live_run_in_another_pid_namespace_is_never_reclaimed_and_its_leftovers_are_once_dead(tmp_path):
    run_id = f"ns{os.getpid()}-{uuid.uuid4().hex[:8]}"
    target = _free_pid()
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", INNER,
                             str(target), run_id, str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    segment = f"zoo-{run_id}.s.pull.p{target}.g0"
    lock = f"zoo-{run_id}.lock"
    folder = run_dir(run_id, str(tmp_path))
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the run in the other namespace did not start within 60 s"
        assert int(proc.stdout.readline()) == target  # its pid in its own namespace
        # The premise: by pid, this live run looks dead from here.
        assert not pid_alive(target)
        assert list_segments(run_prefix(run_id)) == [lock, segment]
        assert sorted(os.listdir(folder)) == ["keys", "owner.lock", "s.shm"]

        for _ in range(2):  # a new run starting here reclaims: nothing of the live run goes
            assert [n for n in reclaim_stale_segments() if n.startswith(run_prefix(run_id))] == []
            assert reclaim_stale_run_dirs(str(tmp_path)) == []
        assert list_segments(run_prefix(run_id)) == [lock, segment]
        assert sorted(os.listdir(folder)) == ["keys", "owner.lock", "s.shm"]

        proc.stdin.close()  # the run dies without cleaning up
        assert proc.wait(30) == 0
        assert sorted(n for n in reclaim_stale_segments() if n.startswith(run_prefix(run_id))) == [lock, segment]
        assert list_segments(run_prefix(run_id)) == []
        assert reclaim_stale_run_dirs(str(tmp_path)) == [folder]
        assert not os.path.exists(folder)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        unlink_run_segments(run_id)
        shutil.rmtree(folder, ignore_errors=True)


def _hold_and_wait(path: str, ready) -> None:
    hold_lock(path)
    ready.set()
    time.sleep(60)  # until SIGKILLed (bounded if the test fails first)


def test_a_lock_held_by_any_live_process_blocks_reclaim_and_dies_with_it(tmp_path):
    """The same rule inside one namespace: a held lock (here by a spawned process) is never
    claimed; after that process is SIGKILLed, the kernel has dropped its lock and it is."""
    path = os.path.join(tmp_path, "zoo-r", LOCK_FILE)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_and_wait, args=(path, ready), daemon=True)
    holder.start()
    try:
        assert ready.wait(60)
        assert claim_lock(path) is False
        assert reclaim_stale_run_dirs(str(tmp_path)) == []
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        fd = claim_lock(path)
        assert isinstance(fd, int) and fd >= 0
        os.close(fd)
        assert reclaim_stale_run_dirs(str(tmp_path)) == [os.path.join(tmp_path, "zoo-r")]
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join(10)


def test_this_process_holding_a_lock_counts_as_live_and_a_missing_lock_file_is_none(tmp_path):
    path = os.path.join(tmp_path, "zoo-mine", LOCK_FILE)
    assert claim_lock(path) is None  # no lock file: not a run made with locks
    hold_lock(path)
    try:
        assert claim_lock(path) is False  # flock locks of two open files conflict within one process too
        assert reclaim_stale_run_dirs(str(tmp_path)) == []
    finally:
        release_lock(path)
    assert reclaim_stale_run_dirs(str(tmp_path)) == [os.path.join(tmp_path, "zoo-mine")]


def test_a_lock_file_removed_under_a_holder_is_made_again_on_the_next_hold(tmp_path):
    """hold_lock re-checks that its path still names the locked file: after a clean-up removed
    the folder, the next endpoint of the run holds a fresh lock file."""
    path = os.path.join(tmp_path, "zoo-again", LOCK_FILE)
    hold_lock(path)
    try:
        shutil.rmtree(os.path.dirname(path))
        hold_lock(path)
        assert os.path.exists(path) and claim_lock(path) is False
    finally:
        release_lock(path)


def _other_process_holds(path: str) -> int:
    """A shared lock on ``path`` through a separate open file description: to flock, that is a
    different process of the run (flock locks belong to the open file, not the pid)."""
    import fcntl

    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def test_only_the_last_process_to_leave_an_orphaned_run_removes_it(tmp_path):
    # The CI failure this pins: after `zoo train` was SIGKILLed, one orphaned worker removed
    # the run's /dev/shm lock and run directory while another still ran; that one's next
    # endpoint re-created both, and they were left behind. Now a leaver removes nothing while
    # another process of the run holds either lock; the last one removes everything.
    from zoo.transports.shm.segments import run_lock_path
    from zoo.transports.shm.transport import ShmTransport

    run_id = f"leave-{uuid.uuid4().hex[:8]}"
    t = ShmTransport(run_id, base_dir=str(tmp_path), create=True)
    puller = t.puller("s")
    shm_lock, dir_lock = run_lock_path(run_id), os.path.join(run_dir(run_id, str(tmp_path)), LOCK_FILE)
    other = _other_process_holds(shm_lock)
    try:
        assert t.leave() is False  # another process of the run still holds the segment lock
        assert os.path.exists(shm_lock) and os.path.isdir(t.dir) and len(list_segments(run_prefix(run_id))) == 2
    finally:
        os.close(other)  # that process has exited
    other = _other_process_holds(dir_lock)
    try:
        assert t.leave() is False  # ... or only the run directory's lock
        assert os.path.isdir(t.dir)
    finally:
        os.close(other)
    assert t.leave() is True  # the last one: the ring, the lock file and the directory go
    assert list_segments(run_prefix(run_id)) == [] and not os.path.exists(t.dir)
    assert t.leave() is True  # idempotent: nothing left to remove, nobody holds anything
    puller.close()


def test_leave_run_calls_remove_once_and_only_when_no_lock_is_held(tmp_path):
    from zoo.transports.sockets.rundir import leave_run

    a, b = str(tmp_path / "a.lock"), str(tmp_path / "b.lock")
    hold_lock(a)
    hold_lock(b)
    calls = []
    other = _other_process_holds(b)
    assert leave_run([a, b], lambda: calls.append(1)) is False and calls == []
    # Our own holds were dropped: only the other process's remains.
    fd = claim_lock(a)
    assert fd not in (False, None) and claim_lock(b) is False
    os.close(fd)
    os.close(other)
    assert leave_run([a, b, str(tmp_path / "missing.lock")], lambda: calls.append(2)) is True and calls == [2]
