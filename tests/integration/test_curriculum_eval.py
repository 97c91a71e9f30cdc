"""A curriculum driven by the eval manager end to end (docs/curriculum.md, ``curriculum.source =
"eval"``): ``zoo train ppo --env fake-stages`` with an eval manager that evaluates every kept
version (10 deterministic episodes at the run's stage) clears stage 0 -> 1 -> 2 on those
episodes, each advance a ``curriculum`` row naming the game that completed it, the actors
follow, and a resume keeps the stage (the eval manager plays on at it)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from zoo.core.checkpoint import load_checkpoint
from zoo.core.history import VersionStore
from zoo.core.testing import subprocess_env
from zoo.core.testing.cli import interrupt, mark_env, nothing_left, read_metrics, rows, start, wait_for, zoo

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[2] / "tests" / "plugins" / "zoo-fakes"
OVER = 10
SETTINGS = ("--set", "log.tensorboard=false", "--set", "algo.epochs=2",
            "--set", "curriculum.advance_when=mean_return >= 0.9", "--set", f"curriculum.over_episodes={OVER}",
            "--set", "curriculum.source=eval", "--set", "trainer.history.every_updates=1",
            "--set", "workers.eval.count=1", "--set", "workers.eval.episodes=10",
            "--set", "workers.eval.deterministic=true")


def games(run: Path) -> list[tuple]:
    """``(id, player_version, curriculum_stage, player_return)`` of the versions' eval games, in play order."""
    if not (run / "history.sqlite").exists():
        return []
    with VersionStore(run, readonly=True) as store:
        return store.db.execute("SELECT id, player_version, curriculum_stage, player_return FROM eval_games "
                                "WHERE player_version IS NOT NULL ORDER BY id").fetchall()


def test_the_eval_managers_episodes_clear_the_stages_in_order_and_a_resume_keeps_the_stage(tmp_path):
    mark = uuid.uuid4().hex
    run = tmp_path / "ce"
    env = mark_env(mark, FAKES)
    proc = start("train", "ppo", "--env", "fake-stages", "--name", "ce", "--steps", "60000",
                 "--set", f"runs_dir={tmp_path}", *SETTINGS, env=env, new_session=True)
    # the last stage reached the actors (a training episode played at it, after the curriculum row of stage 2)
    # and, through the parameters' meta, the eval manager (an eval game played at it)
    wait_for(lambda: any(r.get("curriculum_stage") == 2 for r in rows(run, "episode"))
             and any(g[2] == 2 for g in games(run)), 300, "a training episode and an eval game at stage 2", proc)
    interrupt(proc)  # the trainer writes its checkpoint and the run exits with 130
    nothing_left(proc, mark)

    metrics = read_metrics(run)
    stages = [(i, r) for i, r in enumerate(metrics) if r["type"] == "curriculum"]
    assert [r["stage"] for _, r in stages] == [0, 1, 2] and stages[0][1]["env_steps"] == 0
    played = games(run)
    for (_, before), (at, row) in zip(stages, stages[1:], strict=False):
        assert (row["source"], row["condition"], row["over_episodes"]) == ("eval", "mean_return >= 0.9", OVER)
        assert row["stage_name"] == f"length-{row['stage'] + 1}"
        # the decision, recomputed from the store: the eval games played at the stage before, in play order;
        # the advance came with the first one whose last 10 returns averaged >= 0.9
        at_stage = [g for g in played if g[2] == before["stage"]]
        first = next(k for k in range(OVER - 1, len(at_stage))
                     if sum(g[3] for g in at_stage[k - OVER + 1:k + 1]) / OVER >= 0.9)
        assert (row["eval_game"], row["eval_version"]) == at_stage[first][:2]
        # the actors followed: their episodes from then on reach the new stage, never go back before the old one
        later = [r["curriculum_stage"] for r in metrics[at:] if r["type"] == "episode"]
        assert row["stage"] in later and min(later) >= before["stage"]
    # the eval manager played each version at the stage it had heard of, never one the run had not reached yet
    assert {g[2] for g in played} == {0, 1, 2}
    assert all(g[2] <= 1 for g in played if g[0] <= stages[2][1]["eval_game"])
    ckpt = load_checkpoint(str(run / "checkpoints" / "latest.pt"))
    assert ckpt["trainer"]["curriculum"]["stage"] == 2
    assert ckpt["trainer"]["curriculum"]["eval_cursor"] >= stages[2][1]["eval_game"]
    entry = next(w for w in json.loads((run / "graph.json").read_text())["workers"] if w["role"] == "eval")
    assert (entry["connects"], entry["subscribes"]) == (["parameter"], "parameter")

    last = max(g[0] for g in games(run))  # the resume cuts games of versions after its checkpoint; ids go on
    again = start("train", "--resume", str(run), "--steps", "200000", env=env, new_session=True)

    def resumed_and_evaluated() -> bool:
        kinds = [r["type"] for r in read_metrics(run)]
        return "resume" in kinds and "episode" in kinds[kinds.index("resume"):] and any(g[0] > last
                                                                                       for g in games(run))

    wait_for(resumed_and_evaluated, 300, "a training episode and an eval game of the resumed run", again)
    interrupt(again)
    nothing_left(again, mark)
    metrics = read_metrics(run)
    resumed = next(i for i, r in enumerate(metrics) if r["type"] == "resume")
    assert metrics[resumed]["curriculum_stage"] == 2
    assert {g[2] for g in games(run) if g[0] > last} == {2}  # the eval manager started at the run's stage
    after = [r["curriculum_stage"] for r in metrics[resumed:] if r["type"] == "episode"]
    assert after and min(after) == 2


def test_an_eval_driven_curriculum_without_an_eval_manager_is_refused_before_anything_starts(tmp_path):
    result = zoo("train", "ppo", "--env", "fake-stages", "--name", "x", "--steps", "2000",
                 "--set", f"runs_dir={tmp_path}", "--set", "curriculum.advance_when=mean_return >= 0.9",
                 "--set", "curriculum.source=eval", env=subprocess_env(FAKES), timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert ("error: curriculum.source = 'eval': the run has no eval manager to play the evaluation episodes; set "
            "workers.eval.count=1 (with trainer.history.every_updates=N, docs/history.md), or "
            "curriculum.source=training") in result.stderr
    assert not (tmp_path / "x").exists()
