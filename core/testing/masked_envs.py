"""Small environments with action masks and late-joining agents, for tests and plugin authors.

Importing this module registers the Gymnasium id ``MaskedTarget-v0``, so Zoo can name it
the ecosystem's way: ``--env zoo.core.testing.masked_envs:MaskedTarget-v0``. The module's
:func:`parallel_env` makes it a PettingZoo env too: ``--env pettingzoo:zoo.core.testing.masked_envs``.

**The target task** (per agent): each step a target action ``g`` in ``{0..n-1}`` is drawn and
shown as a one-hot observation; the mask allows ``g`` and one other random action (the
other ``n - 2`` are illegal). Reward 1 for taking ``g``, else 0; an episode has ``length``
steps (then ``terminated``). Expected return per episode of ``length = 10`` with ``n = 4``:
optimal 10, uniformly random over the legal actions 5, uniformly random over all actions
2.5. An illegal action is counted (``illegal``, reported per episode in
``info["stats"]["illegal"]``) and earns nothing.

- :class:`MaskedTarget`: Gymnasium, mask in ``info["action_mask"]`` (int8 ``[n]``).
- :class:`MaskedTargetParallel`: PettingZoo Parallel, ``agents`` agents with their own
  targets; the mask in the observation (``{"observation", "action_mask"}``, PettingZoo's
  convention) or, with ``mask_in="infos"``, in ``infos[agent]["action_mask"]``.
- :class:`LateJoinParallel`: PettingZoo Parallel, 2 agents; ``agent_1`` joins at step
  ``join_at`` (3) of every episode; observation ``float32 [2]`` = ``(t / length, agent id)``.
"""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

GYM_ID = "MaskedTarget-v0"


def _draw(rng: np.random.Generator, n: int) -> tuple[int, np.ndarray]:
    goal = int(rng.integers(n))
    other = int((goal + 1 + rng.integers(n - 1)) % n)
    mask = np.zeros(n, np.int8)
    mask[[goal, other]] = 1
    return goal, mask


class MaskedTarget(gymnasium.Env):
    """The target task for one agent, Gymnasium-style (module docstring)."""

    def __init__(self, n: int = 4, length: int = 10) -> None:
        self.n, self.length = n, length
        self.observation_space = spaces.Box(0.0, 1.0, (n,), np.float32)
        self.action_space = spaces.Discrete(n)
        self.rng = np.random.default_rng(0)
        self.t = self.illegal = 0
        self.goal, self.mask = 0, np.ones(n, np.int8)

    def _obs(self):
        self.goal, self.mask = _draw(self.rng, self.n)
        return np.eye(self.n, dtype=np.float32)[self.goal], {"action_mask": self.mask.copy()}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = self.illegal = 0
        return self._obs()

    def step(self, action):
        a = int(action)
        self.illegal += int(not self.mask[a])
        reward = float(a == self.goal)
        self.t += 1
        obs, info = self._obs()
        done = self.t >= self.length
        if done:
            info["stats"] = {"illegal": float(self.illegal)}
        return obs, reward, done, False, info


if GYM_ID not in gymnasium.registry:
    gymnasium.register(GYM_ID, entry_point=f"{__name__}:MaskedTarget")


class MaskedTargetParallel:
    """The target task for ``agents`` agents, PettingZoo Parallel API (module docstring)."""

    metadata = {"name": "masked_target_v0"}

    def __init__(self, agents: int = 2, n: int = 4, length: int = 10, mask_in: str = "obs") -> None:
        if mask_in not in ("obs", "infos"):
            raise ValueError(f"mask_in={mask_in!r}: 'obs' or 'infos'")
        self.n, self.length, self.mask_in = n, length, mask_in
        self.possible_agents = [f"agent_{i}" for i in range(agents)]
        self.agents: list[str] = []
        feat = spaces.Box(0.0, 1.0, (n,), np.float32)
        self._obs_space = (spaces.Dict({"observation": feat, "action_mask": spaces.Box(0, 1, (n,), np.int8)})
                           if mask_in == "obs" else feat)
        self._act_space = spaces.Discrete(n)
        self.rng = np.random.default_rng(0)
        self.t = 0
        self.illegal = 0
        self.goal: dict[str, int] = {}
        self.mask: dict[str, np.ndarray] = {}

    def observation_space(self, agent: str):
        return self._obs_space

    def action_space(self, agent: str):
        return self._act_space

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs: dict[str, Any] = {}
        infos: dict[str, Any] = {}
        for a in self.agents:
            self.goal[a], self.mask[a] = _draw(self.rng, self.n)
            feat = np.eye(self.n, dtype=np.float32)[self.goal[a]]
            if self.mask_in == "obs":
                obs[a] = {"observation": feat, "action_mask": self.mask[a].copy()}
                infos[a] = {}
            else:
                obs[a] = feat
                infos[a] = {"action_mask": self.mask[a].copy()}
        return obs, infos

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = self.illegal = 0
        return self._observe()

    def step(self, actions: dict[str, Any]):
        rewards = {}
        for a in self.agents:
            act = int(actions[a])
            self.illegal += int(not self.mask[a][act])
            rewards[a] = float(act == self.goal[a])
        self.t += 1
        done = self.t >= self.length
        obs, infos = self._observe()
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        if done:
            for a in self.agents:
                infos[a]["stats"] = {"illegal": float(self.illegal)}
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        pass


def parallel_env(agents: int = 2, n: int = 4, length: int = 10, mask_in: str = "obs") -> MaskedTargetParallel:
    """PettingZoo's factory convention: ``--env pettingzoo:zoo.core.testing.masked_envs``."""
    return MaskedTargetParallel(agents, n, length, mask_in)


class LateJoinParallel:
    """2 agents; ``agent_1`` joins at step ``join_at`` of every episode of ``length`` steps.

    Observations ``float32 [2]`` = ``(t / length, agent index)``; ``Discrete(2)`` actions;
    reward 1 per agent per step. All agents terminate at ``length``.
    """

    metadata = {"name": "late_join_v0"}

    def __init__(self, length: int = 6, join_at: int = 3) -> None:
        self.length, self.join_at = length, join_at
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self._obs_space = spaces.Box(0.0, 1.0, (2,), np.float32)
        self._act_space = spaces.Discrete(2)
        self.t = 0

    def observation_space(self, agent: str):
        return self._obs_space

    def action_space(self, agent: str):
        return self._act_space

    def _observe(self):
        return {a: np.array([self.t / self.length, float(a[-1])], np.float32) for a in self.agents}, \
            {a: {} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = ["agent_0"]
        return self._observe()

    def step(self, actions):
        missing = set(self.agents) - set(actions)
        if missing or set(actions) - set(self.agents):
            raise ValueError(f"actions for {sorted(actions)}, acting agents {self.agents}")
        self.t += 1
        rewards = {a: 1.0 for a in self.agents}
        done = self.t >= self.length
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        if not done and self.t == self.join_at:
            self.agents = ["agent_0", "agent_1"]
        obs, infos = self._observe()
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        pass
