"""The ``lookahead`` baseline of connect four (plugins/envs/pettingzoo/baselines.py) on hand-built
boards, and ``env.random_seats`` of turn-based PettingZoo games (TurnBasedParallel)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.plugins.envs.pettingzoo.baselines import LookaheadBaseline, lookahead_choices


def board(rows: list[str]) -> np.ndarray:
    """``[2, 6, 7]`` from 6 strings of 7 cells, top row first: ``x`` the mover's piece, ``o`` the
    opponent's, ``.`` empty."""
    assert len(rows) == 6 and all(len(r) == 7 for r in rows)
    b = np.zeros((2, 6, 7), np.int8)
    for r, line in enumerate(rows):
        for c, cell in enumerate(line):
            if cell == "x":
                b[0, r, c] = 1
            elif cell == "o":
                b[1, r, c] = 1
    return b


def c4_spec():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(), 0)
    spec = env.spec.subset([env.spec.agents[0]])
    env.close()
    return spec


EMPTY = ["......."] * 6
ALL = np.ones(7, bool)


def test_it_wins_when_a_move_connects_four_even_with_a_threat_to_block():
    # x has three in the bottom row at 0..2, column 3 completes it; o threatens column 6 vertically
    b = board(["......."] * 3 + ["......o", "......o", "xxx...o"])
    assert lookahead_choices(b, ALL) == ("win", [3])
    # vertical: x at column 4 rows 3..5 (the top of its stack is row 2); diagonal: x needs (2, 3)
    assert lookahead_choices(board(["......."] * 3 + ["....x..", "....x..", "o.o.x.o"]), ALL) == ("win", [4])
    diag = board(["......."] * 2 + ["......o", "..x...o", ".xo...x", "xoo.x.x"])
    #  x at (5,0), (4,1), (3,2): the piece at (2,3) would complete the diagonal; column 3's top free row
    #  must be 2, so it needs pieces at (5,3), (4,3), (3,3)
    diag[1, 5, 3] = diag[1, 4, 3] = diag[1, 3, 3] = 1
    assert lookahead_choices(diag, ALL) == ("win", [3])
    player = LookaheadBaseline(c4_spec(), seed=0)
    out = player.act({"observation": torch.as_tensor(np.stack([b, diag])),
                      "zoo:action_mask": torch.ones(2, 7, dtype=torch.bool)})["action"]
    assert out.dtype == torch.int64 and out.tolist() == [3, 3]


def test_it_blocks_the_opponents_immediate_win():
    # o has three at 2..4 of the bottom row: both ends (1 and 5) complete it, so either blocks
    b = board(["......."] * 5 + ["x.ooo.x"])
    b[0, 4, 0] = 1  # a second x so the counts stay a legal position; no x threat
    assert lookahead_choices(b, ALL) == ("block", [1, 5])
    player = LookaheadBaseline(c4_spec(), seed=3)
    picks = {player.choose(b, ALL) for _ in range(50)}
    assert picks == {1, 5}
    # o three high in column 6: block on top of it
    v = board(["......."] * 3 + ["......o", "x.....o", "xx....o"])
    assert lookahead_choices(v, ALL) == ("block", [6])
    assert player.choose(v, ALL) == 6


def test_a_masked_winning_column_does_not_count_and_a_full_column_is_not_playable():
    b = board(["......."] * 5 + ["xxx...."])
    mask = ALL.copy()
    mask[3] = False
    assert lookahead_choices(b, mask) == ("random", [0, 1, 2, 4, 5, 6])
    full = board(["o......", "x......", "o......", "x......", "o......", "x......"])
    assert lookahead_choices(full, ALL) == ("random", [1, 2, 3, 4, 5, 6])


def test_otherwise_a_legal_move_uniformly_at_random_and_seeded():
    b = board(EMPTY)
    mask = np.array([1, 0, 1, 0, 1, 0, 1], bool)
    picks = [LookaheadBaseline(c4_spec(), seed=7).choose(b, mask) for _ in range(3)]
    assert picks[0] == picks[1] == picks[2]  # one seed, one first pick
    player = LookaheadBaseline(c4_spec(), seed=7)
    seq = [player.choose(b, mask) for _ in range(400)]
    again = LookaheadBaseline(c4_spec(), seed=7)
    assert [again.choose(b, mask) for _ in range(400)] == seq
    counts = np.bincount(seq, minlength=7)
    assert counts[[1, 3, 5]].tolist() == [0, 0, 0] and (counts[[0, 2, 4, 6]] > 60).all()
    # the rng draws one integer among the candidates: rng.integers(4) of a fresh generator picks
    expected = [0, 2, 4, 6][int(np.random.default_rng(7).integers(4))]
    assert picks[0] == expected


def test_a_waiting_player_plays_column_0_and_the_channels_last_board_is_read():
    b = board(["......."] * 5 + ["xxx...."])
    waiting = np.array([1, 0, 0, 0, 0, 0, 0], bool)
    player = LookaheadBaseline(c4_spec(), seed=0)
    assert player.choose(b, waiting) == 0
    assert player.choose(np.moveaxis(b, 0, -1), ALL) == 3  # [6, 7, 2], PettingZoo's own layout


def test_an_env_that_is_not_connect_four_is_refused():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.tictactoe_v3", PettingZooConfig(), 0)
    with pytest.raises(ValueError, match=r"^baseline 'lookahead' plays connect four only \(pettingzoo:pettingzoo"
                                         r"\.classic\.connect_four_v3: an 'observation' board of shape \(2, 6, 7\) "
                                         r"and Discrete\(7\) actions\); env 'pettingzoo.classic.tictactoe_v3' has"):
        LookaheadBaseline(env.spec.subset([env.spec.agents[0]]), 0)
    env.close()


def test_the_lookahead_beats_random_in_real_games_from_both_seats():
    """Played through zoo.play.play as the eval manager seats baselines: 40 games per seat."""
    from zoo.core.baselines import RandomBaseline
    from zoo.play import Seat, play
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    envs = [make("pettingzoo.classic.connect_four_v3", PettingZooConfig(), i) for i in range(4)]
    spec = envs[0].spec.subset([envs[0].spec.agents[0]])
    wins = 0
    for seat in (0, 1):
        seats = [Seat("player", "", LookaheadBaseline(spec, 1), np.array([seat], np.int64)),
                 Seat("opponent", "", RandomBaseline(spec, 2), np.array([1 - seat], np.int64))]
        rows = play(seats, envs, 40, seed=10 + seat)
        wins += sum(r["policy_returns"]["player"] > r["policy_returns"]["opponent"] for r in rows)
    for env in envs:
        env.close()
    assert wins >= 64  # of 80; the lookahead beats a random player about 9 games in 10


# ----------------------------------------------------------------------------- env.random_seats
def test_random_seats_draw_the_order_of_play_per_episode_seeded():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    def first_movers(seed: int, episodes: int) -> list[int]:
        env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(random_seats=True), seed)
        out = []
        for _ in range(episodes):
            obs, _ = env.reset()
            mask = obs["zoo:action_mask"]
            out.append(int(mask[1].all()))  # 1: agent player_1 (the second agent) is to move first
        env.close()
        return out

    a = first_movers(5, 40)
    assert a == first_movers(5, 40) and 8 < sum(a) < 32
    rng = np.random.default_rng(5)
    assert a == [int(rng.permutation(2)[0] == 1) for _ in range(40)]


def test_with_random_seats_the_second_agent_moving_first_wins_and_gets_the_reward():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(random_seats=True), 0)
    for _ in range(20):  # reset until player_1 moves first
        obs, _ = env.reset()
        if obs["zoo:action_mask"][1].all():
            break
    assert obs["zoo:action_mask"][1].all() and obs["zoo:action_mask"][0].tolist() == [True] + [False] * 6
    # player_1 plays column 3 four times, player_0 column 0 three times between: player_1 wins on its 4th move
    total = np.zeros(2)
    moves = [(0, 3), (0, 0), (0, 3), (0, 0), (0, 3), (0, 0), (0, 3)]
    for actions in moves:  # [player_0's, player_1's]: the waiting player's action 0 is ignored
        obs, reward, terminated, truncated, info = env.step(np.array(actions))
        total += reward
    assert total.tolist() == [-1.0, 1.0] and terminated.tolist() == [True, True]
    assert obs["observation"][1, 0, 2:, 3].tolist() == [1, 1, 1, 1]  # player_1's own pieces: its channel 0
    assert obs["observation"][0, 1, 2:, 3].tolist() == [1, 1, 1, 1]  # player_0 sees them as the opponent's
    env.close()


def test_random_seats_on_a_parallel_env_is_refused():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    with pytest.raises(ValueError, match=r"^env.random_seats: --env pettingzoo:mpe2.simple_spread_v3 is a Parallel"):
        make("mpe2.simple_spread_v3", PettingZooConfig(random_seats=True), 0)


def test_the_eval_manager_builds_its_envs_without_random_seats_and_the_actors_with_them():
    from types import SimpleNamespace

    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry
    from zoo.core.workers.base import make_env

    reg = get_registry()
    cfg = build_config(reg, "mappo", "pettingzoo:pettingzoo.classic.connect_four_v3", name="x",
                       overrides=["env.random_seats=true"])
    assert cfg.env.random_seats is True
    ctx = SimpleNamespace(cfg=cfg, registry=reg)
    actor_env, eval_env = make_env(ctx, 0), make_env(ctx, 0, seated=True)
    firsts = {"actor": [], "eval": []}
    for _ in range(30):
        firsts["actor"].append(int(actor_env.reset()[0]["zoo:action_mask"][1].all()))
        firsts["eval"].append(int(eval_env.reset()[0]["zoo:action_mask"][1].all()))
    assert firsts["eval"] == [0] * 30  # player_0 always moves first: the eval manager's seat 0
    assert 0 < sum(firsts["actor"]) < 30
    assert cfg.env.random_seats is True  # the run's option is left as it was
    actor_env.close()
    eval_env.close()


# ----------------------------------------------------------------------------- env.to_move
def test_to_move_tells_each_player_whose_turn_it_is_in_every_seat_order():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(random_seats=True, to_move=True), 0)
    assert env.spec.observation_space["to_move"].shape == (1,)
    seen = set()
    for _ in range(20):
        obs, _ = env.reset()
        first = int(obs["zoo:action_mask"][1].all())  # 1: player_1 moves first
        seen.add(first)
        # the mover's entry is 1.0, the waiting player's 0.0; one move later the other way round
        assert obs["to_move"].tolist() == ([[1.0], [0.0]] if first == 0 else [[0.0], [1.0]])
        assert obs["to_move"].dtype == np.float32
        obs, *_ = env.step(np.array([3, 3]))
        assert obs["to_move"].tolist() == ([[0.0], [1.0]] if first == 0 else [[1.0], [0.0]])
    assert seen == {0, 1}
    env.close()
    plain = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(random_seats=True), 0)
    assert "to_move" not in plain.spec.observation_space and "to_move" not in plain.reset()[0]
    plain.close()


def test_to_move_on_a_parallel_env_or_without_dict_observations_is_refused():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, TurnBasedParallel, make

    with pytest.raises(ValueError, match=r"^env.to_move: --env pettingzoo:mpe2.simple_spread_v3 is a Parallel env"):
        make("mpe2.simple_spread_v3", PettingZooConfig(to_move=True), 0)
    from gymnasium import spaces

    class BoxObs:
        possible_agents = ["a", "b"]

        def observation_space(self, agent):
            return spaces.Box(0, 1, (3,))

    with pytest.raises(ValueError, match=r"^env.to_move: agent a's observations are Box\(0.0, 1.0, \(3,\), float32\), "
                                         r"not a dict"):
        TurnBasedParallel(BoxObs(), to_move=True)


# ----------------------------------------------------------------------------- env.opening_moves
class ScriptedRng:
    """Stands in for the env's generator: ``integers`` returns the opening lengths in turn,
    ``choice`` the columns in turn (each must be legal)."""

    def __init__(self, lengths, columns):
        self.lengths, self.columns = list(lengths), list(columns)

    def integers(self, low, high):
        n = self.lengths.pop(0)
        assert low <= n < high
        return n

    def choice(self, legal):
        c = self.columns.pop(0)
        assert c in legal
        return c


def test_an_opening_of_three_moves_is_on_the_board_and_the_second_player_is_to_move():
    from pettingzoo.classic import connect_four_v3

    from zoo.plugins.envs.pettingzoo.env import TurnBasedParallel

    env = TurnBasedParallel(connect_four_v3.env(), opening_moves=5)
    env.rng = ScriptedRng([3], [0, 0, 4])  # player_0 column 0, player_1 column 0, player_0 column 4
    obs, _ = env.reset()
    assert env.agents == ["player_0", "player_1"]
    p1 = obs["player_1"]
    assert p1["action_mask"].tolist() == [1] * 7  # player_1 is to move
    assert obs["player_0"]["action_mask"].tolist() == [1] + [0] * 6  # player_0 waits
    assert np.argwhere(p1["observation"][:, :, 0]).tolist() == [[4, 0]]  # its own piece
    assert np.argwhere(p1["observation"][:, :, 1]).tolist() == [[5, 0], [5, 4]]  # player_0's two
    assert env.rng.lengths == [] and env.rng.columns == []
    env.close()


def test_an_opening_that_ends_the_game_is_drawn_again():
    from pettingzoo.classic import connect_four_v3

    from zoo.plugins.envs.pettingzoo.env import TurnBasedParallel

    env = TurnBasedParallel(connect_four_v3.env(), opening_moves=9)
    # 7 moves: player_0 stacks column 0 four times (player_1 plays column 1 between): a win, drawn again
    env.rng = ScriptedRng([7, 1], [0, 1, 0, 1, 0, 1, 0] + [6])
    obs, _ = env.reset()
    assert env.agents == ["player_0", "player_1"]
    board = obs["player_1"]["observation"]  # player_1 is to move after one opening move
    assert int(board.sum()) == 1 and np.argwhere(board[:, :, 1]).tolist() == [[5, 6]]
    env.close()


def test_openings_are_seeded_and_evaluation_plays_from_the_start():
    from types import SimpleNamespace

    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry
    from zoo.core.workers.base import make_env
    from zoo.evaluate import evaluation_options
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    def pieces(seed):
        env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(opening_moves=6), seed)
        out = [int(env.reset()[0]["observation"][0].sum()) for _ in range(30)]
        env.close()
        return out

    a = pieces(7)
    assert a == pieces(7) and set(a) == set(range(7))  # 0 .. 6 moves, each drawn in 30 openings
    reg = get_registry()
    cfg = build_config(reg, "ppo", "pettingzoo:pettingzoo.classic.connect_four_v3", name="x",
                       overrides=["env.opening_moves=6"])
    assert evaluation_options(cfg.env).opening_moves == 0 and cfg.env.opening_moves == 6
    ctx = SimpleNamespace(cfg=cfg, registry=reg)
    actor_env, eval_env = make_env(ctx, 0), make_env(ctx, 0, seated=True)
    assert [int(eval_env.reset()[0]["observation"][0].sum()) for _ in range(10)] == [0] * 10
    assert sum(int(actor_env.reset()[0]["observation"][0].sum()) for _ in range(10)) > 0
    actor_env.close()
    eval_env.close()


def test_opening_moves_is_refused_for_a_parallel_env_and_below_zero():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    with pytest.raises(ValueError, match=r"^env.opening_moves: --env pettingzoo:mpe2.simple_spread_v3 is a Parallel"):
        make("mpe2.simple_spread_v3", PettingZooConfig(opening_moves=4), 0)
    with pytest.raises(ValueError, match=r"^env.opening_moves=-1 must be a whole number >= 0"):
        make("pettingzoo.classic.connect_four_v3", PettingZooConfig(opening_moves=-1), 0)
