"""A curriculum driven by the eval manager (``curriculum.source = "eval"``, docs/curriculum.md):
the refusal without an eval manager, the store's evaluation episodes, the decision the lead
trainer takes from them, and the eval manager playing at the stage the parameters carry."""
from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest

from tests.unit.trainer_harness import accounting_trainer, fake_host
from zoo.core.config import ConfigError, build_config
from zoo.core.curriculum import Curriculum, CurriculumConfig, EvalFeed, curriculum_problems, parse_conditions
from zoo.core.history import EvalEpisode, EvalGame, VersionStore
from zoo.core.testing.fake_envs import StagedCorridorEnv

STAGED = ("curriculum.advance_when=mean_return >= 0.9", "curriculum.source=eval")


def test_an_eval_driven_curriculum_without_an_eval_manager_is_refused_naming_the_key_and_the_fix():
    host = fake_host()
    with pytest.raises(ConfigError) as err:
        build_config(host.registry, "ppo", "fake-stages", name="x", overrides=list(STAGED))
    assert err.value.field == "curriculum.source"
    assert str(err.value) == ("curriculum.source = 'eval': the run has no eval manager to play the evaluation "
                              "episodes; set workers.eval.count=1 (with trainer.history.every_updates=N, "
                              "docs/history.md), or curriculum.source=training")
    with pytest.raises(ConfigError) as err:  # workers.eval.count=0 said outright is the same
        build_config(host.registry, "ppo", "fake-stages", name="x", overrides=[*STAGED, "workers.eval.count=0"])
    assert err.value.field == "curriculum.source"
    with pytest.raises(ConfigError) as err:
        build_config(host.registry, "ppo", "fake-stages", name="x", overrides=[STAGED[0], "curriculum.source=evals"])
    assert str(err.value) == ("--set curriculum.source=evals: curriculum.source expects one of 'training', 'eval', "
                              "got 'evals'")
    cfg = build_config(host.registry, "ppo", "fake-stages", name="x",
                       overrides=[*STAGED, "workers.eval.count=1", "trainer.history.every_updates=1"])
    assert (cfg.curriculum.source, cfg.curriculum.from_eval) == ("eval", True)
    # the default stays the training episodes; off, the source is never looked at
    assert CurriculumConfig(["mean_return >= 0.9"]).from_eval is False
    assert curriculum_problems(SimpleNamespace(curriculum=CurriculumConfig([], source="eval"), workers={})) == []


def _game(version: int | None, ret: float, stage: int | None, length: float = 1.0) -> EvalGame:
    player = "random" if version is None else f"v{version}"
    return EvalGame(player, None, 0, None, ret, None, version, curriculum_stage=stage,
                    stats=None if stage is None else {"length": length})


def test_the_store_gives_a_versions_evaluation_episodes_at_a_stage_after_a_cursor(tmp_path):
    with VersionStore(tmp_path) as store:
        store.add("default", 1, 1, 100, 1.0, {"w": 1})
        store.record_eval("default", [_game(None, 1.0, None), _game(1, 1.0, 0, 1.0), _game(1, 0.0, None),
                                      _game(1, 0.0, 1, 2.0)], k=32, initial=1000)
        got = store.eval_episodes("default")
        # the baseline's game (id 1) and the game without a stage (id 3) are not the curriculum's
        assert got == [EvalEpisode(2, 1, 0, {"return": 1.0, "length": 1.0}),
                       EvalEpisode(4, 1, 1, {"return": 0.0, "length": 2.0})]
        assert store.eval_episodes("default", after=2) == got[1:]
        assert store.eval_episodes("other") == []


def test_a_store_made_before_the_stage_columns_gets_them_when_a_writer_opens_it(tmp_path):
    db = sqlite3.connect(tmp_path / "history.sqlite")
    db.execute("CREATE TABLE eval_games (id INTEGER PRIMARY KEY AUTOINCREMENT, policy TEXT NOT NULL, player TEXT "
               "NOT NULL, player_version INTEGER, opponent TEXT, opponent_version INTEGER, seat INTEGER NOT NULL, "
               "score REAL, player_return REAL NOT NULL, opponent_return REAL, deterministic INTEGER NOT NULL, "
               "k REAL NOT NULL, initial REAL NOT NULL, player_rating REAL, opponent_rating REAL, "
               "time_s REAL NOT NULL)")
    db.execute("INSERT INTO eval_games (policy, player, player_version, seat, player_return, deterministic, k, "
               "initial, time_s) VALUES ('default', 'v1', 1, 0, 1.0, 0, 32, 1000, 0)")
    db.commit()
    db.close()
    with VersionStore(tmp_path) as store:
        store.add("default", 1, 1, 100, 1.0, {"w": 1})
        assert store.eval_episodes("default") == []  # the old game has no stage
        store.record_eval("default", [_game(1, 1.0, 2, 3.0)], k=32, initial=1000)
        assert store.eval_episodes("default") == [EvalEpisode(2, 1, 2, {"return": 1.0, "length": 3.0})]


def _feed(conditions: list[str], over: int, stage: int = 0, cursor: int = 0) -> EvalFeed:
    spec = StagedCorridorEnv(3).spec
    cur = Curriculum(parse_conditions(CurriculumConfig(conditions), spec.stages, "fake-stages"), over, stage)
    return EvalFeed(cur, cursor)


def test_the_feed_counts_the_current_stages_episodes_in_play_order_and_says_which_one_advanced():
    # stage 0 -> 1 at mean return >= 0.5, 1 -> 2 at min length >= 2; windows of 3 episodes
    feed = _feed(["mean_return >= 0.5", "min_length >= 2"], over=3)
    episodes = [EvalEpisode(3, 1, 0, {"return": 0.0, "length": 1.0}),   # window [0]
                EvalEpisode(4, 1, 1, {"return": 1.0, "length": 2.0}),   # stage 1: not now
                EvalEpisode(5, 1, 0, {"return": 1.0, "length": 1.0}),   # [0, 1]: not full
                EvalEpisode(6, 2, 0, {"return": 0.0, "length": 1.0}),   # [0, 1, 0]: mean 1/3 < 0.5
                EvalEpisode(7, 2, 0, {"return": 1.0, "length": 1.0}),   # [1, 0, 1]: mean 2/3 >= 0.5: stage 1
                EvalEpisode(8, 2, 0, {"return": 1.0, "length": 1.0}),   # played at stage 0: dropped
                EvalEpisode(9, 3, 1, {"return": 0.0}),                  # stage 1 without a length
                EvalEpisode(10, 3, 1, {"return": 1.0, "length": 2.0}),  # lengths [2]
                EvalEpisode(11, 3, 1, {"return": 0.0, "length": 1.0}),  # [2, 1]
                EvalEpisode(12, 4, 1, {"return": 1.0, "length": 2.0}),  # [2, 1, 2]: min 1 < 2
                EvalEpisode(13, 4, 1, {"return": 1.0, "length": 2.0}),  # [1, 2, 2]: min 1 < 2
                EvalEpisode(14, 4, 1, {"return": 1.0, "length": 2.0}),  # [2, 2, 2]: min 2 >= 2: stage 2
                EvalEpisode(15, 5, 2, {"return": 1.0, "length": 3.0})]  # the last stage: nothing to count
    got = [feed.offer(e) for e in episodes]
    assert got == ["counted", "skipped", "counted", "counted", "advanced", "skipped", "missing", "counted",
                   "counted", "counted", "counted", "advanced", "skipped"]
    assert (feed.curriculum.stage, feed.cursor) == (2, 15)
    assert feed.state_dict() == {"stage": 2, "window": [], "eval_cursor": 15}
    assert feed.offer(EvalEpisode(15, 5, 2, {"return": 1.0})) == "skipped"  # offered already


def _trainer(store: VersionStore, over: int):
    """The lead trainer's curriculum bookkeeping alone (Trainer.account, observe_eval), no processes."""
    feed = _feed(["mean_return >= 0.9"], over)
    return accounting_trainer(feed.curriculum, feed, SimpleNamespace(store=store, policy="default",
                                                                     saw=lambda episode: None))


def test_the_trainer_advances_on_the_eval_managers_episodes_not_on_the_training_ones(tmp_path):
    with VersionStore(tmp_path) as store:
        store.add("default", 1, 1, 100, 1.0, {"w": 1})
        t = _trainer(store, over=2)
        # training episodes that would pass the condition twice over are not the curriculum's now
        t.account([{"env_steps": 4, "dropped": 0, "actor_dropped": 0, "episode_at": [0, 1, 2, 3],
                    "episodes": [{"return": 1.0, "length": 1, "curriculum_stage": 0}] * 4}])
        assert (t.curriculum.stage, t.ctx.sent) == (0, [])
        # v1 at stage 0: returns 1, 0, 1, 1: windows [1, 0] (0.5), [0, 1] (0.5), [1, 1] (1.0 >= 0.9) at game 4
        store.record_eval("default", [_game(1, r, 0) for r in (1.0, 0.0, 1.0, 1.0)], k=32, initial=1000)
        t.observe_eval()
        assert (t.curriculum.stage, t.stage_changed, t.eval_feed.cursor) == (1, True, 4)
        assert t.ctx.sent == [("curriculum", {"curriculum_stage": 1, "curriculum_stages": 3,
                                              "curriculum_stage_name": "length-2", **t.counters()})]
        # a stage-0 game written after the advance is not counted at stage 1
        store.record_eval("default", [_game(1, 1.0, 0), _game(1, 1.0, 1)], k=32, initial=1000)
        t.observe_eval()
        assert (t.curriculum.stage, list(t.curriculum.window), t.eval_feed.cursor) == (1, [1.0], 6)


def test_the_eval_manager_plays_at_the_stage_the_parameters_carry_and_writes_it_with_each_game(tmp_path):
    from zoo.core.checkpoint import FORMAT
    from zoo.core.kinds import options_of
    from zoo.core.workers.evaluator import Evaluator

    host = fake_host()
    cfg = build_config(host.registry, "ppo", "fake-stages", name="x", overrides=[
        *STAGED, "trainer.history.every_updates=1", "workers.eval.count=1", "workers.eval.episodes=3",
        "workers.eval.envs=2"])
    metas = [({}, {"policy_version": 1, "curriculum_stage": 1})]

    class Subscriber:
        def latest(self, timeout):
            return metas.pop(0) if metas else None

        def close(self):
            pass

    asked: list[str] = []

    def transport(stream):
        asked.append(stream)
        return SimpleNamespace(subscriber=lambda endpoint: asked.append(endpoint) or Subscriber())

    ctx = SimpleNamespace(cfg=cfg, spec=cfg.spec, registry=host.registry, run_dir=str(tmp_path), index=0, attempt=0,
                          stop=False, policy="", role="eval", curriculum_stage=0, transport=transport)
    net = host.registry.get("algorithm", "ppo").load().build_policy(cfg.algo, cfg.spec)
    with VersionStore(tmp_path) as store:
        store.add("default", 1, 1, 256, 1.0, {"format": FORMAT, "algorithm": {"policy": net.state_dict(),
                                                                            "config": None}})
    ev = Evaluator(ctx, options_of(ctx))
    try:
        assert asked == ["parameter", "parameter"] and ev.stage == 0  # the controller's stage, until parameters
        assert ev.open_store()
        assert ev.evaluate(ev.due()) == 6  # random's 3 episodes, then v1's 3
        # the stage 1 of the parameters was told to both envs before the first match's resets: all 6 played it
        played = [s for env in ev.envs for s in env.stages_played]
        assert (played, ev.env_stage) == ([1] * 6, [1, 1])
        with VersionStore(tmp_path) as store:
            rows = store.db.execute("SELECT player, curriculum_stage, stats FROM eval_games ORDER BY id").fetchall()
            episodes = store.eval_episodes("default")
        assert [r[:2] for r in rows] == [("random", None)] * 3 + [("v1", 1)] * 3  # a baseline's games: no stage
        assert [e.stage for e in episodes] == [1, 1, 1]
        # stage 1: two steps and return 1 when cleared, else 0 after a wrong first or second action
        assert all(e.values["length"] in (1.0, 2.0) and (e.values["return"] == 0.0 or e.values["length"] == 2.0)
                   for e in episodes)
    finally:
        ev.close()
