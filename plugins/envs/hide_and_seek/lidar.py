"""Lidar: horizontal range finder around each agent (docs/hide-and-seek.md, "Vision and lidar").

``lidar_rays`` rays (30) at angles ``2 pi k / lidar_rays`` (every 12 degrees) in the
*world* frame, cast from the agent's centre; each returns the distance (m) to the first
geom hit, the agent's own geom excluded and static geoms (walls) included, or exactly
``lidar_range`` (6 m) when nothing is hit within range. Values lie in ``(0, lidar_range]``.

The rays are cast by :class:`~.vision.Vision` in the same ``mj_multiRay`` call as the
sight rays (one call per agent); :meth:`Lidar.__call__` casts them on their own.
"""
from __future__ import annotations

import mujoco
import numpy as np

from .world import World


class Lidar:
    """Lidar rays of every agent of a :class:`~.world.World`.

    ``vec float64 [lidar_rays, 3]``: unit ray directions; ``dist float64 [A, lidar_rays]``:
    raw ``mj_multiRay`` distances of the last cast (-1: no hit).
    """

    def __init__(self, world: World, n_rays: int, max_range: float) -> None:
        self.w, self.n, self.range = world, n_rays, float(max_range)
        angle = 2.0 * np.pi * np.arange(n_rays) / n_rays
        self.vec = np.stack([np.cos(angle), np.sin(angle), np.zeros(n_rays)], 1)
        self.geomid = np.zeros(n_rays, dtype=np.int32)
        self.dist = np.zeros((world.n_agents, n_rays), dtype=np.float64)

    def cast(self) -> None:
        """Cast every agent's rays on their own (fills :attr:`dist`)."""
        w = self.w
        m, d = w.model, w.data
        vec = self.vec.ravel()
        for i in range(w.n_agents):
            mujoco.mj_multiRay(m, d, d.xpos[i + 1], vec, None, 1, i + 1, self.geomid, self.dist[i], None,
                               self.n, self.range)

    def values(self) -> np.ndarray:
        """``float32 [A, lidar_rays]``: :attr:`dist` with misses and hits beyond range set to ``range``."""
        out = np.where(self.dist < 0, self.range, self.dist)
        np.minimum(out, self.range, out=out)
        np.maximum(out, 1e-6, out=out)
        return out.astype(np.float32)

    def __call__(self) -> np.ndarray:
        """Cast and return :meth:`values`."""
        self.cast()
        return self.values()
