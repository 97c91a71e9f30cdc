"""The placement grid: where walls stand and where spawned objects may go.

docs/hide-and-seek.md, section "World and timing": placement on a ``grid_cells x grid_cells`` grid over the
floor (30 x 30 cells of 0.2 m). Cell ``(i, j)`` covers ``[i c, (i+1) c] x [j c, (j+1) c]``
with ``c`` the cell side. Walls lie on grid *lines*; a wall on line ``k`` blocks the
cells on both sides of it (``k - 1`` and ``k``) so nothing spawns inside a wall. An object
occupies a rectangle of whole cells (its footprint) and is centred in it, so spawned
objects never overlap each other or a wall.
"""
from __future__ import annotations

import math

import numpy as np


def footprint(size: float, cell: float) -> int:
    """Cells needed to cover ``size`` metres (at least 1)."""
    return max(1, math.ceil(size / cell - 1e-9))


class Grid:
    """Occupancy of the placement grid (``occ[i, j]``: cell ``i`` along x, ``j`` along y)."""

    def __init__(self, cells: int, cell: float) -> None:
        self.n, self.cell = cells, cell
        self.occ = np.zeros((cells, cells), dtype=bool)

    def block_line(self, axis: int, line: int, a: int, b: int) -> None:
        """Block the cells beside a wall on grid line ``line`` spanning cells ``[a, b)``.

        ``axis`` 0: the wall runs along y at ``x = line * cell``; 1: along x at ``y = line * cell``.
        """
        lo, hi = max(line - 1, 0), min(line + 1, self.n)
        if lo >= hi:
            return
        if axis == 0:
            self.occ[lo:hi, a:b] = True
        else:
            self.occ[a:b, lo:hi] = True

    def anchors(self, w: int, h: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Lower-left cells where a ``w x h`` footprint fits on free, allowed cells.

        Returns a bool array ``[n - w + 1, n - h + 1]``.
        """
        blocked = self.occ if allowed is None else (self.occ | ~allowed)
        s = np.zeros((self.n + 1, self.n + 1), dtype=np.int32)
        s[1:, 1:] = np.cumsum(np.cumsum(blocked, axis=0), axis=1)
        count = s[w:, h:] - s[:-w, h:] - s[w:, :-h] + s[:-w, :-h]
        return count == 0

    def place(self, rng: np.random.Generator, w: int, h: int, allowed: np.ndarray | None = None,
              anchor_ok=None) -> np.ndarray | None:
        """Draw a free spot uniformly for a ``w x h``-cell footprint and occupy it.

        Args:
            allowed: bool ``[n, n]``: cells the footprint may cover (None: all).
            anchor_ok: optional ``f(centres [k, 2]) -> bool [k]`` filtering candidate centres.

        Returns:
            The footprint centre ``float64 [2]`` in metres, or None if nothing fits.
        """
        ok = self.anchors(w, h, allowed)
        ii, jj = np.nonzero(ok)
        if ii.size == 0:
            return None
        centres = np.stack([(ii + w / 2) * self.cell, (jj + h / 2) * self.cell], axis=1)
        if anchor_ok is not None:
            keep = anchor_ok(centres)
            ii, jj, centres = ii[keep], jj[keep], centres[keep]
            if ii.size == 0:
                return None
        k = int(rng.integers(ii.size))
        self.occ[ii[k]:ii[k] + w, jj[k]:jj[k] + h] = True
        return centres[k]
