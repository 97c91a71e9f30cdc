"""Gymnasium wrappers Zoo ships for its own tests and benchmarks (``--set env.wrappers=module:Class``).

:class:`MaskVelocity` makes a classic-control env partially observable by keeping only its
position entries, a common memory test for recurrent agents: a policy must infer the velocities
from consecutive observations, which a feed-forward one cannot.
"""
from __future__ import annotations

import gymnasium
import numpy as np


class MaskVelocity(gymnasium.ObservationWrapper):
    """CartPole with velocities hidden: observation float32 ``[2]`` (cart position in m, pole angle
    in rad) of the underlying ``[4]``.

    Raises:
        ValueError: the wrapped env is not a CartPole (its observation is not ``Box[4]``).
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or space.shape != (4,):
            raise ValueError(f"MaskVelocity: wraps CartPole (a Box[4] observation); this env observes {space}")
        self.keep = np.array([0, 2])
        self.observation_space = gymnasium.spaces.Box(space.low[self.keep], space.high[self.keep], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation, np.float32)[self.keep]
