"""Env symmetries (zoo.core.symmetry), connect four's mirror (pettingzoo plugin) and PPO's
algo.augment_symmetries, with values worked out by hand."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.symmetry import Symmetry
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

MIRROR = Symmetry("left-right mirror", (("observation", (-1,)), ("zoo:action_mask", (-1,))), (6, 5, 4, 3, 2, 1, 0))


def c4_spec(symmetries=(MIRROR,)):
    obs = {"observation": spaces.Box(0, 1, (2, 6, 7), np.int8), "zoo:action_mask": spaces.Box(0, 1, (7,), bool)}
    return EnvSpec("c4", ("player_0",), obs, spaces.Discrete(7), symmetries=symmetries)


def test_a_symmetry_maps_observations_and_actions():
    board = np.zeros((1, 2, 6, 7), np.int8)
    board[0, 0, 5, 0] = 1  # one piece of the mover's, bottom row, column 0
    mask = np.array([[True, True, False, True, True, True, True]])
    image = MIRROR.observation({"observation": board, "zoo:action_mask": mask, "to_move": np.ones((1, 1))})
    assert np.argwhere(image["observation"]).tolist() == [[0, 0, 5, 6]]  # column 6
    assert image["zoo:action_mask"].tolist() == [[True, True, True, True, False, True, True]]
    assert image["to_move"].tolist() == [[1.0]]  # not listed: as it was
    assert board[0, 0, 5, 0] == 1  # the input is not changed
    t = MIRROR.observation({"observation": torch.as_tensor(board)})["observation"]
    assert torch.nonzero(t).tolist() == [[0, 0, 5, 6]]
    assert MIRROR.action(np.array([0, 2, 6])).tolist() == [6, 4, 0]
    assert MIRROR.action(torch.tensor([[1], [3]])).tolist() == [[5], [3]]


def test_a_symmetry_refuses_positive_axes_and_a_non_permutation():
    with pytest.raises(ValueError, match=r"entry 'obs' flips axes \(1,\); give negative axes"):
        Symmetry("s", (("obs", (1,)),), (0, 1))
    with pytest.raises(ValueError, match=r"actions \(0, 0\) is not a permutation of 0\.\.1"):
        Symmetry("s", (), (0, 0))


def test_connect_four_declares_its_mirror_and_the_mirror_is_a_legal_game():
    from zoo.plugins.envs.pettingzoo.env import PettingZooConfig, make

    env = make("pettingzoo.classic.connect_four_v3", PettingZooConfig(), 0)
    assert env.spec.symmetries == (MIRROR,)
    env.reset(seed=1)
    obs = env.step(np.array([0, 0]))[0]  # player_0 drops a piece in column 0
    image = MIRROR.observation(obs)
    # player_1 (row 1 of the agents) sees the other player's piece (plane 1) in column 6 of the image
    assert np.argwhere(image["observation"][1]).tolist() == [[1, 5, 6]]
    assert image["zoo:action_mask"][1].tolist() == [True] * 7
    env.close()
    ttt = make("pettingzoo.classic.tictactoe_v3", PettingZooConfig(), 0)
    assert ttt.spec.symmetries == ()  # not in the table
    ttt.close()


def test_augment_symmetries_trains_the_image_of_each_row_too():
    """One decision: action 0 at an empty board, reward 1, terminated; V = 0, logits 0 (p = 1/7).
    The policy-gradient loss -A r (r = 1, A = 1, no normalisation) has the gradient
    -(onehot(a) - p) on the actor's bias. Alone: -(6/7) on bias 0, +1/7 on the others. With the
    mirror image (action 6, same advantage) the mean of the two rows: -5/14 on biases 0 and 6,
    +2/14 on the others. Adam's first step moves each by lr * g / (|g| + eps) against it."""
    board = np.zeros((2, 1, 2, 6, 7), np.int8)
    batch = {"obs": {"observation": board, "zoo:action_mask": np.ones((2, 1, 7), bool)},
             "action": np.zeros((1, 1), np.int64), "reward": np.ones((1, 1), np.float32),
             "terminated": np.ones((1, 1), bool), "truncated": np.zeros((1, 1), bool),
             "logp": np.full((1, 1), -math.log(7), np.float32), "value": np.zeros((1, 1), np.float32),
             "final_obs": {"observation": np.zeros((0, 2, 6, 7), np.int8), "zoo:action_mask": np.zeros((0, 7), bool)},
             "final_index": np.zeros((0, 2), np.int64)}
    lr, eps = 0.01, 1e-5

    def step(augment):
        cfg = PPOConfig(lr=lr, epochs=1, minibatches=1, norm_adv=False, ent_coef=0.0, max_grad_norm=0.0,
                        clip_vloss=False, augment_symmetries=augment)
        algo = PPO(cfg, c4_spec(), seed=0)
        with torch.no_grad():
            for layer in (algo.policy.actor, algo.policy.critic):
                layer.weight.zero_()
                layer.bias.zero_()
        stats = algo.update(batch)
        return algo.policy.actor.bias.detach().clone(), stats

    def adam(g):
        return -lr * g / (abs(g) + eps)

    bias, stats = step(False)
    torch.testing.assert_close(bias, torch.tensor([adam(-6 / 7)] + [adam(1 / 7)] * 6))
    bias, stats = step(True)
    torch.testing.assert_close(bias, torch.tensor([adam(-5 / 14)] + [adam(1 / 7)] * 5 + [adam(-5 / 14)]))
    assert stats["agent_steps"] == 1.0  # the env's rows, not the images
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-7)  # the image's ratio starts at 1


def test_augment_symmetries_is_refused_before_the_run_on_an_env_without_one():
    with pytest.raises(ValueError, match=r"^algo.augment_symmetries=true needs an env that declares its symmetries, "
                                         r"and c4 declares none"):
        PPOConfig(augment_symmetries=True).check_experiment(SimpleNamespace(spec=c4_spec(symmetries=())))
    PPOConfig(augment_symmetries=True).check_experiment(SimpleNamespace(spec=c4_spec()))


def test_augment_symmetries_reports_the_explained_variance_of_the_env_rows():
    """Two one-move games (rewards 1 and 0) on lopsided boards, a critic that values a board and
    its image differently: the explained variance is the env rows' with or without the images."""
    board = np.zeros((2, 2, 2, 6, 7), np.int8)
    board[:, 0, 0, 5, 0] = 1
    board[:, 1, 1, 5, 1] = 1
    batch = {"obs": {"observation": board, "zoo:action_mask": np.ones((2, 2, 7), bool)},
             "action": np.zeros((1, 2), np.int64), "reward": np.array([[1.0, 0.0]], np.float32),
             "terminated": np.ones((1, 2), bool), "truncated": np.zeros((1, 2), bool),
             "logp": np.full((1, 2), -math.log(7), np.float32), "value": np.zeros((1, 2), np.float32),
             "final_obs": {"observation": np.zeros((0, 2, 6, 7), np.int8), "zoo:action_mask": np.zeros((0, 7), bool)},
             "final_index": np.zeros((0, 2), np.int64)}

    def ev(augment):
        algo = PPO(PPOConfig(epochs=1, minibatches=1, augment_symmetries=augment), c4_spec(), seed=0)
        values = algo.policy.value(algo._obs({k: v[0] for k, v in batch["obs"].items()})).detach()
        image = algo.policy.value(algo._obs(MIRROR.observation({k: v[0] for k, v in batch["obs"].items()}))).detach()
        assert not torch.allclose(values, image)  # the images' values differ: mixing them in would show
        returns = torch.tensor([1.0, 0.0])
        expected = 1 - float(torch.var(returns - values)) / float(torch.var(returns))
        return algo.update(batch)["explained_variance"], expected

    (plain, expected), (augmented, _) = ev(False), ev(True)
    assert plain == pytest.approx(expected, rel=1e-5) and augmented == pytest.approx(expected, rel=1e-5)
