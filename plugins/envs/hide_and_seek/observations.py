"""Per-agent observations with padded slots (docs/hide-and-seek.md, "Observations").

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

How (speed): each step's arrays are gathered, one fancy index per key, from one flat
float32 *source* vector: the step's values (joint values, object yaw cosines and sines,
visibility, lidar, preparation), then the episode's constants (hider flags, sizes, lock
flags) and a zero for the padding. The index arrays are made once per episode by the
same assignments that would build the arrays directly, applied to positions in the
source instead of values; a dozen numpy calls per step instead of about thirty.
"""
from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from .config import Params

SELF_DIM = 10
LOCK_DIM = 3


class _Source:
    """Hands out consecutive positions of the flat source vector (see the module docstring)."""

    def __init__(self) -> None:
        self.size = 0

    def part(self, *shape: int) -> np.ndarray:
        """``int [*shape]``: the positions of the next ``prod(shape)`` entries."""
        count = math.prod(shape)
        out = np.arange(self.size, self.size + count).reshape(shape)
        self.size += count
        return out


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
        A, B, R, f32 = self.A, self.B, self.R, np.float32
        self.n = len(slots)
        exists = np.zeros(A, bool)
        exists[slots] = True
        exist_aa = (exists[:, None] & exists[None, :]).astype(f32)
        self.spoof_aa = exist_aa[self.rows, self.others]
        self.spoof_ab = np.zeros((A, B), f32)
        self.spoof_ab[slots, :n_boxes] = 1.0
        self.spoof_ar = np.zeros((A, R), f32)
        self.spoof_ar[slots, :n_ramps] = 1.0
        self.hider = np.asarray(is_hider, f32)
        self.sizes = obj_size[:n_boxes].astype(f32)
        self.index, self.n_constants = self._gather_plan(slots, exists, n_boxes, n_ramps)
        self.constants: np.ndarray | None = None  # set_locks() sets them

    def _gather_plan(self, slots: np.ndarray, exists: np.ndarray, b: int, r: int) -> tuple[dict, int]:
        """``(index, n_constants)``: the positions in the source vector of every entry of every
        array :meth:`build` returns (``int`` arrays of the arrays' shapes), and the number of
        constants that end the source."""
        A, B, R, n, o = self.A, self.B, self.R, len(slots), b + r
        # the source vector: the step's values (in build()'s order), then the constants
        src = _Source()
        qpos, qvel = src.part(n + o, 4), src.part(n + o, 4)
        cos_yaw, sin_yaw = src.part(o), src.part(o)
        vis, lidar = src.part(n, n + o), src.part(n, self.p.cfg.lidar_rays)
        prep = src.part()
        first_constant = src.size
        hider, sizes = src.part(n), src.part(b, 3)
        you, team, locked = src.part(n, o), src.part(n, o), src.part(o)
        zero = src.part()

        feats = np.full((A, SELF_DIM), zero)
        feats[slots, :4] = qpos[:n]
        feats[slots, 4:8] = qvel[:n]
        feats[slots, 8] = hider
        feats[slots, 9] = prep
        others = feats[self.others]
        others[~exists] = zero
        common = np.empty((o, 9), np.int64)  # the 9 features every box and ramp has
        common[:, :3] = qpos[n:, :3]
        common[:, 3] = cos_yaw
        common[:, 4] = sin_yaw
        common[:, 5:] = qvel[n:]
        flags = np.stack([you, team, np.broadcast_to(locked, (n, o))], axis=-1)  # [n, o, 3]
        box_obs = np.full((A, B, self.box_dim), zero)
        box_obs[slots, :b, :9] = common[:b]
        box_obs[slots, :b, -LOCK_DIM:] = flags[:, :b]
        ramp_obs = np.full((A, R, self.ramp_dim), zero)
        ramp_obs[slots, :r, :9] = common[b:]
        if self.p.full_obs:
            box_obs[slots, :b, 9:12] = sizes
            ramp_obs[slots, :r, -LOCK_DIM:] = flags[:, b:]
        vis_aa = np.full((A, A), zero)
        vis_aa[slots[:, None], slots[None, :]] = vis[:, :n]
        mask_ab = np.full((A, B), zero)
        mask_ab[slots, :b] = vis[:, n:n + b]
        mask_ar = np.full((A, R), zero)
        mask_ar[slots, :r] = vis[:, n + b:]
        lidar_out = np.full((A, lidar.shape[1]), zero)
        lidar_out[slots] = lidar
        index = {
            "observation_self": feats, "agent_qpos_qvel": others, "box_obs": box_obs, "ramp_obs": ramp_obs,
            "lidar": lidar_out, "mask_aa_obs": vis_aa[self.rows, self.others], "mask_ab_obs": mask_ab,
            "mask_ar_obs": mask_ar,
        }
        return index, src.size - first_constant

    def set_locks(self, you_lock: np.ndarray, team_lock: np.ndarray, locked: np.ndarray) -> None:
        """Set the lock flags of the following observations (call when they change).

        Args:
            you_lock, team_lock: ``bool [n, b + r]``; ``locked``: ``bool [b + r]``.
        """
        self.constants = np.concatenate((self.hider, self.sizes.ravel(), you_lock.ravel(), team_lock.ravel(),
                                         locked, (0.0,)), dtype=np.float32)  # begin()'s order
        assert len(self.constants) == self.n_constants

    def build(self, qpos4: np.ndarray, qvel4: np.ndarray, vis: np.ndarray, lidar: np.ndarray,
              prep: float) -> dict[str, np.ndarray]:
        """The observation dict (call :meth:`begin` and :meth:`set_locks` first each episode).

        Every array is new (callers may keep them).

        Args:
            qpos4, qvel4: ``[n + b + r, 4]`` joint values of the movable bodies (world order).
            vis: ``bool [n, n + b + r]`` visibility (:class:`~.vision.Vision`).
            lidar: ``float32 [n, rays]``.
            prep: preparation fraction in [0, 1].
        """
        assert self.constants is not None, "set_locks() sets them"
        yaw = qpos4[self.n:, 3]
        # float64 values round to float32 here exactly as an assignment into a float32 array would
        source = np.concatenate((qpos4.ravel(), qvel4.ravel(), np.cos(yaw), np.sin(yaw), vis.ravel(),
                                 lidar.ravel(), (prep,), self.constants), dtype=np.float32)
        obs = {key: source[index] for key, index in self.index.items()}
        obs["mask_aa_obs_spoof"] = self.spoof_aa.copy()
        obs["mask_ab_obs_spoof"] = self.spoof_ab.copy()
        obs["mask_ar_obs_spoof"] = self.spoof_ar.copy()
        return obs
