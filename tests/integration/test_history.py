"""The version history end to end (docs/history.md): a real ``zoo train`` keeps versions on its
schedule in ``history.sqlite`` and ``history/default/``, and ``zoo train --resume`` continues it."""
from __future__ import annotations

import os
import signal
import uuid

import numpy as np
import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.history import VersionStore
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import (
    finish,
    mark_env,
    marked_processes,
    nothing_left,
    read_metrics,
    start,
    wait_for,
    workers,
    zoo,
)

pytestmark = pytest.mark.integration


def kept_versions(run) -> list[int]:
    """The versions ``history.sqlite`` holds now (none before the trainer created it)."""
    if not (run / "history.sqlite").exists():
        return []
    with VersionStore(run, readonly=True) as store:
        return [r.version for r in store.versions("default")]


def test_cartpole_keeps_versions_on_schedule_and_a_resume_continues_them(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(ZOO_TEST_MARK=mark)
    run = tmp_path / "h"
    # CartPole's PPO presets: 8 samples x 32 steps = 256 env steps per update, so about 12 updates
    first = zoo("train", "ppo", "--env", "CartPole-v1", "--name", "h", "--steps", "3000", "--seed", "3",
                "--set", f"runs_dir={tmp_path}", "--set", "algo.epochs=1",
                "--set", "trainer.history.every_updates=2", "--set", "trainer.history.keep=3",
                env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert marked_processes(mark) == []
    assert "metrics.jsonl, tensorboard/, checkpoints/latest.pt, history.sqlite, history/" in first.stdout

    def expected() -> tuple[list[tuple[int, int, int, bool]], list[int]]:
        updates = [r for r in read_metrics(run) if r["type"] == "update"]
        assert [r["policy_version"] for r in updates] == list(range(1, len(updates) + 1))
        due = [r for r in updates if r["updates"] % 2 == 0]
        rows = [(r["policy_version"], r["updates"], r["env_steps"], i >= len(due) - 3) for i, r in enumerate(due)]
        return rows, [r[0] for r in rows[-3:]]

    with VersionStore(run, readonly=True) as store:
        rows, kept = expected()
        assert len(rows) >= 5
        got = store.versions("default", kept_only=False)
        assert [(r.version, r.updates, r.env_steps, r.kept) for r in got] == rows
        assert all(r.time_s > 0 for r in got) and [r.time_s for r in got] == sorted(r.time_s for r in got)
        assert sorted(os.listdir(run / "history" / "default")) == [f"v{v:08d}.pt" for v in kept]
        newest = load_checkpoint(store.file(got[-1]))
        assert newest["policy_version"] == kept[-1] and newest["algorithm"]["config"]["epochs"] == 1
        assert store.pick("default", "uniform", np.random.default_rng(0)).version.version in kept

    second = zoo("train", "--resume", str(run), "--steps", "4500", env=env, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert marked_processes(mark) == []
    with VersionStore(run, readonly=True) as store:
        rows, kept = expected()  # the schedule continued over the run's updates
        assert [(r.version, r.updates, r.env_steps, r.kept) for r in store.versions("default", kept_only=False)] \
            == rows
        assert sorted(os.listdir(run / "history" / "default")) == [f"v{v:08d}.pt" for v in kept]


def test_a_resume_forgets_the_versions_kept_after_its_checkpoint(tmp_path):
    mark = uuid.uuid4().hex
    # 0.5 s before each update: from the 7th update row on, the 10th update (the next checkpoint) is >= 1.5 s away
    env = mark_env(mark, ZOO_TEST_TRAINER_DELAY_S="0.5")
    run = tmp_path / "c"
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", "50000", "--name", "c", "--seed", "5",
                 "--set", f"runs_dir={tmp_path}", "--set", "algo.epochs=1", "--set", "trainer.checkpoint_interval=5",
                 "--set", "trainer.checkpoint_interval_s=0", "--set", "trainer.history.every_updates=1", env=env)
    # version 7 in the store, not just the 7th update row: the trainer writes the row before it keeps
    # the version, and a kill between the two (seen on a loaded machine) left 6 kept
    wait_for(lambda: 7 in kept_versions(run), 300, "version 7 kept (a checkpoint at 5)", proc)
    os.kill(wait_for(lambda: workers(mark).get("zoo-trainer-0"), 60, "the trainer", proc), signal.SIGKILL)
    _, err = finish(proc, 300)
    assert proc.returncode == 1, err[-3000:]
    nothing_left(proc, mark)
    ckpt = load_checkpoint(str(run / "checkpoints" / "latest.pt"))
    assert ckpt["policy_version"] == 5
    with VersionStore(run, readonly=True) as store:
        before = [r.version for r in store.versions("default")]
    assert before[:7] == [1, 2, 3, 4, 5, 6, 7]  # kept after the checkpoint too (the run died before its next)

    # a budget one env step past the checkpoint's: the resumed run makes one update, version 6, and stops
    second = zoo("resume", "c", "--runs-dir", str(tmp_path), "--steps", str(ckpt["env_steps"] + 1), env=env,
                 timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert marked_processes(mark) == []
    updates = [r for r in read_metrics(run) if r["type"] == "update"]
    assert [r["policy_version"] for r in updates] == [1, 2, 3, 4, 5, 6]
    with VersionStore(run, readonly=True) as store:
        got = store.versions("default", kept_only=False)
        assert [(r.version, r.updates, r.env_steps, r.kept) for r in got] == \
            [(r["policy_version"], r["updates"], r["env_steps"], True) for r in updates]
    assert sorted(os.listdir(run / "history" / "default")) == [f"v{v:08d}.pt" for v in range(1, 7)]
