"""`zoo train ppo --env atari:Pong --set env.backend=vector` end to end: a short run, its
resume and `zoo eval` (which plays with the Python path), leaving no process or file behind."""
from __future__ import annotations

import json
import uuid

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start, zoo

pytestmark = pytest.mark.integration


def test_ppo_pong_on_the_vector_backend_trains_resumes_and_evaluates(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(ZOO_TEST_MARK=mark)
    run = tmp_path / "vec"
    # 200-frame games (50 env steps) so that games end, and are logged, within the budget (8 envs
    # x 64 env steps); one update = 8 samples x 32 steps = 256 env steps: 512 env steps are 2 updates.
    common = ["--set", "sample_length=32", "--set", "env.max_episode_frames=200"]
    proc = start("train", "ppo", "--env", "atari:Pong", "--steps", "512", "--name", "vec",
                 "--set", f"runs_dir={tmp_path}", "--set", "env.backend=vector", *common, env=env)
    out, err = finish(proc, 600)
    assert proc.returncode == 0, err[-3000:]
    assert "done: " in out + err
    config = json.loads((run / "config.json").read_text())
    assert config["env"]["backend"] == "vector" and config["env_spec"]["resolved"]["backend"] == "vector"
    rows = read_metrics(run)
    updates = [r for r in rows if r["type"] == "update"]
    games = [r for r in rows if r["type"] == "episode"]
    assert [u["policy_version"] for u in updates] == [1, 2]
    # every game is truncated at 200 frames = 50 env steps (the reset's 0..30 no-op frames count:
    # a game lasts ceil((200 - 30) / 4) = 43 to 50 env steps), scored -21..21
    assert games and all(43 <= g["length"] <= 50 and -21 <= g["return"] <= 21 for g in games)
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    import torch

    first = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["env_steps"]
    assert first >= 512

    resumed = zoo("train", "--resume", str(run), "--steps", "1024", env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    # the resumed run's actors went on from the checkpoint's count to the new budget of 1024 env steps
    assert ckpt["env_steps"] >= 1024 > first and ckpt["policy_version"] >= 2
    assert json.loads((run / "config.json").read_text())["env"]["backend"] == "vector"

    evaluated = zoo("eval", str(run), "--episodes", "1", "--out", str(tmp_path / "eval.jsonl"), env=env, timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    episode = json.loads((tmp_path / "eval.jsonl").read_text().splitlines()[0])
    assert 43 <= episode["length"] <= 50  # the Python path (1..30 no-op frames), with the run's 200-frame limit
    assert marked_processes(mark) == []
