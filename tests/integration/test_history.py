"""The version history end to end (docs/history.md): a real ``zoo train`` keeps versions on its
schedule in ``history.sqlite`` and ``history/default/``, and ``zoo train --resume`` continues it."""
from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.history import VersionStore
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import marked_processes, read_metrics, zoo

pytestmark = pytest.mark.integration


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
