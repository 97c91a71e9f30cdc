"""Prioritised replay of R2D2 sequences, inside the trainer (docs/replay.md).

A ring of ``capacity`` sequences whose observations are **not** copied per sequence: each
insert writes the batch's observation rows once (its ``T + 1`` rows per column and the final
observations of its truncated steps) into the transition replay's row storage
(:class:`~zoo.plugins.algorithms.replay.Replay`, used here for rows only), and a sequence holds
the absolute number of its first row and the row stride (the batch's columns): its ``m + 1``
rows are ``row0 + j * stride``. So overlapping sequences share their steps' rows, and frame
stacks (``algo.frame_stack=auto``: uint8 ``[P, H, W(, C)]`` whose rows continue each other) are
stored once per frame, shared across the stack, across overlapping sequences and with the next
sample's first row, exactly as apex-dqn stores them (rebuilt byte for byte at sampling). Keys
that are not frame stacks (vector observations, an image without a stack) are stored once per
row.

Per sequence the ring keeps the start state, the per-step fields (actions, n-step returns,
discounts, masks), the absolute row of each truncated step's final observation (``-1`` none),
and the oldest row and plane it needs; a sequence whose oldest row or plane the row storage
overwrites is evicted (priority 0, never sampled again), as is one the sequence ring wraps onto.

Sampling is stratified by priority with importance weights ``(N P(i)) ** -beta`` divided by
the batch's largest, exactly as apex-dqn's transition replay (Schaul et al. 2016).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from zoo.plugins.algorithms.replay import Replay
from zoo.plugins.algorithms.replay_sizing import (
    _size,
    frame_capacity_for,
    is_frame_stack,
    obs_capacity_for,
    planes_per_step,
)
from zoo.plugins.algorithms.sumtree import SumTree

STEP_KEYS = ("action", "ret", "disc", "last", "from_final", "active", "mask")
"""Per-step fields of a sequence, ``[m]`` each."""

_NONE = np.iinfo(np.int64).max


class SequenceReplay:
    """Sequences of ``m`` steps over shared observation rows (module docstring); ring positions
    are ``written % capacity``.

    Args:
        capacity: sequences.
        obs_capacity: observation rows of the row storage.
        frame_capacity: frame-stack key -> plane slots (empty: every key stored as rows).
    """

    def __init__(self, capacity: int, obs_capacity: int, frame_capacity: dict[str, int] | None = None) -> None:
        self.capacity = int(capacity)
        self.store = Replay(1, obs_capacity, frame_capacity)  # observation rows only, no transitions
        self.tree = SumTree(self.capacity)
        self.data: dict[str, np.ndarray] = {}  # per-sequence arrays, [capacity, ...]
        self.row0 = np.zeros(self.capacity, np.int64)  # absolute row of each sequence's first row
        self.stride = np.zeros(self.capacity, np.int64)  # rows between its consecutive steps
        self.final_ref = np.zeros((0, 0), np.int64)  # [capacity, m]: absolute final row, -1 none
        self.oldest = {k: np.zeros(self.capacity, np.int64) for k in self.store.frame_capacity}  # oldest plane
        self.valid = np.zeros(self.capacity, bool)
        self.n_valid = 0
        self.written = 0
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.n_valid

    @property
    def obs_capacity(self) -> int:
        return self.store.obs_capacity

    @property
    def frame_capacity(self) -> dict[str, int]:
        return self.store.frame_capacity

    @property
    def nbytes(self) -> int:
        """Bytes of every array the replay holds (the row storage's included; 0 before the first insert)."""
        if not self.data:
            return 0
        arrays = [*self.data.values(), self.row0, self.stride, self.final_ref, *self.oldest.values(), self.valid,
                  self.tree.tree]
        return self.store.nbytes + int(sum(a.nbytes for a in arrays))

    def _allocate(self, seqs: dict[str, Any]) -> None:
        C = self.capacity
        self.data = {k: np.zeros((C, *np.asarray(seqs[k]).shape[1:]), np.asarray(seqs[k]).dtype)
                     for k in (*STEP_KEYS, "reset", "state0")}
        self.final_ref = np.full((C, seqs["action"].shape[1]), -1, np.int64)

    def _invalidate(self, pos: np.ndarray) -> None:
        pos = pos[self.valid[pos]]
        if pos.size:
            self.valid[pos] = False
            self.n_valid -= int(pos.size)
            self.tree.update(pos, np.zeros(pos.size))

    def _seq_rows(self, pos: np.ndarray, length: int) -> np.ndarray:
        """Absolute rows ``[len(pos), length]`` of the sequences at ``pos``."""
        return self.row0[pos, None] + np.arange(length, dtype=np.int64)[None, :] * self.stride[pos, None]

    def insert(self, seqs: dict[str, Any], priority: np.ndarray, obs: dict[str, np.ndarray],
               prev_row: np.ndarray) -> np.ndarray:
        """Append ``M`` sequences (:func:`~zoo.plugins.algorithms.r2d2.sequences.cut_sequences`'
        dict, whose ``row0``, ``stride`` and ``final_row`` point into ``obs``) with ``priority``
        (already raised to alpha, ``[M]``), writing the batch's observation rows ``obs``
        (``{key: [rows, ...]}``) with ``prev_row`` (int64 ``[rows]``, each row's predecessor in
        its column, -1 none) once (:func:`~zoo.plugins.algorithms.transitions.observation_rows`).
        Returns the sequences' ring positions, int64 ``[M]``.

        Raises:
            ValueError: more sequences than ``capacity``, more rows or new planes than the row
                storage holds, or observation keys differing from the first insert's.
        """
        M = int(seqs["action"].shape[0])
        if M > self.capacity:
            raise ValueError(f"r2d2 replay: one insert of {M} sequences does not fit {self.capacity} sequences; "
                             "raise algo.capacity")
        base = self.store.obs_written
        self.store.insert(obs, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                         np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0), prev_row=prev_row)
        if not self.data:
            self._allocate(seqs)
        # sequences whose oldest row or plane the rows just written overwrote
        lost = self.valid & (self.row0 < self.store.obs_written - self.store.obs_capacity)
        for k, oldest in self.oldest.items():
            lost |= self.valid & (oldest < self.store.frames_written[k] - self.store.frame_capacity[k])
        self._invalidate(np.flatnonzero(lost))
        pos = (self.written + np.arange(M, dtype=np.int64)) % self.capacity
        self._invalidate(pos)
        for k in self.data:
            self.data[k][pos] = seqs[k]
        m = self.final_ref.shape[1]
        self.row0[pos] = base + np.asarray(seqs["row0"], np.int64)
        self.stride[pos] = int(seqs["stride"])
        fp = np.asarray(seqs["final_pos"], np.int64).reshape(-1, 2)
        ref = np.full((M, m), -1, np.int64)
        ref[fp[:, 0], fp[:, 1]] = base + np.asarray(seqs["final_row"], np.int64)
        self.final_ref[pos] = ref
        rows = self._seq_rows(pos, m + 1)
        for k, oldest in self.oldest.items():
            fr = self.store.frame_ref[k]
            need = fr[rows % self.obs_capacity].min(axis=(1, 2))
            if fp.shape[0]:
                fmin = np.full(M, _NONE, np.int64)
                np.minimum.at(fmin, fp[:, 0], fr[ref[fp[:, 0], fp[:, 1]] % self.obs_capacity].min(axis=1))
                need = np.minimum(need, fmin)
            oldest[pos] = need
        self.valid[pos] = True
        self.n_valid += M
        priority = np.asarray(priority, np.float64)
        self.tree.update(pos, priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))
        self.written += M
        return pos

    def sample(self, m: int, beta: float, rng: np.random.Generator) -> dict[str, Any]:
        """``m`` sequences, stratified by priority.

        Returns:
            ``{"index": int64 [m], "weight": float32 [m] (max 1)}`` and every stored field of
            the sampled sequences (``obs`` dict of ``[m, L + 1, ...]`` rebuilt from the rows and
            planes, ``state0``, the ``[m, L]`` step fields, ``reset``), plus ``final_obs`` dict of
            ``[K, ...]`` and ``final_pos`` int64 ``[K, 2]`` (sampled row, step) of their
            truncated steps.

        Raises:
            ValueError: the replay holds no sequence.
        """
        idx, weight = self.tree.stratified(m, self.n_valid, beta, rng, "r2d2 replay")
        refs = self.final_ref[idx]
        fpos = np.argwhere(refs >= 0)
        L = refs.shape[1]
        rows = self._seq_rows(idx, L + 1)
        seq_obs = {k: v.reshape(len(idx), L + 1, *v.shape[1:]) for k, v in self.store.rows(rows.reshape(-1)).items()}
        out: dict[str, Any] = {k: v[idx] for k, v in self.data.items()}
        out.update({"index": idx, "weight": weight, "obs": seq_obs,
                    "final_obs": self.store.rows(refs[fpos[:, 0], fpos[:, 1]]), "final_pos": fpos.astype(np.int64)})
        return out

    def update_priorities(self, idx: np.ndarray, priority: np.ndarray) -> None:
        """Set the priorities (already raised to alpha) of sampled positions ``idx`` still valid."""
        idx = np.asarray(idx, np.int64)
        keep = self.valid[idx]
        priority = np.asarray(priority, np.float64)[keep]
        self.tree.update(idx[keep], priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every array (the written part of each ring, the row storage's with its planes and
        the table of rows later samples may start from) and counter: an exact copy on load. The
        arrays are views of the storage: serialise before the replay changes again."""
        n = min(self.written, self.capacity)
        return {
            "capacity": self.capacity, "store": self.store.state_dict(),
            "data": {k: v[:n] for k, v in self.data.items()}, "row0": self.row0[:n], "stride": self.stride[:n],
            "final_ref": self.final_ref[:n], "oldest": {k: v[:n] for k, v in self.oldest.items()},
            "valid": self.valid[:n], "priority": self.tree.leaves(np.arange(n)),
            "n_valid": self.n_valid, "written": self.written, "max_priority": self.max_priority,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> SequenceReplay:
        """A replay with :meth:`state_dict`'s capacities and contents.

        Raises:
            ValueError: the checkpoint was written before sequences shared their rows (it has
                no row storage).
        """
        if "store" not in state:
            raise ValueError("r2d2 replay: the checkpoint's replay stores whole observations per sequence (written "
                             "before sequences shared their rows); start a new run, or resume it with the Zoo "
                             "version that wrote it")
        rs = state["store"]
        r = cls(int(state["capacity"]), int(rs["obs_capacity"]), rs.get("frame_capacity") or {})
        r.load_state_dict(state)
        return r

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s copy.

        Raises:
            ValueError: the stored capacities differ from this replay's.
        """
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"r2d2 replay: the checkpoint's replay holds {state['capacity']} sequences, this run's "
                             f"{self.capacity}; resume with the same --set algo.capacity")
        self.__init__(self.capacity, self.store.obs_capacity, self.store.frame_capacity)  # type: ignore[misc]
        self.store.load_state_dict(state["store"])
        n = len(state["valid"])
        if state["data"]:
            C = self.capacity
            self.data = {k: np.zeros((C, *np.asarray(v).shape[1:]), np.asarray(v).dtype)
                         for k, v in state["data"].items()}
            for k, v in state["data"].items():
                self.data[k][:n] = v
            self.final_ref = np.full((C, np.asarray(state["final_ref"]).shape[1]), -1, np.int64)
            self.final_ref[:n] = state["final_ref"]
        self.row0[:n], self.stride[:n] = state["row0"], state["stride"]
        for k, v in state["oldest"].items():
            self.oldest[k][:n] = v
        self.valid[:n] = state["valid"]
        self.tree.update(np.arange(n), np.asarray(state["priority"]))
        self.n_valid = int(state["n_valid"])
        self.written = int(state["written"])
        self.max_priority = float(state["max_priority"])


# -- sizing and refusing ---------------------------------------------------------------------

def sequences_per_column(sample_length: int, m: int, period: int) -> int:
    """Sequences cut from one column of a sample (:func:`~zoo.plugins.algorithms.r2d2.sequences.sequence_starts`)."""
    return len(range(0, sample_length - m + 1, period))


@dataclass(frozen=True)
class SequenceReplayBytes:
    """What a sequence replay's arrays take (:attr:`SequenceReplay.nbytes` once allocated).

    ``rows`` observation rows of ``row_bytes`` (whole observations of row keys, 8 B per plane
    number of frame-stack keys), ``frames`` (key -> plane slots) of ``frame_bytes`` (key -> B),
    ``capacity`` sequences of ``sequence_bytes`` each (fields, start state, final rows, first
    row and stride, oldest planes, validity), the sum-tree's ``tree_bytes`` and the row
    storage's fixed ``overhead`` (its one-entry transition ring). ``steps`` is the env steps the
    sequences cover (``capacity x T / S``, S sequences per column of a T-step sample)."""

    capacity: int
    steps: int
    rows: int
    row_bytes: int
    frames: dict[str, int]
    frame_bytes: dict[str, int]
    sequence_bytes: int
    tree_bytes: int
    overhead: int

    @property
    def total(self) -> int:
        return (self.rows * self.row_bytes + sum(n * self.frame_bytes[k] for k, n in self.frames.items())
                + self.capacity * self.sequence_bytes + self.tree_bytes + self.overhead)

    @property
    def per_step(self) -> float:
        """Bytes per env step held (``total / steps``)."""
        return self.total / max(1, self.steps)

    def describe(self) -> str:
        """``6,127 observation rows x 32 B + 6,200 frames of 'obs' x 7,056 B + 1,000 sequences x ... = ...``."""
        parts = [f"{self.rows:,} observation rows x {self.row_bytes:,} B"]
        parts += [f"{n:,} frames of {k!r} x {self.frame_bytes[k]:,} B" for k, n in self.frames.items()]
        parts += [f"{self.capacity:,} sequences x {self.sequence_bytes:,} B", f"{_size(self.tree_bytes)} of sum-tree"]
        return (" + ".join(parts) + f" = {_size(self.total)} ({self.per_step:,.0f} B per env step over "
                f"{self.steps:,} steps)")


def sequence_replay_bytes(capacity: int, sample_length: int, m: int, period: int, columns: int,
                          obs: dict[str, tuple[tuple[int, ...], Any]], state_floats: int,
                          stacks: dict[str, int] | None = None, action_bytes: int = 8) -> SequenceReplayBytes:
    """The memory of a replay of ``capacity`` sequences of ``m`` steps every ``period`` cut from
    samples of ``sample_length`` steps and ``columns`` columns per batch, observations ``obs``
    (key -> (per-step shape, dtype)), ``stacks`` (key -> planes per step) stored as frames, a
    start state of ``state_floats`` float32. The rows cover the sequences' steps
    (``ceil(capacity / S) x T``) as :func:`~zoo.plugins.algorithms.replay_sizing.obs_capacity_for`
    sizes them (``T + 1`` rows per ``T`` steps, 1% for final observations, at least two
    batches), the frames as :func:`~zoo.plugins.algorithms.replay_sizing.frame_capacity_for`."""
    stacks = stacks or {}
    T = sample_length
    steps = math.ceil(capacity / sequences_per_column(T, m, period)) * T
    rows = obs_capacity_for(steps, T, columns)
    row_bytes = 0
    frames: dict[str, int] = {}
    frame_bytes: dict[str, int] = {}
    for k, (shape, dtype) in sorted(obs.items()):
        item = np.dtype(dtype).itemsize
        if k in stacks:
            row_bytes += 8 * shape[0]
            frames[k] = frame_capacity_for(steps, T, columns, shape[0], stacks[k])
            frame_bytes[k] = int(np.prod(shape[1:], dtype=np.int64)) * item
        else:
            row_bytes += int(np.prod(shape, dtype=np.int64)) * item
    # per step: action, float32 ret and disc, int64 last, 3 flags, int64 final row; reset flags (m + 1);
    # the start state; first row, stride, an oldest plane per frame key, validity
    seq = m * (action_bytes + 4 + 4 + 8 + 3 + 8) + (m + 1) + 4 * state_floats + 8 + 8 + 8 * len(frames) + 1
    tree = 2 * (1 << max(0, (capacity - 1).bit_length())) * 8
    overhead = 8 + 8 + 4 + 4 + 1 + 16 + 8  # the row storage's one-entry transition ring (int64 action)
    return SequenceReplayBytes(capacity, capacity * T // sequences_per_column(T, m, period), rows, row_bytes,
                               frames, frame_bytes, seq, tree, overhead)


def make_sequence_replay(capacity: int, sample_length: int, m: int, period: int, obs: dict[str, np.ndarray],
                         state_floats: int, action_bytes: int, *, frame_stack: str, avail: int | None,
                         done: np.ndarray | None = None) -> tuple[SequenceReplay, SequenceReplayBytes]:
    """The replay for batches like ``obs`` (``{key: [T + 1, B, ...]}``; ``done`` ``[T, B]``):
    keys that pass :func:`~zoo.plugins.algorithms.replay_sizing.is_frame_stack` and whose rows continue
    each other (:func:`~zoo.plugins.algorithms.replay_sizing.planes_per_step`) are stored as frames when
    ``frame_stack`` is ``auto`` (``off``: every key as rows).

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
    need = sequence_replay_bytes(capacity, sample_length, m, period, columns, shapes, state_floats, stacks,
                                 action_bytes)
    problem = sequence_memory_problem(need, avail)
    if problem:
        raise MemoryError(problem)
    return SequenceReplay(capacity, need.rows, need.frames), need


def sequence_memory_problem(need: SequenceReplayBytes, avail: int | None, trainers: int = 1) -> str | None:
    """The refusal (with the arithmetic) when ``trainers`` shards of ``need`` bytes each (one per
    data-parallel trainer, ``trainer.count``) are more than ``avail`` bytes; None when they fit or
    ``avail`` is unknown."""
    if avail is None or need.total * trainers <= avail:
        return None
    each = "" if trainers == 1 else f" per trainer x trainer.count={trainers} = {_size(need.total * trainers)}"
    return (f"algo.capacity={need.capacity:,} sequences need {need.describe()}{each}, more than the "
            f"{_size(avail)} available; lower --set algo.capacity or algo.sequence_length"
            + ("" if trainers == 1 else " or trainer.count"))
