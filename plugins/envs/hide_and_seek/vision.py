"""Who sees what: a 2-D vision cone plus a 3-D line of sight (docs/hide-and-seek.md, "Vision and lidar").

An agent sees a body (another agent, a box or a ramp) when

1. the horizontal direction from the agent's centre to the body's centre lies within
   ``vision_cone_deg / 2`` of the agent's heading ``(cos yaw, sin yaw)`` (135 degrees in
   total by default), and
2. a ray from the agent's centre towards the body's centre first hits a geom of that
   body. Static geoms (walls, floor) are included, so walls block sight, as do boxes,
   ramps and other agents.

Agents never see themselves. Body centres are body origins (the wedge centroid for ramps,
see :mod:`.world`). Positions are read from ``data.xpos``: call ``mj_kinematics`` after
``mj_step`` (which leaves them one substep behind).
"""
from __future__ import annotations

import math

import mujoco
import numpy as np

from .lidar import Lidar
from .world import World


class Vision:
    """Computes the visibility matrix of a :class:`~.world.World`.

    Calling it returns ``bool [A, N]`` with ``N = A + B + R`` movable bodies in world
    order (agents, boxes, ramps); entry ``[i, k]`` is True when agent ``i`` sees body ``k``.
    Given a :class:`~.lidar.Lidar`, its rays go into the same ``mj_multiRay`` call and
    its ``dist`` becomes a view of the lidar columns of this class's ray buffer.
    """

    def __init__(self, world: World, cone_deg: float, lidar: Lidar | None = None) -> None:
        self.w, self.lidar = world, lidar
        self.cos_half = math.cos(math.radians(cone_deg / 2))
        a, n = world.n_agents, world.n_agents + world.n_objects
        self.nl = 0 if lidar is None else lidar.n
        # one ray batch per agent: its lidar rays, then one ray towards every movable body
        self.vec = np.zeros((a, self.nl + n, 3))
        if lidar is not None:
            self.vec[:, :self.nl] = lidar.vec
        self.geomid = np.zeros((a, self.nl + n), dtype=np.int32)
        self.dist = np.zeros((a, self.nl + n), dtype=np.float64)
        if lidar is not None:  # the lidar's distances become a view of this buffer: no copy per step
            lidar.dist = self.dist[:, :self.nl]
        # body of the geom a ray hit; the appended -1 is what geomid -1 (no hit) indexes
        self.body_of_hit = np.append(world.model.geom_bodyid, -1)
        self.target_body = np.arange(1, n + 1)
        self.cutoff = 0.0 if lidar is None else lidar.range
        # views into the data and the buffers above (fetched once: each attribute access of
        # MjData builds a new array), so they always show the current state
        self.centres = world.data.xpos[1:n + 1]
        self.yaw = world.qpos4[:a, 3]
        self.batches = [(self.centres[i], self.vec[i].reshape(-1), i + 1, self.geomid[i], self.dist[i])
                        for i in range(a)]

    def in_cone(self, rel: np.ndarray, norm_xy: np.ndarray) -> np.ndarray:
        """``bool [A, N]`` from offsets ``rel [A, N, 3]`` and their horizontal norms ``[A, N]``."""
        yaw = self.yaw
        along = rel[..., 0] * np.cos(yaw)[:, None] + rel[..., 1] * np.sin(yaw)[:, None]
        return (norm_xy > 1e-9) & (along >= self.cos_half * norm_xy)

    def __call__(self) -> np.ndarray:
        m, d = self.w.model, self.w.data
        nl, nray = self.nl, self.vec.shape[1]
        centres = self.centres
        rel = centres[None, :, :] - centres[:len(self.batches), None, :]
        sq = rel * rel
        sq_xy = sq[..., 0] + sq[..., 1]
        length = np.sqrt(sq_xy + sq[..., 2])
        cone = self.in_cone(rel, np.sqrt(sq_xy))
        # unit rays towards the bodies in the cone; the others get zero-length rays (rel / inf),
        # which MuJoCo skips at no cost and which hit nothing (-1), as does the one to oneself
        np.divide(rel, np.where(cone, np.maximum(length, 1e-12), np.inf)[..., None], out=self.vec[:, nl:])
        cutoff = max(self.cutoff, float(length.max()) + 1.0)
        for pnt, vec, body, geomid, dist in self.batches:
            mujoco.mj_multiRay(m, d, pnt, vec, None, 1, body, geomid, dist, None, nray, cutoff)
        return cone & (self.body_of_hit[self.geomid[:, nl:]] == self.target_body)
