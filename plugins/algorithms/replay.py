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

Shared by the replay algorithms (Ape-X DQN, :mod:`zoo.plugins.algorithms.apex`; SAC,
:mod:`zoo.plugins.algorithms.sac`): :func:`batch_transitions` turns a time-major batch into
transitions with n-step targets (:mod:`zoo.plugins.algorithms.nstep`) pointing at observation
rows; :func:`obs_capacity_for` and :func:`replay_memory_problem` size the replay and refuse one
that cannot fit. This module imports numpy only (config validation runs before torch is loaded).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any

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
        idx, weight = self.tree.stratified(m, self.n_valid, beta, rng)
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


# -- sizing and refusing ---------------------------------------------------------------------

def obs_capacity_for(capacity: int, sample_length: int, columns: int = 0) -> int:
    """Observation rows for ``capacity`` transitions from samples of ``sample_length`` steps:
    ``T + 1`` rows per ``T`` transitions, plus 1% for the final observations of truncated steps;
    at least two batches of ``columns`` columns whose every step is truncated (``2 x (2T + 1) x
    columns``), so any batch fits."""
    rows = capacity + math.ceil(capacity / sample_length) + math.ceil(capacity / 100)
    return max(rows, 2 * (2 * sample_length + 1) * columns)


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


def replay_memory_problem(capacity: int, rows: int, row_bytes: int, avail: int | None,
                          field_bytes: int) -> str | None:
    """The refusal (with the arithmetic) when ``capacity`` transitions of ``field_bytes`` bytes of
    fields each and ``rows`` observation rows of ``row_bytes`` bytes need more than ``avail``
    bytes; None when they fit or ``avail`` is unknown."""
    need = rows * row_bytes + capacity * field_bytes
    if avail is None or need <= avail:
        return None
    return (f"algo.capacity={capacity:,} transitions need {rows:,} observation rows x {row_bytes:,} B + "
            f"{capacity:,} x {field_bytes} B of fields = {_size(need)}, more than the {_size(avail)} available; "
            "lower --set algo.capacity")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# -- from a batch to transitions -------------------------------------------------------------

def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


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
        ``{"obs": {key: [rows, ...]}, "s_idx": int64 [m], "boot_idx": int64 [m], "action": [m, ...],
        "ret": float32 [m], "disc": float32 [m]}``, ``m`` the active steps in (t, b) order.

    Raises:
        ValueError: a truncated active step has no row in ``final_index``.
    """
    reward = np.asarray(batch["reward"], np.float32)
    T, B = reward.shape
    obs_np = {k: np.asarray(v) for k, v in batch["obs"].items()}
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
    obs_rows = {k: _flat(v) for k, v in obs_np.items()}
    if final_index.shape[0]:
        final = batch["final_obs"]
        obs_rows = {k: np.concatenate([v, np.asarray(final[k]).astype(v.dtype, copy=False)])
                    for k, v in obs_rows.items()}
    keep = active.reshape(-1)
    return {"obs": obs_rows, "s_idx": s_idx.reshape(-1)[keep], "boot_idx": boot_idx.reshape(-1)[keep],
            "action": _flat(np.asarray(batch["action"]))[keep], "ret": ret.reshape(-1)[keep],
            "disc": disc.reshape(-1)[keep]}


def rate_limited_steps(credit: float, replay_size: int, inserting: int, *, learning_starts: int,
                       samples_per_insert: float, batch_size: int) -> tuple[int, float]:
    """The rate limiter (Reverb's samples per insert, docs/replay.md): ``(steps, credit)`` after
    ``inserting`` transitions join a replay of ``replay_size``. The credit grows by
    ``inserting x samples_per_insert`` once the replay with them holds ``learning_starts``;
    ``floor(credit / batch_size)`` gradient steps are granted (none from an empty replay, the
    credit then carries) and their samples spent."""
    if replay_size + inserting >= learning_starts:
        credit += inserting * samples_per_insert
    steps = int(credit // batch_size) if replay_size > 0 else 0
    return steps, credit - steps * batch_size
