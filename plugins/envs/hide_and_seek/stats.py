"""Per-episode statistics: the emergent-stage signals (docs/hide-and-seek.md, "Statistics per episode").

Reported at the end of an episode as ``dict[str, float]``:

- ``box_max_displacement_prep`` / ``box_max_displacement``: the largest distance (m, 3-D)
  of any box from its spawn position, over the preparation phase / the whole episode
  (a running maximum, so the first never exceeds the second); ``ramp_*`` likewise.
- ``boxes_locked_prep`` / ``boxes_locked``: boxes locked at the end of preparation / at
  the end; ``ramps_locked_prep`` / ``ramps_locked`` likewise.
- ``hider_return`` / ``seeker_return``: the mean over that team's agents of the sum of
  their rewards.
- ``n_hiders``, ``n_seekers``, ``n_boxes``, ``n_ramps``: the episode's counts.
- ``physics_resets``: env steps where MuJoCo diverged and the step was undone (should be 0).
"""
from __future__ import annotations

import numpy as np


class EpisodeStats:
    """Accumulates the statistics of one episode (call :meth:`update` after every step)."""

    def __init__(self, obj_pos: np.ndarray, n_boxes: int, is_hider: np.ndarray, prep_steps: int) -> None:
        self.start = obj_pos.copy()
        self.b, self.is_hider, self.prep_steps = n_boxes, is_hider, prep_steps
        # running maximum of each object's squared displacement; the square root of the
        # maximum is the maximum of the square roots, taken only when reported
        self.max_sq = np.zeros(len(obj_pos))
        self.returns = np.zeros(len(is_hider))
        self.prep = {"box_max_displacement_prep": 0.0, "ramp_max_displacement_prep": 0.0,
                     "boxes_locked_prep": 0.0, "ramps_locked_prep": 0.0}
        self.locked = np.zeros(2)
        self.physics_resets = 0
        self.last_locked = np.zeros(len(obj_pos), dtype=bool)
        if prep_steps == 0:
            self._record_prep()

    def _max_displacement(self) -> tuple[float, float]:
        """Largest displacement (m) of any box and of any ramp so far (0 without any)."""
        b = self.b
        box = float(np.sqrt(self.max_sq[:b].max())) if b else 0.0
        ramp = float(np.sqrt(self.max_sq[b:].max())) if len(self.max_sq) > b else 0.0
        return box, ramp

    def _record_prep(self) -> None:
        box, ramp = self._max_displacement()
        self.prep = {"box_max_displacement_prep": box, "ramp_max_displacement_prep": ramp,
                     "boxes_locked_prep": float(self.locked[0]), "ramps_locked_prep": float(self.locked[1])}

    def update(self, t: int, obj_pos: np.ndarray, locked: np.ndarray, rewards: np.ndarray) -> None:
        """Record env step ``t`` (1-based): object positions ``[O, 3]``, ``locked bool [O]``, rewards ``[n]``."""
        np.maximum(self.max_sq, ((obj_pos - self.start) ** 2).sum(1), out=self.max_sq)
        self.returns += rewards
        self.last_locked = locked
        if t == self.prep_steps:
            self._count_locks()
            self._record_prep()

    def _count_locks(self) -> None:
        b = self.b
        self.locked[:] = self.last_locked[:b].sum(), self.last_locked[b:].sum()

    def summary(self) -> dict[str, float]:
        """The statistics of the module docstring (call after the last :meth:`update`)."""
        self._count_locks()
        h = self.is_hider
        box, ramp = self._max_displacement()
        return {
            **self.prep,
            "box_max_displacement": box,
            "ramp_max_displacement": ramp,
            "boxes_locked": float(self.locked[0]),
            "ramps_locked": float(self.locked[1]),
            "hider_return": float(self.returns[h].mean()) if h.any() else 0.0,
            "seeker_return": float(self.returns[~h].mean()) if (~h).any() else 0.0,
            "n_hiders": float(h.sum()), "n_seekers": float((~h).sum()),
            "n_boxes": float(self.b), "n_ramps": float(len(self.start) - self.b),
            "physics_resets": float(self.physics_resets),
        }
