"""A curriculum end to end (docs/curriculum.md): ``zoo train ppo --env fake-stages`` with a
``[curriculum]`` clears stage 0 -> 1 from the training episodes, writes the ``curriculum``
rows, shows the stage on the live line, and a resume keeps the stage; a curriculum on an env
without stages is refused before any process starts."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import marked_processes, read_metrics, zoo

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[2] / "tests" / "plugins" / "zoo-fakes"
# over 100 episodes a random policy (return 1 with probability 1/2 at stage 0) never passes 0.8 (P ~ 6e-10)
CURRICULUM = ("--set", "curriculum.advance_when=mean_return >= 0.8", "--set", "curriculum.over_episodes=100")


def test_ppo_clears_the_stages_in_order_and_a_resume_keeps_the_stage(tmp_path):
    mark = uuid.uuid4().hex
    env = subprocess_env(FAKES, ZOO_TEST_MARK=mark)
    first = zoo("train", "ppo", "--env", "fake-stages", "--name", "c", "--steps", "8000",
                "--set", f"runs_dir={tmp_path}", "--set", "algo.epochs=2", *CURRICULUM, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "stage=0 of 3 (length-1)" in first.stdout  # the live line (plain: one line per status)
    rows = read_metrics(tmp_path / "c")
    stages = [(i, r) for i, r in enumerate(rows) if r["type"] == "curriculum"]
    assert stages[0][1]["stage"] == 0 and stages[0][1]["env_steps"] == 0 and stages[0][1]["stage_name"] == "length-1"
    assert [r["stage"] for _, r in stages] == list(range(len(stages))) and len(stages) >= 2  # 0 -> 1 at least
    for (_, before), (at, row) in zip(stages, stages[1:]):
        assert row["stage_name"] == f"length-{row['stage'] + 1}" and row["condition"] == "mean_return >= 0.8"
        assert row["env_steps"] > before["env_steps"] and row["policy_version"] >= before["policy_version"]
        # the advance's window: the last 100 episodes played at the stage before it, as the trainer saw them
        played = [r["return"] for r in rows[:at] if r["type"] == "episode"
                  and r["curriculum_stage"] == before["stage"]][-100:]
        assert len(played) == 100 and sum(played) / 100 >= 0.8
        # from then on the actors play the new stage (after the episodes already under way)
        later = [r["curriculum_stage"] for r in rows[at:] if r["type"] == "episode"]
        assert row["stage"] in later and all(s in (before["stage"], row["stage"]) or s > row["stage"] for s in later)
    reached = stages[-1][1]["stage"]
    ckpt = load_checkpoint(str(tmp_path / "c" / "checkpoints" / "latest.pt"))
    assert ckpt["trainer"]["curriculum"]["stage"] == reached

    second = zoo("train", "--resume", str(tmp_path / "c"), "--steps", "9000", env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert marked_processes(mark) == []
    rows = read_metrics(tmp_path / "c")
    resumed = next(i for i, r in enumerate(rows) if r["type"] == "resume")
    assert rows[resumed]["curriculum_stage"] == reached
    after = [r["curriculum_stage"] for r in rows[resumed:] if r["type"] == "episode"]
    assert after and min(after) == reached  # the actors started at the run's stage, not at 0
    final = load_checkpoint(str(tmp_path / "c" / "checkpoints" / "latest.pt"))
    assert final["trainer"]["curriculum"]["stage"] >= reached


def test_a_curriculum_on_an_env_without_stages_is_refused_before_anything_starts(tmp_path):
    result = zoo("train", "ppo", "--env", "fake-counting", "--name", "x", "--steps", "2000",
                 "--set", f"runs_dir={tmp_path}", *CURRICULUM, env=subprocess_env(FAKES), timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert ("error: curriculum.advance_when: env 'fake-counting' has no curriculum stages (its spec.stages is empty, "
            "it has no set_curriculum_stage); drop the [curriculum] section") in result.stderr
    assert not (tmp_path / "x").exists()
