"""A worker kind from a third-party plugin runs in a real ``zoo train`` with no change to the core.

The test plugin ``tests/plugins/zoo-param-stats`` (on ``PYTHONPATH`` of the CLI only) registers
the kind ``param-stats``: a worker that subscribes to the parameter stream and writes one line
per policy version it sees (version, parameter L2 norm, env steps) to the run folder. The run
asks for it with ``--set workers.param-stats.count=1``.
"""
from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

from zoo.core.testing.cli import leftovers, mark_env, marked_processes, read_metrics, zoo

pytestmark = pytest.mark.integration
PARAM_STATS = Path(__file__).resolve().parents[1] / "plugins" / "zoo-param-stats"
BUDGET = 4096  # 16 updates of 256 env steps (the PPO CartPole presets)


def test_a_plugins_worker_kind_records_every_policy_version_it_sees(tmp_path):
    mark = uuid.uuid4().hex
    result = zoo("train", "ppo", "--env", "CartPole-v1", "--steps", str(BUDGET), "--name", "kinds",
                 "--set", f"runs_dir={tmp_path}", "--set", "workers.param-stats.count=1",
                 env=mark_env(mark, PARAM_STATS, ZOO_STRICT_PLUGINS="1"), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 policy worker, 1 trainer, 1 param-stats worker, run dir" in result.stdout
    run = tmp_path / "kinds"
    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"trainer": 1, "policy": 1, "actor": 2, "eval": 0, "pbt": 0, "param-stats": 1}
    stats_worker = next(w for w in graph["workers"] if w["role"] == "param-stats")
    assert (stats_worker["index"], stats_worker["connects"], stats_worker["listens"]) == (0, ["parameter"], [])
    assert isinstance(stats_worker["pid"], int)
    assert graph["kinds"]["param-stats"]["plugin"] == "param-stats"
    recorded = [json.loads(line) for line in (run / "param-stats-0.jsonl").read_text().splitlines()]
    versions = [r["policy_version"] for r in recorded]
    assert len(versions) > 0
    assert all(a < b for a, b in zip(versions, versions[1:], strict=False)), versions  # strictly increasing
    # each version it saw is one the trainer published, with the env steps of that update
    updates = {r["policy_version"]: r["env_steps"] for r in read_metrics(run) if r["type"] == "update"}
    published = {0: 0, **updates}
    assert {r["policy_version"]: r["env_steps"] for r in recorded}.items() <= published.items()
    assert max(versions) <= max(updates)
    # the norm of all 12 tensors of PPO's CartPole network (6 layers of weights and biases)
    assert all(r["arrays"] == 12 and math.isfinite(r["l2_norm"]) and r["l2_norm"] > 0 for r in recorded)
    assert marked_processes(mark) == []
    assert leftovers(json.loads((run / "status.json").read_text())["pid"]) == []  # the controller's run


def test_bad_kind_options_are_refused_before_any_process_starts(tmp_path):
    result = zoo("train", "ppo", "--env", "CartPole-v1", "--name", "bad", "--set", f"runs_dir={tmp_path}",
                 "--set", "workers.param-stats.cont=1", env=mark_env(uuid.uuid4().hex, PARAM_STATS), timeout=300)
    assert result.returncode == 2
    assert ("workers.param-stats.cont: worker kind 'param-stats' has no option 'cont'; did you mean 'count'? "
            "its options: count, file") in " ".join(result.stderr.split())
    assert not (tmp_path / "bad").exists()
