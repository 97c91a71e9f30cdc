"""Every tensor on its device, checked without a GPU: ``meta`` tensors and torch's
``FakeTensorMode`` stand in for ``cuda`` (issue 21), and :mod:`zoo.core.testing.devices`
names each tensor left on another device by its path."""
import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch._subclasses.fake_tensor import FakeTensorMode

from zoo.core.env import EnvSpec
from zoo.core.testing.devices import assert_on_device, misplaced, tensors
from zoo.plugins.algorithms.impala.impala import IMPALA, IMPALAConfig
from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig
from zoo.plugins.algorithms.normalization import RewardNorm, scaled_rewards
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig


def box_spec(agents=1):
    obs = {"obs": spaces.Box(-np.inf, np.inf, (4,), np.float32)}
    return EnvSpec("Toy-v0", tuple(f"agent_{i}" for i in range(agents)), obs, spaces.Box(-1, 1, (2,), np.float32))


# -- the check itself -------------------------------------------------------------------

def test_tensors_walks_a_nested_batch_by_path():
    batch = {"obs": {"image": torch.zeros(2), "vec": [torch.zeros(1), np.zeros(3)]}, "reward": torch.zeros(2)}
    assert [p for p, _ in tensors(batch)] == ["obs.image", "obs.vec.0", "reward"]


def test_misplaced_names_each_meta_tensor_with_its_path():
    batch = {"obs": {"image": torch.zeros(2, device="meta"), "vec": torch.zeros(1)}, "mask": (torch.zeros(1),)}
    assert misplaced(batch, "meta") == ["obs.vec: cpu", "mask.0: cpu"]
    with pytest.raises(AssertionError, match=r"^2 tensors not on meta: obs\.vec: cpu; mask\.0: cpu$"):
        assert_on_device(batch, "meta")


def test_module_and_optimiser_state_are_walked():
    lin = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    paths = [p for p, _ in tensors({"net": lin, "opt": opt})]
    # Adam's "step" is a host counter by design (HOST_STATE_KEYS): not checked
    assert paths == ["net.weight", "net.bias", "opt.state.0.exp_avg", "opt.state.0.exp_avg_sq",
                     "opt.state.1.exp_avg", "opt.state.1.exp_avg_sq"]
    assert assert_on_device({"net": lin, "opt": opt}, "cpu") == 6
    assert misplaced(lin, "cuda") == ["weight: cpu", "bias: cpu"]


def test_cuda_without_index_matches_any_index_but_an_index_must_agree():
    with FakeTensorMode():
        a, b = torch.zeros(1, device="cuda:0"), torch.zeros(1, device="cuda:1")
        assert misplaced([a, b], "cuda") == []
        assert misplaced([a, b], "cuda:1") == ["0: cuda:0"]


def test_a_check_of_nothing_fails():
    with pytest.raises(AssertionError, match="no tensor found in dict"):
        assert_on_device({"a": np.zeros(2)}, "cpu")


# -- the statistics of every algorithm follow its device (issue 21, fault 2) ------------

ALGOS = [
    pytest.param(lambda: PPO(PPOConfig(device="meta", norm_reward=True, norm_obs=True), box_spec(), 0), id="ppo"),
    pytest.param(lambda: IMPALA(IMPALAConfig(device="meta", norm_reward=True, norm_obs=True), box_spec(), 0),
                 id="impala"),
    pytest.param(lambda: MAPPO(MAPPOConfig(device="meta", norm_reward=True), box_spec(2), 0), id="mappo"),
]


@pytest.mark.parametrize("make", ALGOS)
def test_reward_and_observation_statistics_live_on_the_algorithm_device(make):
    """Before the fix RewardNorm stayed on the CPU: 'reward_norm.returns.mean: cpu' (and var, count)."""
    algo = make()
    assert_on_device(algo, "meta")
    # the statistics path of an update: discounted returns merged, rewards scaled, observations merged
    reward = torch.ones(3, 2, device="meta")
    out = scaled_rewards(algo.reward_norm, {"disc_return": torch.ones(3, 2, device="meta")}, reward, None)
    assert out.device.type == "meta" and out.shape == (3, 2)
    algo.policy.update_obs_stats({"obs": torch.ones(6, 4, device="meta")})
    assert_on_device(algo, "meta")


@pytest.mark.parametrize("make", ALGOS)
def test_reward_statistics_load_onto_the_algorithm_device(make):
    algo = make()
    state = RewardNorm().state_dict()  # as a checkpoint loaded with map_location="cpu" holds them
    algo.reward_norm.load_state_dict(state)
    assert_on_device(algo.reward_norm, "meta")


def test_a_host_reward_norm_fed_cuda_returns_fails_as_on_a_gpu():
    """What fault 2 was, reproduced on the CPU: FakeTensorMode refuses the CPU statistics
    buffers in an update with CUDA returns, as a GPU does."""
    norm = RewardNorm()
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = torch.ones(3, 2, device="cuda:0")
        with pytest.raises(RuntimeError, match="cpu"):
            scaled_rewards(norm, {"disc_return": cuda}, cuda, None)
