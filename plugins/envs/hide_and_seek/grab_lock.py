"""Grab and lock (docs/hide-and-seek.md, "Grab and lock").

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
        version: ``int``, changes whenever ``lock_team`` or ``lockers`` change (so the
            observation flags need rebuilding only then).

    The rules run on the few (agent, object) pairs within reach, in plain Python: with at
    most 6 agents and 11 objects that is faster than dense numpy masks.
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
        self.version = 0
        self.radius, self.grab_radius, self.lock_radius = cfg.agent_radius, cfg.grab_radius, cfg.lock_radius
        self.lock_inertia = cfg.lock_inertia
        self.agent_geoms, self.obj_geoms = world.geom[:a].copy(), world.geom[a:].copy()
        self.reach = max(self.grab_radius, self.lock_radius)
        # bounding-sphere prefilter: geom centres closer than reach + object's bounding radius
        self.near_sq = ((self.reach + world.model.geom_rbound[self.obj_geoms] + 1e-6) ** 2)[None, :]
        self.base_armature = world.model.dof_armature.copy()
        self.base_m0 = world.model.dof_M0.copy()
        # views that follow the data (one geom per movable body, in body order: slices, not copies)
        g0 = int(world.geom[0])
        assert np.array_equal(world.geom, g0 + np.arange(a + o)), "movable bodies need consecutive geoms"
        self.agent_xpos, self.obj_xpos = world.data.geom_xpos[g0:g0 + a], world.data.geom_xpos[g0 + a:g0 + a + o]
        self.eq_active = world.data.eq_active
        self.team_list, self.lockable_list = team.tolist(), self.lockable.tolist()

    def near_pairs(self, seen: np.ndarray) -> list[tuple[int, int, float]]:
        """``(agent, object, distance m)`` for the pairs in ``seen bool [A, O]`` that may be in reach.

        Distance from the agent's centre to the object's surface (``mj_geomDistance``, the
        agent's sphere against the object's geom), computed only for pairs whose bounding
        spheres come within reach; a value above ``max(grab_radius, lock_radius)`` means out
        of reach. Pairs come in row-major order (agent, then object).
        """
        m, d = self.w.model, self.w.data
        diff = self.obj_xpos[None, :, :] - self.agent_xpos[:, None, :]
        agents, objs = np.nonzero(seen & ((diff ** 2).sum(-1) <= self.near_sq))
        gap = self.reach - self.radius + 1e-3
        ga, go = self.agent_geoms, self.obj_geoms
        return [(i, o, mujoco.mj_geomDistance(m, d, int(ga[i]), int(go[o]), gap, None) + self.radius)
                for i, o in zip(agents.tolist(), objs.tolist(), strict=True)]

    def reach_distances(self, seen: np.ndarray) -> np.ndarray:
        """``float64 [A, O]``: :meth:`near_pairs` as a matrix, ``inf`` for the pairs it leaves out."""
        dist = np.full(seen.shape, np.inf)
        for i, o, dd in self.near_pairs(seen):
            dist[i, o] = dd
        return dist

    def apply(self, grab: list[int], lock: list[int], seen: np.ndarray) -> None:
        """Update welds and locks before the physics of one env step.

        Args:
            grab, lock: ``[A]`` the grab and lock actions (1 or True: pressed), as lists
                (the rules run in plain Python).
            seen: ``bool [A, O]`` objects in each agent's previous policy mask.
        """
        w, held = self.w, self.held
        for i, o in enumerate(held.tolist()):
            if o >= 0 and not grab[i]:  # released: detach now
                self.eq_active[w.weld_id(i, o)] = 0
                held[i] = -1
        any_lock = any(lock) or max(self.lock_team.tolist(), default=-1) >= 0
        if not (any_lock or any(grab)):
            return
        pairs = self.near_pairs(seen)
        if any_lock:
            self._lock(lock, [(i, o) for i, o, dd in pairs if dd <= self.lock_radius and self.lockable_list[o]])
        want = [g and h < 0 for g, h in zip(grab, held.tolist(), strict=True)]
        if any(want):
            lock_team = self.lock_team.tolist()
            nearest: dict[int, tuple[float, int]] = {}  # agent -> (distance, object); ties: lowest object
            for i, o, dd in pairs:
                if want[i] and dd <= self.grab_radius and lock_team[o] < 0 and (i not in nearest or dd < nearest[i][0]):
                    nearest[i] = (dd, o)
            for i in sorted(nearest):
                self._weld(i, nearest[i][1])

    def _lock(self, lock: list[int], eligible: list[tuple[int, int]]) -> None:
        """The lock rule for the eligible ``(agent, object)`` pairs; ``lock``: each agent presses."""
        agents_at: dict[int, list[int]] = {}
        for i, o in eligible:
            agents_at.setdefault(o, []).append(i)
        team = self.team_list
        for o in sorted(agents_at):
            t = int(self.lock_team[o])
            if t >= 0:
                mine = [i for i in agents_at[o] if team[i] == t]
                if not all(lock[i] for i in mine):  # an eligible member of the locking team releases
                    self._set_lock(o, -1)
                else:
                    for i in mine:  # pressing teammates join the lockers
                        if not self.lockers[i, o]:
                            self.lockers[i, o] = True
                            self.version += 1
                continue
            for t in (0, 1):
                mine = [i for i in agents_at[o] if team[i] == t]
                if mine and all(lock[i] for i in mine):  # some press, none releases
                    self._set_lock(o, t)
                    self.lockers[:, o] = False
                    self.lockers[mine, o] = True
                    break

    def _set_lock(self, o: int, team: int) -> None:
        w = self.w
        dofs = w.obj_dofs(o)
        self.lock_team[o] = team
        m = w.model
        self.version += 1
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
                self.eq_active[w.weld_id(int(i), o)] = 0
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
        self.eq_active[e] = 1
        self.held[i] = o

    def flags(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Observation flags: ``you_lock bool [A, O]``, ``team_lock bool [A, O]``, ``locked bool [O]``."""
        locked = self.lock_team >= 0
        team_lock = (self.lock_team[None, :] == self.team[:, None]) & locked[None, :]
        return self.lockers.copy(), team_lock, locked
