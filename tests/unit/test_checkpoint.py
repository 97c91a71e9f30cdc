"""Checkpoint durability: a failed write (a full disk) names the path, leaves no temporary
file and keeps the previous checkpoint; non-finite weights are never written."""
from __future__ import annotations

import errno
import os
import subprocess
import uuid

import pytest
import torch

from zoo.core import checkpoint as ck
from zoo.core.checkpoint import CheckpointError, load_checkpoint, write_checkpoint


def _ckpt(version: int, size: int = 4) -> dict:
    return {"format": ck.FORMAT, "policy_version": version,
            "algorithm": {"policy": {"w": torch.full((size,), float(version))}}}


def test_a_checkpoint_is_replaced_whole(tmp_path):
    path = str(tmp_path / "latest.pt")
    write_checkpoint(path, _ckpt(1))
    write_checkpoint(path, _ckpt(2))
    assert load_checkpoint(path)["policy_version"] == 2
    assert os.listdir(tmp_path) == ["latest.pt"]


def test_a_full_disk_names_the_path_removes_the_temporary_file_and_keeps_the_previous_checkpoint(
        tmp_path, monkeypatch):
    path = str(tmp_path / "latest.pt")
    write_checkpoint(path, _ckpt(1))

    def full_disk(target, data):  # half the bytes reach the disk, then ENOSPC
        with open(target, "wb") as f:
            f.write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)

    monkeypatch.setattr(ck, "_write_file", full_disk)
    with pytest.raises(CheckpointError) as info:
        write_checkpoint(path, _ckpt(2))
    text = str(info.value)
    assert text.startswith(f"cannot write the checkpoint {path}: No space left on device (errno 28")
    assert "the previous checkpoint there is intact" in text
    assert os.listdir(tmp_path) == ["latest.pt"]
    assert load_checkpoint(path)["policy_version"] == 1


def test_non_finite_weights_are_never_written(tmp_path):
    path = str(tmp_path / "latest.pt")
    write_checkpoint(path, _ckpt(1))
    bad = _ckpt(2)
    bad["algorithm"]["policy"]["w"][3] = float("inf")
    with pytest.raises(CheckpointError, match=r"policy weights w hold NaN or infinite values"):
        write_checkpoint(path, bad)
    assert load_checkpoint(path)["policy_version"] == 1 and os.listdir(tmp_path) == ["latest.pt"]


def test_stale_temporary_files_are_removed(tmp_path):
    (tmp_path / "latest.pt.tmp").write_bytes(b"half")
    (tmp_path / "notes.tmp").write_bytes(b"not ours")
    assert ck.remove_stale_tmp(str(tmp_path)) == [str(tmp_path / "latest.pt.tmp")]
    assert sorted(os.listdir(tmp_path)) == ["notes.tmp"]


def test_a_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at .*latest.pt: the run stopped before its first"):
        load_checkpoint(str(tmp_path / "latest.pt"))


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (needs root and mount rights; skipped elsewhere), unmounted afterwards."""
    where = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    try:
        yield str(where)
    finally:
        subprocess.run(["umount", str(where)], check=True)
        where.rmdir()


def test_a_really_full_disk(tiny_tmpfs):
    path = os.path.join(tiny_tmpfs, "latest.pt")
    write_checkpoint(path, _ckpt(1))  # ~2 KB
    with pytest.raises(CheckpointError, match=rf"cannot write the checkpoint {path}: No space left on device"):
        write_checkpoint(path, _ckpt(2, size=64 * 1024))  # 256 KB of weights do not fit in 64 KiB
    assert os.listdir(tiny_tmpfs) == ["latest.pt"]
    assert load_checkpoint(path)["policy_version"] == 1
