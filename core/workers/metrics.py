"""The trainer's ``metrics.jsonl`` and TensorBoard events (:class:`MetricsWriter`), and how a
resume cuts back the rows written after its checkpoint (:func:`cut_metrics`)."""
from __future__ import annotations

import fcntl
import json
import os
from typing import Any

TRAINER_ROWS = ("update", "episode", "end", "nonfinite", "resume")
"""The ``type`` of the ``metrics.jsonl`` rows the trainer writes (the ones a resume cuts back)."""


def cut_metrics(path: str, size: int, policy: str = "", rows: int | None = None) -> int:
    """Cut ``metrics.jsonl`` at ``path`` back to ``size`` bytes, keeping the rows after that point
    that the trainer did not write (``type`` not in :data:`TRAINER_ROWS`, e.g. a controller's
    ``restart`` rows), appended again in order. A file already no longer than ``size`` is left
    as it is (it is never extended). Returns the number of rows dropped.

    ``policy``: a named policy's trainer resumes: only its own trainer rows (``"policy":
    policy``) are dropped; the other policies' trainers' rows are kept like the controller's
    (docs/policies.md). The cut holds an exclusive ``flock`` on the file, and a named policy's
    :class:`MetricsWriter` a shared one around each row, so trainers of several policies that
    resume at once neither undo each other's cuts nor lose a row appended during one.

    ``rows`` (a named policy's checkpoint's ``metrics_rows``: how many of its own trainer rows the
    file held then): the cut keeps the first ``rows`` of the policy's own trainer rows and drops
    the ones after them, wherever they now are, and ``size`` is not used. A byte offset stops
    meaning the same place once another policy's trainer has cut the file (its cut moves the rows
    after its own offset), so two named policies resuming at once cut by rows; a byte cut there
    could split a line (a ``{{...`` row, read as invalid JSON)."""
    if not os.path.exists(path) or (rows is None and os.path.getsize(path) <= size):
        return 0
    with open(path, "rb") as lock:  # named policies' trainers cut and append at once: one at a time
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if policy and rows is not None:
                return _cut_rows(path, rows, policy)
            return _cut(path, size, policy)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _own_trainer_row(line: bytes, policy: str) -> bool | None:
    """Whether ``line`` is one of ``policy``'s trainer rows (None: not a JSON object)."""
    try:
        row = json.loads(line)
        return row.get("type") in TRAINER_ROWS and row.get("policy", "") == policy
    except (ValueError, AttributeError):
        return None


def _cut_rows(path: str, rows: int, policy: str) -> int:
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    own, offset, first = 0, 0, None  # first: the index of the first line dropped, at byte offset
    keep = [True] * len(lines)
    for i, line in enumerate(lines):
        mine = _own_trainer_row(line, policy)
        if mine is None or (mine and own >= rows):  # a half-written line, or one of ours after the checkpoint
            keep[i] = False
            first = i if first is None else first
        elif mine:
            own += 1
        if first is None:
            offset += len(line)
    if first is None:
        return 0
    kept = [line if line.endswith(b"\n") else line + b"\n" for i, line in enumerate(lines) if i > first and keep[i]]
    os.truncate(path, offset)
    if kept:
        with open(path, "ab") as f:
            f.write(b"".join(kept))
    return keep.count(False)


def count_trainer_rows(path: str, policy: str) -> int:
    """The number of ``policy``'s own trainer rows (``type`` in :data:`TRAINER_ROWS`, ``"policy":
    policy``) in ``metrics.jsonl`` at ``path`` (0 without the file)."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if policy.encode() in line and _own_trainer_row(line, policy))


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
    :meth:`length` is the file's length now, every writer's rows included, and :attr:`rows` (a
    named policy's) the number of its own trainer rows in it (both stored in checkpoints;
    ``truncate_rows``: a named policy's checkpoint's ``metrics_rows``, see :func:`cut_metrics`).
    """

    def __init__(self, run_dir: str, tensorboard: bool, truncate_to: int | None = None,
                 purge_step: int | None = None, policy: str = "", truncate_rows: int | None = None) -> None:
        path = os.path.join(run_dir, "metrics.jsonl")
        self.policy = policy  # a named policy's rows carry "policy": it (docs/policies.md)
        if truncate_to is not None:
            cut_metrics(path, truncate_to, policy, truncate_rows)
        self.rows = count_trainer_rows(path, policy) if policy else 0
        self.file = open(path, "ab", buffering=0)
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(os.path.join(run_dir, "tensorboard"), purge_step=purge_step)

    def write(self, row: dict[str, Any], step: int, tensorboard: bool = True) -> None:
        if self.policy and row.get("type") in TRAINER_ROWS:
            self.rows += 1
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
