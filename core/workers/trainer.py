"""Trainer worker: consumes samples, filters stale ones, updates, publishes parameters.

Loop: take the next batch of ``trainer.batch_samples`` agent-slot trajectories (whole
messages, so a batch may hold a few more) from the receive thread
(:class:`~zoo.core.workers.receiver.SampleReceiver`), which pulls and collates it while the
previous update runs, holds at most one batch ahead (so the actors are held back through the
sample stream, ``docs/flow.md``) and drops any sample whose policy lag — the version it will
be trained at minus the ``policy_version`` of a step — exceeds ``trainer.max_policy_lag``
(counted in ``dropped_samples``); run the algorithm's ``update``; count the env steps of the
samples it used (``trained_env_steps``) and the agent-slot samples (``trained_samples``);
publish the new parameters with the version incremented; log metrics; checkpoint. Update
rows, ``end`` rows and status messages also carry ``dropped_fraction`` and, from the second
update on, ``mean_env_steps_per_s`` and ``mean_trained_env_steps_per_s`` (per wall-clock
second since this segment's first update). Torch threads: :mod:`zoo.core.workers.threads`.
When no sample arrives for a while it republishes the current parameters, so a policy worker
that started late still gets them. The run ends when the env-step budget is reached: a final
checkpoint is written and the controller is told ``done``.

Data-parallel trainers (``trainer.count`` = K > 1; :mod:`zoo.core.distributed`,
``docs/graph.md``): trainer ``k`` is rank ``k`` of one ``torch.distributed`` group and pulls
its own endpoint ``sample-<k>`` (the samples of actors ``i`` with ``i mod K = k``). Each rank
gathers its own batch of ``trainer.batch_samples``; when it is full the ranks meet at a sync
point, exchange their counts (env steps, episodes, dropped samples, policy lags), whether
their batch is finite, and stop flags, and all decide on the same numbers whether the
budget is reached, a stop was asked for, or the update is skipped (a non-finite batch on
any rank); if not, every rank runs the algorithm's ``update`` on its own batch, whose
gradients are combined across ranks before each optimiser step, so all ranks keep
identical weights and one policy version (a non-finite loss or gradient on one rank makes
every rank skip the same update). Rank 0 alone publishes parameters, writes
``metrics.jsonl`` (all ranks' episodes, logged at the sync point that brought them,
stamped with the run's env-step count then) and checkpoints, and reports status and
``done``; with K > 1 the budget is checked at sync points, so a run may pass it by up to
one global batch. On a resume every rank loads the checkpoint's algorithm state and
counters; the samples waiting for the next update are rank 0's only (other ranks start
their batch afresh).

The heartbeats of its loop (between samples) carry its load (:class:`zoo.core.health.Meter`):
``wait`` seconds spent waiting for a batch (busy is the rest), ``samples_pulled`` (sample
messages, stale ones included) and ``updates``; during an update or a checkpoint the busy
thread's heartbeats say ``busy`` instead (:mod:`zoo.core.workers.base`).

Units: ``env_steps`` counts environment steps (not agent steps); ``frames`` is
``env_steps x frame_skip``.

**Guarded updates.** Before an update the batch's floating-point arrays are checked for
NaN and infinities (one float64 sum per array; a non-finite sum is then located by
column). A non-finite batch is not trained on; an update whose loss, gradient or
resulting weights are not finite is undone by the algorithm
(:class:`~zoo.core.algorithm.NonFiniteUpdate`). Either way the update is *skipped*: no
new policy version, a ``{"type": "nonfinite"}`` row in ``metrics.jsonl`` naming what was
not finite and where the batch came from (actor index, env index within that actor,
agent), a ``warning`` to the controller, and the counters ``nonfinite_updates`` (total)
and ``nonfinite_streak`` (consecutive). After ``trainer.max_nonfinite_updates``
consecutive skips the trainer writes its checkpoint (the last finite weights: skipped
updates change nothing) and stops with :class:`NonFiniteRunError` naming the likely source. A
checkpoint is never written with non-finite weights (:mod:`zoo.core.checkpoint`).

**Checkpoints** (contents and durability: :mod:`zoo.core.checkpoint`) are written to
``<run_dir>/checkpoints/latest.pt`` every ``trainer.checkpoint_interval`` updates, when
``trainer.checkpoint_interval_s`` seconds of wall time have passed since the last one
(checked after each update), and when the trainer stops (budget reached, stop request).

**Starting from a checkpoint** (``cfg.resume`` >= 1, set by ``zoo train --resume`` /
``zoo resume``; or ``ctx.attempt`` >= 1: a trainer the supervisor restarted within a
run, see :mod:`zoo.core.launcher`): the trainer loads
``<run_dir>/checkpoints/latest.pt`` and continues exactly from it: the algorithm's state
(weights, optimiser state, schedule position, statistics, kept batches), policy version,
update, env-step, trained-env-step, frame and episode counters, dropped-sample and non-finite counters, the
recent episode returns behind ``episode_return_mean``, the samples received but not yet
trained on (with their counts, not yet added), the RNG states of torch, numpy and Python, and
``time_s`` (running time, summed over the run's segments). ``metrics.jsonl`` is cut back to its length at the checkpoint
(the trainer's rows written after it, e.g. before a crash, are dropped: the counters
continue without a duplicated or missing update row; rows other writers appended, such as
a controller's ``restart`` rows, are kept: :func:`cut_metrics`) and a
``{"type": "resume", "resume": n, "attempt": k}`` row is appended;
TensorBoard events at env steps after the checkpoint are purged (``purge_step``). With no
checkpoint yet, the trainer starts afresh and cuts the trainer's rows of ``metrics.jsonl``.

Testing knobs: the environment variable ``ZOO_TEST_TRAINER_DELAY_S`` (seconds, default 0)
makes the trainer sleep that long before every update (in short slices, so a stop request
is still honoured), to exercise a trainer slower than sampling: the policy lag grows,
stale samples are dropped, the policy worker warns that parameters stopped arriving.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from zoo.core import devices as zdevices
from zoo.core.algorithm import NonFiniteUpdate
from zoo.core.checkpoint import (
    FORMAT,
    TMP_SUFFIX,
    CheckpointError,
    checkpoint_dir,
    latest_path,
    load_checkpoint,
    remove_stale_tmp,
    write_checkpoint,
)
from zoo.core.graph import PARAMETER_ENDPOINT, endpoint
from zoo.core.health import Meter
from zoo.core.seeding import derive_seed
from zoo.core.workers.base import WorkerContext
from zoo.core.workers.receiver import (  # noqa: F401  (policy_lag, too_stale: re-exported)
    SampleReceiver,
    batch_env_steps,
    fresh_share,
    merge_shares,
    policy_lag,
    too_stale,
)
from zoo.core.workers.threads import thread_plan

RECV_S = 0.5
REPUBLISH_S = 1.0
"""While data-parallel rank 0 waits for its peers, how often it republishes the current weights."""


class Republisher:
    """Rank 0's parameters, published again while it waits for its peers at a sync point.

    A policy worker that subscribes after the last publish gets nothing until the next one
    (pub/sub keeps no value for late subscribers). With K > 1 trainers, rank 0 may wait at a
    sync point for a peer whose samples come from actors served by exactly that policy worker:
    without a publish while waiting, the run deadlocks (seen: rank 1's policy worker
    ``waiting_for: parameters`` for 15 minutes). :meth:`tick`, the heartbeat of the waits,
    publishes every ``every_s`` seconds once a first publish was made.
    """

    def __init__(self, publish: Callable[[], None] | None, every_s: float) -> None:
        self.publish, self.every_s = publish, every_s
        self.last: float | None = None  # time.monotonic() of the last publish

    def published(self, now: float) -> None:
        self.last = now

    def tick(self, heartbeat: Callable[[], None], now: float | None = None) -> None:
        """``heartbeat()``, then a publish if one is due (rank 0, published before, ``every_s`` passed)."""
        heartbeat()
        now = time.monotonic() if now is None else now
        if self.publish is not None and self.last is not None and now - self.last >= self.every_s:
            self.publish()
            self.last = now
PEER_LOST_GRACE_S = 10.0
"""How long a trainer that lost a peer waits for the controller to stop the run before it
reports the failure itself (the controller names the worker that failed first)."""
RECENT_EPISODES = 20
TEST_DELAY_ENV = "ZOO_TEST_TRAINER_DELAY_S"


def _test_delay(ctx: WorkerContext, seconds: float) -> None:
    """Sleep ``seconds`` in 0.1 s slices, returning early on a stop request (see the module doc)."""
    end = time.monotonic() + seconds
    while not ctx.stop and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Join samples ``[T(+1), S_i, ...]`` along the batch axis into one :data:`Batch`.

    ``final_obs`` rows are concatenated and ``final_index[:, 1]`` is shifted by the batch
    offset of the sample they came from.
    """
    out: dict[str, Any] = {}
    offsets = np.cumsum([0] + [s["reward"].shape[1] for s in samples[:-1]])
    for key, first in samples[0].items():
        if key == "final_index":
            out[key] = np.concatenate([s[key] + np.array([0, off]) for s, off in zip(samples, offsets, strict=True)])
        elif key == "final_obs":
            out[key] = {k: np.concatenate([s[key][k] for s in samples]) for k in first}
        elif isinstance(first, dict):
            out[key] = {k: np.concatenate([s[key][k] for s in samples], axis=1) for k in first}
        else:
            out[key] = np.concatenate([s[key] for s in samples], axis=1)
    return out


TRAINER_ROWS = ("update", "episode", "end", "nonfinite", "resume")
"""The ``type`` of the ``metrics.jsonl`` rows the trainer writes (the ones a resume cuts back)."""


def cut_metrics(path: str, size: int) -> int:
    """Cut ``metrics.jsonl`` at ``path`` back to ``size`` bytes, keeping the rows after that point
    that the trainer did not write (``type`` not in :data:`TRAINER_ROWS`, e.g. a controller's
    ``restart`` rows), appended again in order. A file already no longer than ``size`` is left
    as it is (it is never extended). Returns the number of rows dropped."""
    if not os.path.exists(path) or os.path.getsize(path) <= size:
        return 0
    with open(path, "rb") as f:
        f.seek(size)
        tail = f.read().splitlines(keepends=True)
    kept, dropped = [], 0
    for line in tail:
        try:
            kind = json.loads(line).get("type")
        except (ValueError, AttributeError):
            kind = None  # a half-written line: the trainer's, cut
        if kind is None or kind in TRAINER_ROWS:
            dropped += 1
        else:
            kept.append(line if line.endswith(b"\n") else line + b"\n")
    os.truncate(path, size)
    if kept:
        with open(path, "ab") as f:
            f.write(b"".join(kept))
    return dropped


class MetricsWriter:
    """``metrics.jsonl`` (one JSON object per line, written at once) and TensorBoard events.

    Each row is one ``write(2)`` on an unbuffered ``O_APPEND`` file, so rows the controller
    appends (``restart``, :func:`zoo.core.rundir.append_row`) never land inside one of ours.

    ``truncate_to``: cut ``metrics.jsonl`` back to that many bytes first (:func:`cut_metrics`:
    a resume drops the trainer's rows written after its checkpoint).
    ``purge_step``: TensorBoard hides events of this env step and later from earlier writers
    (``SummaryWriter(purge_step=...)``), so a resumed run's curves do not overlap.
    :meth:`length` is the file's length now, every writer's rows included (stored in checkpoints).
    """

    def __init__(self, run_dir: str, tensorboard: bool, truncate_to: int | None = None,
                 purge_step: int | None = None) -> None:
        path = os.path.join(run_dir, "metrics.jsonl")
        if truncate_to is not None:
            cut_metrics(path, truncate_to)
        self.file = open(path, "ab", buffering=0)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(os.path.join(run_dir, "tensorboard"), purge_step=purge_step)

    def write(self, row: dict[str, Any], step: int, tensorboard: bool = True) -> None:
        self.file.write((json.dumps(row) + "\n").encode())
        if self.tb is not None and tensorboard:
            prefix = row.get("type", "update")
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("type",):
                    self.tb.add_scalar(f"{prefix}/{k}", v, step)

    def length(self) -> int:
        """Bytes in ``metrics.jsonl`` now (``fstat``: rows other processes appended count too)."""
        return os.fstat(self.file.fileno()).st_size

    def sync(self) -> None:
        """``fsync`` ``metrics.jsonl``, so that it is at least as long on disk as a checkpoint says."""
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def save_checkpoint(path: str, algo, counters: dict[str, Any]) -> None:
    """Write ``{"algorithm": algo.state_dict(), **counters}`` durably (:func:`zoo.core.checkpoint.write_checkpoint`)."""
    write_checkpoint(path, {"format": FORMAT, "algorithm": algo.state_dict(), **counters})


# ----------------------------------------------------------------------------- non-finite batches
class NonFiniteRunError(RuntimeError):
    """``trainer.max_nonfinite_updates`` consecutive updates were skipped as non-finite."""


Origin = tuple[int, int, int, int]
"""Where a sample's columns come from: ``(actor, env_offset, agents, columns)``; column
``c`` of the sample is env ``env_offset + c // agents`` of that actor, agent ``c % agents``."""


def sample_origin(meta: dict[str, Any], sample: dict[str, Any], agents: int) -> Origin:
    """The :data:`Origin` of a sample from its message ``meta`` (``actor``, ``env_offset``, ``agents``)."""
    return (int(meta.get("actor", -1)), int(meta.get("env_offset", 0)), int(meta.get("agents", agents)),
            int(sample["reward"].shape[1]))


def _float_arrays(batch: dict[str, Any]):
    """``(key, array, columns)`` for every floating-point array of ``batch``; ``columns`` maps the
    array's rows to batch columns for ``final_obs`` (``final_index[:, 1]``), else None (axis 1)."""
    for key, value in batch.items():
        if key == "final_index":
            continue
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, arr in items:
            if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and arr.size:
                name = key if sub is None else f"{key}.{sub}"
                yield name, arr, (batch["final_index"][:, 1] if key == "final_obs" else None)


def nonfinite_columns(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """Which batch columns hold a NaN or an infinity, per key: ``{"reward": int64 [k], ...}``
    (``"obs.obs"`` for a dict entry); ``{}`` when the batch is finite.

    Each floating-point array is first summed in float64 (one pass, no temporary: a float32
    array cannot overflow it); only an array whose sum is not finite is searched column by column.
    """
    out: dict[str, np.ndarray] = {}
    for name, arr, columns in _float_arrays(batch):
        if np.isfinite(np.add.reduce(arr, axis=None, dtype=np.float64)):
            continue
        if columns is None:  # [T(+1), B, ...]: bad columns along axis 1
            bad = ~np.isfinite(arr.reshape(arr.shape[0], arr.shape[1], -1)).all(axis=(0, 2))
            cols = np.flatnonzero(bad)
        else:  # final_obs [K, ...]: row k belongs to column final_index[k, 1]
            bad = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
            cols = np.unique(columns[bad])
        if cols.size:
            out[name] = cols
    return out


def describe_sources(bad: dict[str, np.ndarray], origins: list[Origin], limit: int = 8) -> list[dict[str, Any]]:
    """``[{"actor", "env", "agent", "keys"}]`` for the non-finite columns of a batch (at most ``limit``).

    ``bad`` is :func:`nonfinite_columns`' result; ``origins`` the :data:`Origin` of each
    sample of the batch, in batch order.
    """
    starts = np.cumsum([0] + [o[3] for o in origins])
    found: dict[int, list[str]] = {}
    for key, cols in bad.items():
        for c in cols.tolist():
            found.setdefault(c, []).append(key)
    out = []
    for c in sorted(found)[:limit]:
        i = int(np.searchsorted(starts, c, side="right")) - 1
        actor, offset, agents, _ = origins[i]
        local = c - int(starts[i])
        out.append({"actor": actor, "env": offset + local // agents, "agent": local % agents, "keys": found[c]})
    return out


def _where(sources: list[dict[str, Any]]) -> str:
    return "; ".join(f"actor {s['actor']} env {s['env']} agent {s['agent']}: {', '.join(s['keys'])}"
                     for s in sources)


# ----------------------------------------------------------------------------- RNG state
def rng_state() -> dict[str, Any]:
    """The trainer process's RNG states: torch (CPU, and every CUDA device when CUDA is in
    use), numpy's global generator and Python's ``random``."""
    import random

    import torch

    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> str | None:
    """Restore what :func:`rng_state` returned.

    The CPU state is restored as the CPU ``torch.ByteTensor`` torch requires, wherever the
    checkpoint's tensors were loaded. CUDA states are restored only for the devices this
    machine has (a checkpoint from a machine with more GPUs keeps the first ones; with no
    CUDA, none).

    Returns:
        None when every state was restored, else one line saying which CUDA states were
        dropped and why (the trainer sends it to the controller as a warning).
    """
    import random

    import torch

    torch.set_rng_state(torch.as_tensor(state["torch"]).to("cpu", torch.uint8))
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    cuda = list(state.get("cuda") or [])
    if not cuda:
        return None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for i, s in enumerate(cuda[:count]):
        torch.cuda.set_rng_state(torch.as_tensor(s).to("cpu", torch.uint8), i)
    if len(cuda) > count:
        kept = f"restored those of cuda:0..cuda:{count - 1}" if count else "restored none"
        return (f"the checkpoint holds the CUDA RNG states of {len(cuda)} devices and this machine has {count}: "
                f"{kept}, dropped {len(cuda) - count}; random draws on the dropped devices will not repeat "
                "those of the first run")
    return None


def schedule_progress(updates_done: int, update_env_steps: int, budget_steps: int) -> float:
    """The schedule position of the next update (``algo.progress``), in [0, 1].

    ``min(1, updates_done x update_env_steps / budget_steps)``: the fraction of the run's
    env-step budget that the updates already done stand for, each counted at the size
    (env steps, every trainer's) of the batch about to be trained on. It is CleanRL's
    ``frac = 1 - (update - 1) / num_updates`` with ``num_updates = budget / batch size``
    (``ppo.py``; Huang et al., "The 37 Implementation Details of PPO", detail 4): the
    first update runs at the configured rate and none at rate 0 (lr 1e-3 annealed over 4
    updates: 1e-3, 7.5e-4, 5e-4, 2.5e-4). ``updates_done`` is the run's update count, which
    a checkpoint restores, so a resumed run continues the schedule where it stopped.
    """
    if budget_steps <= 0:
        return 1.0
    return min(1.0, updates_done * update_env_steps / budget_steps)


# ----------------------------------------------------------------------------- the worker
class TrainerState:
    """The trainer's own counters and bookkeeping: everything a checkpoint holds besides the
    algorithm's state (see the module docstring)."""

    def __init__(self) -> None:
        self.version = 0
        self.updates = 0
        self.env_steps = 0
        self.episodes = 0
        self.dropped_samples = 0
        self.actor_dropped_samples = 0  # dropped by actors because the trainer was behind (actors.drop_when_full)
        self.trained_env_steps = 0  # env steps of the samples trained on (env steps, not agent steps)
        self.trained_samples = 0  # agent-slot samples trained on
        self.nonfinite_updates = 0
        self.nonfinite_streak = 0
        self.resumes = 0
        self.rng_note: str | None = None  # set by load(): CUDA RNG states a checkpoint held for devices not here
        self.time_before = 0.0  # running time of the run's earlier segments, seconds
        self.recent: collections.deque = collections.deque(maxlen=RECENT_EPISODES)
        self.recent_stats: dict[str, collections.deque] = {}
        self.pending: list[dict[str, Any]] = []
        self.origins: list[Origin] = []
        self.pending_slots = 0
        self.pending_share: dict[str, Any] = fresh_share()  # counts of the pending samples not yet in the run's
        # (monotonic s, env steps, trained) at this segment's first update
        self.rate_ref: tuple[float, int, int] | None = None

    def counters(self, frame_skip: int) -> dict[str, int]:
        return {"policy_version": self.version, "updates": self.updates, "env_steps": self.env_steps,
                "frames": self.env_steps * frame_skip, "episodes": self.episodes,
                "trained_env_steps": self.trained_env_steps}

    def dropped_fraction(self) -> float:
        """Agent-slot samples dropped (too stale here, or at the actors) over those dropped plus
        those trained on: ``(dropped + actor_dropped) / (dropped + actor_dropped + trained)``; 0.0
        before any."""
        dropped = self.dropped_samples + self.actor_dropped_samples
        return dropped / (dropped + self.trained_samples) if dropped + self.trained_samples else 0.0

    def rates(self, now: float) -> dict[str, float]:
        """``mean_env_steps_per_s`` and ``mean_trained_env_steps_per_s``: env steps received and
        env steps trained on per wall-clock second since this segment's first update (``now``:
        ``time.monotonic()``); empty before that update, or at it."""
        if self.rate_ref is None or now <= self.rate_ref[0]:
            return {}
        t0, steps0, trained0 = self.rate_ref
        return {"mean_env_steps_per_s": (self.env_steps - steps0) / (now - t0),
                "mean_trained_env_steps_per_s": (self.trained_env_steps - trained0) / (now - t0)}

    def to_dict(self, time_s: float, metrics_bytes: int) -> dict[str, Any]:
        return {"dropped_samples": self.dropped_samples, "actor_dropped_samples": self.actor_dropped_samples,
                "trained_samples": self.trained_samples, "pending_share": self.pending_share,
                "nonfinite_updates": self.nonfinite_updates, "nonfinite_streak": self.nonfinite_streak,
                "time_s": time_s, "metrics_bytes": metrics_bytes, "recent": list(self.recent),
                "recent_stats": {k: list(v) for k, v in self.recent_stats.items()},
                "pending": self.pending, "origins": self.origins, "pending_slots": self.pending_slots,
                "rng": rng_state()}

    def load(self, ckpt: dict[str, Any]) -> None:
        t = ckpt.get("trainer", {})
        self.version, self.updates = int(ckpt["policy_version"]), int(ckpt["updates"])
        self.env_steps, self.episodes = int(ckpt["env_steps"]), int(ckpt["episodes"])
        self.resumes = int(ckpt.get("resumes", 0))
        self.dropped_samples = int(t.get("dropped_samples", 0))
        self.actor_dropped_samples = int(t.get("actor_dropped_samples", 0))
        self.trained_env_steps = int(ckpt.get("trained_env_steps", 0))  # absent before it was counted
        self.trained_samples = int(t.get("trained_samples", 0))
        self.pending_share = merge_shares(fresh_share(), t.get("pending_share") or fresh_share())
        self.nonfinite_updates = int(t.get("nonfinite_updates", 0))
        self.nonfinite_streak = 0  # a resumed or restarted trainer gets a fresh run of max_nonfinite_updates tries
        self.time_before = float(t.get("time_s", 0.0))
        self.recent.extend(t.get("recent", []))
        for k, v in t.get("recent_stats", {}).items():
            self.recent_stats[k] = collections.deque(v, maxlen=RECENT_EPISODES)
        self.pending, self.origins = list(t.get("pending", [])), list(t.get("origins", []))
        self.pending_slots = int(t.get("pending_slots", 0))
        self.rng_note = set_rng_state(t["rng"]) if "rng" in t else None

    def return_mean(self) -> float | None:
        return float(np.mean(self.recent)) if self.recent else None


def run(ctx: WorkerContext) -> None:
    """The trainer worker's loop (module docstring); trainer ``ctx.index`` is rank ``ctx.index``
    of ``trainer.count``.

    Raises:
        CheckpointError: a checkpoint could not be written (the path and reason), or the one
            to resume from could not be read.
        NonFiniteRunError: ``trainer.max_nonfinite_updates`` consecutive updates were skipped.
        PeerLost: another trainer died or hung and the controller did not stop this one
            within :data:`PEER_LOST_GRACE_S`.
    """
    from zoo.core import distributed as zdist

    try:
        _run(ctx)
    except zdist.PeerLost:
        # A peer trainer died or hung. The controller sees that worker's end, names it and stops
        # the run: leave it the time to, instead of being reported as the first failure.
        end = time.monotonic() + PEER_LOST_GRACE_S
        while not ctx.stop and time.monotonic() < end:
            time.sleep(0.05)
        if not ctx.stop:
            raise


def load_resume(path: str, algo: Any) -> dict[str, Any]:
    """Read the checkpoint at ``path`` onto the CPU and load its ``"algorithm"`` state into
    ``algo``, whose ``load_state_dict`` moves weights, optimiser state and statistics to the
    algorithm's device (torch's ``Optimizer.load_state_dict`` casts state to each parameter's
    device; ``Module.load_state_dict`` copies into the existing tensors). Everything else (the
    RNG states above all, which torch takes only as CPU ByteTensors) stays on the CPU.

    Returns:
        The checkpoint dict (for :meth:`TrainerState.load`).

    Raises:
        CheckpointError: the file is missing or unreadable (:func:`zoo.core.checkpoint.load_checkpoint`).
    """
    ckpt = load_checkpoint(path, map_location="cpu")
    algo.load_state_dict(ckpt["algorithm"])
    return ckpt


def _devices(cfg: Any, count: int) -> list[str] | None:
    """Each rank's torch device (``algo.device`` through :func:`zoo.core.graph.worker_device`);
    None when the algorithm has no ``device`` option."""
    from zoo.core.graph import worker_device

    device = getattr(cfg.algo, "device", None)
    return [worker_device(device, r) for r in range(count)] if isinstance(device, str) else None


def _run(ctx: WorkerContext) -> None:
    import dataclasses

    import torch

    from zoo.core import distributed as zdist
    from zoo.core.config import budget

    cfg, spec = ctx.cfg, ctx.spec
    K, rank = cfg.trainer.count, ctx.index
    lead = rank == 0  # publishes parameters, writes metrics and checkpoints, reports to the controller
    torch.set_num_threads(thread_plan(cfg).trainer)
    # Initial weights and minibatch order (zoo.core.seeding); index 0 for every data-parallel trainer,
    # so they all start from the same weights.
    # A restarted trainer (ctx.attempt >= 1) draws new ones: it does not replay the crashed attempt
    # (its checkpoint, when there is one, then restores the state it continues from).
    seed = derive_seed(cfg.seed, "trainer", 0, attempt=ctx.attempt)
    torch.manual_seed(seed)
    devices = _devices(cfg, K)
    algo_cfg = cfg.algo
    if devices is not None and devices[rank] != algo_cfg.device:
        algo_cfg = dataclasses.replace(algo_cfg, device=devices[rank])
    if devices is not None:  # cuda:N current before any tensor is made there: no stray context on GPU 0
        zdevices.use_device(devices[rank])
    algo = ctx.registry.get("algorithm", cfg.algo_name).load()(algo_cfg, spec, seed)
    ckpt_dir = checkpoint_dir(ctx.run_dir)
    if lead:
        os.makedirs(ckpt_dir, exist_ok=True)
        remove_stale_tmp(ckpt_dir)
    st = TrainerState()
    truncate_to = purge_step = None
    resume = int(getattr(cfg, "resume", 0) or 0)
    attempt = int(getattr(ctx, "attempt", 0) or 0)
    if resume or attempt:
        latest = latest_path(ctx.run_dir)
        if os.path.exists(latest):
            ckpt = load_resume(latest, algo)
            st.load(ckpt)
            if lead and st.rng_note:
                ctx.send_control("warning", timeout=0.05, key="rng", message=st.rng_note)
            if not lead:  # the samples waiting in the checkpoint were rank 0's
                st.pending, st.origins, st.pending_slots, st.pending_share = [], [], 0, fresh_share()
            cut = ckpt.get("trainer", {}).get("metrics_bytes")  # absent from a checkpoint of format 1: no cut
            truncate_to, purge_step = (None if cut is None else int(cut)), st.env_steps + 1
        else:
            truncate_to = 0  # nothing to continue from: a fresh start, without the rows of the lost segment
        st.resumes = resume
    samples = SampleReceiver(ctx.transport("sample").puller(endpoint("sample", rank)), cfg.trainer.batch_samples,
                             cfg.trainer.max_policy_lag, spec.num_agents, collate,
                             lambda meta, sample: sample_origin(meta, sample, spec.num_agents),
                             on_pull=lambda meta: counts.__setitem__("samples_pulled", counts["samples_pulled"] + 1),
                             pending=st.pending, origins=st.origins, share=st.pending_share, version=st.version)
    st.pending, st.origins, st.pending_slots, st.pending_share = [], [], 0, fresh_share()
    params = ctx.transport("parameter").publisher(PARAMETER_ENDPOINT) if lead else None
    # rank 0's (lead): `metrics is not None` below means rank 0
    metrics = MetricsWriter(ctx.run_dir, cfg.log.tensorboard, truncate_to, purge_step) if lead else None
    group = None
    _, budget_steps = budget(cfg, spec)
    test_delay_s = float(os.environ.get(TEST_DELAY_ENV) or 0)
    interval_s = float(getattr(cfg.trainer, "checkpoint_interval_s", 0) or 0)
    max_nonfinite = int(getattr(cfg.trainer, "max_nonfinite_updates", 1) or 1)
    start = time.monotonic()
    last_checkpoint = start
    if ctx.meter is None:
        ctx.meter = Meter("trainer")
    meter, counts = ctx.meter, ctx.meter.counts  # time waiting for samples, pulls, updates: sent with heartbeats
    unshared = fresh_share()  # this rank's counts not yet added to the run's (K > 1: until the next sync)

    def elapsed() -> float:
        return round(st.time_before + time.monotonic() - start, 3)

    def publish() -> None:
        assert params is not None, "only rank 0 publishes"
        state = {k: v.detach().cpu().numpy() for k, v in algo.policy.state_dict().items()}
        params.publish(state, {"policy_version": st.version, "updates": st.updates, "env_steps": st.env_steps,
                               "trainer_attempt": ctx.attempt})
        republish.published(time.monotonic())

    republish = Republisher(publish if lead else None, REPUBLISH_S)

    def counters() -> dict[str, int]:
        return st.counters(spec.frame_skip)

    def flow() -> dict[str, Any]:
        """Dropped and trained-on counts, the dropped fraction and the rates since the first update."""
        return {"dropped_samples": st.dropped_samples, "actor_dropped_samples": st.actor_dropped_samples,
                "trained_samples": st.trained_samples, "dropped_fraction": st.dropped_fraction(),
                **st.rates(time.monotonic())}

    def status(**extra: Any) -> None:
        if st.nonfinite_updates:  # shown by the display only once there is something to show
            extra["nonfinite_updates"] = st.nonfinite_updates
        ctx.send_control("status", timeout=0.05, **counters(), **flow(), budget_env_steps=budget_steps,
                         episode_return_mean=st.return_mean(),
                         **{k: float(np.mean(v)) for k, v in st.recent_stats.items() if v}, **extra)

    def checkpoint() -> None:
        with ctx.busy("checkpoint"):  # a large checkpoint may take long: heartbeats go on
            _checkpoint()

    def _checkpoint() -> None:
        nonlocal last_checkpoint
        assert metrics is not None, "only rank 0 writes checkpoints"
        metrics.sync()
        st.pending, st.origins, st.pending_share = samples.snapshot()  # received, not yet trained on
        st.pending_slots = sum(int(p["reward"].shape[1]) for p in st.pending)
        latest = latest_path(ctx.run_dir)
        save_checkpoint(latest, algo, {**counters(), "resumes": st.resumes,
                                       "trainer": st.to_dict(elapsed(), metrics.length())})
        last_checkpoint = time.monotonic()
        if cfg.trainer.keep_checkpoints:
            snapshot = os.path.join(ckpt_dir, f"policy-v{st.version:08d}.pt")
            try:
                shutil.copyfile(latest, snapshot + TMP_SUFFIX)
                os.replace(snapshot + TMP_SUFFIX, snapshot)  # never a half-written snapshot
            except OSError as exc:
                if os.path.exists(snapshot + TMP_SUFFIX):
                    os.unlink(snapshot + TMP_SUFFIX)
                raise CheckpointError(f"cannot write the checkpoint {snapshot}: {exc.strerror or exc}; "
                                      f"{latest} is intact") from exc

    def skip(what: str, sources: list[dict[str, Any]], detail: str) -> None:
        """Count a skipped update (every rank: the streak decides for all); rank 0 logs and warns."""
        st.nonfinite_updates += 1
        st.nonfinite_streak += 1
        if metrics is not None:  # rank 0
            metrics.write({"type": "nonfinite", **counters(), "time_s": elapsed(), "what": what,
                           "sources": sources, "streak": st.nonfinite_streak,
                           "nonfinite_updates": st.nonfinite_updates}, st.env_steps, tensorboard=False)
            ctx.send_control("warning", timeout=0.05, key="nonfinite",
                             message=f"update skipped (non-finite {what}; {detail}); "
                                     f"{st.nonfinite_streak} in a row, {st.nonfinite_updates} in all")
        if st.nonfinite_streak >= max_nonfinite:
            if lead:  # the last finite weights (the skipped updates changed nothing) and the counters
                checkpoint()
            raise NonFiniteRunError(
                f"{st.nonfinite_streak} consecutive updates were skipped because of non-finite values "
                f"(trainer.max_nonfinite_updates={max_nonfinite}); the last one: non-finite {what}; {detail}. "
                f"The checkpoint {latest_path(ctx.run_dir)} holds the last finite weights "
                f"(policy version {st.version}).")

    def absorb(shares: list[dict[str, Any]]) -> None:
        """Add every rank's share (rank order) to the run's counters; rank 0 logs the episodes, each
        stamped (K = 1) with the env steps up to the sample that brought it, or (K > 1) with the
        run's env steps after this sync point."""
        base = st.env_steps
        st.env_steps += sum(sh["env_steps"] for sh in shares)
        st.dropped_samples += sum(sh["dropped"] for sh in shares)
        st.actor_dropped_samples += sum(sh["actor_dropped"] for sh in shares)
        for sh in shares:
            for ep, at in zip(sh["episodes"], sh["episode_at"], strict=True):
                st.episodes += 1
                st.recent.append(ep["return"])
                for k, v in ep.items():
                    if k not in ("return", "length"):
                        st.recent_stats.setdefault(k, collections.deque(maxlen=RECENT_EPISODES)).append(v)
                if metrics is not None:  # rank 0
                    stamp = base + at if K == 1 else st.env_steps
                    metrics.write({"type": "episode", "env_steps": stamp, **ep}, stamp)

    lag_mean = lag_max = 0.0
    finished = False  # the budget was reached
    try:
        if K > 1:
            from zoo.core.resolver import resolver_from_config

            resolver = ctx.resolver or resolver_from_config(ctx.registry, cfg)  # the one the transports use
            group = zdist.TrainerGroup.join(rank, K, devices[rank] if devices else "cpu", devices or ["cpu"] * K,
                                            ctx.run_id, resolver, cfg.trainer.collective_timeout_s,
                                            stop=lambda: ctx.stop, heartbeat=lambda: republish.tick(ctx.heartbeat))
            if group is None:
                return  # stopped before every trainer arrived
            group.broadcast_module(algo.policy)  # identical starting weights on every rank
            if lead:  # what the group chose, for graph.json's launcher entry
                ctx.send_control("group", timeout=1.0, backend=group.backend, devices=group.devices, gpus=group.gpus)
        if metrics is not None:  # rank 0
            if resume or attempt:
                metrics.write({"type": "resume", "resume": resume, "attempt": attempt, **counters(),
                               "time_s": elapsed()}, st.env_steps, tensorboard=False)
            publish()
        samples.start()  # receives and collates the next batch while each update runs
        while True:
            if K == 1 and (ctx.stop or st.env_steps >= budget_steps):
                finished = not ctx.stop
                break
            ready = None
            samples.set_version(st.version, updating=False)
            if not (K > 1 and ctx.stop):
                ctx.heartbeat()
                waiting = time.perf_counter()
                ready, share = samples.take(RECV_S, updating=cfg.trainer.learn)
                meter.lap("wait", waiting)
                unshared = merge_shares(unshared, share)
                if K == 1:  # one trainer: the run's counters at once
                    absorb([unshared])
                    unshared = fresh_share()
                if ready is None:
                    if lead:
                        publish()  # late joiners get the current weights
                        status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
                    continue
            # An update point: this rank's batch is full (or, K > 1, it was asked to stop). The batch
            # the receiver fills from now on is trained after this update, at the next version.
            samples.set_version(st.version, updating=cfg.trainer.learn)
            batch, used, origins = ready[:3] if ready is not None else (None, [], [])
            used_steps = batch_env_steps(used, origins, spec.num_agents)
            used_slots = int(batch["reward"].shape[1]) if batch is not None else 0
            lags = policy_lag(st.version, batch) if batch is not None else np.zeros(0, np.int64)
            bad = nonfinite_columns(batch) if batch is not None and cfg.trainer.learn else {}
            sources = describe_sources(bad, origins) if bad else []
            if K > 1:  # every rank's counts, lags, batch check and stop flag, exchanged at a sync point
                assert group is not None, "K > 1: joined before the loop"
                shares = group.sync({**unshared, "lag_sum": int(lags.sum()), "lag_count": int(lags.size),
                                     "lag_max": int(lags.max()) if lags.size else 0, "bad": sources,
                                     "stop": bool(ctx.stop), "used_steps": used_steps, "used_slots": used_slots})
                if shares is None:
                    break  # asked to stop while waiting for the others, who are being stopped too
                unshared = fresh_share()
                absorb(shares)
                lag_count = sum(sh["lag_count"] for sh in shares)
                lag_mean = sum(sh["lag_sum"] for sh in shares) / lag_count if lag_count else 0.0
                lag_max = max(sh["lag_max"] for sh in shares)
                sources = [s for sh in shares for s in sh["bad"]]
                used_steps, used_slots = sum(sh["used_steps"] for sh in shares), sum(sh["used_slots"] for sh in shares)
                if any(sh["stop"] for sh in shares) or st.env_steps >= budget_steps:
                    finished = st.env_steps >= budget_steps and not any(sh["stop"] for sh in shares)
                    break
            else:
                lag_mean, lag_max = float(lags.mean()) if lags.size else 0.0, int(lags.max()) if lags.size else 0
            if not cfg.trainer.learn:  # sampling benchmark: count the samples, keep the weights
                if lead:
                    status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
                continue
            if test_delay_s > 0:
                with ctx.busy("update"):
                    _test_delay(ctx, test_delay_s)
                if ctx.stop and K == 1:  # K > 1: the others are already in this update; stop at the next sync
                    break
            if hasattr(algo, "progress"):
                algo.progress = schedule_progress(st.updates, used_steps, budget_steps)
            if sources:  # a non-finite batch (K > 1: on any rank): every rank skips this update
                skip("batch values", sources, f"the batch holds NaN/inf from {_where(sources)}: "
                     "check that environment (its rewards and observations) or the policy's outputs")
                continue
            try:
                with ctx.busy("update"):  # however long it takes: heartbeats come from a background thread
                    stats = algo.update(batch)
            except NonFiniteUpdate as exc:
                where = [{"actor": o[0], "env_offset": o[1], "columns": o[3]} for o in origins]
                skip(exc.what, where, f"{exc}; the batch itself was finite, so the update diverged: "
                     "lower the learning rate (algo.lr) or the gradient-norm clip (algo.max_grad_norm)")
                continue
            st.nonfinite_streak = 0
            st.version += 1
            st.updates += 1
            st.trained_env_steps += used_steps
            st.trained_samples += used_slots
            if st.rate_ref is None:  # rates are per wall-clock second since this segment's first update
                st.rate_ref = (time.monotonic(), st.env_steps, st.trained_env_steps)
            counts["updates"] += 1
            if metrics is None:  # not rank 0
                continue
            publish()
            row = {"type": "update", **counters(), "time_s": elapsed(),
                   "policy_lag_mean": lag_mean, "policy_lag_max": lag_max, "dropped_samples": st.dropped_samples,
                   "actor_dropped_samples": st.actor_dropped_samples, "trained_samples": st.trained_samples,
                   "dropped_fraction": st.dropped_fraction(), **st.rates(time.monotonic()),
                   "episode_return_mean": st.return_mean(),
                   **{k: float(v) for k, v in stats.items()}}
            metrics.write(row, st.env_steps)
            if (st.updates % cfg.trainer.checkpoint_interval == 0
                    or (interval_s > 0 and time.monotonic() - last_checkpoint >= interval_s)):
                checkpoint()
            status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)  # after the checkpoint it may announce
        if metrics is not None:  # rank 0
            checkpoint()  # the final weights (also on Ctrl-C), kept like every other checkpoint
            # The run's final counters: samples that arrived after the last update count too
            # (K > 1: those exchanged at the last sync point).
            metrics.write({"type": "end", **counters(), "time_s": elapsed(), **flow(),
                           "episode_return_mean": st.return_mean()}, st.env_steps, tensorboard=False)
            if finished:
                status(policy_lag_mean=lag_mean, policy_lag_max=lag_max)
                ctx.send_control("done", timeout=2.0, **counters(), **flow())
    finally:
        if group is not None:
            group.close()
        if metrics is not None:
            metrics.close()
        samples.close()
        if params is not None:
            params.close()
