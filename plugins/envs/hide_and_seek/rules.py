"""Rewards of one env step (spec "Phases, reward, horizon").

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


def outside(xy: np.ndarray, area: tuple[float, float]) -> np.ndarray:
    """``bool [k]``: points ``xy [k, 2]`` outside the square ``[area[0], area[1]]^2``."""
    return ((xy < area[0]) | (xy > area[1])).any(axis=1)


def team_reward(vis_agents: np.ndarray, is_hider: np.ndarray) -> float:
    """``h``: +1.0 when no seeker sees a hider in ``vis_agents bool [n, n]``, else -1.0."""
    return -1.0 if vis_agents[~is_hider][:, is_hider].any() else 1.0


def step_rewards(vis_agents: np.ndarray, is_hider: np.ndarray, agent_xy: np.ndarray, object_xy: np.ndarray,
                 area: tuple[float, float], penalize_objects_out: bool, penalty: float,
                 in_prep: bool) -> np.ndarray:
    """``float32 [n]`` rewards of the active agents (hiders first) for one env step."""
    if in_prep:
        return np.zeros(len(is_hider), np.float32)
    h = team_reward(vis_agents, is_hider)
    rew = np.where(is_hider, np.float32(h), np.float32(-h))
    rew[outside(agent_xy, area)] = penalty
    if penalize_objects_out and len(object_xy) and outside(object_xy, area).any():
        rew[:] = penalty
    return rew
