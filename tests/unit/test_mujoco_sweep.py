"""benchmarks/mujoco_sweep.py: run order, the parsing of CleanRL's output and of run command
lines, and the final-return figure of the report (the MuJoCo benchmark of issue 15)."""
from __future__ import annotations

import json
import os

import pytest

from tests.unit.fakes import load_benchmark


@pytest.fixture(scope="module")
def sweep():
    return load_benchmark("mujoco_sweep")


def test_run_order_keeps_partial_results_balanced(sweep):
    names = [j["job"] for j in sweep.jobs([1, 2], [1, 2], 1000)]
    assert names == [
        "zoo-Hopper-s1", "cleanrl-Hopper-s1",             # side by side: the wall-clock pair
        "zoo-HalfCheetah-s1", "zoo-Walker2d-s1",          # Zoo seed 1 on every env
        "cleanrl-HalfCheetah-s1", "cleanrl-Walker2d-s1",  # CleanRL seed 1 on every env
        "zoo-Hopper-s2", "zoo-HalfCheetah-s2", "zoo-Walker2d-s2",
        "cleanrl-Hopper-s2", "cleanrl-HalfCheetah-s2", "cleanrl-Walker2d-s2",
    ]


def test_cleanrl_episodes_are_read_from_its_output(sweep, tmp_path):
    log = tmp_path / "cleanrl-Hopper-s1.log"
    log.write_text("global_step=1328, episodic_return=[15.179221]\nSPS: 174\n"
                   "global_step=2048, episodic_return=[-5.5]\nglobal_step=999424, episodic_return=[1e3]\n")
    assert sweep.cleanrl_returns(log) == ([15.179221, -5.5, 1000.0], 999424)
    assert sweep.cleanrl_returns(tmp_path / "missing.log") == ([], 0)


def test_job_names_from_command_lines(sweep):
    zoo = ["python", "-m", "zoo", "train", "ppo", "--env", "Hopper-v5", "--seed", "2", "--name", "zoo-Hopper-s2"]
    cleanrl = ["python", "-u", "ppo_continuous_action.py", "--env-id", "Walker2d-v4", "--total-timesteps",
               "1000000", "--seed", "3", "--no-cuda"]
    assert sweep.job_of(zoo) == "zoo-Hopper-s2"
    assert sweep.job_of(cleanrl) == "cleanrl-Walker2d-s3"
    assert sweep.job_of(["bash"]) is None


def test_report_takes_the_last_100_episodes_of_finished_runs(sweep, tmp_path, capsys):
    run = tmp_path / "zoo" / "zoo-Hopper-s1"
    run.mkdir(parents=True)
    # 150 episodes with returns 0..149 reaching 1000 env steps: the last 100 are 50..149, mean 99.5
    rows = [{"type": "episode", "env_steps": 10 * (i + 1), "return": float(i), "length": 10} for i in range(150)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "cleanrl").mkdir()
    # CleanRL: 2 episodes, last at 998,000 >= 1,000 - 2,048: finished; mean (10 + 30) / 2 = 20
    (tmp_path / "cleanrl" / "cleanrl-Hopper-s1.log").write_text(
        "global_step=500, episodic_return=[10]\nglobal_step=998, episodic_return=[30]\n")
    done = {"rc": 0, "wall_s": 600.0, "loadavg_start": [1, 4.0, 1], "loadavg_end": [1, 6.0, 1], "steps": 1000,
            "seed": 1, "env": "Hopper"}
    (tmp_path / "jobs.jsonl").write_text(
        json.dumps({**done, "job": "zoo-Hopper-s1", "kind": "zoo", "cpu_s": 300.0}) + "\n"
        + json.dumps({**done, "job": "cleanrl-Hopper-s1", "kind": "cleanrl", "cpu_s": 540.0}) + "\n")
    sweep.report(type("Args", (), {"out": str(tmp_path), "png_dir": "", "unfinished": False})())
    hopper = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| Hopper")]
    # wall 600 s = 10 min; CPU 300 s = 5 min and 540 s = 9 min; load (4 + 6) / 2 = 5
    assert hopper == ["| Hopper | 100 +- 0 (n=1) | 10 / 5 (load 5) | 2,383 +- 272 | 20 +- 0 (n=1) | 10 / 9 (load 5) |"]


def test_tree_cpu_counts_this_process(sweep):
    own = os.times()
    assert sweep.tree_cpu_s(os.getpid()) >= own.user + own.system - 0.05
