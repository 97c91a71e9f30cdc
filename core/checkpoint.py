"""Checkpoints: what they hold, how they are written (durably), read back and checked.

A run's trainer writes ``<run_dir>/checkpoints/latest.pt`` every
``trainer.checkpoint_interval`` updates, every ``trainer.checkpoint_interval_s`` seconds of
wall time (checked after each update) and when it stops. The file is a ``torch.save``'d
dict (format :data:`FORMAT`):

==================  ==========================================================================
key                 contents
==================  ==========================================================================
``format``          int, :data:`FORMAT`
``algorithm``       the algorithm's ``state_dict()``: policy weights (and normalisation
                    statistics held as buffers), optimiser state (Adam's step count
                    included), its counters, RNG and any sample-reuse buffer
``policy_version``  int, version of the weights in ``algorithm``
``updates``         int, updates done
``env_steps``       int, env steps received by the trainer (the budget counts these)
``frames``          int, ``env_steps x frame_skip``
``episodes``        int, finished episodes received
``trained_env_steps``  int, env steps whose samples the trainer trained on (0: written
                    before it was counted)
``resumes``         int, how many times the run was resumed before this checkpoint
``trainer``         the trainer worker's own state for an exact resume (see
                    :mod:`zoo.core.workers.checkpointing`): sample counters, recent episode
                    returns, samples received but not yet trained on, ``time_s``, the byte
                    length of ``metrics.jsonl`` at the checkpoint, RNG states of torch,
                    numpy and Python
==================  ==========================================================================

Durability (:func:`write_checkpoint`): the data is serialised in memory, written to
``<path>.tmp`` in the same folder, flushed and ``fsync``'d, then renamed over ``<path>``
with ``os.replace`` (atomic on POSIX), and the folder is ``fsync``'d. A crash at any point
leaves either the previous checkpoint or the new one, never half of one; a failed write
(a full disk: ``ENOSPC``) raises :class:`CheckpointError` naming the path and the
operating system's reason, removes the temporary file and leaves the previous checkpoint
untouched. A checkpoint whose policy weights hold a NaN or an infinity is never written
(:func:`nonfinite_tensors`).
"""
from __future__ import annotations

import contextlib
import io
import os
from typing import Any

FORMAT = 2
LATEST = "latest.pt"
TMP_SUFFIX = ".tmp"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the path and the reason."""


def checkpoint_dir(run_dir: str, policy: str = "") -> str:
    """``<run_dir>/checkpoints``; named policy ``policy``'s: ``<run_dir>/checkpoints/<policy>``."""
    base = os.path.join(run_dir, "checkpoints")
    return os.path.join(base, policy) if policy else base


def trainable_policies(run_dir: str) -> list[str]:
    """The run's trainable named policies, from its ``config.json`` (``[policies.NAME]`` whose
    ``trainable`` is not false), in their order there; ``[""]`` (the one default policy,
    ``checkpoints/latest.pt``) when it names none, or has no readable ``config.json``."""
    import json

    try:
        with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
            tables = json.load(f).get("policies") or {}
    except (OSError, ValueError, AttributeError):
        return [""]
    names = [str(n) for n, t in tables.items() if not isinstance(t, dict) or t.get("trainable", True) is not False]
    return names or [""]


def latest_path(run_dir: str, policy: str = "") -> str:
    """``<run_dir>/checkpoints/latest.pt`` (named policy ``policy``: ``checkpoints/<policy>/latest.pt``):
    the checkpoint a resume or a trainer restart starts from."""
    return os.path.join(checkpoint_dir(run_dir, policy), LATEST)


def nonfinite_tensors(state: Any, prefix: str = "") -> list[str]:
    """Dotted names of the floating-point tensors in ``state`` (nested dicts, lists, tensors)
    that hold a NaN or an infinity; ``[]`` when every one is finite."""
    import torch

    bad: list[str] = []
    if isinstance(state, torch.Tensor):
        if state.is_floating_point() and state.numel() and not bool(torch.isfinite(state).all()):
            bad.append(prefix or "<tensor>")
    elif isinstance(state, dict):
        for k, v in state.items():
            bad += nonfinite_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            bad += nonfinite_tensors(v, f"{prefix}[{i}]")
    return bad


def _write_file(path: str, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` (created or truncated), flush it and ``fsync`` it."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: str, data: bytes | memoryview) -> None:
    """Replace ``path`` with ``data`` durably: ``<path>.tmp`` written and fsync'd, then ``os.replace``.

    Raises:
        CheckpointError: the write, the fsync or the rename failed (e.g. ``ENOSPC``, a full
            disk); the temporary file is removed and ``path`` is as it was.
    """
    tmp = path + TMP_SUFFIX
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        reason = exc.strerror or str(exc)
        keep = "the previous checkpoint there is intact" if os.path.exists(path) else "no checkpoint was written"
        raise CheckpointError(
            f"cannot write the checkpoint {path}: {reason} (errno {exc.errno}, writing {len(data):,} bytes); "
            f"{keep}; free space on that disk (or choose another runs_dir) and resume the run") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path) or ".")


def write_checkpoint(path: str, checkpoint: dict[str, Any]) -> None:
    """Serialise ``checkpoint`` (``torch.save``) and write it with :func:`write_bytes_atomic`.

    Raises:
        CheckpointError: the policy weights in ``checkpoint["algorithm"]["policy"]`` hold a
            non-finite value (nothing is written), or the write failed (see
            :func:`write_bytes_atomic`).
    """
    import torch

    policy = checkpoint.get("algorithm", {}).get("policy", {})
    bad = nonfinite_tensors(policy)
    if bad:
        raise CheckpointError(f"refusing to write the checkpoint {path}: the policy weights {', '.join(bad[:5])} "
                              "hold NaN or infinite values; the previous checkpoint is kept")
    buf = io.BytesIO()
    torch.save(checkpoint, buf)
    write_bytes_atomic(path, buf.getbuffer())


def remove_stale_tmp(folder: str) -> list[str]:
    """Delete ``*.pt.tmp`` files a killed writer left in ``folder``; returns their paths."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(folder):
            if name.endswith(".pt" + TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, name))
                    removed.append(os.path.join(folder, name))
    return removed


def load_checkpoint(path: str, map_location: str = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`write_checkpoint` (``weights_only=False``: it holds
    numpy RNG states and sample arrays; load only checkpoints you wrote).

    Raises:
        CheckpointError: the file is missing or unreadable, with the path and the reason.
    """
    import torch

    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {path}: the run stopped before its first checkpoint "
                              "(start it again instead of resuming)") from None
    except Exception as exc:  # noqa: BLE001 - a corrupt file: say which and why
        raise CheckpointError(f"cannot read the checkpoint {path}: {type(exc).__name__}: {exc}") from exc
