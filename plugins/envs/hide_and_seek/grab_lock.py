"""Grab and lock (spec "Grab and lock").

Eligibility: agent ``i`` may act on object ``o`` (a box or a ramp) when ``o``'s surface is
within ``grab_radius`` / ``lock_radius`` (0.25 m) of ``i``'s centre and ``o`` was in ``i``'s
vision (policy mask) in the observation the action was chosen on, i.e. the previous step.

Grab (held every step): an agent pressing grab that holds nothing attaches the nearest
eligible object with a weld equality that keeps their current relative pose; while it
keeps pressing it keeps that object (unless the object gets locked); when it stops
pressing the weld is switched off
before this step's physics ("detaches on the next step"). Several agents may hold one
object; an agent standing on an object it holds moves with it (box surfing).

Lock (one binary action for every eligible lockable object; ramps are lockable only when
``lock_ramps``): with ``press`` = eligible and pressing, ``release`` = eligible and not
pressing,

- an unlocked object becomes locked by team T (hiders tried first) when some agent of T
  presses and no eligible agent of T releases; the pressing agents are its lockers;
- a locked object unlocks when an eligible agent of the locking team releases; agents
  of the other team never unlock it; teammates who press join the lockers.

A locked object cannot be moved: ``lock_inertia`` (1e9 kg, kg m^2) is added to the
inertia of its four joints (as armature, which the constraint solver sees, so contacts
stay consistent) and its velocity is zeroed; a 90 N push then accelerates it by 1e-7
m/s^2. Unlocking restores the inertia. A locked object cannot be grabbed, and locking an
object releases every agent holding it (see docs/hide-and-seek.md).
"""
from __future__ import annotations

import mujoco
import numpy as np

from .config import Params
from .world import World, yaw_quat


class GrabLock:
    """Grab and lock state of one episode.

    Attributes:
        held: ``int64 [A]`` object index held by each agent, -1 for none.
        lock_team: ``int64 [O]`` team that locked each object (0 hiders, 1 seekers), -1 unlocked.
        lockers: ``bool [A, O]`` agents that locked each object (the "you-locked" flag).
        lockable: ``bool [O]`` boxes always; ramps when ``lock_ramps``.
    """

    def __init__(self, world: World, p: Params, team: np.ndarray) -> None:
        cfg = p.cfg
        self.w, self.team = world, team
        a, o = world.n_agents, world.n_objects
        self.held = np.full(a, -1, dtype=np.int64)
        self.lock_team = np.full(o, -1, dtype=np.int64)
        self.lockers = np.zeros((a, o), dtype=bool)
        self.lockable = np.ones(o, dtype=bool)
        self.lockable[world.n_boxes:] = p.lock_ramps
        self.radius, self.grab_radius, self.lock_radius = cfg.agent_radius, cfg.grab_radius, cfg.lock_radius
        self.lock_inertia = cfg.lock_inertia
        self.agent_geoms, self.obj_geoms = world.geom[:a].copy(), world.geom[a:].copy()
        self.reach = max(self.grab_radius, self.lock_radius)
        # bounding-sphere prefilter: geom centres closer than reach + object's bounding radius
        self.near_sq = ((self.reach + world.model.geom_rbound[self.obj_geoms] + 1e-6) ** 2)[None, :]
        self.base_armature = world.model.dof_armature.copy()
        self.base_m0 = world.model.dof_M0.copy()

    def reach_distances(self, seen: np.ndarray) -> np.ndarray:
        """``float64 [A, O]``: distance (m) from each agent's centre to each object's surface.

        Computed (``mj_geomDistance``, the agent's sphere against the object's geom) only
        for pairs in ``seen`` whose bounding spheres come within reach; other pairs, and
        pairs farther than ``max(grab_radius, lock_radius)``, hold a value beyond reach.
        """
        w = self.w
        m, d = w.model, w.data
        ga, go = self.agent_geoms, self.obj_geoms
        xpos = d.geom_xpos
        diff = xpos[go][None, :, :] - xpos[ga][:, None, :]
        cand = seen & ((diff ** 2).sum(-1) <= self.near_sq)
        dist = np.full(seen.shape, np.inf)
        gap = self.reach - self.radius + 1e-3
        for i, o in zip(*np.nonzero(cand)):
            dist[i, o] = mujoco.mj_geomDistance(m, d, int(ga[i]), int(go[o]), gap, None) + self.radius
        return dist

    def apply(self, grab: np.ndarray, lock: np.ndarray, seen: np.ndarray) -> None:
        """Update welds and locks before the physics of one env step.

        Args:
            grab, lock: ``bool [A]`` the grab and lock actions.
            seen: ``bool [A, O]`` objects in each agent's previous policy mask.
        """
        w = self.w
        for i in np.flatnonzero(~grab & (self.held >= 0)):  # released: detach now
            w.data.eq_active[w.weld_id(i, int(self.held[i]))] = 0
            self.held[i] = -1
        any_lock = lock.any() or (self.lock_team >= 0).any()
        if not (any_lock or grab.any()):
            return
        dist = self.reach_distances(seen)
        if any_lock:
            self._lock(lock, (dist <= self.lock_radius) & self.lockable[None, :])
        want = grab & (self.held < 0)
        if want.any():
            eligible = (dist <= self.grab_radius) & (self.lock_team < 0)[None, :] & want[:, None]
            for i in np.flatnonzero(eligible.any(1)):
                self._weld(i, int(np.argmin(np.where(eligible[i], dist[i], np.inf))))

    def _lock(self, lock: np.ndarray, eligible: np.ndarray) -> None:
        press = eligible & lock[:, None]
        release = eligible & ~lock[:, None]
        for o in np.flatnonzero(eligible.any(0)):
            t = self.lock_team[o]
            if t >= 0:
                mine = self.team == t
                if release[mine, o].any():
                    self._set_lock(o, -1)
                else:
                    self.lockers[:, o] |= press[:, o] & mine
                continue
            for t in (0, 1):
                mine = self.team == t
                if press[mine, o].any() and not release[mine, o].any():
                    self._set_lock(o, t)
                    self.lockers[:, o] = press[:, o] & mine
                    break

    def _set_lock(self, o: int, team: int) -> None:
        w = self.w
        dofs = w.obj_dofs(o)
        self.lock_team[o] = team
        m = w.model
        extra = 0.0 if team < 0 else self.lock_inertia
        # MuJoCo reads dof_armature for general bodies and dof_M0 (the compiled diagonal
        # inertia, armature included) for "simple" bodies: change both
        m.dof_armature[dofs] = self.base_armature[dofs] + extra
        m.dof_M0[dofs] = self.base_m0[dofs] + extra
        if team < 0:
            self.lockers[:, o] = False
        else:
            w.data.qvel[dofs] = 0.0
            for i in np.flatnonzero(self.held == o):  # a locked object cannot be held
                w.data.eq_active[w.weld_id(i, o)] = 0
                self.held[i] = -1

    def _weld(self, i: int, o: int) -> None:
        """Switch on agent ``i``'s weld to object ``o`` at their current relative pose."""
        w = self.w
        qa, qo = w.qpos4[i], w.qpos4[w.n_agents + o]
        c, s = np.cos(qa[3]), np.sin(qa[3])
        dx, dy, dz = qo[:3] - qa[:3]
        e = w.weld_id(i, o)
        w.model.eq_data[e, 3:6] = (c * dx + s * dy, -s * dx + c * dy, dz)
        w.model.eq_data[e, 6:10] = yaw_quat(qo[3] - qa[3])
        w.data.eq_active[e] = 1
        self.held[i] = o

    def flags(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Observation flags: ``you_lock bool [A, O]``, ``team_lock bool [A, O]``, ``locked bool [O]``."""
        locked = self.lock_team >= 0
        team_lock = (self.lock_team[None, :] == self.team[:, None]) & locked[None, :]
        return self.lockers.copy(), team_lock, locked
