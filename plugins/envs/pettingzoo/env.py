"""PettingZoo Parallel environments through :class:`zoo.core.env.PettingZooEnv`."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from zoo.core.env import PaddedSpaces, PettingZooEnv
from zoo.plugins.envs.kwargs import parse_kwargs  # noqa: F401 - also importable from here


@dataclass
class PettingZooConfig:
    """Options of the ``pettingzoo`` environment plugin."""

    kwargs: str = ""
    """Keyword arguments of the module's ``parallel_env``, as comma-separated ``key=value`` pairs.

    Values are Python literals (a bare word is a string), e.g. ``--set env.kwargs=N=3,max_cycles=25``.
    """
    mixed_spaces: bool = False
    """Agents with different observation spaces, each space group with a named policy of its own
    (docs/policies.md): the env is laid out by :class:`zoo.core.env.PaddedSpaces`. ``zoo train``
    sets it when the run names policies; left False, such an env is refused as before."""


def make(arg: str | None, config: PettingZooConfig, seed: int) -> PettingZooEnv | PaddedSpaces:
    """Import ``arg`` (a module with ``parallel_env(**kwargs)``) and adapt its env (with
    ``config.mixed_spaces`` and agents of different spaces: :class:`PaddedSpaces` over it).

    Raises:
        ValueError: no module given, it cannot be imported, or it has no ``parallel_env``.
    """
    if not arg:
        raise ValueError("env 'pettingzoo' needs a module: --env pettingzoo:mpe2.simple_spread_v3")
    try:
        module = importlib.import_module(arg)
    except ImportError as exc:
        raise ValueError(f"--env pettingzoo:{arg}: cannot import {arg!r} ({exc}); "
                         "install the package that provides it") from None
    if not hasattr(module, "parallel_env"):
        raise ValueError(f"--env pettingzoo:{arg}: module {arg!r} has no parallel_env()")
    mixed = bool(getattr(config, "mixed_spaces", False))
    env = PettingZooEnv(module.parallel_env(**parse_kwargs(config.kwargs)), arg, mixed_spaces=mixed)
    return PaddedSpaces(env) if env.spec.mixed else env
