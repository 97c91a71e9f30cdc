"""Zoo's adapter: drives :class:`~.env.HideAndSeekEnv` through its array API.

Implements :class:`zoo.core.env.Env`: agents in the fixed order of ``possible_agents``
(``A`` = maximum hiders + maximum seekers), observations ``dict[key, float32 [A, ...]]``,
actions ``int64 [A, 5]``, rewards ``float32 [A]``, ``terminated``/``truncated`` ``bool [A]``
(never terminated; all truncated at the horizon). ``info["active"] bool [A]`` marks the
slots playing this episode (inactive slots have zero observations and rewards);
``info["stats"]`` (:mod:`.stats`) comes with the last step.
"""
from __future__ import annotations

import numpy as np

from zoo.core.env import EnvSpec

from .config import HideAndSeekConfig
from .env import HideAndSeekEnv


class ZooHideAndSeek:
    """Zoo :class:`~zoo.core.env.Env` over one :class:`~.env.HideAndSeekEnv`."""

    def __init__(self, scenario: str | None, config: HideAndSeekConfig | None, seed: int | None) -> None:
        self.env = HideAndSeekEnv(scenario, config, seed)
        p = self.env.params
        self.spec = EnvSpec(
            env_id=f"hide-and-seek:{p.scenario}",
            agents=tuple(self.env.possible_agents),
            observation_space=dict(self.env.observation_space(self.env.possible_agents[0]).spaces),
            action_space=self.env.action_space(self.env.possible_agents[0]),
            frame_skip=1,
            resolved={"scenario": p.scenario, "horizon": p.horizon, "prep_steps": p.prep_steps,
                      "substeps": p.cfg.substeps, "timestep": p.cfg.timestep},
            stages=self.env.stages,
        )

    def set_curriculum_stage(self, stage: int) -> None:
        """Play stage ``stage`` of ``spec.stages`` (a number of boxes) from the next reset on
        (:meth:`~.env.HideAndSeekEnv.set_curriculum_stage`)."""
        self.env.set_curriculum_stage(stage)

    def reset(self, seed: int | None = None):
        obs = self.env.reset_arrays(seed)
        return obs, {"active": self.env.game.active.copy()}

    def step(self, action: np.ndarray):
        obs, rewards, truncated, info = self.env.step_arrays(action)
        a = self.spec.num_agents
        out = {"active": self.env.game.active.copy(), **info}
        return obs, rewards, np.zeros(a, bool), (np.ones if truncated else np.zeros)(a, bool), out

    def close(self) -> None:
        self.env.close()


def make(arg: str | None, config: HideAndSeekConfig | None, seed: int | None) -> ZooHideAndSeek:
    """Zoo env factory: ``arg`` is the scenario (``None`` -> ``"quadrant"``, or ``"full"``).

    Raises:
        ValueError: unknown scenario or invalid config.
    """
    return ZooHideAndSeek(arg, config, seed)
