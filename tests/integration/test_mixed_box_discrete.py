"""An env whose agents act in a Box and a Discrete space, one ppo policy each, end to end
(docs/policies.md, "Agents with different spaces"): ``zoo train ppo --env fake-mixed``, whose
``mover`` moves with ``Box(-1, 1, (2,))`` float32 vectors and whose ``chooser`` picks one of
``Discrete(4)``. The env refuses any action not in its agent's own shape and dtype, so a run
that ends with rc 0 stepped it with float32 ``[1, 2]`` and int64 ``[1]`` actions only. One
policy for both agents is refused naming both spaces (tests/unit/test_policies.py; the CLI's
refusal before any process starts: tests/integration/test_policies_train.py)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import finish, leftovers, marked_processes, read_metrics, start, zoo

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[2] / "tests" / "plugins" / "zoo-fakes"
MOVER_CHOOSER = """
sample_length = 16
[actors]
count = 1
envs_per_actor = 2
ring_size = 1
[trainer]
batch_samples = 4
[policies.mover]
algo = "ppo"
[policies.chooser]
algo = "ppo"
[[agents]]
match = "mover"
policy = "mover"
[[agents]]
match = "chooser"
policy = "chooser"
"""


def test_a_box_agent_and_a_discrete_agent_each_train_their_own_ppo_policy_and_zoo_eval_plays_them(tmp_path):
    import torch

    mark = uuid.uuid4().hex
    env = subprocess_env(FAKES, ZOO_TEST_MARK=mark)
    config = tmp_path / "mc.toml"
    config.write_text(MOVER_CHOOSER)
    proc = start("train", "ppo", "--env", "fake-mixed", "--config", str(config), "--steps", "64", "--name", "mc",
                 "--set", f"runs_dir={tmp_path / 'runs'}", env=env)
    out, err = finish(proc, 300)
    assert proc.returncode == 0, err[-3000:]
    assert marked_processes(mark) == [] and leftovers(proc.pid) == []
    assert "checkpoints/mover/latest.pt, checkpoints/chooser/latest.pt" in out
    run = tmp_path / "runs" / "mc"
    rows = read_metrics(run)
    for policy in ("mover", "chooser"):
        updates = [r for r in rows if r["type"] == "update" and r.get("policy") == policy]
        assert updates and updates[-1]["policy_version"] >= 1, (policy, updates)
    spaces = json.loads((run / "config.json").read_text())["env_spec"]["agent_spaces"]
    assert spaces["mover"]["action_space"] == "Box(-1.0, 1.0, (2,), float32)"
    assert spaces["chooser"]["action_space"] == "Discrete(4)"
    # each policy's network was built for its own agent's spaces and trained on its own samples
    for policy, n_out, n_obs in (("mover", 2, 3), ("chooser", 4, 5)):
        ckpt = torch.load(run / "checkpoints" / policy / "latest.pt", map_location="cpu", weights_only=False)
        state = ckpt["algorithm"]["policy"]
        assert tuple(state["actor.4.weight"].shape) == (n_out, 64) and ckpt["updates"] >= 1
        assert tuple(state["actor.0.weight"].shape) == (64, n_obs)
        assert ("head.log_std" in state) == (policy == "mover")  # the Gaussian head of the Box agent only

    # zoo eval: each policy plays its agent in its own action space
    scores = tmp_path / "mc.jsonl"
    result = zoo("eval", str(run), "-n", "2", "--out", str(scores), env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    played = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [r["length"] for r in played] == [8, 8]
    assert all(set(r["policy_returns"]) == {"mover", "chooser"} for r in played)
    assert marked_processes(mark) == []
