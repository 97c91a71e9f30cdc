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
        self.others = np.array([[j for j in range(self.A) if j != i] for i in range(self.A)],
                               dtype=np.int64).reshape(self.A, self.A - 1)

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
        """Set the episode's constants.

        Args:
            slots: ``int [n]`` slot of each active agent; ``is_hider``: ``bool [n]``.
            n_boxes, n_ramps: object counts ``b``, ``r``; ``obj_size``: ``[b + r, 3]`` full extents (m).
        """
        A, f32 = self.A, np.float32
        self.slots, self.n, self.b, self.r = slots, len(slots), n_boxes, n_ramps
        self.exists = np.zeros(A, bool)
        self.exists[slots] = True
        self.hider = np.asarray(is_hider, f32)
        exist_aa = (self.exists[:, None] & self.exists[None, :]).astype(f32)
        self.spoof_aa = exist_aa[np.arange(A)[:, None], self.others]
        self.spoof_ab = np.zeros((A, self.B), f32)
        self.spoof_ab[slots, :n_boxes] = 1.0
        self.spoof_ar = np.zeros((A, self.R), f32)
        self.spoof_ar[slots, :n_ramps] = 1.0
        self.sizes = obj_size[:n_boxes].astype(f32)
        # slot of each other agent, per slot: gathers visibility [A, A] into [A, A-1]
        self.rows = np.arange(A)[:, None]

    def _objects(self, common: np.ndarray, count: int, width: int, k: int, sizes: np.ndarray | None,
                 flags: tuple | None) -> np.ndarray:
        out = np.zeros((self.A, count, width), np.float32)
        slots = self.slots
        out[slots, :k, :9] = common
        if sizes is not None:
            out[slots, :k, 9:12] = sizes
        if flags is not None:
            you, team, locked = flags
            out[slots, :k, width - 3] = you
            out[slots, :k, width - 2] = team
            out[slots, :k, width - 1] = locked
        return out

    def build(self, qpos4: np.ndarray, qvel4: np.ndarray, vis: np.ndarray, lidar: np.ndarray,
              you_lock: np.ndarray, team_lock: np.ndarray, locked: np.ndarray, prep: float) -> dict[str, np.ndarray]:
        """The observation dict (call :meth:`begin` first each episode).

        Args:
            qpos4, qvel4: ``[n + b + r, 4]`` joint values of the movable bodies (world order).
            vis: ``bool [n, n + b + r]`` visibility (:class:`~.vision.Vision`).
            lidar: ``float32 [n, rays]``.
            you_lock, team_lock: ``bool [n, b + r]``; ``locked``: ``bool [b + r]``.
            prep: preparation fraction in [0, 1].
        """
        A, n, b, r, slots = self.A, self.n, self.b, self.r, self.slots
        f32 = np.float32
        feats = np.zeros((A, SELF_DIM), f32)
        feats[slots, :4] = qpos4[:n]
        feats[slots, 4:8] = qvel4[:n]
        feats[slots, 8] = self.hider
        feats[slots, 9] = prep
        q, v = qpos4[n:], qvel4[n:]
        common = np.empty((b + r, 9), f32)
        common[:, :3] = q[:, :3]
        common[:, 3] = np.cos(q[:, 3])
        common[:, 4] = np.sin(q[:, 3])
        common[:, 5:] = v
        full = self.p.full_obs
        box_obs = self._objects(common[:b], self.B, self.box_dim, b, self.sizes if full else None,
                                (you_lock[:, :b], team_lock[:, :b], locked[:b]))
        ramp_obs = self._objects(common[b:], self.R, self.ramp_dim, r, None,
                                 (you_lock[:, b:], team_lock[:, b:], locked[b:]) if full else None)
        vis_aa = np.zeros((A, A), f32)
        vis_aa[slots[:, None], slots[None, :]] = vis[:, :n]
        mask_ab = np.zeros((A, self.B), f32)
        mask_ab[slots, :b] = vis[:, n:n + b]
        mask_ar = np.zeros((A, self.R), f32)
        mask_ar[slots, :r] = vis[:, n + b:]
        lidar_out = np.zeros((A, lidar.shape[1]), f32)
        lidar_out[slots] = lidar
        others = feats[self.others]
        others[~self.exists] = 0.0
        return {
            "observation_self": feats,
            "agent_qpos_qvel": others,
            "box_obs": box_obs,
            "ramp_obs": ramp_obs,
            "lidar": lidar_out,
            "mask_aa_obs": vis_aa[self.rows, self.others],
            "mask_ab_obs": mask_ab,
            "mask_ar_obs": mask_ar,
            "mask_aa_obs_spoof": self.spoof_aa.copy(),
            "mask_ab_obs_spoof": self.spoof_ab.copy(),
            "mask_ar_obs_spoof": self.spoof_ar.copy(),
        }
