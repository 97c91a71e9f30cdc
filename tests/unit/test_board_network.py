"""algo.network = "columns" (zoo.plugins.algorithms.board): each column's logit from its own
column's features, the floor and the walls visible, other features as planes, refusals."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.plugins.algorithms.board_spaces import column_problem
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig


def c4_spec(to_move=True, actions=7):
    obs = {"observation": spaces.Box(0, 1, (2, 6, 7), np.int8), "zoo:action_mask": spaces.Box(0, 1, (7,), bool)}
    if to_move:
        obs["to_move"] = spaces.Box(0.0, 1.0, (1,), np.float32)
    return EnvSpec("c4", ("player_0",), obs, spaces.Discrete(actions))


def boards():
    """Two boards: the mover's pieces at (5, 0), (4, 0), (5, 3); the other's at (5, 1), (5, 6), (4, 6)."""
    board = np.zeros((2, 2, 6, 7), np.int8)
    for r, c in ((5, 0), (4, 0), (5, 3)):
        board[:, 0, r, c] = 1
    for r, c in ((5, 1), (5, 6), (4, 6)):
        board[:, 1, r, c] = 1
    return {"observation": torch.as_tensor(board), "zoo:action_mask": torch.ones(2, 7, dtype=torch.bool),
            "to_move": torch.tensor([[1.0], [0.0]])}


def test_each_columns_logit_reads_its_own_column_the_floor_and_the_other_features():
    """One 3x3 layer of 3 channels, set by hand. The tower's input planes: the board's 2, ones, to_move.
    Channel 0 copies the mover's pieces (kernel centre); channel 1 reads the ones plane at the cell
    below (kernel row 2, column 1): 1 on rows 0-4, 0 on the bottom row, whose cell below is the
    zero padding (the floor); channel 2 copies to_move. The head weighs every row of channel 0 by
    1, channel 1 by 10, channel 2 by 100, so column c's logit = (mover's pieces in column c)
    + 10 x 5 + 100 x 6 x to_move: [2, 0, 0, 1, 0, 0, 0] + 50 + 600 x to_move."""
    algo = PPO(PPOConfig(network="columns", board_channels=3, board_layers=1), c4_spec(), seed=0)
    net = algo.policy
    conv = net.encoder.convs[0]
    head = net.actor.conv
    assert tuple(conv.weight.shape) == (3, 4, 3, 3) and tuple(head.weight.shape) == (1, 3, 6, 1)
    with torch.no_grad():
        conv.weight.zero_()
        conv.bias.zero_()
        conv.weight[0, 0, 1, 1] = 1.0
        conv.weight[1, 2, 2, 1] = 1.0
        conv.weight[2, 3, 1, 1] = 1.0
        head.weight.zero_()
        head.bias.zero_()
        head.weight[0, 0] = 1.0
        head.weight[0, 1] = 10.0
        head.weight[0, 2] = 100.0
    logits = net.actor(net.encoder(boards()))
    assert logits.dtype == torch.float32
    assert logits.tolist() == [[652.0, 650.0, 650.0, 651.0, 650.0, 650.0, 650.0],
                               [52.0, 50.0, 50.0, 51.0, 50.0, 50.0, 50.0]]
    obs = boards()
    obs["zoo:action_mask"][:, 0] = False  # column 0 full: the best legal column is 3
    out = net.act(obs, deterministic=True)
    assert out["action"].tolist() == [3, 3]
    assert out["value"].shape == (2,) and out["logp"].shape == (2,)


def test_act_and_evaluate_agree_and_a_checkpoint_round_trips():
    spec = c4_spec()
    algo = PPO(PPOConfig(network="columns"), spec, seed=0)
    obs = boards()
    torch.manual_seed(0)
    out = algo.policy.act(obs)
    logp, entropy, value = algo.policy.evaluate(obs, out["action"])
    assert torch.allclose(logp, out["logp"]) and torch.allclose(value, out["value"])
    assert entropy.shape == (2,) and bool((entropy > 0).all())
    other = PPO(PPOConfig(network="columns"), spec, seed=1)
    other.load_state_dict(algo.state_dict())
    assert torch.equal(other.policy.evaluate(obs, out["action"])[0], logp)
    # the defaults: 4 layers of 64 channels over 2 + 1 + 1 input planes
    shapes = [tuple(m.weight.shape) for m in algo.policy.encoder.convs if isinstance(m, torch.nn.Conv2d)]
    assert shapes == [(64, 4, 3, 3)] + [(64, 64, 3, 3)] * 3


def test_spaces_it_does_not_fit_are_named():
    vector = EnvSpec("CartPole-v1", ("agent_0",), {"obs": spaces.Box(-1, 1, (4,), np.float32)}, spaces.Discrete(2))
    assert column_problem(vector.observation_space, vector.action_space) == (
        "it needs exactly one board observation [C, H, W] and the observations are obs [4] (0 of rank 3)")
    six = c4_spec(actions=6)
    assert column_problem(six.observation_space, six.action_space) == (
        "it needs one action per column of the board 'observation' [2, 6, 7] (Discrete(7)), and the actions "
        "are Discrete(6)")
    box = EnvSpec("c4box", ("a",), {"observation": spaces.Box(0, 1, (2, 6, 7), np.int8)},
                  spaces.Box(-1, 1, (7,), np.float32))
    assert column_problem(box.observation_space, box.action_space).startswith(
        "it needs Discrete actions, one per column of the board [2, 6, 7], and the actions are Box(")
    assert column_problem(c4_spec().observation_space, c4_spec().action_space) is None


def test_network_columns_is_refused_before_the_run_where_it_does_not_fit():
    vector = EnvSpec("CartPole-v1", ("agent_0",), {"obs": spaces.Box(-1, 1, (4,), np.float32)}, spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"^algo.network=columns does not fit CartPole-v1: it needs exactly one "
                                         r"board observation .*; use --set algo.network=auto$"):
        PPOConfig(network="columns").check_experiment(SimpleNamespace(spec=vector))
    PPOConfig(network="columns").check_experiment(SimpleNamespace(spec=c4_spec()))  # accepted
    with pytest.raises(ValueError, match=r"^algo.network=columns: it needs exactly one board"):
        PPO(PPOConfig(network="columns"), vector, seed=0)


def test_zoo_train_refuses_it_on_cartpole_before_any_process_starts(tmp_path):
    from zoo.core.testing.cli import zoo

    done = zoo("train", "ppo", "--env", "CartPole-v1", "--steps", "1000", "--set", "algo.network=columns",
               "--set", f"runs_dir={tmp_path}", timeout=300)
    assert done.returncode == 2
    text = " ".join((done.stdout + done.stderr).split())
    assert ("algo.network=columns does not fit CartPole-v1: it needs exactly one board observation [C, H, W] and "
            "the observations are obs [4] (0 of rank 3); use --set algo.network=auto") in text
    assert list(tmp_path.iterdir()) == []  # no run folder
