"""Results of training games in the version history, Elo ratings, and ``zoo league``
(issue 23, item 3; docs/history.md, "Results and ratings"). Every figure is worked out by hand."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import zoo.cli as cli
from tests.unit.fakes import one_line_error
from zoo.core.history import HistorySchedule, Query, VersionStore, query_weights
from zoo.core.plugins import get_host
from zoo.core.ratings import Game, bradley_terry, elo_update, expected_score, games_in, learner_score
from zoo.core.workers.history import History


def weights(x: float) -> dict:
    return {"format": 2, "algorithm": {"policy": {"w": torch.tensor([x])}, "config": {"lr": 0.1}}}


# ----------------------------------------------------------------------------- Elo
def test_expected_score_is_the_fide_formula():
    assert expected_score(1000, 1000) == 0.5
    assert expected_score(1400, 1000) == pytest.approx(10 / 11)  # 1 / (1 + 10 ** -1)
    assert expected_score(1000, 1400) == pytest.approx(1 / 11)


def test_elo_updates_of_a_few_games():
    assert elo_update(1000, 1000, 1.0) == (1016.0, 984.0)  # K = 32: 32 * (1 - 0.5)
    assert elo_update(1000, 1000, 0.5) == (1000.0, 1000.0)
    a, b = elo_update(1400, 1000, 1.0)  # favourite wins: 32 * (1 - 10/11) = 32/11
    assert (a, b) == (pytest.approx(1400 + 32 / 11), pytest.approx(1000 - 32 / 11))
    a, b = elo_update(1400, 1000, 0.0, k=16)  # favourite loses: 16 * (0 - 10/11) = -160/11
    assert (a, b) == (pytest.approx(1400 - 160 / 11), pytest.approx(1000 + 160 / 11))
    a, b = elo_update(1016, 984, 0.5)  # E = 1 / (1 + 10 ** -0.08) = 0.545922...: 32 * (0.5 - E) = -1.469502
    assert (a, b) == (pytest.approx(1014.530498, abs=1e-6), pytest.approx(985.469502, abs=1e-6))
    with pytest.raises(ValueError, match="score_a=2"):
        elo_update(1000, 1000, 2)
    with pytest.raises(ValueError, match="k=-1"):
        elo_update(1000, 1000, 1, k=-1)


def test_bradley_terry_fits_all_games_at_once():
    # A beat B 5 times; 2 virtual draws each against a virtual player at 1000. By symmetry
    # R_A - 1000 = 1000 - R_B; with x = 10 ** ((R_A - 1000) / 400) A's equation (wins = expected wins)
    # is 5 + 1 = 5 x^2 / (x^2 + 1) + 2 x / (x + 1), which x = 3 solves (4.5 + 1.5), and B's
    # 0 + 1 = 5 / 10 + 2 / 4: R_A = 1000 + 400 log10(3) = 1190.848502, R_B = 809.151498
    fit = bradley_terry([("A", "B", 1.0)] * 5)
    assert fit == {"A": pytest.approx(1190.848502, abs=1e-5), "B": pytest.approx(809.151498, abs=1e-5)}
    # the same games as B's losses, in any order and seen from either side: the same fit
    assert bradley_terry([("B", "A", 0.0)] * 2 + [("A", "B", 1.0)] * 3) == pytest.approx(fit, abs=1e-5)
    # equal results, draws as half a win: everyone stays at the prior's centre
    assert bradley_terry([("A", "B", 1.0), ("B", "A", 1.0), ("A", "C", 0.5)], initial=1500) == pytest.approx(
        {"A": 1500.0, "B": 1500.0, "C": 1500.0}, abs=1e-5)
    # a weaker prior (1 virtual draw) lets the results weigh more: A's equation 5 + 1/2 = 5 x^2/(x^2+1)
    # + x/(x+1) (no closed form) holds to the fit's tolerance, with A further above 1000 than at x = 3
    x = 10 ** ((bradley_terry([("A", "B", 1.0)] * 5, prior_draws=1.0)["A"] - 1000) / 400)
    assert 5.5 - 5 * x * x / (x * x + 1) - x / (x + 1) == pytest.approx(0.0, abs=1e-6) and x > 3
    assert bradley_terry([]) == {}


def test_bradley_terry_refuses_bad_games_and_settings():
    with pytest.raises(ValueError, match="score 2 of 'A' against 'B' must be in"):
        bradley_terry([("A", "B", 2)])
    with pytest.raises(ValueError, match="player 'A' plays itself"):
        bradley_terry([("A", "A", 1.0)])
    with pytest.raises(ValueError, match="prior_draws=0 must be a finite number > 0"):
        bradley_terry([("A", "B", 1.0)], prior_draws=0)
    with pytest.raises(ValueError, match="tol=0 must be > 0"):
        bradley_terry([("A", "B", 1.0)], tol=0)


# ----------------------------------------------------------------------------- counting games
EPISODES = [
    {"return": 0.0, "learner_return": 1.0, "opponent_return": -1.0, "opponent_version": 10},  # learner wins
    {"return": 0.0, "learner_return": 0.0, "opponent_return": 0.0, "opponent_version": 10},  # draw
    {"return": 0.5, "learner_return": -2.0, "opponent_return": 3.0, "opponent_version": 20},  # learner loses
    {"return": 3.0, "learner_return": 5.0, "opponent_return": 1.0},  # the opponent did not act: no game
    {"return": 1.0, "learner_return": 1.0, "opponent_version": 20},  # no opponent return: no game
]


def test_learner_score_from_the_two_returns():
    assert [learner_score(1, -1), learner_score(0, 0), learner_score(-2, 3)] == [1.0, 0.5, 0.0]


def test_games_in_episode_rows():
    assert list(games_in(EPISODES, {"opponent": "learner"})) == [
        Game("learner", "opponent", 10, 1.0, -1.0), Game("learner", "opponent", 10, 0.5, 0.0),
        Game("learner", "opponent", 20, 0.0, 3.0)]
    assert list(games_in(EPISODES, {"other": "learner"})) == []


# ----------------------------------------------------------------------------- the store after a batch
def history(tmp_path) -> History:
    store = VersionStore(tmp_path)
    for version in (10, 20):
        store.add("learner", version, version, 128 * version, float(version), weights(version))
    return History(store, "learner", HistorySchedule(), 0, {"opponent": "learner"})


def test_a_batch_of_games_sets_games_wins_draws_mean_return_and_ratings(tmp_path):
    h = history(tmp_path)
    assert h.rating == 1000.0  # no version rated yet
    for row in EPISODES:
        h.saw(row)
    assert h.record() == 3 and h.games == []
    # learner 1000 beats v10 (1000): 1016 / 984; draw: 1014.530498 / 985.469502; loses to v20 (1000):
    # E = 1 / (1 + 10 ** ((1000 - 1014.530498) / 400)) = 0.520894, 32 * (0 - E) = -16.668764
    v10, v20 = h.store.versions("learner")
    assert (v10.games, v10.wins, v10.draws, v10.mean_return, v10.win_rate()) == (2, 0, 1, -0.5, 0.25)
    assert v10.rating == pytest.approx(985.469502, abs=1e-6)
    assert (v20.games, v20.wins, v20.draws, v20.mean_return, v20.win_rate()) == (1, 1, 0, 3.0, 1.0)
    assert v20.rating == pytest.approx(1016.668764, abs=1e-6)
    assert h.rating == pytest.approx(997.861734, abs=1e-6)
    # a second batch adds to the counts: learner beats v20 with v20's return 1.0
    h.saw({"learner_return": 2.0, "opponent_return": 1.0, "opponent_version": 20})
    h.saw({"learner_return": 2.0, "opponent_return": 1.0, "opponent_version": 5})  # v5 has no row: not counted
    assert h.record() == 1
    v20 = h.store.get("learner", 20)
    assert (v20.games, v20.wins, v20.draws, v20.mean_return, v20.win_rate()) == (2, 1, 0, 2.0, 0.5)
    assert v20.rating == pytest.approx(999.803514, abs=1e-6)
    assert h.rating == pytest.approx(1014.726985, abs=1e-6)
    assert h.record() == 0  # nothing seen: no write
    # pfsp now sees real win rates: 0.25 ** 2 = 0.0625 and 0.5 ** 2 = 0.25, so p = [0.2, 0.8]
    p, reason = query_weights(Query("pfsp"), h.store.versions("learner"))
    assert reason == "" and p.tolist() == pytest.approx([0.2, 0.8])
    h.close()


def test_a_kept_version_starts_at_the_learners_rating_and_a_resume_starts_from_it(tmp_path):
    h = history(tmp_path)
    h.rating = 1012.5
    algo = SimpleNamespace(policy=torch.nn.Linear(1, 1))
    h.keep(algo, None, SimpleNamespace(version=30, updates=30, env_steps=3840), 3.0)
    assert h.store.get("learner", 30).rating == 1012.5
    h.close()
    again = History(VersionStore(tmp_path), "learner", HistorySchedule(), 0, {"opponent": "learner"})
    assert again.rating == 1012.5
    again.close()


# ----------------------------------------------------------------------------- zoo league
runner = CliRunner()


@pytest.fixture(scope="module")
def app():
    return cli.build_app(get_host())


def league_run(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    with VersionStore(run) as store:
        for version in (10, 20, 30):
            store.add("learner", version, version, 128 * version, float(version), weights(version))
        store.update_metadata("learner", 10, rating=985.5, games=4, wins=1, draws=1, mean_return=-0.25)
        store.update_metadata("learner", 20, rating=1016.75, games=2, wins=2, draws=0, mean_return=3.0)
    return run


def test_zoo_league_prints_the_table_of_kept_versions(app, tmp_path):
    run = league_run(tmp_path)
    result = runner.invoke(app, ["league", str(run)])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in result.output.splitlines()]
    assert "policy learner: 3 kept versions" in lines
    assert "version env steps rating games win rate mean return" in lines
    assert "10 1,280 985.5 4 0.375 -0.25" in lines  # (1 + 1/2) / 4
    assert "20 2,560 1016.8 2 1.000 3.00" in lines
    assert "30 3,840 - 0 - -" in lines


def test_zoo_league_json(app, tmp_path):
    result = runner.invoke(app, ["league", str(league_run(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"learner": [
        {"version": 10, "env_steps": 1280, "rating": 985.5, "games": 4, "wins": 1, "draws": 1, "win_rate": 0.375,
         "mean_return": -0.25},
        {"version": 20, "env_steps": 2560, "rating": 1016.75, "games": 2, "wins": 2, "draws": 0, "win_rate": 1.0,
         "mean_return": 3.0},
        {"version": 30, "env_steps": 3840, "rating": None, "games": 0, "wins": 0, "draws": 0, "win_rate": None,
         "mean_return": None}]}


def test_zoo_league_errors_in_one_line(app, tmp_path):
    one_line_error(runner.invoke(app, ["league", str(tmp_path)]), "is not a run folder", "config.json")
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    one_line_error(runner.invoke(app, ["league", str(run)]), "has no version history (history.sqlite)",
                   "trainer.history.every_updates=N")
    np.testing.assert_equal(sorted(p.name for p in run.iterdir()), ["config.json"])  # read-only: made nothing


def test_the_lead_trainer_of_the_source_counts_the_games_of_its_opponents(tmp_path):
    from zoo.core.config import HistoryConfig

    named = {"learner": SimpleNamespace(opponent=SimpleNamespace(source="")),
             "opponent": SimpleNamespace(opponent=SimpleNamespace(source="learner")),
             "frozen": SimpleNamespace(opponent=SimpleNamespace(source=""))}
    cfg = SimpleNamespace(resume=0, policies=SimpleNamespace(named=named),
                          trainer=SimpleNamespace(history=HistoryConfig(every_updates=1)))
    h = History.open(SimpleNamespace(run_dir=str(tmp_path), policy="learner", attempt=0), cfg, 0)
    assert h is not None and h.opponents == {"opponent": "learner"}
    h.close()
    other = History.open(SimpleNamespace(run_dir=str(tmp_path), policy="frozen", attempt=0), cfg, 0)
    assert other is not None and other.opponents == {}
    other.close()
