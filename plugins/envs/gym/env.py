"""Gymnasium environments through :class:`zoo.core.env.GymnasiumEnv`.

``--env`` takes any id ``gymnasium.make`` takes:

- a registered id: ``CartPole-v1``, ``Pendulum-v1``, ``ALE/Pong-v5``...;
- ``module:EnvName-vN`` for an env registered by importing ``module`` (Gymnasium's own
  convention, e.g. ``--env my_package.envs:Corridor-v0``). ``gymnasium.make`` imports the
  module in every process that builds the env, so the registration reaches the spawned
  worker processes too; the module must be importable there (installed, or on
  ``PYTHONPATH``).

``--set env.kwargs=key=value,...`` passes keyword arguments to ``gymnasium.make``;
``--set env.wrappers=Name,...`` applies Gymnasium wrappers (``gymnasium.wrappers.Name`` or
``module:Class``) in order, e.g. ``RecordEpisodeStatistics,NormalizeReward``.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass, field

from zoo.core.env import GymnasiumEnv
from zoo.core.options import bounded
from zoo.plugins.envs.kwargs import parse_kwargs

# Default budgets (env steps) for ids whose usual training length is known.
KNOWN_BUDGETS = {"CartPole-v1": 200_000, "CartPole-v0": 100_000, "Acrobot-v1": 500_000}
DEFAULT_BUDGET = 1_000_000
_MODULE_ID = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):(.+)$")


@dataclass
class GymConfig:
    """Options of the ``gym`` environment plugin."""

    max_episode_steps: int = field(default=0, metadata=bounded(ge=0, hint="0 = the id's own limit"))
    """Overrides the id's registered time limit (0 keeps it)."""
    kwargs: str = ""
    """Keyword arguments of ``gymnasium.make``, comma-separated ``key=value`` (Python literals; a bare word
    is a string), e.g. ``--set env.kwargs=g=9.81``."""
    wrappers: str = ""
    """Gymnasium wrappers applied in order, comma-separated: ``gymnasium.wrappers`` names or ``module:Class``
    (e.g. ``RecordEpisodeStatistics,NormalizeReward``). No auto-reset wrapper: the actor owns resets."""


def split_module_id(env_id: str) -> tuple[str, str] | None:
    """``"my_pkg.envs:Corridor-v0"`` -> ``("my_pkg.envs", "Corridor-v0")``; None for a plain id."""
    m = _MODULE_ID.match(env_id)
    return (m.group(1), m.group(2)) if m else None


def resolves(env_id: str) -> bool:
    """True when ``env_id`` is a registered Gymnasium id, or ``module:ID`` with an importable ``module``."""
    import gymnasium

    if env_id in gymnasium.registry:
        return True
    parts = split_module_id(env_id)
    if parts is None:
        return False
    try:
        return importlib.util.find_spec(parts[0]) is not None
    except (ImportError, ValueError):
        return False


def known_ids() -> list[str]:
    import gymnasium

    return list(gymnasium.registry)


def default_budget(arg: str | None) -> tuple[str, int]:
    arg = arg or ""
    parts = split_module_id(arg)
    return ("env_steps", KNOWN_BUDGETS.get(parts[1] if parts else arg, DEFAULT_BUDGET))


def _wrapper(name: str):
    import gymnasium

    if ":" in name:
        module, _, attr = name.partition(":")
        return getattr(importlib.import_module(module), attr)
    cls = getattr(gymnasium.wrappers, name, None)
    if cls is None:
        raise ValueError(f"env.wrappers: {name!r} is not a gymnasium.wrappers class; give a name such as "
                         "RecordEpisodeStatistics, or module:Class")
    return cls


def make(arg: str | None, config: GymConfig, seed: int) -> GymnasiumEnv:
    """Build ``gymnasium.make(arg, **kwargs)`` with the configured wrappers, no auto-reset.

    Raises:
        ValueError: ``arg`` is missing, its module cannot be imported, the id is not
            registered, or ``env.kwargs`` / ``env.wrappers`` are malformed.
        zoo.core.spaces.UnsupportedSpaceError: a space Zoo cannot train on.
    """
    import gymnasium

    if not arg:
        raise ValueError("env 'gym' needs an id: --env gym:CartPole-v1 (or --env my_package.envs:MyEnv-v0)")
    parts = split_module_id(arg)
    if parts is not None:
        try:
            importlib.import_module(parts[0])
        except ImportError as exc:
            raise ValueError(f"--env {arg}: cannot import module {parts[0]!r} ({exc}); install it or put it on "
                             "PYTHONPATH") from None
    env_id = parts[1] if parts else arg
    if env_id not in gymnasium.registry:
        import difflib

        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
        where = f" after importing {parts[0]!r} (does it call gymnasium.register?)" if parts else ""
        raise ValueError(f"unknown Gymnasium id {env_id!r}{where}"
                         + (f"; did you mean {', '.join(close)}?" if close else ""))
    kwargs = parse_kwargs(config.kwargs)
    if config.max_episode_steps > 0:
        kwargs["max_episode_steps"] = config.max_episode_steps
    try:
        env = gymnasium.make(env_id, **kwargs)
    except TypeError as exc:
        raise ValueError(f"--env {arg}: gymnasium.make rejected env.kwargs={config.kwargs!r}: {exc}") from None
    for name in filter(None, (w.strip() for w in config.wrappers.split(","))):
        env = _wrapper(name)(env)
    env.action_space.seed(seed)
    return GymnasiumEnv(env, arg)


def render(env: GymnasiumEnv):
    """The env's picture, ``uint8 [H, W, 3]``: Gymnasium's ``render()`` in ``rgb_array`` mode
    (the ``renderer`` this plugin registers; ``zoo eval --video`` calls it after each reset and step).

    An env made without a render mode is switched to ``rgb_array`` first: Gymnasium's own
    envs read ``render_mode`` when ``render()`` is called, and build their renderer then.

    Raises:
        ValueError: the env's ``render()`` returns no RGB array (it has no ``rgb_array`` mode).
    """
    import os

    import numpy as np

    # pygame (classic control, Box2D) draws off-screen; without these SDL looks for a display
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    base = env.env.unwrapped if hasattr(env.env, "unwrapped") else env.env
    if getattr(base, "render_mode", None) != "rgb_array":
        base.render_mode = "rgb_array"
    frame = env.env.render()
    if frame is None or np.ndim(frame) != 3:
        raise ValueError(f"env {env.spec.env_id!r}: render() in rgb_array mode returned "
                         f"{type(frame).__name__}, not an RGB array")
    return np.asarray(frame, dtype=np.uint8)
