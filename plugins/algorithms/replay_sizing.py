"""How big a replay is, before and after it exists, and the refusal of one that cannot fit
(docs/replay.md, "Memory").

:func:`obs_capacity_for` and :func:`frame_capacity_for` size a replay's observation rows and
frame rings; :func:`is_frame_stack` and :func:`planes_per_step` decide which keys are stored once
per frame (``algo.frame_stack``, :func:`check_frame_stack`); :func:`replay_bytes`
(:class:`ReplayBytes`) is what the arrays take, :func:`experiment_replay_bytes` the same before
anything starts; :func:`replay_memory_problem` refuses replays that need more than
:func:`available_memory`. :func:`zoo.plugins.algorithms.replay.make_replay` builds a replay with
them. This module imports numpy only (config validation runs before torch is loaded).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


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
    """What a replay's arrays take (:attr:`~zoo.plugins.algorithms.replay.Replay.nbytes` once allocated), term by term.

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
    step (the trainer measures it on its first batch,
    :func:`~zoo.plugins.algorithms.replay.make_replay`)."""
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

