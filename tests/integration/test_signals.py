"""Stopping a run by signal, end to end through the ``zoo`` CLI (issue 20, items 1-3).

- Ctrl-C stops ``zoo train`` even when it was started with SIGINT ignored (a background job
  of a non-interactive shell);
- a second Ctrl-C stops at once, abandoning a long update and keeping the last checkpoint;
- with ``trainer.count`` = 2, SIGINT, SIGTERM and SIGHUP stop like with one trainer (final
  checkpoint, ``end`` row, ``status.json``), and ``zoo resume`` continues the update rows.

Every wait is for something observable (a metrics row, a stderr line, the process table), with
deadlines generous for a loaded 2-core machine (:mod:`zoo.core.testing.cli`). Runs are found by a
mark in their environment.
"""
from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import pytest

from zoo.core.testing.cli import finish, mark_env, nothing_left, rows, wait_for
from zoo.core.testing.cli import start as start_zoo

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CHAOS_PLUGIN = ROOT / "tests" / "plugins" / "zoo-chaos"


def start(tmp_path: Path, *args: str, ignore_sigint: bool = False):
    """``zoo train ARGS --set runs_dir=tmp_path`` (``zoo resume ARGS --runs-dir tmp_path``) with the chaos
    plugin, as from a terminal (or, with ``ignore_sigint``, as a background job): the process and its mark."""
    mark = uuid.uuid4().hex
    where = ("--runs-dir", str(tmp_path)) if args[0] == "resume" else (
        "--set", f"runs_dir={tmp_path}", "--set", "log.tensorboard=false")
    return start_zoo(*args, *where, env=mark_env(mark, CHAOS_PLUGIN), ignore_sigint=ignore_sigint), mark


def checkpoint(run: Path) -> dict:
    import torch

    return torch.load(run / "checkpoints" / "latest.pt", weights_only=False)


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def test_ctrl_c_stops_zoo_train_started_with_sigint_ignored(tmp_path):
    # A background job of a non-interactive shell starts with SIGINT ignored; Python then installs
    # no handler of its own, and before the fix SIGINT did nothing: training went on.
    proc, mark = start(tmp_path, "train", "ppo", "--env", "CartPole-v1", "--steps", "1000000", "--name", "bg",
                       ignore_sigint=True)
    run = tmp_path / "bg"
    wait_for(lambda: rows(run, "update"), 300, "the first update row", proc)
    proc.send_signal(signal.SIGINT)
    _, text = finish(proc, 300)
    assert proc.returncode == 130, text[-3000:]
    end = rows(run, "end")
    assert len(end) == 1
    assert checkpoint(run)["policy_version"] == end[0]["policy_version"] == rows(run, "update")[-1]["policy_version"]
    s = status(run)
    assert (s["status"], s["exit_code"], s["reason"]) == ("stopped", 130, "Ctrl-C")
    nothing_left(proc, mark)


def test_a_second_ctrl_c_abandons_the_update_and_keeps_the_last_checkpoint(tmp_path):
    # The first update is fast and checkpointed (policy version 1); the second sleeps 600 s,
    # ignoring stop requests. Before the fix the second Ctrl-C was ignored: no "again" line.
    proc, mark = start(tmp_path, "train", "slow-ppo", "--env", "CartPole-v1", "--steps", "1000000",
                       "--name", "slow", "--set", "algo.update_sleep_s=600", "--set", "algo.fast_updates=1",
                       "--set", "trainer.checkpoint_interval=1")
    run = tmp_path / "slow"
    wait_for(lambda: "zoo-chaos: update 2 sleeps" in proc.stderr_text(), 300, "the trainer's second update", proc)
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "Ctrl-C again to stop now" in proc.stderr_text(), 300, "the first Ctrl-C's message", proc)
    proc.send_signal(signal.SIGINT)
    _, text = finish(proc, 300)
    assert proc.returncode == 130, text[-3000:]
    latest = run / "checkpoints" / "latest.pt"
    ckpt = checkpoint(run)
    assert ckpt["policy_version"] == 1 and [r["policy_version"] for r in rows(run, "update")] == [1]
    assert rows(run, "end") == []  # the trainer was killed in its update: no end row
    flat = " ".join(text.split())
    assert (f"Ctrl-C again to stop now (keeps checkpoint {latest} (policy version 1, "
            f"{ckpt['env_steps']:,} env steps))") in flat
    assert (f"every worker killed, the update under way abandoned; kept the last checkpoint {latest} "
            f"(policy version 1, {ckpt['env_steps']:,} env steps)") in flat
    s = status(run)
    assert (s["status"], s["exit_code"], s["reason"]) == ("stopped", 130, "Ctrl-C, then Ctrl-C again: update abandoned")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest.pt"]  # nothing half-written
    nothing_left(proc, mark)


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_two_trainers_stop_with_their_final_checkpoint_and_resume_without_a_gap(tmp_path, sig):
    # trainer.count=2: before the fix a stop often ended the run without its final checkpoint or
    # end row (rank 1 left the sync point alone; rank 0's exchange then failed with PeerLost).
    two = ("--set", "trainer.count=2", "--set", "policy.count=2", "--set", "actors.count=2")
    proc, mark = start(tmp_path, "train", "ppo", "--env", "CartPole-v1", "--steps", "200000", "--name", "k2", *two)
    run = tmp_path / "k2"
    wait_for(lambda: rows(run, "update"), 300, "the first update row", proc)
    proc.send_signal(sig)
    _, text = finish(proc, 300)
    code = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGHUP: 129}[sig]
    assert proc.returncode == code, text[-3000:]
    end = rows(run, "end")
    updates = rows(run, "update")
    assert len(end) == 1, text[-3000:]
    assert checkpoint(run)["policy_version"] == end[0]["policy_version"] == updates[-1]["policy_version"]
    assert status(run)["status"] == "stopped"
    nothing_left(proc, mark)
    first = len(updates)
    # two updates' env steps (2 trainers x 8 samples x 32 env steps each); the run stops once it has
    # received them, having made at least one update
    budget = end[0]["env_steps"] + 1024
    proc, mark = start(tmp_path, "resume", "k2", "--steps", str(budget))
    _, text = finish(proc, 600)
    assert proc.returncode == 0, text[-3000:]
    versions = [r["policy_version"] for r in rows(run, "update")]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) > first  # no gap, no duplicate
    assert rows(run, "end")[-1]["env_steps"] >= budget and status(run)["status"] == "finished"
    nothing_left(proc, mark)
