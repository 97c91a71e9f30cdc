"""Prioritised replay kept inside the trainer: transitions with n-step targets in a ring, their
priorities in a sum-tree, their observations once per step in a separate ring of observation
rows, and frame stacks once per frame in a ring of planes (:class:`Replay`, docs/replay.md).

Shared by the replay algorithms (Ape-X DQN, :mod:`zoo.plugins.algorithms.apex`; SAC,
:mod:`zoo.plugins.algorithms.sac`; r2d2 keeps its rows in one). The replay machinery lives in
modules of its own, whose names this module re-exports:

- :mod:`zoo.plugins.algorithms.sumtree` — the sum-tree of priorities and prioritised sampling
  with importance weights (Schaul et al., "Prioritized Experience Replay", ICLR 2016);
- :mod:`zoo.plugins.algorithms.transitions` — a time-major batch turned into transitions with
  n-step targets (:mod:`zoo.plugins.algorithms.nstep`) pointing at observation rows
  (:func:`batch_transitions`, :func:`observation_rows`), and the Q-learners' spec check;
- :mod:`zoo.plugins.algorithms.replay_sizing` — sizing a replay (:func:`replay_bytes`), which
  keys are frame stacks (:func:`is_frame_stack`, :func:`planes_per_step`) and the refusal of one
  that cannot fit;
- :mod:`zoo.plugins.algorithms.rate_limiter` — samples per insert, for one trainer or
  data-parallel ones;
- :mod:`zoo.plugins.algorithms.replay_ranks` — each data-parallel rank's sampling RNG and its
  checkpointed shard (:func:`rank_state`, :func:`load_rank_state`, :func:`restore_replay`).

:func:`make_replay` sizes the replay, stores frame stacks once per frame and refuses one that
cannot fit. This module imports numpy only (config validation runs before torch is loaded).
"""
from __future__ import annotations

import zlib
from collections import deque
from typing import Any, NamedTuple

import numpy as np

from zoo.plugins.algorithms.rate_limiter import (  # noqa: F401 (re-exported)
    Grant,
    global_rate_limited_steps,
    pooled_rate_limited_steps,
    rate_limited_steps,
)
from zoo.plugins.algorithms.replay_ranks import (  # noqa: F401 (re-exported)
    load_rank_state,
    rank_rng,
    rank_state,
    restore_replay,
)
from zoo.plugins.algorithms.replay_sizing import (  # noqa: F401 (re-exported)
    ReplayBytes,
    available_memory,
    check_frame_stack,
    experiment_replay_bytes,
    frame_capacity_for,
    is_frame_stack,
    obs_capacity_for,
    planes_per_step,
    replay_bytes,
    replay_memory_problem,
)
from zoo.plugins.algorithms.sumtree import SumTree
from zoo.plugins.algorithms.transitions import (  # noqa: F401 (re-exported)
    batch_transitions,
    check_q_learning_spec,
    observation_rows,
)


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
        """``m`` transitions, stratified by priority (:meth:`SumTree.stratified`).

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
