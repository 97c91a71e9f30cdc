"""`zoo train` with 2 policy workers and 2 data-parallel trainers, end to end.

Each run stops by itself (its budget, or a bounded wait) and checks that no worker
process and no transport file is left behind.
"""
from __future__ import annotations

import json
import os
import signal
import uuid

import numpy as np
import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import (
    best_rolling_mean,
    finish,
    leftovers,
    marked_processes,
    nothing_left,
    read_metrics,
    rows,
    start,
    title,
    wait_for,
)

pytestmark = pytest.mark.integration
GRAPH = ("--set", "policy.count=2", "--set", "trainer.count=2")


def check_graph(run) -> None:
    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"actor": 2, "policy": 2, "trainer": 2, "eval": 0, "pbt": 0}
    # the presets' 2 actors: actor i -> policy worker i, trainer i
    assert [(w["requests"], w["pushes"]) for w in graph["workers"] if w["role"] == "actor"] == [
        ("inference-0", "sample-0"), ("inference-1", "sample-1")]


# IMPALA only: PPO with 2 trainers computes the update of one trainer on the concatenated data
# (tests/unit/test_distributed.py, exact state dicts over several updates) and PPO learning
# CartPole is test_train's; the PPO case here repeated both at ~80-160 s of the suite.
# The threshold is 350, not test_impala's 450: this graph (seed 1, asynchronous, so no two runs
# alike) stopped at 450 after 71-165k env steps in 6 runs and once not within 300k (best 425.45,
# in CI: IMPALA at a constant lr can hover below 450 for a long while); in 8 runs the mean first
# reached 350 after 45-81k (400: 52-145k). A run that learns nothing stays near 22.
@pytest.mark.parametrize("algo, budget", [("impala", 300_000)])
def test_cartpole_with_2_policy_workers_and_2_trainers_reaches_350(tmp_path, algo, budget):
    mark = uuid.uuid4().hex
    # the budget bounds the run; stop_when ends it once a 20-episode mean reached 350 (both ranks decide alike)
    proc = start("train", algo, "--env", "CartPole-v1", "--seed", "1", "--steps", str(budget), "--name", "cp",
               "--set", f"runs_dir={tmp_path}", "--set", "stop_when=mean_return >= 350", *GRAPH,
               env=subprocess_env(ZOO_TEST_MARK=mark))
    _, err = finish(proc, 1500)
    assert proc.returncode == 0, err[-3000:]
    run = tmp_path / "cp"
    check_graph(run)
    metrics = read_metrics(run)
    episodes = [r for r in metrics if r["type"] == "episode"]
    updates = [r for r in metrics if r["type"] == "update"]
    best = best_rolling_mean(episodes, 20, budget)
    print(f"{algo}: best 20-episode mean return within {budget:,} env steps: {best:.1f}; updates {len(updates)}; "
          f"dropped {updates[-1]['dropped_samples']}")
    assert best >= 350
    # one metrics row per update, by trainer 0 alone; versions 1, 2, 3, ...
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    # it ended at the sync point after the condition held, before the budget
    end = metrics[-1]
    assert end["type"] == "end" and end["stop_when"] == "mean_return >= 350" and end["env_steps"] < budget
    assert (run / "status.json").exists() and json.loads((run / "status.json").read_text())["status"] == "finished"
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []


def test_mappo_hide_and_seek_with_2_trainers(tmp_path):
    # 2 actors x 4 envs x 4 agents; each trainer's batch is 16 agent-slot samples of 160 steps
    # = 2 sample messages of 2 envs = 640 env steps, so one update takes 2 x 640 = 1,280 env
    # steps: updates at 1,280 and 2,560, and the run ends at the next update point (3,840 >= 3,000).
    mark = uuid.uuid4().hex
    proc = start("train", "mappo", "--env", "hide-and-seek", "--steps", "3000", "--name", "hns",
               "--set", f"runs_dir={tmp_path}", "--set", "trainer.count=2", "--set", "actors.count=2",
               "--set", "actors.envs_per_actor=4", "--set", "trainer.batch_samples=16",
               env=subprocess_env(ZOO_TEST_MARK=mark))
    _, err = finish(proc, 900)
    assert proc.returncode == 0, err[-3000:]
    metrics = read_metrics(tmp_path / "hns")
    updates = [r for r in metrics if r["type"] == "update"]
    assert [u["env_steps"] for u in updates] == [1280, 2560]
    assert [u["agent_steps"] for u in updates] == [1280 * 4, 1280 * 4]  # both trainers' active agent steps
    assert all(np.isfinite(u["pg_loss"]) and np.isfinite(u["value_std"]) for u in updates)
    assert metrics[-1]["type"] == "end" and metrics[-1]["env_steps"] == 3840
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []


def test_killing_one_trainer_rank_ends_the_run_naming_it(tmp_path):
    mark = uuid.uuid4().hex
    proc = start("train", "ppo", "--env", "CartPole-v1", "--name", "killed", "--set", f"runs_dir={tmp_path}",
               *GRAPH, env=subprocess_env(ZOO_TEST_MARK=mark))
    run = tmp_path / "killed"
    wait_for(lambda: len(rows(run, "update")) >= 3, 300, "3 updates", proc)  # start-up on a loaded machine is slow
    ranks = wait_for(lambda: (lambda r: r if {"zoo: trainer 0 killed", "zoo: trainer 1 killed", "zoo: policy 0 killed",
                                              "zoo: policy 1 killed"} <= set(r) else None)(
        {title(pid): pid for pid in marked_processes(mark)}), 60, "both trainers and policy workers titled", proc)
    os.kill(ranks["zoo: trainer 1 killed"], signal.SIGKILL)
    _, err = finish(proc, 300)
    assert proc.returncode == 1, err[-3000:]
    assert "zoo: trainer worker 1 failed (killed by SIGKILL); stopping the run." in err
    assert "trainer worker 0 failed" not in err  # the surviving rank is not blamed
    nothing_left(proc, mark)
