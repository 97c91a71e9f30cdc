"""Prioritised replay kept inside the trainer: a vectorised sum-tree over a ring of transitions
whose observations live once per step in a separate ring of observation rows, and frame stacks
once per frame in a ring of planes (docs/replay.md).

Schaul, Quan, Antonoglou and Silver, "Prioritized Experience Replay", ICLR 2016 (arXiv
1511.05952): transition ``i`` is sampled with probability ``P(i) = p_i / sum_k p_k`` where the
stored priority is ``p_i = (|delta_i| + eps) ** alpha`` (the caller raises to ``alpha``; alpha = 0
is uniform sampling), and its loss is weighted by ``w_i = (N P(i)) ** -beta / max_j w_j``
(``N`` the valid transitions; the max is over the sampled batch, as Dopamine and CleanRL do, so
weights are at most 1). Sampling is stratified: the total is cut into ``m`` equal ranges and one
point drawn uniformly in each.

Every operation on many items is one numpy call per tree level (``log2(capacity)`` levels), never
a Python loop per item.

Shared by the replay algorithms (Ape-X DQN, :mod:`zoo.plugins.algorithms.apex`; SAC,
:mod:`zoo.plugins.algorithms.sac`): :func:`batch_transitions` turns a time-major batch into
transitions with n-step targets (:mod:`zoo.plugins.algorithms.nstep`) pointing at observation
rows; :func:`make_replay` sizes the replay (:func:`replay_bytes`), stores frame stacks once per
frame (:func:`is_frame_stack`, :func:`planes_per_step`) and refuses one that cannot fit. This
module imports numpy only (config validation runs before torch is loaded).
"""
from __future__ import annotations

import copy
import math
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from zoo.plugins.algorithms.nstep import nstep_targets


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
    """Transitions with n-step targets, observations stored once per step, frame stacks once per frame.

    Storage (allocated at the first insert, from the inserted arrays' dtypes and shapes):

    - an observation ring of ``obs_capacity`` rows; each insert writes one block of rows (a
      batch's ``T + 1`` rows per column and the final observations of its truncated steps),
      never an ``(s, s')`` pair. A key not stored as frames keeps its whole observation per row
      (``obs[key]``, ``[obs_capacity, ...]``);
    - for each **frame-stack key** (``frame_capacity``: key -> frame slots; its observation is
      ``[P, ...]``, P planes along the first axis, e.g. Atari's ``uint8 [4, 84, 84]``), a ring
      of single planes ``frames[key]`` (``[frame_capacity[key], ...]``) and, per row, the
      absolute numbers of its ``P`` planes ``frame_ref[key]`` (int64 ``[obs_capacity, P]``). A
      row that continues the row before it in its column (its first ``P - g`` planes equal that
      row's last ``P - g``, for the smallest such ``g``) stores only its ``g`` new planes; a
      column's first row that equals a stored row no later row continued (the bootstrap row of
      the env's previous sample, :meth:`_plan`) takes that row's planes and stores none; any
      other row (the reset stack that starts an episode, an env's first sample) stores its
      planes with repeats inside the row stored once (a reset stack of the first frame repeated
      costs one plane). Planes are compared byte for byte before one is shared, so a sampled
      stack equals the inserted one exactly, across episode starts, truncations and ring wraps;
    - a transition ring of ``capacity`` entries: ``s_ref`` and ``boot_ref`` (int64, absolute
      row numbers of the observation and of the n-step bootstrap observation), ``action``,
      ``ret`` (float32, the discounted n-step reward sum) and ``disc`` (float32, the discount of
      the bootstrap value: ``gamma ** k`` or 0 after termination), and a :class:`SumTree` of
      priorities; ``valid`` marks live entries.

    A transition is evicted when the transition ring wraps onto it, or when the observation
    ring overwrites its observation or bootstrap row, or a frame ring one of those rows' planes:
    then its priority becomes 0 and it is never sampled again. Row, frame and transition counts
    are absolute (``obs_written``, ``frames_written[key]``, ``trans_written``), positions are
    those modulo the capacities. :attr:`nbytes` is what the arrays take (:func:`replay_bytes`
    computes it before they exist).
    """

    def __init__(self, capacity: int, obs_capacity: int, frame_capacity: dict[str, int] | None = None) -> None:
        self.capacity, self.obs_capacity = int(capacity), int(obs_capacity)
        self.frame_capacity = {k: int(v) for k, v in sorted((frame_capacity or {}).items())}
        self.tree = SumTree(self.capacity)
        self.obs: dict[str, np.ndarray] = {}
        self.frames: dict[str, np.ndarray] = {}
        self.frame_ref: dict[str, np.ndarray] = {}
        self.s_ref = np.zeros(self.capacity, np.int64)
        self.boot_ref = np.zeros(self.capacity, np.int64)
        self.action: np.ndarray | None = None
        self.ret = np.zeros(self.capacity, np.float32)
        self.disc = np.zeros(self.capacity, np.float32)
        self.valid = np.zeros(self.capacity, bool)
        self.n_valid = 0
        self.obs_written = 0
        self.trans_written = 0
        self.frames_written = {k: 0 for k in self.frame_capacity}
        # per frame key: digest -> the latest row no row of its block continued, and those rows in order
        self.tails: dict[str, dict[int, int]] = {k: {} for k in self.frame_capacity}
        self.tail_log: dict[str, deque[tuple[int, int]]] = {k: deque() for k in self.frame_capacity}
        self.max_priority = 1.0
        # (obs_start, obs_end, trans_start, trans_end, the oldest plane number each frame key's rows
        # use, in the order of the sorted frame keys)
        self.blocks: deque[tuple[int, int, int, int, tuple[int, ...]]] = deque()

    def __len__(self) -> int:
        return self.n_valid

    @property
    def allocated(self) -> bool:
        return self.action is not None

    @property
    def nbytes(self) -> int:
        """Bytes of every array the replay holds (0 before the first insert allocates them)."""
        if self.action is None:
            return 0
        arrays = [*self.obs.values(), *self.frames.values(), *self.frame_ref.values(), self.s_ref, self.boot_ref,
                  self.action, self.ret, self.disc, self.valid, self.tree.tree]
        return int(sum(a.nbytes for a in arrays))

    @property
    def bytes_per_transition(self) -> float:
        """:attr:`nbytes` / ``capacity``: what one stored transition costs, its share of the rows
        and frames included."""
        return self.nbytes / self.capacity

    def _allocate(self, shapes: dict[str, tuple[tuple[int, ...], np.dtype]], action: np.ndarray) -> None:
        missing = sorted(set(self.frame_capacity) - set(shapes))
        if missing:
            raise ValueError(f"replay: frame-stack keys {missing} are not among the observation keys {sorted(shapes)}")
        for k, (shape, dtype) in shapes.items():
            if k in self.frame_capacity:
                if len(shape) < 1 or shape[0] < 1:
                    raise ValueError(f"replay: frame-stack key {k!r} needs a leading stack axis; its rows are {shape}")
                self.frames[k] = np.zeros((self.frame_capacity[k], *shape[1:]), dtype)
                self.frame_ref[k] = np.zeros((self.obs_capacity, shape[0]), np.int64)
            else:
                self.obs[k] = np.zeros((self.obs_capacity, *shape), dtype)
        self.action = np.zeros((self.capacity, *action.shape[1:]), action.dtype)

    def _keys(self) -> set[str]:
        return set(self.obs) | set(self.frames)

    def _invalidate(self, pos: np.ndarray) -> None:
        pos = pos[self.valid[pos]]
        if pos.size:
            self.valid[pos] = False
            self.n_valid -= int(pos.size)
            self.tree.update(pos, np.zeros(pos.size))

    def _oldest_frame(self, k: str, pos: np.ndarray) -> np.ndarray:
        """The oldest absolute plane number transitions ``pos`` need from key ``k`` (garbage for
        invalid ones: their rows may have been overwritten)."""
        ref = self.frame_ref[k]
        return np.minimum(ref[self.s_ref[pos] % self.obs_capacity].min(1),
                          ref[self.boot_ref[pos] % self.obs_capacity].min(1))

    def _plan(self, k: str, x: np.ndarray, prev: np.ndarray) -> _FramePlan:
        """Which planes of the stacked rows ``x`` (``[rows, P, ...]``) of key ``k`` this block
        stores, and the plane numbers every row is rebuilt from (the class docstring). A row
        that starts its column (``prev`` -1) and equals, byte for byte, a row no later row
        continued (the last row of an earlier sample of that env, whose planes are all still in
        the ring, or of an earlier column of this block) shares that row's planes: a sample
        starts from its predecessor's bootstrap observation. Vectorised over rows: one
        comparison per shift and, for rows that stand alone, per pair of planes."""
        x = np.asarray(x)
        n, P = int(x.shape[0]), int(x.shape[1])
        flat = x.reshape(n, P, -1)
        F, base = self.frame_capacity[k], self.frames_written[k]
        g = np.zeros(n, np.int64)  # planes a continuing row adds; 0: it does not continue its predecessor
        cand = np.flatnonzero(prev >= 0)
        for shift in range(1, P):
            if cand.size == 0:
                break
            ok = (flat[cand, :P - shift] == flat[prev[cand], shift:]).all(axis=(1, 2))
            g[cand[ok]] = shift
            cand = cand[~ok]
        # column starts that repeat an earlier sample's last row
        succ = np.zeros(n, bool)
        succ[prev[prev >= 0]] = True
        tails = np.flatnonzero(~succ)
        heads = np.flatnonzero(prev < 0)
        digest = {row: _digest(flat[row]) for row in np.union1d(heads, tails).tolist()}
        head_of = np.arange(n)
        while True:  # the column start of every row's chain
            up = np.where(prev[head_of] >= 0, prev[head_of], head_of)
            if np.array_equal(up, head_of):
                break
            head_of = up
        in_block: dict[int, list[int]] = {}
        for tail in tails.tolist():
            in_block.setdefault(digest[tail], []).append(tail)
        copy_of = np.full(n, -1, np.int64)  # a column start that copies a row of this block
        outside: dict[int, np.ndarray] = {}  # a column start that copies an earlier block's row: absolute refs
        # at most this many new planes (copies only lower it): planes below `survive` may be overwritten now
        survive = base + int(g.sum()) + P * int((g == 0).sum()) - F
        known = self.tails.get(k, {})
        for head in heads.tolist():
            d = digest[head]
            # only from a column whose chain starts earlier: copies never form a cycle
            match = [i for i in in_block.get(d, ()) if head_of[i] < head and np.array_equal(flat[i], flat[head])]
            if match:
                copy_of[head] = match[0]
                continue
            row = known.get(d)
            if row is not None and row >= self.obs_written - self.obs_capacity:
                ref = self.frame_ref[k][row % self.obs_capacity]
                if int(ref.min()) >= survive and np.array_equal(self.frames[k][ref % F].reshape(P, -1), flat[head]):
                    outside[head] = ref.copy()
        alone = np.flatnonzero((g == 0) & (copy_of < 0) & ~np.isin(np.arange(n), list(outside)))
        same_as = np.broadcast_to(np.arange(P), (n, P)).copy()  # the earliest equal plane of a lone row
        for p in range(1, P):
            for q in range(p):
                open_ = alone[same_as[alone, p] == p]
                if open_.size == 0:
                    break
                eq = (flat[open_, p] == flat[open_, q]).all(axis=1)
                same_as[open_[eq], p] = q
        new = np.zeros((n, P), bool)
        new[alone] = same_as[alone] == np.arange(P)
        cont = np.flatnonzero(g > 0)
        new[cont] = np.arange(P)[None, :] >= (P - g[cont])[:, None]
        n_new = int(new.sum())
        refs = np.zeros((n, P), np.int64)
        refs[new] = np.arange(n_new, dtype=np.int64)
        refs[alone] = np.take_along_axis(refs[alone], same_as[alone], axis=1)
        resolved = np.zeros(n, bool)
        resolved[alone] = True
        for head, ref in outside.items():
            refs[head] = ref - base
            resolved[head] = True
        src = np.where(g > 0, prev, copy_of)
        pending = np.flatnonzero(~resolved)
        while pending.size:  # a row takes its source's plane numbers once those are known
            ready = pending[resolved[src[pending]]]
            if ready.size == 0:
                raise ValueError("replay: prev_row links the rows of a block in a cycle")
            copies = ready[g[ready] == 0]
            refs[copies] = refs[src[copies]]
            for shift in np.unique(g[ready]):
                if shift:
                    r = ready[g[ready] == shift]
                    refs[r, :P - shift] = refs[src[r], shift:]
            resolved[ready] = True
            pending = pending[~resolved[pending]]
        return _FramePlan(refs, new, n_new, [(tail, digest[tail]) for tail in tails.tolist()])

    def insert(self, obs: dict[str, np.ndarray], s_idx: np.ndarray, boot_idx: np.ndarray, action: np.ndarray,
               ret: np.ndarray, disc: np.ndarray, priority: np.ndarray,
               prev_row: np.ndarray | None = None) -> np.ndarray:
        """Append one block: observation rows ``obs`` (each ``[rows, ...]``) and ``m`` transitions
        whose observation is row ``s_idx`` and bootstrap observation row ``boot_idx`` of the block
        (int ``[m]``), with ``action [m, ...]``, ``ret``, ``disc`` and ``priority`` (already raised
        to alpha) ``[m]``. ``prev_row`` (int ``[rows]``, -1 for none) names each row's predecessor
        in its env column within the block (:func:`batch_transitions`), smaller than the row: a
        frame-stack row may share planes only with it; without it every row stands alone.
        Returns the transitions' ring positions, int64 ``[m]``.

        Raises:
            ValueError: the block holds more rows than ``obs_capacity``, more new planes than a
                frame ring, or more transitions than ``capacity``; its observation keys differ
                from the first insert's; ``prev_row`` does not point backwards.
        """
        rows = int(next(iter(obs.values())).shape[0])
        m = int(s_idx.shape[0])
        if rows > self.obs_capacity or m > self.capacity:
            raise ValueError(f"replay: one insert of {m} transitions and {rows} observation rows does not fit a "
                             f"replay of {self.capacity} transitions and {self.obs_capacity} rows; raise algo.capacity")
        if not self.allocated:
            self._allocate({k: (tuple(v.shape[1:]), v.dtype) for k, v in obs.items()}, action)
        elif set(obs) != self._keys():
            raise ValueError(f"replay: observation keys {sorted(obs)} differ from the stored {sorted(self._keys())}")
        prev = np.full(rows, -1, np.int64) if prev_row is None else np.asarray(prev_row, np.int64).reshape(-1)
        if prev.shape[0] != rows or bool((prev >= np.arange(rows)).any()):
            raise ValueError(f"replay: prev_row must give each of the {rows} rows an earlier row of the block or -1")
        plans = {k: self._plan(k, obs[k], prev) for k in self.frames}
        for k, plan in plans.items():
            if plan.n_new > self.frame_capacity[k]:
                raise ValueError(f"replay: one insert of {plan.n_new} new planes of {k!r} does not fit its ring of "
                                 f"{self.frame_capacity[k]}; raise algo.capacity")
        # evict the transitions one of whose rows or planes the new ones overwrite (oldest blocks first)
        lost_below = self.obs_written + rows - self.obs_capacity
        frames_lost = tuple(self.frames_written[k] + plans[k].n_new - self.frame_capacity[k] for k in self.frames)
        oldest_live = self.trans_written + m - self.capacity  # transitions below this are overwritten now
        dead = 0  # blocks at the front with no live transition left: dropped
        for i, (obs_start, _, ts, te, oldest) in enumerate(self.blocks):
            frames_touched = any(a < b for a, b in zip(oldest, frames_lost, strict=True))
            if not (obs_start < lost_below or te <= oldest_live or frames_touched):
                break  # later blocks have later rows and transitions and need no older planes
            lo = max(ts, self.trans_written - self.capacity, oldest_live)  # below: overwritten just below
            alive = False
            if te > lo:
                pos = np.arange(lo, te, dtype=np.int64) % self.capacity
                pos = pos[self.valid[pos]]
                lost = np.minimum(self.s_ref[pos], self.boot_ref[pos]) < lost_below
                for k, below in zip(self.frames, frames_lost, strict=True):
                    lost |= self._oldest_frame(k, pos) < below
                self._invalidate(pos[lost])
                alive = not bool(lost.all())
            if i == dead and not alive:
                dead += 1
        for _ in range(dead):
            self.blocks.popleft()
        pos = (self.trans_written + np.arange(m, dtype=np.int64)) % self.capacity
        self._invalidate(pos)  # the ring wraps onto these
        rpos = (self.obs_written + np.arange(rows, dtype=np.int64)) % self.obs_capacity
        for k, v in obs.items():
            if k in self.obs:
                self.obs[k][rpos] = v
        needs = []
        for k, plan in plans.items():
            ref = plan.refs + self.frames_written[k]
            self.frames[k][ref[plan.new] % self.frame_capacity[k]] = np.asarray(obs[k])[plan.new]
            self.frame_ref[k][rpos] = ref
            self.frames_written[k] += plan.n_new
            needs.append(int(ref.min()) if rows else self.frames_written[k])
            for r, d in plan.tails:  # rows a later sample of the same env may start from
                self.tails[k][d] = self.obs_written + r
                self.tail_log[k].append((self.obs_written + r, d))
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
        # each block records the oldest plane it needs; kept non-decreasing along the deque (an earlier
        # block's is lowered to a later one's) so that eviction can stop at the first untouched block
        j = len(self.blocks) - 1
        while j >= 0 and any(a > b for a, b in zip(self.blocks[j][4], needs, strict=True)):
            b = self.blocks[j]
            self.blocks[j] = (*b[:4], tuple(min(a, c) for a, c in zip(b[4], needs, strict=True)))
            j -= 1
        self.blocks.append((self.obs_written, self.obs_written + rows, self.trans_written, self.trans_written + m,
                            tuple(needs)))
        self.obs_written += rows
        self.trans_written += m
        for k, log in self.tail_log.items():  # forget rows the observation ring no longer holds
            while log and log[0][0] < self.obs_written - self.obs_capacity:
                row, d = log.popleft()
                if self.tails[k].get(d) == row:
                    del self.tails[k][d]
        return pos

    def rows(self, row: np.ndarray) -> dict[str, np.ndarray]:
        """The observations of absolute row numbers ``row`` (int ``[m]``, still in the ring):
        ``{key: [m, ...]}``, frame stacks rebuilt from their planes."""
        r = np.asarray(row, np.int64) % self.obs_capacity
        out = {k: v[r] for k, v in self.obs.items()}
        for k, frames in self.frames.items():
            out[k] = frames[self.frame_ref[k][r] % self.frame_capacity[k]]
        return out

    def sample(self, m: int, beta: float, rng: np.random.Generator) -> dict[str, Any]:
        """``m`` transitions, stratified by priority (module docstring).

        Returns:
            ``{"index": int64 [m] ring positions, "weight": float32 [m] importance weights (max 1),
            "obs": {key: [m, ...]}, "boot_obs": {key: [m, ...]}, "action": [m, ...], "ret": float32
            [m], "disc": float32 [m]}``.

        Raises:
            ValueError: the replay holds no transition.
        """
        idx, weight = self.tree.stratified(m, self.n_valid, beta, rng)
        assert self.action is not None, "a non-empty replay is allocated"
        return {"index": idx, "weight": weight, "obs": self.rows(self.s_ref[idx]),
                "boot_obs": self.rows(self.boot_ref[idx]), "action": self.action[idx],
                "ret": self.ret[idx], "disc": self.disc[idx]}

    def update_priorities(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """Set the priorities (already raised to alpha) of sampled positions ``idx`` that are still valid."""
        idx = np.asarray(idx, np.int64)
        keep = self.valid[idx]
        priority = np.asarray(priority, np.float64)[keep]
        self.tree.update(idx[keep], priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every array (the written part of each ring) and counter: an exact copy on load. The
        arrays are views of the replay's storage, as a torch ``state_dict`` holds the live
        tensors: serialise it (a checkpoint does at once) before the replay changes again."""
        n_obs = min(self.obs_written, self.obs_capacity)
        n_tr = min(self.trans_written, self.capacity)
        return {
            "capacity": self.capacity, "obs_capacity": self.obs_capacity,
            "frame_capacity": dict(self.frame_capacity),
            "obs": {k: v[:n_obs] for k, v in self.obs.items()},
            "frames": {k: v[:min(self.frames_written[k], self.frame_capacity[k])] for k, v in self.frames.items()},
            "frame_ref": {k: v[:n_obs] for k, v in self.frame_ref.items()},
            "s_ref": self.s_ref[:n_tr], "boot_ref": self.boot_ref[:n_tr],
            "action": None if self.action is None else self.action[:n_tr],
            "ret": self.ret[:n_tr], "disc": self.disc[:n_tr],
            "valid": self.valid[:n_tr], "priority": self.tree.leaves(np.arange(n_tr)),
            "n_valid": self.n_valid, "obs_written": self.obs_written, "trans_written": self.trans_written,
            "frames_written": dict(self.frames_written),
            "tails": {k: [list(e) for e in log] for k, log in self.tail_log.items()},
            "max_priority": self.max_priority, "blocks": [list(b) for b in self.blocks],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Replay:
        """A replay with :meth:`state_dict`'s capacities and contents (checkpoints written before
        frame stacks were stored once have no ``frame_capacity``: rows only)."""
        r = cls(int(state["capacity"]), int(state["obs_capacity"]), state.get("frame_capacity") or {})
        r.load_state_dict(state)
        return r

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s copy.

        Raises:
            ValueError: the stored capacities differ from this replay's.
        """
        frame_capacity = {k: int(v) for k, v in sorted((state.get("frame_capacity") or {}).items())}
        if (int(state["capacity"]) != self.capacity or int(state["obs_capacity"]) != self.obs_capacity
                or frame_capacity != self.frame_capacity):
            raise ValueError(f"replay: the checkpoint's replay holds {state['capacity']} transitions, "
                             f"{state['obs_capacity']} rows and frame rings {frame_capacity}, this run's "
                             f"{self.capacity}, {self.obs_capacity} and {self.frame_capacity}; resume with the same "
                             "--set algo.capacity")
        self.__init__(self.capacity, self.obs_capacity, self.frame_capacity)  # type: ignore[misc]
        n_tr = len(state["s_ref"])
        frames, frame_ref = state.get("frames") or {}, state.get("frame_ref") or {}
        if state["action"] is not None:
            shapes = {k: (tuple(np.asarray(v).shape[1:]), np.asarray(v).dtype) for k, v in state["obs"].items()}
            for k, v in frames.items():
                shapes[k] = ((int(np.asarray(frame_ref[k]).shape[1]), *np.asarray(v).shape[1:]), np.asarray(v).dtype)
            self._allocate(shapes, np.asarray(state["action"]))
            for k, v in state["obs"].items():
                self.obs[k][:len(v)] = v
            for k, v in frames.items():
                self.frames[k][:len(v)] = v
                self.frame_ref[k][:len(frame_ref[k])] = frame_ref[k]
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
        self.frames_written = {k: int(v) for k, v in sorted((state.get("frames_written") or {}).items())}
        self.max_priority = float(state["max_priority"])
        self.blocks = deque((int(b[0]), int(b[1]), int(b[2]), int(b[3]),
                             tuple(int(x) for x in (b[4] if len(b) > 4 else ()))) for b in state["blocks"])
        for k, log in (state.get("tails") or {}).items():
            for row, d in log:
                self.tails[k][int(d)] = int(row)
                self.tail_log[k].append((int(row), int(d)))


class _FramePlan(NamedTuple):
    refs: np.ndarray  # int64 [rows, P]: plane numbers relative to the frames written before the block
    new: np.ndarray  # bool [rows, P]: the planes stored by this block (numbered in row-major order)
    n_new: int
    tails: list[tuple[int, int]]  # (row in the block, digest) of the rows no row of the block continues


def _digest(plane_rows: np.ndarray) -> int:
    """A deterministic digest of one stacked row (CRC-32; matches are compared byte for byte)."""
    return zlib.crc32(np.ascontiguousarray(plane_rows).data) & 0xFFFFFFFF


# -- sizing and refusing ---------------------------------------------------------------------

def obs_capacity_for(capacity: int, sample_length: int, columns: int = 0) -> int:
    """Observation rows for ``capacity`` transitions from samples of ``sample_length`` steps:
    ``T + 1`` rows per ``T`` transitions, plus 1% for the final observations of truncated steps;
    at least two batches of ``columns`` columns whose every step is truncated (``2 x (2T + 1) x
    columns``), so any batch fits."""
    rows = capacity + math.ceil(capacity / sample_length) + math.ceil(capacity / 100)
    return max(rows, 2 * (2 * sample_length + 1) * columns)


def frame_capacity_for(capacity: int, sample_length: int, columns: int, planes: int, per_step: int = 1) -> int:
    """Plane slots of a frame ring for ``capacity`` transitions: ``per_step`` new planes per step
    and per final observation of a truncated step (1%, as :func:`obs_capacity_for`), plus two
    batches of ``columns`` columns whose every row stands alone (``2 x (2T + 1) x columns x
    planes``: any batch fits, and samples that cannot start from a stored row, such as each
    env's first, do not shorten the replay)."""
    return per_step * (capacity + math.ceil(capacity / 100)) + 2 * (2 * sample_length + 1) * columns * planes


def is_frame_stack(shape: tuple[int, ...], dtype: Any) -> bool:
    """The shape rule of ``algo.frame_stack=auto``: uint8 observations ``[P, H, W(, C)]`` with a
    stack axis first of ``2 <= P <= 32`` planes, as the atari env (Python and vector backends)
    lays out its frame stacks (``[4, 84, 84]``; RGB ``[12, 84, 84]``); ``[H, W, C]`` images
    (``H > 32``) are not. Whether the planes really continue from step to step is measured on
    the data (:func:`planes_per_step`)."""
    return np.dtype(dtype) == np.uint8 and len(shape) >= 3 and 2 <= shape[0] <= 32


def planes_per_step(x: np.ndarray, done: np.ndarray | None = None) -> int:
    """How many planes a step adds to a frame-stacked key, measured on a batch ``[T + 1, B, P,
    ...]``: the most common smallest shift ``g`` with ``obs[t][:P - g] == obs[t - 1][g:]`` (1 for
    grey frames, 3 for RGB planes channels-first), over the rows that do not start an
    episode (``done`` ``[T, B]``: step ``t`` ended one, so row ``t + 1`` is a reset); 0 when
    fewer than half of them continue their predecessor this way (not a frame stack), 1 when
    there are none."""
    x = np.asarray(x)
    if x.shape[0] < 2:
        return 1
    P = int(x.shape[2])
    cur = x[1:].reshape(-1, P, int(np.prod(x.shape[3:], dtype=np.int64)))
    before = x[:-1].reshape(cur.shape)
    if done is not None:
        keep = ~np.asarray(done, bool).reshape(-1)
        cur, before = cur[keep], before[keep]
    if cur.shape[0] == 0:
        return 1
    g = np.zeros(cur.shape[0], np.int64)
    cand = np.arange(cur.shape[0])
    for shift in range(1, P):
        if cand.size == 0:
            break
        ok = (cur[cand, :P - shift] == before[cand, shift:]).all(axis=(1, 2))
        g[cand[ok]] = shift
        cand = cand[~ok]
    if 2 * int((g > 0).sum()) < g.size:
        return 0
    return int(np.bincount(g[g > 0]).argmax())


@dataclass(frozen=True)
class ReplayBytes:
    """What a replay's arrays take (:attr:`Replay.nbytes` once allocated), term by term.

    ``rows`` observation rows of ``row_bytes`` each (whole observations of the keys stored as
    rows, 8 B per plane number of the frame-stack keys); ``frames`` (key -> plane slots) of
    ``frame_bytes`` (key -> bytes per plane); ``capacity`` transitions of ``field_bytes`` (two
    int64 row numbers, the action, float32 return and discount, a validity byte); the sum-tree's
    ``tree_bytes`` (float64, twice the leaves' power of two)."""

    capacity: int
    rows: int
    row_bytes: int
    frames: dict[str, int]
    frame_bytes: dict[str, int]
    field_bytes: int
    tree_bytes: int

    @property
    def total(self) -> int:
        return (self.rows * self.row_bytes + sum(n * self.frame_bytes[k] for k, n in self.frames.items())
                + self.capacity * self.field_bytes + self.tree_bytes)

    @property
    def per_transition(self) -> float:
        return self.total / self.capacity

    def describe(self) -> str:
        """``1,041,250 observation rows x 32 B + 1,156,250 frames x 7,056 B + ... = 7.73 GiB``."""
        parts = [f"{self.rows:,} observation rows x {self.row_bytes:,} B"]
        parts += [f"{n:,} frames of {k!r} x {self.frame_bytes[k]:,} B" for k, n in self.frames.items()]
        parts += [f"{self.capacity:,} x {self.field_bytes} B of fields", f"{_size(self.tree_bytes)} of sum-tree"]
        return " + ".join(parts) + f" = {_size(self.total)} ({self.per_transition:,.0f} B per transition)"


def replay_bytes(capacity: int, sample_length: int, columns: int,
                 obs: dict[str, tuple[tuple[int, ...], Any]], action_bytes: int,
                 stacks: dict[str, int] | None = None) -> ReplayBytes:
    """The memory of a replay of ``capacity`` transitions fed samples of ``sample_length`` steps
    and ``columns`` columns per batch, observations ``obs`` (key -> (per-step shape, dtype)),
    ``action_bytes`` per action, and ``stacks`` (key -> planes per step) stored as frames; the
    rows and frame slots are :func:`obs_capacity_for` and :func:`frame_capacity_for`'s."""
    stacks = stacks or {}
    rows = obs_capacity_for(capacity, sample_length, columns)
    row_bytes = 0
    frames: dict[str, int] = {}
    frame_bytes: dict[str, int] = {}
    for k, (shape, dtype) in sorted(obs.items()):
        item = np.dtype(dtype).itemsize
        if k in stacks:
            row_bytes += 8 * shape[0]
            frames[k] = frame_capacity_for(capacity, sample_length, columns, shape[0], stacks[k])
            frame_bytes[k] = int(np.prod(shape[1:], dtype=np.int64)) * item
        else:
            row_bytes += int(np.prod(shape, dtype=np.int64)) * item
    size = 1 << max(0, (capacity - 1).bit_length())
    tree = 2 * size * 8
    return ReplayBytes(capacity, rows, row_bytes, frames, frame_bytes, 8 + 8 + action_bytes + 4 + 4 + 1, tree)


def make_replay(capacity: int, sample_length: int, obs: dict[str, np.ndarray], action_bytes: int, *,
                frame_stack: str, avail: int | None, done: np.ndarray | None = None) -> tuple[Replay, ReplayBytes]:
    """The replay for batches like ``obs`` (``{key: [T + 1, B, ...]}``; ``done`` ``[T, B]``:
    terminated or truncated): keys that pass :func:`is_frame_stack` and whose rows continue
    each other (:func:`planes_per_step`) are stored as frames when ``frame_stack`` is ``auto``
    (``off``: every key as rows).

    Raises:
        MemoryError: the replay needs more than ``avail`` bytes (the arithmetic and the fix).
    """
    shapes = {k: (tuple(v.shape[2:]), v.dtype) for k, v in obs.items()}
    stacks: dict[str, int] = {}
    if frame_stack == "auto":
        for k, v in obs.items():
            if is_frame_stack(shapes[k][0], v.dtype):
                g = planes_per_step(v, done)
                if g:
                    stacks[k] = g
    columns = int(next(iter(obs.values())).shape[1])
    need = replay_bytes(capacity, sample_length, columns, shapes, action_bytes, stacks)
    problem = replay_memory_problem(need, avail)
    if problem:
        raise MemoryError(problem)
    return Replay(capacity, need.rows, need.frames), need


def check_frame_stack(value: str) -> None:
    """``algo.frame_stack`` is ``auto`` or ``off``.

    Raises:
        ValueError: any other value (naming the field and the fix).
    """
    if value not in ("auto", "off"):
        raise ValueError(f"algo.frame_stack={value!r} is not one of 'auto', 'off'; set --set algo.frame_stack=auto "
                         "(store frame stacks once per frame) or off (whole observations per row)")


def experiment_replay_bytes(capacity: int, cfg: Any, action_bytes: int, frame_stack: str) -> ReplayBytes:
    """:func:`replay_bytes` before anything starts, from the experiment's env spec and one
    trainer's batch: the keys :func:`is_frame_stack` accepts are assumed to add one plane per
    step (the trainer measures it on its first batch, :func:`make_replay`)."""
    from zoo.core.config import batch_agent_steps

    steps, _ = batch_agent_steps(cfg, cfg.spec)
    obs = {k: (tuple(space.shape), space.dtype) for k, space in cfg.spec.observation_space.items()}
    stacks = {k: 1 for k, (shape, dtype) in obs.items() if frame_stack == "auto" and is_frame_stack(shape, dtype)}
    return replay_bytes(capacity, cfg.sample_length, steps // cfg.sample_length, obs, action_bytes, stacks)


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def replay_memory_problem(need: ReplayBytes, avail: int | None, trainers: int = 1) -> str | None:
    """The refusal (with the arithmetic) when ``trainers`` replays (data-parallel trainers on this
    machine: each holds a shard of ``algo.capacity``) of what ``need`` describes take more than
    ``avail`` bytes; None when they fit or ``avail`` is unknown."""
    if avail is None or need.total * trainers <= avail:
        return None
    if trainers > 1:
        return (f"algo.capacity={need.capacity:,} transitions per trainer x trainer.count={trainers} need {trainers} x "
                f"({need.describe()}) = {_size(need.total * trainers)}, more than the {_size(avail)} available; "
                "lower --set algo.capacity or trainer.count")
    return (f"algo.capacity={need.capacity:,} transitions need {need.describe()}, more than the {_size(avail)} "
            "available; lower --set algo.capacity")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# -- from a batch to transitions -------------------------------------------------------------

def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def observation_rows(batch: dict[str, Any]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A time-major batch's observation rows, as :meth:`Replay.insert` stores them: the ``T + 1``
    rows per column (row ``t * B + b``), then the final observations of its truncated steps
    (``final_obs``, in ``final_index`` order).

    Returns:
        ``({key: [rows, ...]}, prev_row)``: ``prev_row`` int64 ``[rows]`` is each row's
        predecessor in its env column (row ``(t - 1) * B + b``, -1 for ``t = 0``; a final
        observation's is its step's row).
    """
    T, B = np.shape(batch["reward"])
    final_index = np.asarray(batch.get("final_index", np.zeros((0, 2), np.int64)), np.int64).reshape(-1, 2)
    obs_rows = {k: _flat(np.asarray(v)) for k, v in batch["obs"].items()}
    if final_index.shape[0]:
        final = batch["final_obs"]
        obs_rows = {k: np.concatenate([v, np.asarray(final[k]).astype(v.dtype, copy=False)])
                    for k, v in obs_rows.items()}
    prev_row = np.concatenate([np.full(B, -1, np.int64), np.arange(T * B, dtype=np.int64),
                               final_index[:, 0] * B + final_index[:, 1]])
    return obs_rows, prev_row


def batch_transitions(batch: dict[str, Any], *, gamma: float, n: int, who: str) -> dict[str, Any]:
    """The active transitions of a time-major batch (:mod:`zoo.core.algorithm`) with n-step targets,
    ready for :meth:`Replay.insert`.

    Observation rows are the batch's ``T + 1`` rows per column (row ``t * B + b``), then the final
    observations of its truncated steps (``final_obs``, in ``final_index`` order). A transition's
    bootstrap row is ``obs[last + 1]``, or the final observation of step ``last`` when it was
    truncated (never the next episode's reset row); after termination (``disc = 0``) it is the
    transition's own row (unused).

    Args:
        batch: needs ``obs``, ``action``, ``reward``, ``terminated``, ``truncated``; optional
            ``active`` (all True without), ``final_obs`` / ``final_index``.
        gamma, n: the discount and the steps of the return (:func:`nstep_targets`).
        who: the algorithm's name, for the error message.

    Returns:
        ``{"obs": {key: [rows, ...]}, "prev_row": int64 [rows], "s_idx": int64 [m], "boot_idx": int64
        [m], "action": [m, ...], "ret": float32 [m], "disc": float32 [m]}``, ``m`` the active steps
        in (t, b) order; ``prev_row`` is each row's predecessor in its column (row ``(t - 1) * B +
        b``, -1 for ``t = 0``; a final observation's is its step's row), for :meth:`Replay.insert`.

    Raises:
        ValueError: a truncated active step has no row in ``final_index``.
    """
    reward = np.asarray(batch["reward"], np.float32)
    T, B = reward.shape
    active = np.asarray(batch["active"], bool) if "active" in batch else np.ones((T, B), bool)
    ret, disc, last, from_final = nstep_targets(reward, batch["terminated"], batch["truncated"], gamma=gamma, n=n)
    rows = (T + 1) * B
    final_index = np.asarray(batch.get("final_index", np.zeros((0, 2), np.int64)), np.int64).reshape(-1, 2)
    final_row = np.full((T, B), -1, np.int64)
    final_row[final_index[:, 0], final_index[:, 1]] = rows + np.arange(final_index.shape[0])
    cols = np.arange(B)[None, :]
    s_idx = np.arange(T)[:, None] * B + cols
    boot_idx = np.where(from_final, final_row[last, np.broadcast_to(cols, (T, B))], (last + 1) * B + cols)
    if bool((from_final & (boot_idx < 0) & active).any()):
        raise ValueError(f"{who}: a truncated step has no row in 'final_index'; every truncated step needs "
                         "its final observation (zoo.core.algorithm)")
    boot_idx = np.where(disc > 0, boot_idx, s_idx)  # unused after termination: any valid row
    obs_rows, prev_row = observation_rows(batch)
    keep = active.reshape(-1)
    return {"obs": obs_rows, "prev_row": prev_row, "s_idx": s_idx.reshape(-1)[keep],
            "boot_idx": boot_idx.reshape(-1)[keep],
            "action": _flat(np.asarray(batch["action"]))[keep], "ret": ret.reshape(-1)[keep],
            "disc": disc.reshape(-1)[keep]}


def check_q_learning_spec(spec: Any, who: str) -> None:
    """What a Q-learner (apex-dqn, r2d2) needs of ``spec``: a Discrete action space (one Q-value
    per action) and no action mask (its greedy and epsilon-random actions could be illegal).
    Several agents are fine: they share the network as independent learners, as PPO trains them.

    Raises:
        TypeError: either need is not met, naming ``who``, the env and what to use instead.
    """
    from gymnasium import spaces

    from zoo.core.spaces import ACTION_MASK_KEY

    if not isinstance(spec.action_space, spaces.Discrete):
        raise TypeError(f"{who} needs a Discrete action space; env {spec.env_id!r} has {spec.action_space} "
                        "(use ppo or impala for other action spaces)")
    if ACTION_MASK_KEY in spec.observation_space:
        raise TypeError(f"{who} does not apply action masks; env {spec.env_id!r} has {ACTION_MASK_KEY!r} "
                        "(use ppo or mappo, which sample legal actions only)")


def rate_limited_steps(credit: float, replay_size: int, inserting: int, *, learning_starts: int,
                       samples_per_insert: float, batch_size: int) -> tuple[int, float]:
    """The rate limiter (Reverb's samples per insert, docs/replay.md) of one trainer: ``(steps,
    credit)`` after ``inserting`` transitions join a replay of ``replay_size``. The credit grows by
    ``inserting x samples_per_insert`` once the replay with them holds ``learning_starts``;
    ``floor(credit / batch_size)`` gradient steps are granted (none from an empty replay, the
    credit then carries) and their samples spent. :func:`pooled_rate_limited_steps` with one shard."""
    return pooled_rate_limited_steps(credit, replay_size, inserting, 1 if replay_size <= 0 else 0, 1,
                                     learning_starts=learning_starts, samples_per_insert=samples_per_insert,
                                     batch_size=batch_size)


def pooled_rate_limited_steps(credit: float, replay_size: int, inserting: int, empty_shards: int, world: int, *,
                              learning_starts: int, samples_per_insert: float, batch_size: int) -> tuple[int, float]:
    """The rate limiter of ``world`` data-parallel trainers, each with its own replay shard:
    ``(steps, credit)``, the same on every rank since every argument is.

    ``replay_size`` and ``inserting`` are summed over the shards (before this insert; the
    transitions joining them now), ``empty_shards`` counts the shards that hold nothing yet. The
    credit grows by ``inserting x samples_per_insert`` once the shards with them hold
    ``learning_starts`` together; a gradient step draws ``batch_size`` from every shard, so it
    spends ``world x batch_size`` and ``floor(credit / (world x batch_size))`` steps are granted,
    none while any shard is empty (that rank could not sample; the credit carries). Every rank
    takes the granted steps together, each one all-reducing its gradients.

    Example: 2 ranks, batch 64, 16 samples per insert, learning after 1,000, credit 100; shards of
    600 and 500 receive 128 transitions each: credit 100 + 256 x 16 = 4,196, 4,196 // 128 = 32
    steps, credit 4,196 - 4,096 = 100 carried.
    """
    if replay_size + inserting >= learning_starts:
        credit += inserting * samples_per_insert
    per_step = world * batch_size
    steps = int(credit // per_step) if empty_shards == 0 else 0
    return steps, credit - steps * per_step


class Grant(NamedTuple):
    """What :func:`global_rate_limited_steps` decided: ``steps`` to take on every rank, the
    ``credit`` left, and every rank's shards together: ``replay_size`` (before this insert) and
    ``inserting`` (the transitions joining them now)."""

    steps: int
    credit: float
    replay_size: int
    inserting: int


def global_rate_limited_steps(credit: float, replay_size: int, inserting: int, *, learning_starts: int,
                              samples_per_insert: float, batch_size: int) -> Grant:
    """:func:`pooled_rate_limited_steps` on the counts of every data-parallel trainer: one
    all-reduce (:func:`zoo.core.distributed.global_sum`) of this rank's ``[replay_size,
    inserting, replay_size == 0]``; every rank must call it once per update. With one trainer it
    is :func:`rate_limited_steps` on the local counts (no collective).

    Raises:
        zoo.core.distributed.PeerLost: the all-reduce failed.
    """
    from zoo.core import distributed as zdist

    world = zdist.world_size()
    if world == 1:
        size, new, empty = replay_size, inserting, int(replay_size <= 0)
    else:
        pooled = zdist.global_sum([float(replay_size), float(inserting), 1.0 if replay_size <= 0 else 0.0])
        size, new, empty = (int(round(float(v))) for v in pooled)
    steps, credit = pooled_rate_limited_steps(credit, size, new, empty, world, learning_starts=learning_starts,
                                              samples_per_insert=samples_per_insert, batch_size=batch_size)
    return Grant(steps, credit, size, new)


def rank_rng(seed: int, rank: int) -> np.random.Generator:
    """The sampling generator of data-parallel rank ``rank``: ``default_rng(seed)`` for rank 0 (as
    one trainer's), ``default_rng([seed, rank])`` for the others, so every shard is sampled from
    its own stream."""
    return np.random.default_rng(seed if rank == 0 else [seed, rank])


def restore_replay(state: dict[str, Any] | None, capacity: int, cls: Any, *, unit: str,
                   what: str = "replay") -> Any:
    """A replay rebuilt from its ``state_dict()`` (``cls.from_state_dict``; None from None), after
    checking it holds as many items as ``algo.capacity`` asks.

    Args:
        state: a replay's ``state_dict()`` (carries ``capacity``), or None (no replay yet).
        capacity: ``algo.capacity`` of the resuming run [items].
        cls: the replay class (:class:`Replay`, r2d2's ``SequenceReplay``).
        unit: what one item is, for the message (``transitions``, ``sequences``).
        what: ``replay`` (the whole one of a single trainer) or ``replay shard`` (a rank's).

    Raises:
        ValueError: the stored capacity differs; the message names ``algo.capacity`` and the
            value to resume with.
    """
    if state is None:
        return None
    if int(state["capacity"]) != capacity:
        raise ValueError(f"the checkpoint's {what} holds {state['capacity']:,} {unit} but algo.capacity="
                         f"{capacity:,}; resume with --set algo.capacity={state['capacity']}")
    return cls.from_state_dict(state)


def rank_state(rng: np.random.Generator, replay: Any, generator: Any = None) -> dict[str, Any]:
    """What only one data-parallel rank of a replay algorithm holds: its sampling RNG's state, its
    replay shard (``state_dict()``, or None before its first batch) and, when given, its torch
    generator's state (sac's exploration noise). The rest of the algorithm's state is the same on
    every rank; ranks 1..K-1 write this beside ``latest.pt`` (``core/workers/checkpointing.py``)."""
    out = {"rng": copy.deepcopy(rng.bit_generator.state),
           "replay": None if replay is None else replay.state_dict()}
    if generator is not None:
        out["generator"] = generator.get_state()
    return out


def load_rank_state(state: dict[str, Any] | None, rng: np.random.Generator, generator: Any = None
                    ) -> dict[str, Any] | None:
    """Restore the RNGs that :func:`rank_state` stored (``rng`` and ``generator`` in place) and
    return the stored replay shard's state for :func:`restore_replay`. ``state`` None (no shard
    file: the rank starts with an empty shard, its RNGs drawn afresh) returns None and changes
    nothing."""
    if state is None:
        return None
    rng.bit_generator.state = state["rng"]
    if generator is not None:
        generator.set_state(state["generator"])
    return state["replay"]
