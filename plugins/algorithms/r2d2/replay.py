"""Prioritised replay of R2D2 sequences, inside the trainer (docs/replay.md).

A ring of ``capacity`` sequences, each stored whole in fixed-shape arrays (the output of
:func:`~zoo.plugins.algorithms.r2d2.sequences.cut_sequences`: ``m + 1`` observation rows, the
start state, actions, n-step returns, discounts, masks), with priorities in apex-dqn's
:class:`~zoo.plugins.algorithms.replay.SumTree`. The final observations of truncated steps
live in a second ring of ``final_capacity`` rows, referenced per step by absolute row number;
a sequence whose final row is overwritten is evicted (priority 0, never sampled again).
Overlapping sequences store their shared steps twice (as R2D2 does).

Sampling is stratified by priority with importance weights ``(N P(i)) ** -beta`` divided by
the batch's largest, exactly as apex-dqn's transition replay (Schaul et al. 2016).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from zoo.plugins.algorithms.replay import SumTree

STEP_KEYS = ("action", "ret", "disc", "last", "from_final", "active", "mask")
"""Per-step fields of a sequence, ``[m]`` each."""


class SequenceReplay:
    """Sequences of ``m`` steps (module docstring); ring positions are ``written % capacity``."""

    def __init__(self, capacity: int, final_capacity: int) -> None:
        self.capacity, self.final_capacity = int(capacity), int(final_capacity)
        self.tree = SumTree(self.capacity)
        self.data: dict[str, np.ndarray] = {}  # per-sequence arrays, [capacity, ...]
        self.obs: dict[str, np.ndarray] = {}  # [capacity, m + 1, ...]
        self.final: dict[str, np.ndarray] = {}  # [final_capacity, ...]
        self.final_ref = np.zeros((0, 0), np.int64)  # [capacity, m]: absolute final row, -1 none
        self.valid = np.zeros(self.capacity, bool)
        self.n_valid = 0
        self.written = 0
        self.final_written = 0
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.n_valid

    def _allocate(self, seqs: dict[str, Any]) -> None:
        C = self.capacity
        self.obs = {k: np.zeros((C, *v.shape[1:]), v.dtype) for k, v in seqs["obs"].items()}
        self.final = {k: np.zeros((self.final_capacity, *v.shape[2:]), v.dtype) for k, v in seqs["obs"].items()}
        self.data = {k: np.zeros((C, *np.asarray(seqs[k]).shape[1:]), np.asarray(seqs[k]).dtype)
                     for k in (*STEP_KEYS, "reset", "state0")}
        self.final_ref = np.full((C, seqs["action"].shape[1]), -1, np.int64)

    def _invalidate(self, pos: np.ndarray) -> None:
        pos = pos[self.valid[pos]]
        if pos.size:
            self.valid[pos] = False
            self.n_valid -= int(pos.size)
            self.tree.update(pos, np.zeros(pos.size))

    def insert(self, seqs: dict[str, Any], priority: np.ndarray) -> np.ndarray:
        """Append ``M`` sequences (:func:`cut_sequences`' dict) with ``priority`` (already raised
        to alpha, ``[M]``). Returns their ring positions, int64 ``[M]``.

        Raises:
            ValueError: more sequences than ``capacity`` or final observations than
                ``final_capacity`` in one insert, or observation keys differing from the first's.
        """
        M = int(seqs["action"].shape[0])
        K = int(seqs["final_pos"].shape[0])
        if M > self.capacity or K > self.final_capacity:
            raise ValueError(f"r2d2 replay: one insert of {M} sequences and {K} final observations does not fit "
                             f"{self.capacity} sequences and {self.final_capacity} final rows; raise algo.capacity")
        if not self.obs:
            self._allocate(seqs)
        elif set(seqs["obs"]) != set(self.obs):
            raise ValueError(f"r2d2 replay: observation keys {sorted(seqs['obs'])} differ from the stored "
                             f"{sorted(self.obs)}")
        # final rows [final_written, final_written + K) overwrite those below lost_below
        lost_below = self.final_written + K - self.final_capacity
        if K and lost_below > 0:
            refs = np.where(self.final_ref >= 0, self.final_ref, np.iinfo(np.int64).max).min(axis=1)
            self._invalidate(np.flatnonzero(self.valid & (refs < lost_below)))
        pos = (self.written + np.arange(M, dtype=np.int64)) % self.capacity
        self._invalidate(pos)
        fpos = (self.final_written + np.arange(K, dtype=np.int64)) % self.final_capacity
        for k, v in seqs["final_obs"].items():
            self.final[k][fpos] = v
        for k, v in seqs["obs"].items():
            self.obs[k][pos] = v
        for k in self.data:
            self.data[k][pos] = seqs[k]
        ref = np.full((M, self.final_ref.shape[1]), -1, np.int64)
        fp = seqs["final_pos"]
        ref[fp[:, 0], fp[:, 1]] = self.final_written + np.arange(K, dtype=np.int64)
        self.final_ref[pos] = ref
        self.valid[pos] = True
        self.n_valid += M
        priority = np.asarray(priority, np.float64)
        self.tree.update(pos, priority)
        if priority.size:
            self.max_priority = max(self.max_priority, float(priority.max()))
        self.written += M
        self.final_written += K
        return pos

    def sample(self, m: int, beta: float, rng: np.random.Generator) -> dict[str, Any]:
        """``m`` sequences, stratified by priority.

        Returns:
            ``{"index": int64 [m], "weight": float32 [m] (max 1)}`` and every stored field of
            the sampled sequences (``obs`` dict of ``[m, L + 1, ...]``, ``state0``, the
            ``[m, L]`` step fields, ``reset``), plus ``final_obs`` dict of ``[K, ...]`` and
            ``final_pos`` int64 ``[K, 2]`` (sampled row, step) of their truncated steps.

        Raises:
            ValueError: the replay holds no sequence.
        """
        idx, weight = self.tree.stratified(m, self.n_valid, beta, rng, "r2d2 replay")
        refs = self.final_ref[idx]
        fpos = np.argwhere(refs >= 0)
        frows = refs[fpos[:, 0], fpos[:, 1]] % self.final_capacity
        out: dict[str, Any] = {k: v[idx] for k, v in self.data.items()}
        out.update({"index": idx, "weight": weight, "obs": {k: v[idx] for k, v in self.obs.items()},
                    "final_obs": {k: v[frows] for k, v in self.final.items()}, "final_pos": fpos.astype(np.int64)})
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
        """Every array (the written part of each ring) and counter: an exact copy on load. The
        arrays are views of the storage: serialise before the replay changes again."""
        n = min(self.written, self.capacity)
        nf = min(self.final_written, self.final_capacity)
        return {
            "capacity": self.capacity, "final_capacity": self.final_capacity,
            "obs": {k: v[:n] for k, v in self.obs.items()}, "final": {k: v[:nf] for k, v in self.final.items()},
            "data": {k: v[:n] for k, v in self.data.items()}, "final_ref": self.final_ref[:n],
            "valid": self.valid[:n], "priority": self.tree.leaves(np.arange(n)),
            "n_valid": self.n_valid, "written": self.written, "final_written": self.final_written,
            "max_priority": self.max_priority,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s copy.

        Raises:
            ValueError: the stored capacities differ from this replay's.
        """
        if int(state["capacity"]) != self.capacity or int(state["final_capacity"]) != self.final_capacity:
            raise ValueError(f"r2d2 replay: the checkpoint's replay holds {state['capacity']} sequences, this run's "
                             f"{self.capacity}; resume with the same --set algo.capacity")
        self.__init__(self.capacity, self.final_capacity)  # type: ignore[misc]
        n = len(state["valid"])
        if state["obs"]:
            C, FC = self.capacity, self.final_capacity

            def ring(n: int, src: dict[str, Any]) -> dict[str, np.ndarray]:
                return {k: np.zeros((n, *np.asarray(v).shape[1:]), np.asarray(v).dtype) for k, v in src.items()}

            self.obs, self.final, self.data = ring(C, state["obs"]), ring(FC, state["final"]), ring(C, state["data"])
            self.final_ref = np.full((C, np.asarray(state["final_ref"]).shape[1]), -1, np.int64)
            for src, dst in ((state["obs"], self.obs), (state["final"], self.final), (state["data"], self.data)):
                for k, v in src.items():
                    dst[k][:len(v)] = v
            self.final_ref[:n] = state["final_ref"]
        self.valid[:n] = state["valid"]
        self.tree.update(np.arange(n), np.asarray(state["priority"]))
        self.n_valid = int(state["n_valid"])
        self.written, self.final_written = int(state["written"]), int(state["final_written"])
        self.max_priority = float(state["max_priority"])
