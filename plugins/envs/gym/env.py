"""Gymnasium environments through :class:`zoo.core.env.GymnasiumEnv`."""
from __future__ import annotations

from dataclasses import dataclass

from zoo.core.env import GymnasiumEnv

# Default budgets (env steps) for ids whose usual training length is known.
KNOWN_BUDGETS = {"CartPole-v1": 200_000, "CartPole-v0": 100_000, "Acrobot-v1": 500_000}
DEFAULT_BUDGET = 1_000_000


@dataclass
class GymConfig:
    """Options of the ``gym`` environment plugin.

    ``max_episode_steps``: overrides the id's registered time limit (0 keeps it).
    """

    max_episode_steps: int = 0


def resolves(env_id: str) -> bool:
    """True when ``env_id`` is a registered Gymnasium id."""
    import gymnasium

    return env_id in gymnasium.registry


def known_ids() -> list[str]:
    import gymnasium

    return list(gymnasium.registry)


def default_budget(arg: str | None) -> tuple[str, int]:
    return ("env_steps", KNOWN_BUDGETS.get(arg or "", DEFAULT_BUDGET))


def make(arg: str | None, config: GymConfig, seed: int) -> GymnasiumEnv:
    """Build ``gymnasium.make(arg)`` with no auto-reset wrapper.

    Raises:
        ValueError: ``arg`` is missing or not a registered Gymnasium id.
    """
    import gymnasium

    if not arg:
        raise ValueError("env 'gym' needs an id: --env gym:CartPole-v1")
    if arg not in gymnasium.registry:
        import difflib

        close = difflib.get_close_matches(arg, list(gymnasium.registry), n=3)
        raise ValueError(f"unknown Gymnasium id {arg!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))
    kwargs = {"max_episode_steps": config.max_episode_steps} if config.max_episode_steps > 0 else {}
    env = gymnasium.make(arg, **kwargs)
    env.action_space.seed(seed)
    return GymnasiumEnv(env, arg)
