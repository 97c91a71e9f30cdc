"""Scripted placements for the hide-and-seek tests."""
from __future__ import annotations

import math

import numpy as np

from zoo.plugins.envs.hide_and_seek.config import HideAndSeekConfig, resolve
from zoo.plugins.envs.hide_and_seek.game import Game
from zoo.plugins.envs.hide_and_seek.scenarios import Layout, Wall, outer_walls

# Bins: 0 = full negative force, 5 = none, 10 = full positive.
NEG, NONE, POS = 0, 5, 10


def layout(p, hiders=(), seekers=(), boxes=(), ramps=(), walls=(), outer=True, elongated=None) -> Layout:
    """A layout from ``(x, y, yaw)`` tuples (agents, boxes; ramps: bounding-box centre)."""
    def arr(items, k):
        return np.array([list(it)[:k] for it in items], dtype=float).reshape(-1, k)

    agents = list(hiders) + list(seekers)
    box_el = np.zeros(len(boxes), bool) if elongated is None else np.array(elongated, bool)
    return Layout(
        (outer_walls(p) if outer else []) + [Wall(*w) for w in walls],
        len(hiders), len(seekers), arr(agents, 3)[:, :2], arr(agents, 3)[:, 2],
        arr(boxes, 3)[:, :2], arr(boxes, 3)[:, 2], box_el, arr(ramps, 3)[:, :2], arr(ramps, 3)[:, 2])


def game(scenario: str = "quadrant", config: HideAndSeekConfig | None = None, **kw) -> tuple[Game, dict]:
    """A :class:`Game` reset on a scripted layout; returns ``(game, first_obs)``."""
    p = resolve(config, scenario)
    g = Game(p)
    obs = g.reset(np.random.default_rng(0), layout(p, **kw))
    return g, obs


def noop(g: Game) -> np.ndarray:
    return np.tile(g.noop, (g.p.max_agents, 1))


def skip_prep(g: Game) -> list[np.ndarray]:
    """Play no-op steps to the end of preparation; returns each step's rewards."""
    out = []
    while g.t < g.p.prep_steps:
        out.append(g.step(noop(g))[1])
    return out


def polar(x: float, y: float, r: float, deg: float) -> tuple[float, float]:
    return x + r * math.cos(math.radians(deg)), y + r * math.sin(math.radians(deg))
