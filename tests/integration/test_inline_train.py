"""`zoo train ppo --env CartPole-v1 --set policy.inline=true`, end to end: no policy worker
runs, the budget is reached, nothing is left behind."""
from __future__ import annotations

import json
import uuid

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start

pytestmark = pytest.mark.integration


def test_ppo_cartpole_with_inline_inference_runs_no_policy_worker_and_reaches_its_budget(tmp_path):
    mark = uuid.uuid4().hex
    budget = 3000
    proc = start("train", "ppo", "--env", "CartPole-v1", "--steps", str(budget), "--name", "inl",
                 "--set", f"runs_dir={tmp_path}", "--set", "policy.inline=true", env=subprocess_env(ZOO_TEST_MARK=mark))
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert "policy inline in each actor" in out and "done: " in out
    run = tmp_path / "inl"
    # the preset's 2 actors and 1 trainer were started, each with a pid; no policy worker
    graph = json.loads((run / "graph.json").read_text())
    assert graph["counts"] == {"actor": 2, "policy": 0, "trainer": 1, "eval": 0, "pbt": 0}
    assert [(w["role"], w["index"], w.get("inference"), w.get("subscribes")) for w in graph["workers"]] == [
        ("trainer", 0, None, None), ("actor", 0, "inline", "parameter"), ("actor", 1, "inline", "parameter")]
    assert all(isinstance(w["pid"], int) for w in graph["workers"])
    live = json.loads((run / "live.json").read_text())
    assert live["ended"] is True
    assert sorted((w["role"], w["index"]) for w in live["workers"]) == [("actor", 0), ("actor", 1), ("trainer", 0)]
    # the bottleneck never measures a policy worker that does not exist ("policy worker busy B%")
    text = live["bottleneck"]["text"]
    assert live["bottleneck"]["inline"] is True and live["bottleneck"]["policy_busy"] is None
    assert "policy worker busy" not in text and "policy worker is busy" not in text
    # the budget was reached: the end row's env steps, status finished
    rows = read_metrics(run)
    updates = [r for r in rows if r["type"] == "update"]
    assert rows[-1]["type"] == "end" and rows[-1]["env_steps"] >= budget
    assert [u["policy_version"] for u in updates] == list(range(1, len(updates) + 1))
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["exit_code"]) == ("finished", 0)
    # nothing left behind: no process, no transport file or segment, only the run folder
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    assert [p.name for p in tmp_path.iterdir()] == ["inl"]
