"""The trainer's ``metrics.jsonl`` and TensorBoard events (:class:`MetricsWriter`), and how a
resume cuts back the rows written after its checkpoint (:func:`cut_metrics`)."""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any

TRAINER_ROWS = ("update", "episode", "end", "nonfinite", "resume")
"""The ``type`` of the ``metrics.jsonl`` rows the trainer writes (the ones a resume cuts back)."""


def cut_metrics(path: str, size: int, policy: str = "") -> int:
    """Cut ``metrics.jsonl`` at ``path`` back to ``size`` bytes, keeping the rows after that point
    that the trainer did not write (``type`` not in :data:`TRAINER_ROWS`, e.g. a controller's
    ``restart`` rows), appended again in order. A file already no longer than ``size`` is left
    as it is (it is never extended). Returns the number of rows dropped.

    ``policy``: a named policy's trainer resumes: only its own trainer rows (``"policy":
    policy``) are dropped; the other policies' trainers' rows are kept like the controller's
    (docs/policies.md). The cut holds an exclusive ``flock`` on the file, and a named policy's
    :class:`MetricsWriter` a shared one around each row, so trainers of several policies that
    resume at once neither undo each other's cuts nor lose a row appended during one."""
    if not os.path.exists(path) or os.path.getsize(path) <= size:
        return 0
    with open(path, "rb") as lock:  # named policies' trainers cut and append at once: one at a time
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            return _cut(path, size, policy)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _cut(path: str, size: int, policy: str) -> int:
    with open(path, "rb") as f:
        f.seek(size)
        tail = f.read().splitlines(keepends=True)
    kept, dropped = [], 0
    for line in tail:
        try:
            row = json.loads(line)
            kind, owner = row.get("type"), row.get("policy", "")
        except (ValueError, AttributeError):
            kind, owner = None, policy  # a half-written line: the trainer's, cut
        if kind is None or (kind in TRAINER_ROWS and owner == policy):
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
    ``policy``: a named policy's trainer: every row gets ``"policy": policy`` and TensorBoard
    scalars go under ``<type>/<policy>/``.
    ``purge_step``: TensorBoard hides events of this env step and later from earlier writers
    (``SummaryWriter(purge_step=...)``), so a resumed run's curves do not overlap.
    :meth:`length` is the file's length now, every writer's rows included (stored in checkpoints).
    """

    def __init__(self, run_dir: str, tensorboard: bool, truncate_to: int | None = None,
                 purge_step: int | None = None, policy: str = "") -> None:
        path = os.path.join(run_dir, "metrics.jsonl")
        self.policy = policy  # a named policy's rows carry "policy": it (docs/policies.md)
        if truncate_to is not None:
            cut_metrics(path, truncate_to, policy)
        self.file = open(path, "ab", buffering=0)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(os.path.join(run_dir, "tensorboard"), purge_step=purge_step)

    def write(self, row: dict[str, Any], step: int, tensorboard: bool = True) -> None:
        if self.policy:  # a named policy's trainer: never append inside another's cut (cut_metrics)
            row = {**row, "policy": self.policy}
            fcntl.flock(self.file.fileno(), fcntl.LOCK_SH)
            try:
                self.file.write((json.dumps(row) + "\n").encode())
            finally:
                fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
        else:
            self.file.write((json.dumps(row) + "\n").encode())
        if self.tb is not None and tensorboard:
            prefix = row.get("type", "update") + (f"/{self.policy}" if self.policy else "")
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
