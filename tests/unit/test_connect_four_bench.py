"""benchmarks/connect_four.py's report on hand-made data: tallies, Spearman, ratings read from a
hand-made history store, the table, the config of each variant."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.unit.fakes import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("connect_four")


def test_tally_counts_wins_draws_losses_per_seat(bench):
    games = [(0, 1.0, -1.0), (0, 1.0, -1.0), (0, 0.0, 0.0), (1, -1.0, 1.0), (1, 1.0, -1.0)]
    t = bench.tally(games)
    assert (t.wins, t.draws, t.losses, t.games) == (3, 1, 1, 5)
    assert t.first == (2, 1, 0) and t.second == (1, 0, 1)
    assert t.rate("wins") == 3 / 5 and t.rate("draws") == 1 / 5
    assert math.isnan(bench.tally([]).rate("wins"))


def test_spearman_by_hand(bench):
    assert bench.spearman([1, 2, 3, 4], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    # ranks of y: 2, 3, 1; d = -1, -1, 2; 1 - 6 * (1 + 1 + 4) / (3 * (9 - 1)) = -0.5
    assert bench.spearman([1, 2, 3], [999.264, 1016.736, 983.264]) == pytest.approx(-0.5)
    # a tie: y ranks 1.5, 1.5, 3 against 1, 2, 3: centred (-0.5, -0.5, 1) . (-1, 0, 1) = 1.5,
    # norms sqrt(1.5) and sqrt(2): 1.5 / sqrt(3) = 0.866025
    assert bench.spearman([1, 2, 3], [5.0, 5.0, 7.0]) == pytest.approx(1.5 / math.sqrt(3.0))
    assert math.isnan(bench.spearman([1], [2.0])) and math.isnan(bench.spearman([1, 2], [3.0, 3.0]))
    with pytest.raises(ValueError, match="^spearman: x has 2 values, y 1$"):
        bench.spearman([1, 2], [1.0])


def test_version_ratings_reads_the_eval_managers_ratings_of_kept_versions(bench, tmp_path):
    from zoo.core.checkpoint import FORMAT
    from zoo.core.history import EvalGame, VersionStore

    weights = {"format": FORMAT, "algorithm": {"policy": {}, "config": None}}
    with VersionStore(tmp_path) as store:
        for v in (1, 2, 3):
            store.add("learner", v, 10 * v, 20_000 * v, float(v), weights)
        loaded = {v.version: v.time_s for v in store.versions("learner")}
        # v1 beats random: 1016 / 984. v2 (1000) beats v1 (1016): E = 1 / (1 + 10 ** (16 / 400)) = 0.476995,
        # v2 + 32 * 0.523005 = 1016.736, v1 999.264. v3 (1000) loses to random (984): E = 0.523005,
        # v3 983.264, random 1000.736.
        store.record_eval("learner", [EvalGame("v1", "random", 0, 1.0, 1.0, -1.0, 1, None)], k=32.0,
                          initial=1000.0, loaded=loaded)
        store.record_eval("learner", [EvalGame("v2", "v1", 1, 1.0, 1.0, -1.0, 2, 1)], k=32.0, initial=1000.0,
                          loaded=loaded)
        store.record_eval("learner", [EvalGame("v3", "random", 0, 0.0, -1.0, 1.0, 3, None)], k=32.0,
                          initial=1000.0, loaded=loaded)
    rows = bench.version_ratings(tmp_path, kind="elo")
    assert [(v, s, round(r, 3)) for v, s, r in rows] == [(1, 20_000, 999.264), (2, 40_000, 1016.736),
                                                         (3, 60_000, 983.264)]
    # the fitted ratings are the store's fit of the three games (checked in test_eval_manager), by version
    with VersionStore(tmp_path, readonly=True) as store:
        fit = store.fitted_ratings("learner")
    assert bench.version_ratings(tmp_path) == [(1, 20_000, fit["v1"]), (2, 40_000, fit["v2"]), (3, 60_000, fit["v3"])]
    assert fit["v2"] > fit["v1"] > fit["v3"]  # v2 beat v1, who beat random, who beat v3
    assert bench.version_ratings(tmp_path, kind="training") == []  # no training games rated them
    with pytest.raises(ValueError, match="kind 'x' is not one of fit, elo, training"):
        bench.version_ratings(tmp_path, kind="x")
    assert bench.spearman([r[0] for r in rows], [r[2] for r in rows]) == pytest.approx(-0.5)
    assert bench.version_ratings(tmp_path / "nothing") == []
    # the win rates against the baselines, from the version's side: v1 1 of 1 against random, v3 0 of 1
    # (v2 played v1 only, a past version, not a baseline)
    assert bench.baseline_win_rates(tmp_path) == {"random": [(20_000, 1.0), (60_000, 0.0)]}
    assert bench.baseline_win_rates(tmp_path / "nothing") == {}


def test_running_mean_and_the_two_panel_plot(bench, tmp_path):
    assert bench.running_mean([0.0, 1.0, 0.5, 0.25], 2) == [0.0, 0.5, 0.75, 0.375]
    assert bench.running_mean([], 5) == []
    out = tmp_path / "c4.png"
    bench.plot({"pfsp": [(1, 20_000, 999.0)]}, out, {"pfsp": {"random": [(20_000, 1.0)], "lookahead": []}})
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_says_which_targets_are_met(bench, tmp_path):
    t_random = bench.tally([(0, 1.0, -1.0)] * 240 + [(0, 0.0, 0.0)] * 10 + [(1, 1.0, -1.0)] * 240
                           + [(1, -1.0, 1.0)] * 10)  # 480 of 500: 96%
    t_look = bench.tally([(0, 1.0, -1.0)] * 150 + [(0, -1.0, 1.0)] * 100 + [(1, 1.0, -1.0)] * 125
                         + [(1, -1.0, 1.0)] * 125)  # 275 of 500: 55%
    tactics = {"pfsp": {"random": bench.Tactics(10, 9, 4, 1), "lookahead": bench.Tactics(0, 0, 8, 2)}}
    text = bench.table({"pfsp": {"random": t_random, "lookahead": t_look}},
                       {"pfsp": {"fit": (0.85, 40), "elo": (-0.25, 40)}}, {"pfsp": 500_000}, deterministic=False,
                       tactics=tactics)
    lines = text.splitlines()
    assert lines[2] == ("| pfsp | 500,000 | random | 500 | 96.0% | 2.0% | 2.0% | 96.0% / 96.0% | >= 95% wins | "
                        "yes |")
    assert lines[3] == ("| pfsp | 500,000 | lookahead | 500 | 55.0% | 0.0% | 45.0% | 60.0% / 50.0% | >= 60% wins | "
                        "no |")
    assert "Actions: sampled." in lines
    assert "| pfsp | random | 9 of 10 (90.0%) | 1 of 4 (25.0%) |" in lines
    assert "| pfsp | lookahead | - | 2 of 8 (25.0%) |" in lines
    assert lines[-2] == "| pfsp | eval, fitted to all games (Bradley-Terry) | 40 | 0.850 | >= 0.8 | yes |"
    assert lines[-1] == "| pfsp | eval, Elo one game at a time | 40 | -0.250 | >= 0.8 | no |"
    out = tmp_path / "c4.png"
    bench.plot({"pfsp": [(1, 20_000, 999.0), (2, 40_000, 1016.0)], "latest": []}, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_variant_differs_in_the_pick_only(bench):
    pfsp, latest = bench.config_text("pfsp"), bench.config_text("latest")
    assert 'opponent = {source = "learner", pick = "pfsp", every = "episode", cache = 8}' in pfsp
    assert pfsp.replace('pick = "pfsp"', 'pick = "latest"').replace("against pfsp", "against latest") == latest
    import tomllib

    cfg = tomllib.loads(pfsp)
    assert cfg["env"] == {"random_seats": True}
    assert cfg["workers"]["eval"]["baselines"] == ["random", "lookahead"]
    with pytest.raises(ValueError, match="^variant 'uniform' is not one of pfsp, latest$"):
        bench.config_text("uniform")


def test_the_algorithm_is_both_policies_and_names_the_run(bench):
    import tomllib

    cfg = tomllib.loads(bench.config_text("pfsp", algo="ppo"))
    assert (cfg["policies"]["learner"]["algo"], cfg["policies"]["opponent"]["algo"]) == ("ppo", "ppo")
    assert tomllib.loads(bench.config_text("pfsp"))["policies"]["learner"]["algo"] == "mappo"
    assert (bench.run_name("pfsp", 1), bench.run_name("latest", 2, "ppo")) == ("c4-pfsp-s1", "c4-ppo-latest-s2")
    with pytest.raises(ValueError, match="^algo 'sac' is not one of mappo, ppo$"):
        bench.config_text("pfsp", algo="sac")


def test_the_tactics_counter_counts_forced_moves_taken(bench):
    import numpy as np
    import torch

    boards = np.zeros((3, 2, 6, 7), np.float32)
    boards[0, 0, 5, 0:3] = 1  # row 0: three of mine on the bottom row, column 3 connects four
    boards[0, 1, 4, 0:3] = 1
    boards[1, 1, 5, 2:5] = 1  # row 1: three of theirs from column 2, columns 1 and 5 block
    boards[1, 0, 4, 2:4] = 1
    boards[2, 0, 5, 0] = 1  # row 2: nothing forced
    played = torch.tensor([3, 6, 4])  # row 0 takes its win, row 1 does not block

    class Net:
        def act(self, obs, deterministic=False):
            assert obs["observation"] is boards and deterministic
            return {"action": played}

    t = bench.Tactics()
    counter = bench.TacticsCounter(Net(), t)
    out = counter.act({"observation": boards, "zoo:action_mask": np.ones((3, 7), bool)}, deterministic=True)
    assert out["action"] is played and counter.eval() is counter
    assert t == bench.Tactics(wins=1, taken=1, blocks=1, blocked=0)
    played = torch.tensor([0, 5, 4])  # row 0 misses its win, row 1 blocks at 5
    counter.act({"observation": boards, "zoo:action_mask": np.ones((3, 7), bool)}, deterministic=True)
    assert t == bench.Tactics(wins=2, taken=1, blocks=2, blocked=1)


def test_probe_policy_by_hand(bench):
    """Two positions: the first's right column is 3 under uniform logits (P = 1/7, the argmax
    column 0 is wrong); the second's are 1 and 5 with column 6 illegal and column 1's logit ln 2
    (P = (2 + 1) / 7, argmax column 1 right). Means: P 2/7, argmax 1/2, entropy
    (ln 7 + ln 7 - (2/7) ln 2) / 2."""
    import numpy as np
    import torch

    legal = np.ones((2, 7), bool)
    legal[1, 6] = False
    cases = [(np.zeros((2, 6, 7), np.int8), legal[0], [3]), (np.zeros((2, 6, 7), np.int8), legal[1], [1, 5])]

    class Net:
        def _forward(self, obs):
            assert obs["observation"].shape == (2, 2, 6, 7) and obs["to_move"].tolist() == [[1.0], [1.0]]
            logits = torch.zeros(2, 7)
            logits[1, 1] = math.log(2.0)
            return logits, torch.zeros(2)

    p, argmax, entropy = bench.probe_policy(Net(), cases, {"to_move": np.ones(1, np.float32)})
    assert p == pytest.approx(2 / 7, rel=1e-6)
    assert argmax == 0.5
    assert entropy == pytest.approx(math.log(7) - math.log(2) / 7, rel=1e-6)


def test_random_play_positions_are_wins_and_blocks_of_the_mover(bench):
    import numpy as np

    from zoo.plugins.envs.pettingzoo.baselines import connects, drop_row

    wins, blocks = bench.random_play_positions(40, seed=3)
    assert wins and blocks
    for board, legal, columns in wins:
        assert board.dtype == np.int8 and board.shape == (2, 6, 7)
        assert board[0].sum() in (board[1].sum(), board[1].sum() - 1)  # the mover has as many or one fewer
        assert all(connects(board[0].astype(bool), drop_row(board, c), c) for c in columns)
        assert all(not connects(board[0].astype(bool), drop_row(board, c), c) for c in range(7)
                   if legal[c] and c not in columns)
    for board, legal, columns in blocks:
        assert not any(connects(board[0].astype(bool), drop_row(board, c), c) for c in range(7) if legal[c])
        assert all(connects(board[1].astype(bool), drop_row(board, c), c) for c in columns)


def test_win_direction_by_hand(bench):
    import numpy as np

    board = np.zeros((2, 6, 7), np.int8)
    board[0, 5, 0:3] = 1  # three of the mover's on the bottom row: column 3 connects them
    board[0, 2:5, 6] = 1  # three stacked in column 6: column 6 connects them
    board[1, 5, 6] = 1  # under them, the other player's
    assert bench.win_direction(board, 3) == "horizontal"
    assert bench.win_direction(board, 6) == "vertical"
    assert bench.win_direction(board, 1) is None  # lands on row 4 of column 1: no four
    diag = np.zeros((2, 6, 7), np.int8)
    diag[0, 5, 0], diag[0, 4, 1], diag[0, 3, 2] = 1, 1, 1  # up-right from the bottom left
    diag[1, 5, 1:4], diag[1, 4, 2:4], diag[1, 3, 3] = 1, 1, 1  # the other's pieces under them
    assert bench.win_direction(diag, 3) == "diagonal"  # lands on row 2 of column 3
