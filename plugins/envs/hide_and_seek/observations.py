"""Per-agent observations with padded slots (spec "Observations").

Slots: hiders occupy slots ``0 .. max_hiders-1`` and seekers ``max_hiders ..``; an
episode with fewer agents leaves the trailing slots of each team inactive (all-zero rows,
masked out). Boxes and ramps are padded the same way up to their maximum counts. Every
array is ``float32`` with a leading slot axis ``A = max_hiders + max_seekers``; all
coordinates are absolute world coordinates (m, rad, m/s, rad/s).

=========================  ==================  ===============================================
key                        shape               content
=========================  ==================  ===============================================
``observation_self``       ``[A, 10]``         x, y, z, yaw, vx, vy, vz, vyaw, hider flag,
                                               preparation fraction (clipped to 1)
``agent_qpos_qvel``        ``[A, A-1, 10]``    the same ten features of every other slot
                                               (slot order, self removed)
``box_obs``                ``[A, B, 12|15]``   x, y, z, cos yaw, sin yaw, vx, vy, vz, vyaw,
                                               (full: size x, y, z), you-locked, team-locked,
                                               locked
``ramp_obs``               ``[A, R, 9|15]``    x, y, z, cos yaw, sin yaw, vx, vy, vz, vyaw,
                                               (full: 3 zeros, you-locked, team-locked, locked)
``lidar``                  ``[A, 30]``         see :mod:`.lidar`
``mask_aa_obs``            ``[A, A-1]``        policy mask: other agent in view (cone + sight)
``mask_ab_obs``            ``[A, B]``          policy mask: box in view
``mask_ar_obs``            ``[A, R]``          policy mask: ramp in view
``mask_*_obs_spoof``       as above            critic masks: the slot exists (existence only)
=========================  ==================  ===============================================

The 12/15 and 9/15 widths are the quadrant/full layouts of the original code; the
``_spoof`` names are the original's names for the critic's masks. Policy masks are zero
wherever critic masks are zero (a subset). Every array is zero in the rows of inactive
slots.
"""
from __future__ import annotations

import numpy as np
from gymnasium import spaces

from .config import Params

SELF_DIM = 10
LOCK_DIM = 3


class ObservationBuilder:
    """Builds the observation dict of the module docstring for one :class:`~.config.Params`."""

    def __init__(self, p: Params) -> None:
        self.p = p
        self.A, self.B, self.R = p.max_agents, p.boxes[1], p.ramps
        self.box_dim = 9 + (3 if p.full_obs else 0) + LOCK_DIM
        self.ramp_dim = 9 + (3 + LOCK_DIM if p.full_obs else 0)
        # slot of each other agent, per slot: [rows, others] gathers [A, A] into [A, A-1]
        self.others = np.array([[j for j in range(self.A) if j != i] for i in range(self.A)],
                               dtype=np.int64).reshape(self.A, self.A - 1)
        self.rows = np.arange(self.A)[:, None]

    def spaces(self) -> dict[str, spaces.Box]:
        """Per-agent ``gymnasium.spaces.Box`` of every key (float32; masks in [0, 1], lidar in [0, range])."""
        inf, A, B, R = np.inf, self.A, self.B, self.R
        box = lambda *shape: spaces.Box(-inf, inf, shape, np.float32)  # noqa: E731
        mask = lambda *shape: spaces.Box(0.0, 1.0, shape, np.float32)  # noqa: E731
        return {
            "observation_self": box(SELF_DIM),
            "agent_qpos_qvel": box(A - 1, SELF_DIM),
            "box_obs": box(B, self.box_dim),
            "ramp_obs": box(R, self.ramp_dim),
            "lidar": spaces.Box(0.0, self.p.cfg.lidar_range, (self.p.cfg.lidar_rays,), np.float32),
            "mask_aa_obs": mask(A - 1), "mask_ab_obs": mask(B), "mask_ar_obs": mask(R),
            "mask_aa_obs_spoof": mask(A - 1), "mask_ab_obs_spoof": mask(B), "mask_ar_obs_spoof": mask(R),
        }

    def begin(self, slots: np.ndarray, is_hider: np.ndarray, n_boxes: int, n_ramps: int,
              obj_size: np.ndarray) -> None:
        """Set the episode's constants (then call :meth:`set_locks` before :meth:`build`).

        Args:
            slots: ``int [n]`` slot of each active agent; ``is_hider``: ``bool [n]``.
            n_boxes, n_ramps: object counts ``b``, ``r``; ``obj_size``: ``[b + r, 3]`` full extents (m).
        """
        A, f32 = self.A, np.float32
        self.slots, self.n, self.b, self.r = slots, len(slots), n_boxes, n_ramps
        self.exists = np.zeros(A, bool)
        self.exists[slots] = True
        # rows of the active agents: a slice (cheaper, and a view) when every slot plays
        self.all_active = self.n == A
        self.sel = slice(None) if self.all_active else slots
        self.sel_aa = (slice(None), slice(None)) if self.all_active else (slots[:, None], slots[None, :])
        exist_aa = (self.exists[:, None] & self.exists[None, :]).astype(f32)
        self.spoof_aa = exist_aa[self.rows, self.others]
        self.spoof_ab = np.zeros((A, self.B), f32)
        self.spoof_ab[slots, :n_boxes] = 1.0
        self.spoof_ar = np.zeros((A, self.R), f32)
        self.spoof_ar[slots, :n_ramps] = 1.0
        self.sizes = obj_size[:n_boxes].astype(f32)
        # what does not change every step, copied and then completed by build()
        self.self_template = np.zeros((A, SELF_DIM), f32)
        self.self_template[slots, 8] = np.asarray(is_hider, f32)

    def set_locks(self, you_lock: np.ndarray, team_lock: np.ndarray, locked: np.ndarray) -> None:
        """Set the lock flags of the following observations (call when they change).

        Args:
            you_lock, team_lock: ``bool [n, b + r]``; ``locked``: ``bool [b + r]``.
        """
        b, full = self.b, self.p.full_obs
        self.box_template = self._objects(self.B, self.box_dim, b, self.sizes if full else None,
                                          (you_lock[:, :b], team_lock[:, :b], locked[:b]))
        self.ramp_template = self._objects(self.R, self.ramp_dim, self.r, None,
                                           (you_lock[:, b:], team_lock[:, b:], locked[b:]) if full else None)

    def _objects(self, count: int, width: int, k: int, sizes: np.ndarray | None, flags: tuple | None) -> np.ndarray:
        """``float32 [A, count, width]``: zeros but the sizes and lock flags of the ``k`` objects."""
        out = np.zeros((self.A, count, width), np.float32)
        slots = self.slots
        if sizes is not None:
            out[slots, :k, 9:12] = sizes
        if flags is not None:
            you, team, locked = flags
            out[slots, :k, width - 3] = you
            out[slots, :k, width - 2] = team
            out[slots, :k, width - 1] = locked
        return out

    def build(self, qpos4: np.ndarray, qvel4: np.ndarray, vis: np.ndarray, lidar: np.ndarray,
              prep: float) -> dict[str, np.ndarray]:
        """The observation dict (call :meth:`begin` and :meth:`set_locks` first each episode).

        Every array is new (callers may keep them).

        Args:
            qpos4, qvel4: ``[n + b + r, 4]`` joint values of the movable bodies (world order).
            vis: ``bool [n, n + b + r]`` visibility (:class:`~.vision.Vision`).
            lidar: ``float32 [n, rays]``, a new array (returned as is when every slot plays).
            prep: preparation fraction in [0, 1].
        """
        A, n, b, r, sel = self.A, self.n, self.b, self.r, self.sel
        f32 = np.float32
        feats = self.self_template.copy()
        feats[sel, :4] = qpos4[:n]
        feats[sel, 4:8] = qvel4[:n]
        feats[sel, 9] = prep
        q, v = qpos4[n:], qvel4[n:]
        common = np.empty((b + r, 9), f32)
        common[:, :3] = q[:, :3]
        common[:, 3] = np.cos(q[:, 3])
        common[:, 4] = np.sin(q[:, 3])
        common[:, 5:] = v
        box_obs = self.box_template.copy()
        box_obs[sel, :b, :9] = common[:b]
        ramp_obs = self.ramp_template.copy()
        ramp_obs[sel, :r, :9] = common[b:]
        others = feats[self.others]
        if self.all_active:
            mask_aa = vis[self.rows, self.others].astype(f32)
        else:
            others[~self.exists] = 0.0
            vis_aa = np.zeros((A, A), f32)
            vis_aa[self.sel_aa] = vis[:, :n]
            mask_aa = vis_aa[self.rows, self.others]
        return {
            "observation_self": feats,
            "agent_qpos_qvel": others,
            "box_obs": box_obs,
            "ramp_obs": ramp_obs,
            "lidar": lidar if self.all_active else self._pad(lidar, lidar.shape[1]),  # lidar: a new array
            "mask_aa_obs": mask_aa,
            "mask_ab_obs": self._pad(vis[:, n:n + b], self.B),
            "mask_ar_obs": self._pad(vis[:, n + b:], self.R),
            "mask_aa_obs_spoof": self.spoof_aa.copy(),
            "mask_ab_obs_spoof": self.spoof_ab.copy(),
            "mask_ar_obs_spoof": self.spoof_ar.copy(),
        }

    def _pad(self, values: np.ndarray, width: int) -> np.ndarray:
        """``float32 [A, width]``: ``values [n, k]`` in the active rows' first ``k`` columns, zeros elsewhere."""
        if self.all_active and values.shape[1] == width:
            return values.astype(np.float32)
        out = np.zeros((self.A, width), np.float32)
        out[self.sel, :values.shape[1]] = values
        return out
