"""The corridor environment: a tiny deterministic task with a known optimal return.

The agent starts in cell 0 of a corridor of ``length`` cells and must reach cell
``length - 1``. Actions (``Discrete(2)``): 0 = left (a no-op in cell 0), 1 = right.
Every step costs ``STEP_COST`` (0.01); the step that reaches the end also earns
``GOAL_REWARD`` (1.0) and terminates the episode. An episode that has not reached the end
after ``max_steps`` steps is truncated.

The observation is the one-hot position, ``float32 [length]``. Always moving right
reaches the end in ``length - 1`` steps, the optimal return
``GOAL_REWARD - STEP_COST * (length - 1)`` (:func:`optimal_return`; 0.91 for length 10).

:class:`CorridorEnv` is a plain ``gymnasium.Env``; :func:`make` wraps it in
:class:`zoo.core.env.GymnasiumEnv` to give Zoo's multi-agent-first interface (``A = 1``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium
import numpy as np
from gymnasium import spaces

from zoo.core.env import GymnasiumEnv
from zoo.core.options import bounded

STEP_COST = 0.01
GOAL_REWARD = 1.0
LEFT, RIGHT = 0, 1


@dataclass
class CorridorConfig:
    """Options of the ``corridor`` env (``--set env.length=20`` style overrides).

    ``length``: cells in the corridor, >= 2 (``--env corridor:N`` also sets it).
    ``max_steps``: steps before the episode is truncated, >= 1.
    """

    length: int = field(default=10, metadata=bounded(ge=2))
    max_steps: int = field(default=100, metadata=bounded(ge=1))


def optimal_return(length: int) -> float:
    """The return of always moving right: ``GOAL_REWARD - STEP_COST * (length - 1)``."""
    return GOAL_REWARD - STEP_COST * (length - 1)


class CorridorEnv(gymnasium.Env):
    """A 1-D corridor (see the module docstring). Deterministic: the seed changes nothing.

    Raises:
        ValueError: ``length`` < 2 or ``max_steps`` < 1 (names the field and value);
            an action other than 0 or 1.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 10, max_steps: int = 100) -> None:
        if not isinstance(length, int) or length < 2:
            raise ValueError(f"corridor: length={length!r} is not allowed; it must be an int >= 2")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"corridor: max_steps={max_steps!r} is not allowed; it must be an int >= 1")
        self.length, self.max_steps = length, max_steps
        self.observation_space = spaces.Box(0.0, 1.0, shape=(length,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.position = 0
        self.steps = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = 0
        self.steps = 0
        return self._obs(), {"position": self.position}

    def step(self, action):
        if action not in (LEFT, RIGHT):
            raise ValueError(f"corridor: action {action!r} is not allowed; use 0 (left) or 1 (right)")
        self.position = min(self.position + 1, self.length - 1) if action == RIGHT else max(self.position - 1, 0)
        self.steps += 1
        terminated = self.position == self.length - 1
        truncated = not terminated and self.steps >= self.max_steps
        reward = (GOAL_REWARD if terminated else 0.0) - STEP_COST
        return self._obs(), reward, terminated, truncated, {"position": self.position}


def make(arg: str | None, config: CorridorConfig, seed: int) -> GymnasiumEnv:
    """Zoo's env factory: ``--env corridor`` or ``--env corridor:LENGTH``.

    Raises:
        ValueError: ``arg`` is not an int, or a config value is out of range.
    """
    length = config.length
    if arg:
        try:
            length = int(arg)
        except ValueError:
            raise ValueError(f"corridor: {arg!r} after 'corridor:' is not allowed; "
                             "it must be the corridor length, an int >= 2 (e.g. corridor:20)") from None
    env = CorridorEnv(length, config.max_steps)
    env.action_space.seed(seed)
    return GymnasiumEnv(env, f"corridor:{length}" if arg else "corridor",
                        resolved={"length": length, "max_steps": config.max_steps})
