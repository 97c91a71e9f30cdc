"""zoo.plugins.envs.gym.wrappers: MaskVelocity keeps CartPole's positions only."""
import gymnasium
import numpy as np
import pytest

from zoo.plugins.envs.gym.wrappers import MaskVelocity


def test_mask_velocity_keeps_cart_position_and_pole_angle():
    inner = gymnasium.make("CartPole-v1")
    full, _ = inner.reset(seed=5)
    env = MaskVelocity(gymnasium.make("CartPole-v1"))
    obs, _ = env.reset(seed=5)
    assert env.observation_space.shape == (2,) and obs.dtype == np.float32
    assert obs.tolist() == [float(full[0]), float(full[2])]
    full, *_ = inner.step(1)
    obs, *_ = env.step(1)
    assert obs.tolist() == [float(full[0]), float(full[2])]
    assert env.observation_space.high.tolist() == [float(inner.observation_space.high[0]),
                                                   float(inner.observation_space.high[2])]
    with pytest.raises(ValueError, match=r"MaskVelocity: wraps CartPole \(a Box\[4\] observation\)"):
        MaskVelocity(gymnasium.make("Acrobot-v1"))
