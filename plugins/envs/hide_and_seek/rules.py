"""Rewards of one env step (docs/hide-and-seek.md, "Phases, reward, horizon").

- Preparation phase (the first ``prep_steps`` env steps): every reward is exactly 0,
  the out-of-area penalty included.
- After it: ``h = +1`` when no seeker sees any hider (policy visibility: cone + line of
  sight), else ``h = -1``; every hider gets ``h``, every seeker ``-h``.
- An agent whose centre lies outside the allowed square ``[lo, hi]^2`` gets
  ``out_of_area_reward`` (-10) in place of that; with ``penalize_objects_out`` (the
  quadrant) a box or ramp outside it gives every agent ``out_of_area_reward``.
"""
from __future__ import annotations

import numpy as np


def outside(x: float, y: float, area: tuple[float, float]) -> bool:
    """Whether the point ``(x, y)`` lies outside the square ``[area[0], area[1]]^2``."""
    return x < area[0] or x > area[1] or y < area[0] or y > area[1]


class StepRewards:
    """The reward rule of one episode: ``float32 [n]`` rewards of its active agents (hiders first).

    Args:
        is_hider: ``bool [n]``.
        area: the allowed square ``(lo, hi)`` (m).
        penalize_objects_out: an object outside the square gives every agent ``penalty``.
        penalty: the out-of-area reward (-10).
    """

    def __init__(self, is_hider: np.ndarray, area: tuple[float, float], penalize_objects_out: bool,
                 penalty: float) -> None:
        self.n, self.area, self.penalize_objects_out, self.penalty = len(is_hider), area, penalize_objects_out, penalty
        self.seeker_hider = np.ix_(~is_hider, is_hider)  # the [seeker, hider] block of the visibility
        self.sign = np.where(is_hider, np.float32(1.0), np.float32(-1.0))  # h for hiders, -h for seekers

    def __call__(self, vis_agents: np.ndarray, xy: np.ndarray, in_prep: bool) -> np.ndarray:
        """Rewards from ``vis_agents bool [n, n]`` and the positions ``xy [n + objects, 2]`` of
        every movable body (agents first)."""
        if in_prep:
            return np.zeros(self.n, np.float32)
        h = -1.0 if vis_agents[self.seeker_hider].any() else 1.0  # some seeker sees some hider
        rew = self.sign * np.float32(h)
        # a few points: plain Python beats numpy's per-call overhead here
        out = [outside(x, y, self.area) for x, y in xy.tolist()]
        for i in range(self.n):
            if out[i]:
                rew[i] = self.penalty
        if self.penalize_objects_out and any(out[self.n:]):
            rew[:] = self.penalty
        return rew
