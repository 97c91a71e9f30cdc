"""One hide-and-seek episode on arrays: reset, step, observe (the core both APIs wrap).

Every array has a leading slot axis ``A = max_hiders + max_seekers`` (see
:mod:`.observations`); ``active bool [A]`` marks the slots used this episode.

One env step (docs/hide-and-seek.md, "Actions", "Phases, reward, horizon"):

1. actions ``int64 [A, 5]``: bins of force x, force y, torque z (``action_bins`` = 11,
   bin 5 is no action), grab, lock; during preparation every seeker's action becomes the
   no-op ``(5, 5, 5, 0, 0)``;
2. grab and lock (:mod:`.grab_lock`) with the visibility of the previous observation;
3. motor controls ``(bin - 5) / 5 * action_scale`` (times ``motor_gear`` = up to 90 N,
   90 N m), held for ``substeps`` physics steps of ``timestep`` (15 x 0.005 s);
4. vision, lidar, observations, rewards (:mod:`.rules`), statistics (:mod:`.stats`).

Episodes never terminate; they are truncated after ``horizon`` steps.
"""
from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from .config import Params
from .grab_lock import GrabLock
from .lidar import Lidar
from .observations import ObservationBuilder
from .rules import StepRewards
from .scenarios import Layout, sample_layout
from .stats import EpisodeStats
from .vision import Vision
from .world import World, build_world

BAD_QPOS, BAD_QVEL, BAD_QACC = (int(mujoco.mjtWarning.mjWARN_BADQPOS), int(mujoco.mjtWarning.mjWARN_BADQVEL),
                                int(mujoco.mjtWarning.mjWARN_BADQACC))


class Game:
    """The game state machine. Call :meth:`reset` before :meth:`step`."""

    def __init__(self, p: Params) -> None:
        self.p = p
        self.builder = ObservationBuilder(p)
        cfg = p.cfg
        self.mid = (cfg.action_bins - 1) // 2
        self.noop = np.array([self.mid] * 3 + [0, 0], dtype=np.int64)
        self.nvec = np.array([cfg.action_bins] * 3 + [2, 2], dtype=np.int64)
        self.nvec_unsigned = self.nvec.astype(np.uint64)
        self.ctrl_per_bin = cfg.action_scale / self.mid  # motor control (x gear) per bin from the middle
        self.ctrl_of_bin = (np.arange(cfg.action_bins) - self.mid) * self.ctrl_per_bin
        self.world: World | None = None
        self.layout: Layout | None = None
        self.t = 0

    # -- episode -------------------------------------------------------------------
    def reset(self, rng: np.random.Generator, layout: Layout | None = None) -> dict[str, np.ndarray]:
        """Start an episode (``layout``: a scripted layout, else one is drawn with ``rng``).

        Raises:
            ValueError: a scripted layout has more hiders, seekers, boxes or ramps than the slots.
        """
        p = self.p
        layout = layout if layout is not None else sample_layout(p, rng)
        self._check_layout(layout)
        self.layout = layout
        self.world = w = build_world(p, layout)
        # views into the data, fetched once (each MjData attribute access builds a new array)
        self._warnings = w.data.warning.number
        self._ctrl = w.data.ctrl.reshape(w.n_agents, 3)
        nh, ns = layout.n_hiders, layout.n_seekers
        self.is_hider = np.arange(nh + ns) < nh
        self.slots = np.concatenate([np.arange(nh), p.hiders[1] + np.arange(ns)]).astype(np.int64)
        self.active = np.zeros(p.max_agents, dtype=bool)
        self.active[self.slots] = True
        self.all_active = bool(self.active.all())
        self.rewards = StepRewards(self.is_hider, p.area, p.penalize_objects_out, p.cfg.out_of_area_reward)
        self.grablock = GrabLock(w, p, np.where(self.is_hider, 0, 1))
        self.lidar = Lidar(w, p.cfg.lidar_rays, p.cfg.lidar_range)
        self.vision = Vision(w, p.cfg.vision_cone_deg, self.lidar)
        self.t = 0
        self.builder.begin(self.slots, self.is_hider, w.n_boxes, w.n_ramps, w.obj_size)
        self.flags_version: int | None = None  # GrabLock.version the builder's lock flags were set at
        self.stats = EpisodeStats(w.qpos4[w.n_agents:, :3], w.n_boxes, self.is_hider, p.prep_steps)
        return self._observe()

    def _check_layout(self, layout: Layout) -> None:
        p = self.p
        for name, count, limit in (("n_hiders", layout.n_hiders, p.hiders[1]),
                                   ("n_seekers", layout.n_seekers, p.seekers[1]),
                                   ("boxes", len(layout.box_xy), p.boxes[1]), ("ramps", len(layout.ramp_xy), p.ramps)):
            if count > limit:
                raise ValueError(f"hide-and-seek layout: {name} = {count} exceeds the scenario's {limit} slots")

    @property
    def prep_fraction(self) -> float:
        """Elapsed fraction of preparation after ``t`` steps, clipped to 1 (1 when there is none)."""
        return 1.0 if self.p.prep_steps == 0 else min(1.0, self.t / self.p.prep_steps)

    def _observe(self) -> dict[str, np.ndarray]:
        w = self.world
        assert w is not None, "reset() builds the world"
        self.vis = self.vision()  # also casts the lidar rays
        if self.flags_version != self.grablock.version:  # locks change rarely: rebuild their flags only then
            self.builder.set_locks(*self.grablock.flags())
            self.flags_version = self.grablock.version
        return self.builder.build(w.qpos4, w.qvel4, self.vis, self.lidar.values(), self.prep_fraction)

    def _divergences(self) -> int:
        """How many times MuJoCo found a bad qpos, qvel or qacc in this episode."""
        warn = self._warnings
        return int(warn[BAD_QPOS]) + int(warn[BAD_QVEL]) + int(warn[BAD_QACC])

    def _physics(self) -> None:
        """``substeps`` MuJoCo steps, then kinematics so positions match ``qpos``.

        If MuJoCo diverges (it then warns and resets the data to the model's defaults),
        the state before this env step is restored at rest with every grab released, and
        ``stats["physics_resets"]`` counts it.
        """
        w = self.world
        assert w is not None, "reset() builds the world"
        m, d = w.model, w.data
        before, qpos = self._divergences(), d.qpos.copy()
        mujoco.mj_step(m, d, self.p.cfg.substeps)
        if self._divergences() != before:
            d.qpos[:] = qpos
            d.qvel[:] = 0.0
            d.eq_active[:] = 0
            self.grablock.held[:] = -1
            self.stats.physics_resets += 1
            mujoco.mj_forward(m, d)
        mujoco.mj_kinematics(m, d)

    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, bool, dict[str, Any]]:
        """Play one env step.

        Args:
            actions: ``int [A, 5]`` (rows of inactive slots are ignored).

        Returns:
            ``(obs, rewards float32 [A], truncated, info)``; ``info["stats"]`` is set on the
            last step of the episode.

        Raises:
            ValueError: ``actions`` has the wrong shape or a value outside its bins.
            RuntimeError: :meth:`step` called before :meth:`reset` or after the horizon.
        """
        p, w = self.p, self.world
        if w is None or self.t >= p.horizon:
            raise RuntimeError("hide-and-seek: call reset() before step() (the episode is over or never started)")
        actions = np.asarray(actions)
        if actions.shape != (p.max_agents, 5):
            raise ValueError(f"hide-and-seek actions: expected shape ({p.max_agents}, 5) = [agents, "
                             f"(force x, force y, torque z, grab, lock)], got {actions.shape}")
        act = actions[self.slots]
        if act.dtype != np.int64:
            act = act.astype(np.int64)
        if (act.view(np.uint64) >= self.nvec_unsigned).any():  # a negative bin wraps round to a huge one
            raise ValueError(f"hide-and-seek actions: each row must lie in [0, {list(self.nvec - 1)}], got "
                             f"{act[((act < 0) | (act >= self.nvec)).any(1)].tolist()}")
        in_prep = self.t < p.prep_steps
        if in_prep:
            act[~self.is_hider] = self.noop
        n = w.n_agents
        grab, lock = act[:, 3:].T.tolist()
        self.grablock.apply(grab, lock, self.vis[:, n:])
        np.take(self.ctrl_of_bin, act[:, :3], out=self._ctrl, mode="clip")  # bins checked above
        self._physics()
        self.t += 1
        obs = self._observe()
        rew = self.rewards(self.vis[:, :n], w.qpos4[:, :2], in_prep)
        self.stats.update(self.t, w.qpos4[n:, :3], self.grablock.lock_team >= 0, rew)
        if self.all_active:
            rewards = rew  # a new array every step
        else:
            rewards = np.zeros(p.max_agents, np.float32)
            rewards[self.slots] = rew
        truncated = self.t >= p.horizon
        info: dict[str, Any] = {"stats": self.stats.summary()} if truncated else {}
        return obs, rewards, truncated, info
