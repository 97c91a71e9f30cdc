"""The trainer's checkpoints: when they are written (:class:`Checkpointer`) and how a trainer
starts from one (:func:`start_from_checkpoint`).

**Checkpoints** (contents and durability: :mod:`zoo.core.checkpoint`) are written to
``<run_dir>/checkpoints/latest.pt`` every ``trainer.checkpoint_interval`` updates, when
``trainer.checkpoint_interval_s`` seconds of wall time have passed since the last one
(checked after each update), and when the trainer stops (budget reached, stop request).
With ``trainer.keep_checkpoints`` each is also copied to ``policy-v<version>.pt``. Only
data-parallel rank 0 writes them.

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
a controller's ``restart`` rows, are kept: :func:`~zoo.core.workers.metrics.cut_metrics`) and a
``{"type": "resume", "resume": n, "attempt": k}`` row is appended;
TensorBoard events at env steps after the checkpoint are purged (``purge_step``). With no
checkpoint yet, the trainer starts afresh and cuts the trainer's rows of ``metrics.jsonl``.
With data-parallel trainers every rank loads the checkpoint's algorithm state and counters;
the samples waiting for the next update are rank 0's only (other ranks start their batch
afresh).

**Rank shards.** An algorithm whose state is partly its rank's own (a replay algorithm's replay
shard and sampling RNG: ``rank_state_dict()`` / ``load_rank_state_dict(state | None)``,
:mod:`zoo.core.algorithm`) checkpoints it on every rank: rank 0's is in ``latest.pt`` (its
whole ``state_dict()``), each rank ``k`` >= 1 writes ``replay-rank<k>-u<updates:08d>.pt``
beside it at the same update (:func:`write_rank_state`; the ranks decide together when a
checkpoint is due) and keeps its two newest. On a resume rank ``k`` loads the one of
``latest.pt``'s update (:func:`load_rank_state`); without it (a crash between the two writes,
or a run that had fewer trainers) its shard starts empty, with a warning.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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


def save_checkpoint(path: str, algo, counters: dict[str, Any]) -> None:
    """Write ``{"algorithm": algo.state_dict(), **counters}`` durably (:func:`zoo.core.checkpoint.write_checkpoint`)."""
    write_checkpoint(path, {"format": FORMAT, "algorithm": algo.state_dict(), **counters})


def load_resume(path: str, algo: Any) -> dict[str, Any]:
    """Read the checkpoint at ``path`` onto the CPU and load its ``"algorithm"`` state into
    ``algo``, whose ``load_state_dict`` moves weights, optimiser state and statistics to the
    algorithm's device (torch's ``Optimizer.load_state_dict`` casts state to each parameter's
    device; ``Module.load_state_dict`` copies into the existing tensors). Everything else (the
    RNG states above all, which torch takes only as CPU ByteTensors) stays on the CPU.

    Returns:
        The checkpoint dict (for :meth:`~zoo.core.workers.accounting.TrainerState.load`).

    Raises:
        CheckpointError: the file is missing or unreadable (:func:`zoo.core.checkpoint.load_checkpoint`).
    """
    ckpt = load_checkpoint(path, map_location="cpu")
    algo.load_state_dict(ckpt["algorithm"])
    return ckpt


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


def prepare_dir(run_dir: str, policy: str = "") -> None:
    """Make ``<run_dir>/checkpoints`` (named policy: ``checkpoints/<policy>``) and remove the
    temporary files a crashed write left there."""
    ckpt_dir = checkpoint_dir(run_dir, policy)
    os.makedirs(ckpt_dir, exist_ok=True)
    remove_stale_tmp(ckpt_dir)


class Checkpointer:
    """Writes ``<run_dir>/checkpoints/latest.pt`` (and, with ``keep``, a ``policy-v<version>.pt``
    copy) and says when the next one is due: every ``every_updates`` updates, or once
    ``every_s`` seconds (> 0; 0: never by time) have passed since the last one. ``clock``:
    seconds, ``time.monotonic`` unless a test gives its own."""

    def __init__(self, run_dir: str, every_updates: int, every_s: float = 0.0, keep: bool = False,
                 clock: Callable[[], float] = time.monotonic, policy: str = "") -> None:
        self.dir, self.latest = checkpoint_dir(run_dir, policy), latest_path(run_dir, policy)
        self.every_updates, self.every_s, self.keep, self.clock = every_updates, float(every_s or 0), keep, clock
        self.last = clock()  # when the last checkpoint was written (the trainer's start before the first)

    def due(self, updates: int) -> bool:
        """Whether a checkpoint is due after update number ``updates``."""
        return (updates % self.every_updates == 0
                or (self.every_s > 0 and self.clock() - self.last >= self.every_s))

    def write(self, algo: Any, contents: dict[str, Any], version: int) -> None:
        """Write ``{"format", "algorithm": algo.state_dict(), **contents}`` durably to ``latest.pt``
        (:func:`save_checkpoint`), then, with ``keep``, copy it to ``policy-v<version:08d>.pt``
        (never half-written: copied to a temporary name, then renamed).

        Raises:
            CheckpointError: either file could not be written (the path and the reason).
        """
        save_checkpoint(self.latest, algo, contents)
        self.last = self.clock()
        if self.keep:
            snapshot = os.path.join(self.dir, f"policy-v{version:08d}.pt")
            try:
                shutil.copyfile(self.latest, snapshot + TMP_SUFFIX)
                os.replace(snapshot + TMP_SUFFIX, snapshot)  # never a half-written snapshot
            except OSError as exc:
                if os.path.exists(snapshot + TMP_SUFFIX):
                    os.unlink(snapshot + TMP_SUFFIX)
                raise CheckpointError(f"cannot write the checkpoint {snapshot}: {exc.strerror or exc}; "
                                      f"{self.latest} is intact") from exc


RANK_STATE_PREFIX = "replay-rank"


def rank_state_path(run_dir: str, rank: int, updates: int, policy: str = "") -> str:
    """``<checkpoints>/replay-rank<rank>-u<updates:08d>.pt``: rank ``rank``'s own state at update ``updates``."""
    return os.path.join(checkpoint_dir(run_dir, policy), f"{RANK_STATE_PREFIX}{rank}-u{updates:08d}.pt")


def write_rank_state(run_dir: str, rank: int, updates: int, algo: Any, policy: str = "", keep: int = 2) -> str:
    """Write ``{"format", "rank", "updates", "rank_state": algo.rank_state_dict()}`` durably to
    :func:`rank_state_path`, then delete this rank's older ones but the ``keep`` newest (the
    newest may be ahead of ``latest.pt`` when rank 0 has not finished writing it). Returns the path.

    Raises:
        CheckpointError: the file could not be written (the path and the reason).
    """
    folder = checkpoint_dir(run_dir, policy)
    os.makedirs(folder, exist_ok=True)
    path = rank_state_path(run_dir, rank, updates, policy)
    write_checkpoint(path, {"format": FORMAT, "rank": rank, "updates": updates, "rank_state": algo.rank_state_dict()})
    head = f"{RANK_STATE_PREFIX}{rank}-u"
    mine = sorted(n for n in os.listdir(folder) if n.startswith(head) and n.endswith(".pt"))
    for name in mine[:-keep]:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass
    return path


def load_rank_state(run_dir: str, rank: int, updates: int, algo: Any, policy: str = "") -> str | None:
    """Load rank ``rank``'s own state at update ``updates`` (``latest.pt``'s) into ``algo``
    (``load_rank_state_dict``). Returns None when it was there, else one line saying that the
    rank's shard starts empty, and why (the trainer warns with it).

    Raises:
        CheckpointError: the file exists and could not be read.
    """
    path = rank_state_path(run_dir, rank, updates, policy)
    if not os.path.exists(path):
        algo.load_rank_state_dict(None)
        return (f"trainer rank {rank}: no {os.path.basename(path)} beside latest.pt (update {updates:,}); its replay "
                "shard starts empty and fills from its actors' next samples")
    algo.load_rank_state_dict(load_checkpoint(path, map_location="cpu")["rank_state"])
    return None


@dataclass(frozen=True)
class Start:
    """How a trainer segment starts: ``truncate_to`` (bytes ``metrics.jsonl`` is cut back to; None:
    not cut) and ``purge_step`` (TensorBoard's; None: nothing purged), for
    :class:`~zoo.core.workers.metrics.MetricsWriter`; ``resumed``: a resume or a restart
    (a ``resume`` row is written)."""

    truncate_to: int | None = None
    purge_step: int | None = None
    resumed: bool = False
    truncate_rows: int | None = None  # a named policy's checkpoint's metrics_rows (cut_metrics)


def start_from_checkpoint(run_dir: str, resume: int, attempt: int, algo: Any, state: Any, policy: str = "") -> Start:
    """Load ``<run_dir>/checkpoints/latest.pt`` into ``algo`` and ``state`` (a
    :class:`~zoo.core.workers.accounting.TrainerState`) when this segment resumes
    (``resume`` >= 1) or restarts (``attempt`` >= 1) and the file exists (module docstring).

    Returns:
        :class:`Start`: a fresh run cuts nothing; a resume cuts ``metrics.jsonl`` back to the
        checkpoint's ``metrics_bytes`` (a checkpoint of format 1 has none: no cut) and purges
        TensorBoard from ``env_steps + 1``; a resume without a checkpoint cuts the trainer's
        rows from the start (``truncate_to`` 0).

    Raises:
        CheckpointError: the checkpoint could not be read.
    """
    if not (resume or attempt):
        return Start()
    latest = latest_path(run_dir, policy)  # named policy: checkpoints/<policy>/latest.pt
    truncate_to = purge_step = truncate_rows = None
    if os.path.exists(latest):
        ckpt = load_resume(latest, algo)
        state.load(ckpt)
        cut = ckpt.get("trainer", {}).get("metrics_bytes")  # absent from a checkpoint of format 1: no cut
        truncate_to, purge_step = (None if cut is None else int(cut)), state.env_steps + 1
        rows = ckpt.get("trainer", {}).get("metrics_rows")  # a named policy's, since the cut by rows
        truncate_rows = None if rows is None or cut is None else int(rows)
    else:
        truncate_to, truncate_rows = 0, 0  # nothing to continue from: a fresh start, without the lost segment's rows
    state.resumes = resume
    return Start(truncate_to, purge_step, resumed=True, truncate_rows=truncate_rows if policy else None)
