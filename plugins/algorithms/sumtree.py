"""A vectorised sum-tree: the priorities of a replay's transitions (or r2d2's sequences), and
prioritised sampling from them (docs/replay.md).

Schaul, Quan, Antonoglou and Silver, "Prioritized Experience Replay", ICLR 2016 (arXiv
1511.05952): transition ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k`` where the
stored priority is ``p_i = (|delta_i| + eps) ** alpha`` (the caller raises to ``alpha``; alpha = 0
is uniform sampling), and its loss is weighted by ``w_i = (N P(i)) ** -beta / max_j w_j``
(``N`` the valid transitions; the max is over the sampled batch, as Dopamine and CleanRL do, so
weights are at most 1). Sampling is stratified: the total is cut into ``m`` equal ranges and one
point drawn uniformly in each (:meth:`SumTree.stratified`).

Every operation on many items is one numpy call per tree level (``log2(capacity)`` levels), never
a Python loop per item. This module imports numpy only.
"""
from __future__ import annotations

import numpy as np


class SumTree:
    """Sums of non-negative leaf values in a complete binary tree, float64.

    Node 1 is the root, node ``k`` has children ``2k`` and ``2k + 1``; leaf ``i`` (0-based, ``i <
    capacity``) is node ``size + i``, ``size`` the power of two at least ``capacity``. Parents are
    recomputed from their children on every update (no running sums: no rounding drift).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree: capacity={capacity} must be at least 1")
        self.capacity = int(capacity)
        self.size = 1 << max(0, (self.capacity - 1).bit_length())
        self.depth = self.size.bit_length() - 1  # levels below the root
        self.tree = np.zeros(2 * self.size, np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def leaves(self, idx: np.ndarray) -> np.ndarray:
        """Leaf values at ``idx`` (int ``[m]``), float64 ``[m]``."""
        return self.tree[self.size + np.asarray(idx, np.int64)]

    def stratified(self, m: int, n_valid: int, beta: float, rng: np.random.Generator,
                   who: str = "replay") -> tuple[np.ndarray, np.ndarray]:
        """``m`` leaves drawn by priority, one from each of ``m`` equal slices of the total mass
        (Schaul et al. 2016, "Prioritized Experience Replay", section 3.3), with their importance
        weights ``(n_valid * P(i)) ** -beta`` scaled to a maximum of 1 (ibid., section 3.4).

        Returns:
            ``(idx, weight)``: int64 ``[m]`` leaf indices and float32 ``[m]`` weights.

        Raises:
            ValueError: ``n_valid`` is 0 or every priority is 0 (message starts with ``who``).
        """
        total = self.total
        if n_valid == 0 or total <= 0:
            raise ValueError(f"{who}: cannot sample from an empty replay")
        mass = (np.arange(m) + rng.random(m)) * (total / m)
        idx = self.find(np.minimum(mass, np.nextafter(total, 0)))
        prob = self.leaves(idx) / total
        weight = (n_valid * prob) ** (-beta)
        return idx, (weight / weight.max()).astype(np.float32)

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` (int ``[m]``) to ``values`` (``[m]``, >= 0, finite); the last one wins
        where ``idx`` repeats.

        Raises:
            ValueError: an index outside ``[0, capacity)`` or a negative or non-finite value.
        """
        idx = np.asarray(idx, np.int64).reshape(-1)
        values = np.asarray(values, np.float64).reshape(-1)
        if idx.size == 0:
            return
        if idx.shape != values.shape:
            raise ValueError(f"SumTree.update: {idx.size} indices but {values.size} values")
        if int(idx.min()) < 0 or int(idx.max()) >= self.capacity:
            raise ValueError(f"SumTree.update: an index is outside [0, {self.capacity})")
        if not np.isfinite(values).all() or float(values.min()) < 0:
            raise ValueError("SumTree.update: priorities must be finite and >= 0")
        # the last occurrence of each index wins (numpy leaves repeated fancy assignment unordered)
        rev_unique, rev_first = np.unique(idx[::-1], return_index=True)
        nodes = rev_unique + self.size
        self.tree[nodes] = values[::-1][rev_first]
        pairs = self.tree.reshape(-1, 2)  # pairs[k] = (tree[2k], tree[2k + 1]), a view
        for _ in range(self.depth):  # one level up at a time; a repeated parent is written twice with one sum
            nodes = nodes >> 1
            self.tree[nodes] = pairs[nodes].sum(axis=1)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf whose prefix-sum range holds each ``mass`` (float ``[m]``, in ``[0, total)``):
        leaf ``i`` with ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``. Leaves of value 0 are
        never returned while the total is positive (rounding at a boundary goes to the non-empty
        side). Returns int64 ``[m]``."""
        shape = np.shape(mass)
        u = np.asarray(mass, np.float64).reshape(-1).copy()
        node = np.ones(u.shape, np.int64)
        pairs = self.tree.reshape(-1, 2)
        for _ in range(self.depth):
            children = pairs[node]  # [m, 2]: the left and right child sums
            left, right = children[:, 0], children[:, 1]
            go_right = ((u >= left) & (right > 0)) | (left <= 0)
            u -= np.where(go_right, left, 0.0)
            node = 2 * node + go_right
        return (node - self.size).reshape(shape)
