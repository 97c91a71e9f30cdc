"""The environment interface Zoo's actors drive, multi-agent first, and the adapters.

Every Zoo environment has a fixed agent order (``spec.agents``) and exchanges arrays with
a leading agent axis ``A = len(spec.agents)``:

- observations: ``dict[str, np.ndarray]``, each of shape ``[A, *space.shape]`` (a plain
  Box observation is stored under the key ``"obs"``);
- actions: ``np.ndarray`` of shape ``[A, *action_space.shape]``;
- rewards ``float32 [A]``, ``terminated`` and ``truncated`` ``bool [A]``.

``reset`` and ``step`` may put into ``info``:

- ``"episode"``: ``{"return": float, "length": int}`` when a *whole* episode ends, for
  environments whose training signal differs from the score (Atari: episodic life and
  reward clipping). Without it the actor logs the sum of the rewards it was given.
- ``"active"``: ``bool [A]`` for agents that have not finished (multi-agent).
- ``"stats"``: ``dict[str, float]`` of per-episode statistics to be logged.

The actor owns resets: when every agent is terminated or truncated it calls ``reset``;
no adapter may reset by itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

OBS_KEY = "obs"


@dataclass
class EnvSpec:
    """Static facts about an environment that workers and algorithms need.

    ``observation_space`` maps each observation key to a per-agent ``gymnasium.spaces.Box``;
    ``action_space`` is the per-agent action space (Discrete, MultiDiscrete or Box).
    ``frame_skip`` converts env steps to frames (frames = env steps x frame_skip).
    """

    env_id: str
    agents: tuple[str, ...]
    observation_space: dict[str, Any]
    action_space: Any
    frame_skip: int = 1
    reports_episodes: bool = False  # True: info["episode"] marks the only episode ends to log
    resolved: dict[str, Any] = field(default_factory=dict)  # written to the run's config

    @property
    def num_agents(self) -> int:
        return len(self.agents)


class Env(Protocol):
    """What the actor worker drives (see the module docstring for shapes)."""

    spec: EnvSpec

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]: ...

    def close(self) -> None: ...


def _as_obs_dict(obs: Any) -> dict[str, np.ndarray]:
    if isinstance(obs, dict):
        return {k: np.asarray(v)[None] for k, v in obs.items()}
    return {OBS_KEY: np.asarray(obs)[None]}


class GymnasiumEnv:
    """Adapts one single-agent ``gymnasium.Env`` to Zoo's interface (``A = 1``).

    The wrapped environment must not auto-reset. Observations keep their dtype (uint8
    frames stay uint8); a Dict observation space becomes one key per entry.

    Raises:
        TypeError: the observation space is neither a Box nor a Dict of Boxes.
    """

    def __init__(self, env: Any, env_id: str, frame_skip: int = 1, resolved: dict | None = None,
                 reports_episodes: bool = False) -> None:
        from gymnasium import spaces

        self.env = env
        space = env.observation_space
        if isinstance(space, spaces.Dict):
            obs_space = dict(space.spaces)
        elif isinstance(space, spaces.Box):
            obs_space = {OBS_KEY: space}
        else:
            raise TypeError(f"env {env_id!r}: observation space {space} is not a Box or Dict of Boxes")
        self.spec = EnvSpec(env_id, ("agent_0",), obs_space, env.action_space, frame_skip,
                            reports_episodes, resolved or {})

    def reset(self, seed: int | None = None):
        obs, info = self.env.reset(seed=seed)
        return _as_obs_dict(obs), info

    def step(self, action: np.ndarray):
        a = action[0]
        if a.ndim == 0:
            a = a.item()
        obs, reward, terminated, truncated, info = self.env.step(a)
        return (
            _as_obs_dict(obs),
            np.array([reward], dtype=np.float32),
            np.array([terminated], dtype=bool),
            np.array([truncated], dtype=bool),
            info,
        )

    def close(self) -> None:
        self.env.close()


class PettingZooEnv:
    """Adapts a PettingZoo ``ParallelEnv`` to Zoo's interface (``A = len(possible_agents)``).

    Agents are laid out in ``possible_agents`` order. An agent that is not in ``env.agents``
    (finished early or not yet joined) gets a zero observation, reward 0, both flags False
    and ``info["active"][a] = False``; it is sent no action. The step on which an agent
    finishes keeps its own reward and flag. Per-episode statistics that the env puts in any
    agent's info under ``"stats"`` are passed on. When the env has a global ``state()`` with
    a Box ``state_space`` (centralised-critic input), every agent's observation also holds
    it under the key ``"state"``.

    Raises:
        TypeError: agents have observation or action spaces of different structure (one
            shared policy needs one layout; pad them in the env).
    """

    def __init__(self, env: Any, env_id: str, frame_skip: int = 1, resolved: dict | None = None) -> None:
        from gymnasium import spaces

        self.env = env
        self.agents = tuple(env.possible_agents)
        first = self.agents[0]
        space = env.observation_space(first)
        for a in self.agents[1:]:
            if env.observation_space(a) != space or env.action_space(a) != env.action_space(first):
                raise TypeError(f"env {env_id!r}: agents {first!r} and {a!r} have different spaces; "
                                "Zoo's shared-policy layout needs one per-agent observation and action space")
        obs_space = dict(space.spaces) if isinstance(space, spaces.Dict) else {OBS_KEY: space}
        self.with_state = isinstance(getattr(env, "state_space", None), spaces.Box) and "state" not in obs_space
        if self.with_state:
            obs_space["state"] = env.state_space
        self.spec = EnvSpec(env_id, self.agents, obs_space, env.action_space(first), frame_skip, False, resolved or {})
        self._zero = {k: np.zeros(s.shape, s.dtype) for k, s in obs_space.items() if k != "state"}

    def _stack(self, per_agent: dict[str, Any]) -> dict[str, np.ndarray]:
        rows = []
        for a in self.agents:
            o = per_agent.get(a)
            rows.append(self._zero if o is None else (o if isinstance(o, dict) else {OBS_KEY: o}))
        out = {k: np.stack([np.asarray(r[k]) for r in rows]) for k in self._zero}
        if self.with_state:
            out["state"] = np.broadcast_to(np.asarray(self.env.state()), (len(self.agents), *self.spec.observation_space["state"].shape)).copy()
        return out

    def _info(self, infos: dict[str, Any]) -> dict[str, Any]:
        live = set(self.env.agents)
        out: dict[str, Any] = {"active": np.array([a in live for a in self.agents])}
        for a in self.agents:
            if isinstance(infos.get(a), dict) and "stats" in infos[a]:
                out["stats"] = infos[a]["stats"]
        return out

    def reset(self, seed: int | None = None):
        obs, infos = self.env.reset(seed=seed)
        return self._stack(obs), self._info(infos)

    def step(self, action: np.ndarray):
        live = list(self.env.agents)
        acts = {}
        for i, a in enumerate(self.agents):
            if a in live:
                act = action[i]
                acts[a] = act.item() if act.ndim == 0 else act
        obs, rew, term, trunc, infos = self.env.step(acts)
        rewards = np.array([rew.get(a, 0.0) for a in self.agents], np.float32)
        terminated = np.array([bool(term.get(a, False)) for a in self.agents])
        truncated = np.array([bool(trunc.get(a, False)) for a in self.agents])
        # env.agents no longer lists agents that just finished: inactive from the next step on.
        return self._stack(obs), rewards, terminated, truncated, self._info(infos)

    def close(self) -> None:
        self.env.close()
