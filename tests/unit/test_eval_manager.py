"""The eval manager (issue 23, item 3; docs/history.md, "The eval manager"): its games and Elo
ratings in the store (every figure worked out by hand), the cut on resume, the ``random``
baseline, turn-based PettingZoo games, its refusals before any worker starts, and what
``zoo league`` and ``zoo plot --y rating`` read."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import zoo.cli as cli
from zoo.core.baselines import RandomBaseline
from zoo.core.config import ConfigError, build_config
from zoo.core.history import EvalGame, EvalResult, Standing, VersionStore
from zoo.core.plugins import get_host, get_registry
from zoo.core.ratings import bradley_terry

TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"


def weights(x: float) -> dict:
    return {"format": 2, "algorithm": {"policy": {"w": torch.tensor([x])}, "config": {"lr": 0.1}}}


def store_with_versions(tmp_path, versions=(1, 2)) -> VersionStore:
    store = VersionStore(tmp_path)
    for v in versions:
        store.add("learner", v, v, 100 * v, float(v), weights(v))
    return store


# v1 beats random, then draws it; v2 loses to v1 (K = 32, everyone starts at 1000):
#   game 1: E = 0.5, v1 1000 + 32 * 0.5 = 1016, random 984
#   game 2: E(v1) = 1 / (1 + 10 ** ((984 - 1016) / 400)) = 1 / (1 + 10 ** -0.08) = 0.545922;
#           32 * (0.5 - 0.545922) = -1.469502: v1 1014.530498, random 985.469502
#   game 3: E(v2) = 1 / (1 + 10 ** (14.530498 / 400)) = 0.479101; 32 * (0 - 0.479101) = -15.331236:
#           v2 984.668764, v1 1029.861734
MATCH_1 = [EvalGame("v1", "random", 0, 1.0, 1.0, -1.0, 1, None), EvalGame("v1", "random", 1, 0.5, 0.0, 0.0, 1, None)]
MATCH_2 = [EvalGame("v2", "v1", 0, 0.0, -1.0, 1.0, 2, 1)]


def test_eval_games_move_elo_ratings_game_by_game(tmp_path):
    with store_with_versions(tmp_path) as store:
        assert store.record_eval("learner", MATCH_1, k=32, initial=1000) == 2
        assert store.record_eval("learner", MATCH_2, k=32, initial=1000) == 1
        by = {s.player: s for s in store.standings("learner")}
        assert [s.player for s in store.standings("learner")] == ["random", "v1", "v2"]  # baselines first
        assert by["v1"].rating == pytest.approx(1029.861734, abs=1e-6)
        assert by["random"].rating == pytest.approx(985.469502, abs=1e-6)
        assert by["v2"].rating == pytest.approx(984.668764, abs=1e-6)
        # totals from each player's side: v1 won twice (random, v2), drew once; its returns 1, 0, 1
        assert by["v1"] == Standing("v1", 1, by["v1"].rating, 3, 2, 1, 0, pytest.approx(2 / 3))
        assert by["random"] == Standing("random", None, by["random"].rating, 2, 0, 1, 1, -0.5)
        assert by["v2"] == Standing("v2", 2, by["v2"].rating, 1, 0, 0, 1, -1.0)
        assert store.eval_results("learner") == [
            EvalResult("v1", "random", 2, 1, 1, 0, 0.5), EvalResult("v2", "v1", 1, 0, 0, 1, -1.0)]
        assert store.eval_results("learner")[0].win_rate() == 0.75  # (1 + 1/2) / 2
        assert store.evaluated("learner") == {1, 2}
        # each game row holds both ratings after it; the training-game columns are untouched
        rows = store.db.execute("SELECT player, opponent, seat, score, player_rating, opponent_rating, k, initial "
                                "FROM eval_games ORDER BY id").fetchall()
        assert rows[0] == ("v1", "random", 0, 1.0, 1016.0, 984.0, 32.0, 1000.0)
        assert rows[1][4:6] == (pytest.approx(1014.530498, abs=1e-6), pytest.approx(985.469502, abs=1e-6))
        assert [(v.games, v.rating) for v in store.versions("learner")] == [(None, None), (None, None)]


def test_fitted_ratings_fit_all_eval_games_at_once_around_their_initial_rating(tmp_path):
    with store_with_versions(tmp_path) as store:
        assert store.fitted_ratings("learner") == {}
        # v1 beat random 5 times (test_league's worked case: x = 3), K = 16 and start 1200 (the
        # prior's centre); a game without an opponent is not part of the fit
        store.record_eval("learner", [EvalGame("v1", "random", i % 2, 1.0, 1.0, -1.0, 1) for i in range(5)]
                          + [EvalGame("v2", None, 0, None, 3.0, None, 2)], k=16, initial=1200)
        assert store.fitted_ratings("learner") == {"v1": pytest.approx(1390.848502, abs=1e-5),
                                                   "random": pytest.approx(1009.151498, abs=1e-5)}
        # the Elo standings moved one game at a time: 1200 + 8, then smaller steps
        assert {s.player: s.rating for s in store.standings("learner")}["v1"] < 1240


def test_k_and_the_initial_rating_are_the_games_own(tmp_path):
    with store_with_versions(tmp_path) as store:
        # K = 16, start 1200: v1 loses to random: 16 * (0 - 0.5) = -8
        store.record_eval("learner", [EvalGame("v1", "random", 0, 0.0, -1.0, 1.0, 1)], k=16, initial=1200)
        assert {s.player: s.rating for s in store.standings("learner")} == {"random": 1208.0, "v1": 1192.0}


def test_a_single_agent_game_counts_the_return_and_rates_nobody(tmp_path):
    with store_with_versions(tmp_path) as store:
        store.record_eval("learner", [EvalGame("v1", None, 0, None, 7.0, None, 1),
                                      EvalGame("v1", None, 0, None, 9.0, None, 1)], k=32, initial=1000)
        assert store.standings("learner") == [Standing("v1", 1, None, 2, 0, 0, 0, 8.0)]
        assert store.eval_results("learner") == [EvalResult("v1", None, 2, 0, 0, 0, 8.0)]
        assert store.eval_results("learner")[0].win_rate() is None


def test_resume_cut_drops_eval_games_of_newer_versions_and_replays_the_ratings(tmp_path):
    with store_with_versions(tmp_path) as store:
        store.record_eval("learner", MATCH_1, k=32, initial=1000)
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
        assert store.drop_after("learner", 1) == [2]
        by = {s.player: s for s in store.standings("learner")}
        assert set(by) == {"random", "v1"}  # v2's games (as player or opponent) are gone
        assert by["v1"].rating == pytest.approx(1014.530498, abs=1e-6) and by["v1"].games == 2
        assert by["random"].rating == pytest.approx(985.469502, abs=1e-6)
        assert store.evaluated("learner") == {1}
        assert store.db.execute("SELECT COUNT(*) FROM eval_games").fetchone()[0] == 2


def test_games_of_a_version_made_again_since_it_was_loaded_are_not_written(tmp_path):
    with store_with_versions(tmp_path) as store:
        loaded = {1: 1.0, 2: 2.0}  # time_s of the rows when the weights were loaded
        store.drop_after("learner", 1)
        store.add("learner", 2, 2, 200, 9.5, weights(2.5))  # the resumed trainer keeps version 2 again
        assert store.record_eval("learner", MATCH_1 + MATCH_2, k=32, initial=1000, loaded=loaded) == 2
        assert store.evaluated("learner") == {1}


# ----------------------------------------------------------------------------- the random baseline
def test_random_baseline_plays_only_legal_actions_and_each_of_them():
    from gymnasium import spaces

    spec = build_spec(spaces.Discrete(5))
    baseline = RandomBaseline(spec, seed=3)
    mask = torch.tensor([[False, True, False, True, False], [False, False, False, False, True],
                         [False, False, False, False, False]])  # the last row allows none: any action
    picks = np.stack([baseline.act({"obs": torch.zeros(3, 2), "zoo:action_mask": mask})["action"].numpy()
                      for _ in range(400)])
    assert set(picks[:, 0]) == {1, 3} and set(picks[:, 1]) == {4} and set(picks[:, 2]) == {0, 1, 2, 3, 4}
    again = RandomBaseline(spec, seed=3).act({"obs": torch.zeros(3, 2), "zoo:action_mask": mask})["action"]
    assert again.tolist() == picks[0].tolist()  # seeded


def test_random_baseline_multidiscrete_box_and_refusal():
    from gymnasium import spaces

    md = RandomBaseline(build_spec(spaces.MultiDiscrete([2, 3])), seed=0)
    mask = torch.tensor([[True, False, False, False, True]])  # entry 0: only 0; entry 1: only 2
    assert md.act({"x": torch.zeros(1, 1), "zoo:action_mask": mask})["action"].tolist() == [[0, 2]]
    box = RandomBaseline(build_spec(spaces.Box(-1.0, 1.0, (2,), np.float32)), seed=0)
    a = box.act({"x": torch.zeros(64, 1)})["action"].numpy()
    assert a.shape == (64, 2) and a.dtype == np.float32 and np.all(np.abs(a) <= 1.0)
    with pytest.raises(ValueError, match=r"^baseline 'random' cannot play action space Box\(-inf, inf"):
        RandomBaseline(build_spec(spaces.Box(-np.inf, np.inf, (2,), np.float32)), seed=0)


def build_spec(action_space):
    from zoo.core.env import EnvSpec

    return EnvSpec("t", ("a",), {}, action_space)


# ----------------------------------------------------------------------------- turn-based PettingZoo games
def test_tictactoe_plays_as_a_parallel_env_one_move_per_step():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.tictactoe_v3", PettingZooConfig(), 0)
    assert env.spec.agents == ("player_1", "player_2") and env.spec.action_space.n == 9
    obs, info = env.reset(seed=1)
    mask = obs["zoo:action_mask"]
    assert mask[0].all() and mask[1].tolist() == [True] + [False] * 8  # the waiting player: action 0 only
    # player_1 plays 0, 1, 2 (the top row) while player_2 plays 3, 4: player_1 wins on move 5
    moves = [(0, 0), (0, 3), (1, 0), (0, 4), (2, 0)]
    total = np.zeros(2)
    for step, (a1, a2) in enumerate(moves):
        obs, reward, terminated, truncated, info = env.step(np.array([a1, a2]))
        total += reward
        done = step == len(moves) - 1
        assert terminated.tolist() == [done, done] and not truncated.any()
        if not done:
            assert obs["zoo:action_mask"][step % 2].tolist() == [True] + [False] * 8  # who just moved waits
    assert total.tolist() == [1.0, -1.0] and info["active"].tolist() == [False, False]


# ----------------------------------------------------------------------------- refused before any worker starts
@pytest.mark.parametrize("overrides, field, message", [
    (["workers.eval.baselines=randm", "trainer.history.every_updates=1"], "workers.eval.baselines",
     "workers.eval.baselines: no baseline 'randm' is installed; did you mean 'random'? baselines: lookahead, random "
     "(see `zoo list baselines`)"),
    ([], "workers.eval.policy",
     "workers.eval.policy: policy default keeps no history, so the eval manager has no version to play; set "
     "trainer.history.every_updates=N (or every_minutes=M; docs/history.md)"),
    (["trainer.history.every_updates=1", "workers.eval.elo_k=0"], "workers.eval.elo_k",
     "workers.eval.elo_k must be in (0, 400], got 0.0"),
    (["trainer.history.every_updates=1", "workers.eval.initial_rating=-5"], "workers.eval.initial_rating",
     "workers.eval.initial_rating must be in [0, 10000], got -5.0"),
    (["trainer.history.every_updates=1", "workers.eval.count=2"], "workers.eval.count",
     "workers.eval.count must be in [0, 1] (one eval manager writes a policy's ratings), got 2"),
    (["trainer.history.every_updates=1", "workers.eval.episodes=0"], "workers.eval.episodes",
     "workers.eval.episodes must be in [1, 100000], got 0"),
    (["trainer.history.every_updates=1", "workers.eval.every_versions=0"], "workers.eval.every_versions",
     "workers.eval.every_versions = 0 and workers.eval.every_minutes = 0: nothing schedules an evaluation; set "
     "every_versions=1 (each kept version) or every_minutes=M"),
    (["trainer.history.every_updates=1", "workers.eval.policy=learner"], "workers.eval.policy",
     "workers.eval.policy = 'learner': the run names no policies (its one policy is 'default'); leave "
     "workers.eval.policy out"),
])
def test_bad_eval_settings_are_refused_naming_the_field_and_the_fix(overrides, field, message):
    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "mappo", TICTACTOE, overrides=["workers.eval.count=1", *overrides], name="x")
    assert (err.value.field, str(err.value)) == (field, message)


def test_a_named_policy_without_history_is_refused(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[policies.learner]\nalgo = "mappo"\n[policies.rival]\nalgo = "mappo"\n'
                    'trainer.history.every_updates = 1\n[[agents]]\nmatch = "player_2"\npolicy = "rival"\n'
                    '[[agents]]\nmatch = "*"\npolicy = "learner"\n[workers.eval]\ncount = 1\npolicy = "learner"\n')
    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "mappo", TICTACTOE, config_file=conf, name="x")
    assert "workers.eval.policy: policy learner keeps no history, so the eval manager has no version to play; set " \
           "policies.learner.trainer.history.every_updates=N (or every_minutes=M; docs/history.md)" in str(err.value)


def test_a_good_eval_config_is_typed():
    cfg = build_config(get_registry(), "mappo", TICTACTOE, name="x",
                       overrides=["workers.eval.count=1", "trainer.history.every_updates=2", "workers.eval.elo_k=16",
                                  "workers.eval.deterministic=true", "workers.eval.baselines=random"])
    assert cfg.workers["eval"] == {"count": 1, "elo_k": 16.0, "deterministic": True, "baselines": ["random"]}


# ----------------------------------------------------------------------------- zoo league and zoo plot
def test_zoo_league_prints_the_eval_managers_table_and_json(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"algo_name": "mappo", "env_name": TICTACTOE}))
    with store_with_versions(run) as store:
        store.record_eval("learner", MATCH_1, k=32, initial=1000)
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
    app = cli.build_app(get_host())
    result = CliRunner().invoke(app, ["league", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in result.output.splitlines()]
    assert "policy learner: eval manager, 2 versions rated" in lines
    assert "player env steps rating fit rating games vs random mean return" in lines
    fit = bradley_terry([("v1", "random", 1.0), ("v1", "random", 0.5), ("v2", "v1", 0.0)])
    assert f"random - 985.5 {fit['random']:.1f} 2 - -0.50" in lines
    assert f"v1 100 1029.9 {fit['v1']:.1f} 3 0.750 0.67" in lines
    assert f"v2 200 984.7 {fit['v2']:.1f} 1 - -1.00" in lines
    data = json.loads(CliRunner().invoke(app, ["league", str(run), "--json"]).output)["learner"]
    assert data[0]["baseline"] == "random" and data[0]["version"] is None
    assert data[0]["eval"]["rating"] == pytest.approx(985.469502, abs=1e-6)
    assert data[0]["eval"]["fit_rating"] == pytest.approx(fit["random"])
    v1 = data[1]
    assert v1["version"] == 1 and v1["eval"]["vs"]["random"] == {"games": 2, "wins": 1, "draws": 1, "losses": 0,
                                                                 "win_rate": 0.75, "mean_return": 0.5}
    assert v1["eval"]["vs"] == {"random": v1["eval"]["vs"]["random"]}  # v1 was the player only against random


def test_rating_rows_give_each_versions_rating_at_its_env_steps(tmp_path):
    from zoo.plotting import rating_rows

    with store_with_versions(tmp_path, versions=(1, 2, 3)) as store:
        store.record_eval("learner", MATCH_1, k=32, initial=1000)
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
    rows = rating_rows(tmp_path)
    assert [(r["version"], r["env_steps"], round(r["rating"], 6)) for r in rows] == [
        (1, 100, 1029.861734), (2, 200, 984.668764)]  # version 3 has no rating of either kind
    # the fit to all the games at once, as zoo league's "fit rating" column
    fit = bradley_terry([("v1", "random", 1.0), ("v1", "random", 0.5), ("v2", "v1", 0.0)])
    assert [r["fit_rating"] for r in rows] == [fit["v1"], fit["v2"]]
    assert fit["v1"] > fit["v2"]  # v2 lost its one game to v1


def test_a_resumed_trainer_cuts_the_eval_managers_games_of_versions_after_its_checkpoint(tmp_path):
    from types import SimpleNamespace

    from zoo.core.workers.history import History

    with VersionStore(tmp_path) as store:
        for v in (1, 2, 3):
            store.add("default", v, v, 100 * v, float(v), weights(v))
        store.record_eval("default", MATCH_1, k=32, initial=1000)
        store.record_eval("default", MATCH_2, k=32, initial=1000)
        store.record_eval("default", [EvalGame("v3", "random", 0, 1.0, 1.0, -1.0, 3)], k=32, initial=1000)
    # the trainer of a resumed run (resume = 1) whose checkpoint holds version 1
    cfg = SimpleNamespace(resume=1, policies=None,
                          trainer=SimpleNamespace(history=SimpleNamespace(every_updates=1, every_minutes=0, keep=0)))
    history = History.open(SimpleNamespace(run_dir=str(tmp_path), policy="", attempt=0), cfg, 1)
    assert history is not None
    history.close()
    with VersionStore(tmp_path, readonly=True) as store:
        assert [v.version for v in store.versions("default")] == [1]
        by = {s.player: s for s in store.standings("default")}
        assert set(by) == {"random", "v1"} and store.evaluated("default") == {1}
        # replayed: v1's two games against random only (the v2 and v3 games are gone)
        assert by["v1"].rating == pytest.approx(1014.530498, abs=1e-6)
        assert by["random"].rating == pytest.approx(985.469502, abs=1e-6) and by["random"].games == 2
        assert store.db.execute("SELECT player_rating FROM eval_games ORDER BY id").fetchall()[0] == (1016.0,)


def schedule(store, clock, **options):
    """An Evaluator's schedule state alone (no envs, no networks): what ``due`` reads."""
    from zoo.core.workers.evaluator import EvalOptions, Evaluator

    ev = object.__new__(Evaluator)
    ev.opts, ev.clock, ev.store, ev.policy = EvalOptions(**options), clock, store, "learner"
    ev.seen, ev.new_since, ev.last_eval, ev.tried = -1, 0, clock(), set()
    return ev


def test_every_version_is_evaluated_oldest_first_and_once(tmp_path):
    with store_with_versions(tmp_path) as store:
        ev = schedule(store, lambda: 0.0)
        assert ev.due().version == 1
        store.record_eval("learner", MATCH_1, k=32, initial=1000)  # v1 played
        assert ev.due().version == 2
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
        assert ev.due() is None
        store.add("learner", 3, 3, 300, 3.0, weights(3))
        assert ev.due().version == 3


def test_every_n_versions_and_every_m_minutes(tmp_path):
    now = [0.0]
    with store_with_versions(tmp_path, versions=(1,)) as store:
        ev = schedule(store, lambda: now[0], every_versions=2, every_minutes=1.0)
        assert ev.due() is None  # one new version of 2; 0 s of 60
        store.add("learner", 2, 2, 200, 2.0, weights(2))
        assert ev.due().version == 2  # 2 new versions: the newest not evaluated
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
        assert ev.due() is None  # v1 is not evaluated, but neither schedule is due
        now[0] = 60.0
        assert ev.due().version == 1  # a minute since the last evaluation: the newest not evaluated


def test_zoo_plot_draws_each_versions_rating_over_env_steps(tmp_path):
    from zoo.plotting import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"algo_name": "mappo", "env_name": TICTACTOE}))
    (run / "metrics.jsonl").write_text(json.dumps({"type": "episode", "env_steps": 9, "return": 0.0}) + "\n")
    with store_with_versions(run) as store:
        store.record_eval("learner", MATCH_1, k=32, initial=1000)
        store.record_eval("learner", MATCH_2, k=32, initial=1000)
    fig = plot_runs([run], ["rating"])
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_gid() == "run|rating"]
    assert line.get_xdata().tolist() == [100.0, 200.0]
    assert np.round(line.get_ydata(), 6).tolist() == [1029.861734, 984.668764]
    assert fig.axes[0].get_ylabel() == "eval manager's Elo rating of each kept version"


def test_in_a_one_agent_env_versions_and_baselines_are_scored_by_return_alone(tmp_path):
    from types import SimpleNamespace

    from zoo.core.checkpoint import FORMAT
    from zoo.core.kinds import options_of
    from zoo.core.workers.evaluator import Evaluator

    reg = get_registry()
    cfg = build_config(reg, "ppo", "CartPole-v1", name="x", overrides=[
        "trainer.history.every_updates=1", "workers.eval.count=1", "workers.eval.episodes=3",
        "workers.eval.envs=2"])
    ctx = SimpleNamespace(cfg=cfg, spec=cfg.spec, registry=reg, run_dir=str(tmp_path), index=0, attempt=0,
                          stop=False, policy="", role="eval")
    net = reg.get("algorithm", "ppo").load().build_policy(cfg.algo, cfg.spec)
    with VersionStore(tmp_path) as store:
        store.add("default", 1, 1, 256, 1.0, {"format": FORMAT, "algorithm": {"policy": net.state_dict(),
                                                                            "config": None}})
    ev = Evaluator(ctx, options_of(ctx))
    try:
        assert ev.open_store()
        row = ev.due()
        assert row.version == 1
        assert ev.evaluate(row) == 6  # random's 3 episodes (once), then v1's 3
        assert ev.due() is None
    finally:
        ev.close()
    with VersionStore(tmp_path, readonly=True) as store:
        got = {s.player: s for s in store.standings("default")}
        rows = store.db.execute("SELECT player, opponent, score, player_return FROM eval_games ORDER BY id").fetchall()
    assert [r[:3] for r in rows] == [("random", None, None)] * 3 + [("v1", None, None)] * 3
    assert all(r[3] >= 1.0 for r in rows)  # a CartPole episode earns 1 per step, at least one step
    assert {p: (s.rating, s.games) for p, s in got.items()} == {"random": (None, 3), "v1": (None, 3)}
    assert got["v1"].mean_return == pytest.approx(sum(r[3] for r in rows[3:]) / 3)


def test_a_version_with_no_opponent_is_passed_over_not_played_again(tmp_path):
    with store_with_versions(tmp_path) as store:
        ev = schedule(store, lambda: 0.0)
        assert ev.due().version == 1
        ev.tried.add(1)  # what evaluate() does first: v1, the oldest, had no older version to play
        assert ev.due().version == 2


def test_no_opponent_at_all_is_refused():
    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "mappo", TICTACTOE, name="x", overrides=[
            "workers.eval.count=1", "trainer.history.every_updates=1", "workers.eval.baselines=",
            "workers.eval.past_versions=0"])
    assert str(err.value) == ("workers.eval.baselines = [] and workers.eval.past_versions = 0: a version has no "
                              "opponent to play; name a baseline (random) or set past_versions=N")
