"""Running observation / reward normalisation (issue 15 item 6), by hand."""
import math

import numpy as np
import pytest
import torch
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.workers.actor import EnvGroup, SampleBuffer
from zoo.core.testing.fake_envs import CountingEnv
from zoo.plugins.algorithms.normalization import ObsNorm, RewardNorm, RunningMeanStd
from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig


def test_running_moments_merge_batches_exactly():
    rms = RunningMeanStd(())
    rms.update(torch.tensor([1.0, 2.0, 3.0]))
    # from (mean 0, var 1, count 1e-4): batch mean 2, var 2/3; delta 2, M = 3.0001
    c = 1e-4
    m1 = 2 * 3 / (3 + c)
    v1 = (1 * c + (2 / 3) * 3 + 4 * c * 3 / (3 + c)) / (3 + c)
    assert rms.mean.item() == pytest.approx(m1) and rms.var.item() == pytest.approx(v1)
    rms.update(torch.tensor([4.0, 5.0, 6.0, 7.0]))
    # merged, the prior's 1e-4 weight aside: mean and population variance of 1..7 = 4 and 4
    assert rms.mean.item() == pytest.approx(4.0, abs=1e-3) and rms.var.item() == pytest.approx(4.0, abs=2e-3)
    assert rms.count.item() == pytest.approx(7 + c)


def test_obs_norm_skips_images_and_zoo_keys_and_clips():
    space = {"v": spaces.Box(-9, 9, (2,), np.float32), "img": spaces.Box(0, 255, (1, 4, 4), np.uint8),
             "zoo:action_mask": spaces.Box(0, 1, (3,), np.bool_)}
    norm = ObsNorm(space, clip=1.5)
    assert norm.keys == ["v"]
    norm.update({"v": torch.tensor([[0.0, 10.0], [2.0, 10.0]])})
    out = norm({"v": torch.tensor([[1.0, 10.0], [5.0, 0.0]]), "img": torch.zeros(2, 1, 4, 4, dtype=torch.uint8)})
    # column 0: mean ~1, var ~1 -> (1 - 1) / 1 = 0 and (5 - 1) / 1 = 4 -> clipped to 1.5
    assert out["v"][0, 0].item() == pytest.approx(0.0, abs=1e-3) and out["v"][1, 0].item() == 1.5
    # column 1: two 10s merged into the prior (mean 0, var 1, count c = 1e-4): delta 10, M = 2 + c,
    # mean 20 / M, var (c + 0 + 100 c 2 / M) / M ~ 0.00505: x = 10 -> 0.0005 / 0.0711 = 0.0070; x = 0 -> -1.5
    c = 1e-4
    m, v = 20 / (2 + c), (c + 100 * c * 2 / (2 + c)) / (2 + c)
    assert out["v"][0, 1].item() == pytest.approx((10 - m) / math.sqrt(v + 1e-8), rel=1e-3)  # float32
    assert out["v"][1, 1].item() == -1.5
    assert out["img"].dtype == torch.uint8


def test_reward_norm_divides_by_the_std_of_discounted_returns():
    rn = RewardNorm(clip=10.0)
    rn.update(torch.tensor([2.0, 4.0, 6.0, 8.0]))  # population var 5 (count 1e-4 prior aside)
    assert rn(torch.tensor([1.0])).item() == pytest.approx(1 / math.sqrt(5), rel=1e-3)
    assert rn(torch.tensor([-1000.0])).item() == -10.0


def test_the_actor_keeps_each_slots_discounted_return_and_resets_it_at_episode_ends():
    env = CountingEnv(episode_length=3)  # reward 1 per step, episodes of 3 steps
    group = EnvGroup([env], [0], return_gamma=0.5)
    buf = SampleBuffer(5, group.obs, disc_return=True)
    for _ in range(5):
        action = buf.record_policy({"action": np.zeros(1, np.int64)}, 0, group.active, group.on_reset)
        group.step(action, buf, [])
    # R = 0.5 R + 1: 1, 1.5, 1.75 | (episode ends, reset) 1, 1.5
    assert buf.disc_return[:, 0].tolist() == [1.0, 1.5, 1.75, 1.0, 1.5]
    assert "disc_return" in buf.bundle()


def test_ppo_with_normalisation_updates_and_checkpoints_its_statistics():
    spec = EnvSpec("Toy-v0", ("a",), {"obs": spaces.Box(-10, 10, (2,), np.float32)}, spaces.Box(-1, 1, (1,)))
    algo = PPO(PPOConfig(norm_obs=True, norm_reward=True, epochs=1, minibatches=1), spec, 0)
    T, B = 4, 2
    rng = np.random.default_rng(0)
    batch = {"obs": {"obs": (3.0 + rng.standard_normal((T + 1, B, 2))).astype(np.float32)},
             "action": rng.standard_normal((T, B, 1)).astype(np.float32),
             "reward": np.ones((T, B), np.float32), "terminated": np.zeros((T, B), bool),
             "truncated": np.zeros((T, B), bool), "logp": np.zeros((T, B), np.float32),
             "value": np.zeros((T, B), np.float32), "disc_return": np.arange(T * B, dtype=np.float32).reshape(T, B)}
    algo.update(batch)
    rms = algo.policy.obs_norm.stats[0]
    # the obs statistics took the T x B = 8 active rows (not the bootstrap row)
    assert rms.count.item() == pytest.approx(8 + 1e-4)
    assert rms.mean.numpy() == pytest.approx(batch["obs"]["obs"][:T].reshape(-1, 2).mean(0) * 8 / (8 + 1e-4), rel=1e-4)
    # discounted returns 0..7: population variance 5.25
    assert algo.reward_norm.returns.var.item() == pytest.approx(5.25, rel=1e-3)
    state = algo.state_dict()
    assert "obs_norm.stats.0.mean" in state["policy"] and state["reward_norm"]["returns.var"].item() == \
        pytest.approx(5.25, rel=1e-3)
    fresh = PPO(PPOConfig(norm_obs=True, norm_reward=True), spec, 1)
    fresh.load_state_dict(state)
    assert fresh.reward_norm.returns.var.item() == algo.reward_norm.returns.var.item()
    assert torch.equal(fresh.policy.obs_norm.stats[0].mean, rms.mean)
    with pytest.raises(KeyError, match="disc_return"):
        algo.update({k: v for k, v in batch.items() if k != "disc_return"})


def test_mappo_reward_normalisation_merges_discounted_returns_of_active_steps_and_checkpoints_them():
    from zoo.plugins.algorithms.mappo.mappo import MAPPO, MAPPOConfig

    spec = EnvSpec("Toy-v0", ("a", "b"), {"obs": spaces.Box(-1, 1, (2,), np.float32)}, spaces.Discrete(2))
    algo = MAPPO(MAPPOConfig(norm_reward=True, epochs=1), spec, 0)
    T, B = 2, 2
    batch = {"obs": {"obs": np.zeros((T + 1, B, 2), np.float32)}, "action": np.zeros((T, B), np.int64),
             "reward": np.ones((T, B), np.float32), "terminated": np.zeros((T, B), bool),
             "truncated": np.zeros((T, B), bool), "logp": np.full((T, B), np.log(0.5), np.float32),
             "value": np.zeros((T, B), np.float32),
             "active": np.array([[True, True], [True, False]]),
             "disc_return": np.array([[1.0, 2.0], [3.0, 100.0]], np.float32)}  # 100: an inactive step, left out
    algo.update(batch)
    # active returns 1, 2, 3: mean 2, population variance 2/3 (the 1e-4 prior aside)
    assert algo.reward_norm.returns.mean.item() == pytest.approx(2.0, rel=1e-3)
    assert algo.reward_norm.returns.var.item() == pytest.approx(2 / 3, rel=1e-3)
    fresh = MAPPO(MAPPOConfig(norm_reward=True), spec, 1)
    fresh.load_state_dict(algo.state_dict())
    assert fresh.reward_norm.returns.var.item() == algo.reward_norm.returns.var.item()
