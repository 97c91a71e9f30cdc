"""Prioritised replay kept inside the trainer: a vectorised sum-tree over a ring of transitions
whose observations live once per step in a separate ring of observation rows (docs/replay.md).

Schaul, Quan, Antonoglou and Silver, "Prioritized Experience Replay", ICLR 2016 (arXiv
1511.05952): transition ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k`` where the
stored priority is ``p_i = (|delta_i| + eps) ** alpha`` (the caller raises to ``alpha``; alpha = 0
is uniform sampling), and its loss is weighted by ``w_i = (N P(i)) ** -beta / max_j w_j``
(``N`` the valid transitions; the max is over the sampled batch, as Dopamine and CleanRL do, so
weights are at most 1). Sampling is stratified: the total is cut into ``m`` equal ranges and one
point drawn uniformly in each.

Every operation on many items is one numpy call per tree level (``log2(capacity)`` levels), never
a Python loop per item.
"""
from __future__ import annotations

from collections import deque
from typing import Any

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
        nodes = np.unique(nodes >> 1)
        while nodes.size and nodes[-1] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[-1] == 1:
                break
            nodes = np.unique(nodes >> 1)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The leaf whose prefix-sum range holds each ``mass`` (float ``[m]``, in ``[0, total)``):
        leaf ``i`` with ``sum(leaves[:i]) <= mass < sum(leaves[:i+1])``. Leaves of value 0 are
        never returned while the total is positive (rounding at a boundary goes to the non-empty
        side). Returns int64 ``[m]``."""
        u = np.asarray(mass, np.float64).copy()
        node = np.ones(u.shape, np.int64)
        for _ in range(self.depth):
            left = self.tree[2 * node]
            right = self.tree[2 * node + 1]
            go_right = ((u >= left) & (right > 0)) | (left <= 0)
            u = np.where(go_right, u - left, u)
            node = 2 * node + go_right
        return node - self.size


class Replay:
    """Transitions with n-step targets, observations stored once per step.

    Storage (allocated at the first insert, from the inserted arrays' dtypes and shapes):

    - an observation ring of ``obs_capacity`` rows per observation key; each insert writes one
      block of rows (a batch's ``T + 1`` rows per column and the final observations of its
      truncated steps), never an ``(s, s')`` pair;
    - a transition ring of ``capacity`` entries: ``s_ref`` and ``boot_ref`` (int64, absolute
      row numbers of the observation and of the n-step bootstrap observation), ``action``,
      ``ret`` (float32, the discounted n-step reward sum) and ``disc`` (float32, the discount of
      the bootstrap value: ``gamma ** k`` or 0 after termination), and a :class:`SumTree` of
      priorities; ``valid`` marks live entries.

    A transition is evicted when the transition ring wraps onto it, or when the observation
    ring overwrites its observation or bootstrap row: then its priority becomes 0 and it is
    never sampled again. Row and transition counts are absolute (``obs_written``,
    ``trans_written``), positions are those modulo the capacities.
    """

    def __init__(self, capacity: int, obs_capacity: int) -> None:
        self.capacity, self.obs_capacity = int(capacity), int(obs_capacity)
        self.tree = SumTree(self.capacity)
        self.obs: dict[str, np.ndarray] = {}
        self.s_ref = np.zeros(self.capacity, np.int64)
        self.boot_ref = np.zeros(self.capacity, np.int64)
        self.action: np.ndarray | None = None
        self.ret = np.zeros(self.capacity, np.float32)
        self.disc = np.zeros(self.capacity, np.float32)
        self.valid = np.zeros(self.capacity, bool)
        self.n_valid = 0
        self.obs_written = 0
        self.trans_written = 0
        self.max_priority = 1.0
        self.blocks: deque[tuple[int, int, int, int]] = deque()  # (obs_start, obs_end, trans_start, trans_end)

    def __len__(self) -> int:
        return self.n_valid

    def _allocate(self, obs: dict[str, np.ndarray], action: np.ndarray) -> None:
        self.obs = {k: np.zeros((self.obs_capacity, *v.shape[1:]), v.dtype) for k, v in obs.items()}
        self.action = np.zeros((self.capacity, *action.shape[1:]), action.dtype)

    def _invalidate(self, pos: np.ndarray) -> None:
        pos = pos[self.valid[pos]]
        if pos.size:
            self.valid[pos] = False
            self.n_valid -= int(pos.size)
            self.tree.update(pos, np.zeros(pos.size))

    def insert(self, obs: dict[str, np.ndarray], s_idx: np.ndarray, boot_idx: np.ndarray, action: np.ndarray,
               ret: np.ndarray, disc: np.ndarray, priority: np.ndarray) -> np.ndarray:
        """Append one block: observation rows ``obs`` (each ``[rows, ...]``) and ``m`` transitions
        whose observation is row ``s_idx`` and bootstrap observation row ``boot_idx`` of the block
        (int ``[m]``), with ``action [m, ...]``, ``ret``, ``disc`` and ``priority`` (already raised
        to alpha) ``[m]``. Returns the transitions' ring positions, int64 ``[m]``.

        Raises:
            ValueError: the block holds more rows than ``obs_capacity`` or more transitions than
                ``capacity``, or its observation keys differ from the first insert's.
        """
        rows = int(next(iter(obs.values())).shape[0])
        m = int(s_idx.shape[0])
        if rows > self.obs_capacity or m > self.capacity:
            raise ValueError(f"replay: one insert of {m} transitions and {rows} observation rows does not fit a "
                             f"replay of {self.capacity} transitions and {self.obs_capacity} rows; raise algo.capacity")
        if not self.obs:
            self._allocate(obs, action)
        elif set(obs) != set(self.obs):
            raise ValueError(f"replay: observation keys {sorted(obs)} differ from the stored {sorted(self.obs)}")
        # evict the transitions one of whose rows the new rows overwrite (oldest blocks first)
        lost_below = self.obs_written + rows - self.obs_capacity
        oldest_live = self.trans_written + m - self.capacity  # transitions below this are overwritten now
        while self.blocks and (self.blocks[0][0] < lost_below or self.blocks[0][3] <= oldest_live):
            _, obs_end, ts, te = self.blocks[0]
            lo = max(ts, self.trans_written - self.capacity)
            if te > lo:
                pos = np.arange(lo, te, dtype=np.int64) % self.capacity
                lost = np.minimum(self.s_ref[pos], self.boot_ref[pos]) < lost_below
                self._invalidate(pos[lost])
            if obs_end > lost_below and te > oldest_live:
                break  # part of this block stays; later blocks start after it
            self.blocks.popleft()
        pos = (self.trans_written + np.arange(m, dtype=np.int64)) % self.capacity
        self._invalidate(pos)  # the ring wraps onto these
        rpos = (self.obs_written + np.arange(rows, dtype=np.int64)) % self.obs_capacity
        for k, v in obs.items():
            self.obs[k][rpos] = v
        assert self.action is not None, "allocated above"
        self.s_ref[pos] = self.obs_written + np.asarray(s_idx, np.int64)
        self.boot_ref[pos] = self.obs_written + np.asarray(boot_idx, np.int64)
        self.action[pos] = action
        self.ret[pos] = ret
        self.disc[pos] = disc
        self.valid[pos] = True
        self.n_valid += m
        priority = np.asarray(priority, np.float64)
        self.tree.update(pos, priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))
        self.blocks.append((self.obs_written, self.obs_written + rows, self.trans_written, self.trans_written + m))
        self.obs_written += rows
        self.trans_written += m
        return pos

    def sample(self, m: int, beta: float, rng: np.random.Generator) -> dict[str, Any]:
        """``m`` transitions, stratified by priority (module docstring).

        Returns:
            ``{"index": int64 [m] ring positions, "weight": float32 [m] importance weights (max 1),
            "obs": {key: [m, ...]}, "boot_obs": {key: [m, ...]}, "action": [m, ...], "ret": float32
            [m], "disc": float32 [m]}``.

        Raises:
            ValueError: the replay holds no transition.
        """
        total = self.tree.total
        if self.n_valid == 0 or total <= 0:
            raise ValueError("replay: cannot sample from an empty replay")
        mass = (np.arange(m) + rng.random(m)) * (total / m)
        idx = self.tree.find(np.minimum(mass, np.nextafter(total, 0)))
        prob = self.tree.leaves(idx) / total
        weight = (self.n_valid * prob) ** (-beta)
        weight = (weight / weight.max()).astype(np.float32)
        s = self.s_ref[idx] % self.obs_capacity
        b = self.boot_ref[idx] % self.obs_capacity
        assert self.action is not None, "a non-empty replay is allocated"
        return {"index": idx, "weight": weight, "obs": {k: v[s] for k, v in self.obs.items()},
                "boot_obs": {k: v[b] for k, v in self.obs.items()}, "action": self.action[idx],
                "ret": self.ret[idx], "disc": self.disc[idx]}

    def update_priorities(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """Set the priorities (already raised to alpha) of sampled positions ``idx`` that are still valid."""
        idx = np.asarray(idx, np.int64)
        keep = self.valid[idx]
        priority = np.asarray(priority, np.float64)[keep]
        self.tree.update(idx[keep], priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))

    def nbytes_per_transition(self, rows_per_transition: float) -> float:
        """Bytes one stored transition costs: its share of observation rows, its fields, two
        tree nodes (a bound: the tree has at most twice the leaves' power of two)."""
        row = sum(v[0].nbytes for v in self.obs.values())
        action = self.action[0].nbytes if self.action is not None else 8
        return row * rows_per_transition + 8 + 8 + action + 4 + 4 + 1 + 2 * 8 * self.tree.size / self.capacity

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every array (the written part of each ring) and counter: an exact copy on load. The
        arrays are views of the replay's storage, as a torch ``state_dict`` holds the live
        tensors: serialise it (a checkpoint does at once) before the replay changes again."""
        n_obs = min(self.obs_written, self.obs_capacity)
        n_tr = min(self.trans_written, self.capacity)
        return {
            "capacity": self.capacity, "obs_capacity": self.obs_capacity,
            "obs": {k: v[:n_obs] for k, v in self.obs.items()},
            "s_ref": self.s_ref[:n_tr], "boot_ref": self.boot_ref[:n_tr],
            "action": None if self.action is None else self.action[:n_tr],
            "ret": self.ret[:n_tr], "disc": self.disc[:n_tr],
            "valid": self.valid[:n_tr], "priority": self.tree.leaves(np.arange(n_tr)),
            "n_valid": self.n_valid, "obs_written": self.obs_written, "trans_written": self.trans_written,
            "max_priority": self.max_priority, "blocks": list(self.blocks),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s copy.

        Raises:
            ValueError: the stored capacities differ from this replay's.
        """
        if int(state["capacity"]) != self.capacity or int(state["obs_capacity"]) != self.obs_capacity:
            raise ValueError(f"replay: the checkpoint's replay holds {state['capacity']} transitions and "
                             f"{state['obs_capacity']} rows, this run's {self.capacity} and {self.obs_capacity}; "
                             f"resume with the same --set algo.capacity")
        self.__init__(self.capacity, self.obs_capacity)  # type: ignore[misc]
        n_tr = len(state["s_ref"])
        if state["action"] is not None and state["obs"]:
            self._allocate({k: np.asarray(v) for k, v in state["obs"].items()}, np.asarray(state["action"]))
            for k, v in state["obs"].items():
                self.obs[k][:len(v)] = v
            assert self.action is not None, "allocated above"
            self.action[:n_tr] = state["action"]
        self.s_ref[:n_tr] = state["s_ref"]
        self.boot_ref[:n_tr] = state["boot_ref"]
        self.ret[:n_tr] = state["ret"]
        self.disc[:n_tr] = state["disc"]
        self.valid[:n_tr] = state["valid"]
        self.tree.update(np.arange(n_tr), np.asarray(state["priority"]))
        self.n_valid = int(state["n_valid"])
        self.obs_written, self.trans_written = int(state["obs_written"]), int(state["trans_written"])
        self.max_priority = float(state["max_priority"])
        self.blocks = deque((int(a), int(b), int(c), int(d)) for a, b, c, d in state["blocks"])
