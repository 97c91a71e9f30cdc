"""The PettingZoo Parallel API of hide-and-seek (usable without Zoo).

::

    from zoo.plugins.envs.hide_and_seek.env import HideAndSeekEnv
    env = HideAndSeekEnv("quadrant", seed=0)
    obs, infos = env.reset()
    obs, rewards, terminations, truncations, infos = env.step(
        {a: env.action_space(a).sample() for a in env.agents})

``possible_agents`` are ``hider_0 .. hider_{max-1}, seeker_0 .. seeker_{max-1}`` (the
maximum team sizes); ``agents`` are the ones playing this episode (the full game draws
1-3 per team). Each agent observes a dict of float32 arrays (:mod:`.observations`) and
acts with ``MultiDiscrete([11, 11, 11, 2, 2])`` (force x, force y, torque z, grab, lock).
A missing action means no-op. Every agent's info carries ``"stats"`` (:mod:`.stats`) on
the last step. After the last step ``agents`` is empty.

``reset(options={"layout": Layout})`` plays a scripted layout (:mod:`.scenarios`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from .config import HideAndSeekConfig, Params, resolve
from .game import Game


class HideAndSeekEnv(ParallelEnv):
    """Hide-and-seek, scenario ``"quadrant"`` (default) or ``"full"``.

    Args:
        scenario: ``"quadrant"``, ``"full"`` or None (quadrant).
        config: :class:`~.config.HideAndSeekConfig` (None: defaults).
        seed: seeds the layout generator (None: fresh entropy); ``reset(seed=...)`` reseeds.
        render_mode: None or ``"rgb_array"`` (top-down image, :mod:`.render`).

    Raises:
        ValueError: unknown scenario or invalid config (see :func:`~.config.resolve`).
    """

    metadata = {"name": "hide_and_seek_v0", "render_modes": ["rgb_array"], "is_parallelizable": True}

    def __init__(self, scenario: str | None = None, config: HideAndSeekConfig | None = None,
                 seed: int | None = None, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"hide-and-seek render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.params = resolve(config, scenario)
        self.scenario = self.params.scenario
        self.render_mode = render_mode
        self.game = Game(self.params)
        p = self.params
        self.possible_agents = [f"hider_{i}" for i in range(p.hiders[1])] + [f"seeker_{i}" for i in range(p.seekers[1])]
        self.agents: list[str] = []
        self._rng = np.random.default_rng(seed)
        leaves: dict[str, spaces.Space[Any]] = {**self.game.builder.spaces()}
        self._obs_space = spaces.Dict(leaves)
        self._act_space = spaces.MultiDiscrete([p.cfg.action_bins] * 3 + [2, 2], dtype=np.int64)
        self.stage_params = stage_params(p)  # curriculum stages: the number of boxes (docs/curriculum.md)
        self.stages = tuple(name for name, _ in self.stage_params)
        self._next_params = p  # what the next reset plays: the configured game until a stage is set

    def observation_space(self, agent: str) -> spaces.Dict:
        """The same ``Dict`` of float32 ``Box`` es for every agent (see :mod:`.observations`)."""
        return self._obs_space

    def action_space(self, agent: str) -> spaces.MultiDiscrete:
        """``MultiDiscrete([11, 11, 11, 2, 2])`` (int64), the same object for every agent."""
        return self._act_space

    def set_curriculum_stage(self, stage: int) -> None:
        """Play curriculum stage ``stage`` (``stages[stage]``, a number of boxes: :func:`stage_params`)
        from the next reset on; before any call the configured game is played (the last stage).

        Raises:
            ValueError: ``stage`` is not one of ``0 .. len(stages) - 1``.
        """
        if not 0 <= int(stage) < len(self.stage_params):
            raise ValueError(f"hide-and-seek: curriculum stage {stage} is not one of 0..{len(self.stage_params) - 1} "
                             f"({', '.join(self.stages)})")
        self._next_params = self.stage_params[int(stage)][1]

    # -- array API (used by the Zoo adapter) ------------------------------------------
    def reset_arrays(self, seed: int | None = None, options: dict | None = None) -> dict[str, np.ndarray]:
        """Reset; observations ``dict[key, float32 [A, ...]]`` over all ``possible_agents`` slots."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.game.p = self._next_params  # a curriculum stage applies from a reset on (observations keep their slots)
        obs = self.game.reset(self._rng, (options or {}).get("layout"))
        self.agents = [a for a, on in zip(self.possible_agents, self.game.active, strict=True) if on]
        return obs

    def step_arrays(self, actions: np.ndarray):
        """Step with ``actions int [A, 5]``; returns ``(obs, rewards float32 [A], truncated bool, info)``."""
        obs, rewards, truncated, info = self.game.step(actions)
        if truncated:
            self.agents = []
        return obs, rewards, truncated, info

    # -- PettingZoo API -------------------------------------------------------------
    def _split(self, obs: dict[str, np.ndarray], agents: list[str]) -> dict[str, dict[str, np.ndarray]]:
        index = {a: i for i, a in enumerate(self.possible_agents)}
        return {a: {k: v[index[a]] for k, v in obs.items()} for a in agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs = self.reset_arrays(seed, options)
        return self._split(obs, self.agents), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        """One env step; ``actions`` maps live agents to ``int [5]`` (missing: no-op).

        Raises:
            ValueError: an action names an unknown agent or has values outside its bins.
        """
        live = list(self.agents)
        arr = np.tile(self.game.noop, (len(self.possible_agents), 1))
        index = {a: i for i, a in enumerate(self.possible_agents)}
        for agent, action in actions.items():
            if agent not in index:
                raise ValueError(f"hide-and-seek: unknown agent {agent!r}; agents are {self.possible_agents}")
            arr[index[agent]] = np.asarray(action, dtype=np.int64).reshape(5)
        obs, rewards, truncated, info = self.step_arrays(arr)
        stats = info.get("stats")
        infos = {a: ({"stats": stats} if stats is not None else {}) for a in live}
        return (self._split(obs, live), {a: float(rewards[index[a]]) for a in live},
                {a: False for a in live}, {a: truncated for a in live}, infos)

    def render(self) -> np.ndarray | None:
        """``uint8 [H, W, 3]`` top-down image when ``render_mode == "rgb_array"``, else None."""
        if self.render_mode != "rgb_array" or self.game.world is None:
            return None
        from .render import render_topdown

        return render_topdown(self.game)

    def close(self) -> None:
        pass


def stage_params(p: Params) -> list[tuple[str, Params]]:
    """The curriculum stages of the game ``p``, ``[(name, params)]``, by the number of boxes
    (observations keep ``p``'s box slots at every stage; absent boxes are masked as usual):

    - quadrant (``quadrant_boxes`` = B): ``boxes-0``, ``boxes-1`` .. ``boxes-B``, exactly that many;
    - full (boxes drawn from ``[lo, hi]``): ``boxes-0`` (none), ``boxes-lo`` (exactly ``lo``) and
      ``boxes-lo-hi`` (the full game), duplicates left out.

    The last stage is the configured game.
    """
    import dataclasses

    lo, hi = p.boxes
    if p.scenario == "quadrant":
        ranges = [(k, k) for k in range(hi + 1)]
    else:
        ranges = sorted({(0, 0), (lo, lo), (lo, hi)})
    out = []
    for a, b in ranges:
        name = f"boxes-{a}" if a == b else f"boxes-{a}-{b}"
        out.append((name, dataclasses.replace(p, boxes=(a, b))))  # elongated ones: capped by the count drawn
    return out
