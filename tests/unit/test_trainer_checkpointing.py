"""The trainer's checkpointing (:mod:`zoo.core.workers.checkpointing`): when a checkpoint is
due, what is written where, and how a segment starts from one; values worked out by hand."""
from __future__ import annotations

import os

import pytest
import torch

from zoo.core.checkpoint import FORMAT, CheckpointError, load_checkpoint
from zoo.core.workers.accounting import TrainerState
from zoo.core.workers.checkpointing import Checkpointer, Start, prepare_dir, start_from_checkpoint


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Algo:
    """The two methods a checkpoint needs of an algorithm."""

    def __init__(self, w: float) -> None:
        self.w = torch.tensor([w])

    def state_dict(self) -> dict:
        return {"policy": {"w": self.w.clone()}}

    def load_state_dict(self, state: dict) -> None:
        self.w = state["policy"]["w"].clone()


def test_due_every_n_updates():
    ck = Checkpointer("/nowhere", every_updates=5, clock=Clock())
    assert [u for u in range(1, 16) if ck.due(u)] == [5, 10, 15]


def test_due_once_the_interval_passed_since_the_last_checkpoint(tmp_path):
    clock = Clock()
    ck = Checkpointer(str(tmp_path), every_updates=1000, every_s=10.0, clock=clock)
    prepare_dir(str(tmp_path))
    clock.now = 109.9  # 9.9 s after the start
    assert not ck.due(1)
    clock.now = 110.0
    assert ck.due(2)
    ck.write(Algo(1.0), {"updates": 2}, version=2)  # at 110
    clock.now = 119.0
    assert not ck.due(3)  # 9 s after the last checkpoint
    clock.now = 120.0
    assert ck.due(4)
    assert not Checkpointer(str(tmp_path), every_updates=1000, every_s=0, clock=clock).due(1)  # 0: never by time


def test_write_keeps_a_copy_per_version_when_asked(tmp_path):
    run_dir = str(tmp_path)
    prepare_dir(run_dir)
    stale = os.path.join(run_dir, "checkpoints", "latest.pt.tmp")
    open(stale, "wb").close()
    prepare_dir(run_dir)  # a crashed write's temporary file goes
    assert os.listdir(os.path.join(run_dir, "checkpoints")) == []
    Checkpointer(run_dir, every_updates=1).write(Algo(2.0), {"updates": 7, "resumes": 0}, version=7)
    assert os.listdir(os.path.join(run_dir, "checkpoints")) == ["latest.pt"]
    Checkpointer(run_dir, every_updates=1, keep=True).write(Algo(3.0), {"updates": 8, "resumes": 0}, version=8)
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == ["latest.pt", "policy-v00000008.pt"]
    for name in ("latest.pt", "policy-v00000008.pt"):
        ckpt = load_checkpoint(os.path.join(run_dir, "checkpoints", name))
        assert set(ckpt) == {"format", "algorithm", "updates", "resumes"}
        assert (ckpt["format"], ckpt["updates"], ckpt["algorithm"]["policy"]["w"].tolist()) == (FORMAT, 8, [3.0])


def test_nonfinite_weights_are_never_written(tmp_path):
    prepare_dir(str(tmp_path))
    with pytest.raises(CheckpointError, match="policy weights w hold NaN"):
        Checkpointer(str(tmp_path), every_updates=1).write(Algo(float("nan")), {}, version=1)
    assert os.listdir(os.path.join(str(tmp_path), "checkpoints")) == []


def checkpoint(run_dir: str, metrics_bytes: int | None) -> None:
    st = TrainerState()
    st.version, st.updates, st.env_steps, st.episodes = 4, 4, 40, 3
    trainer = st.to_dict(time_s=12.5, metrics_bytes=0)
    if metrics_bytes is None:  # a checkpoint of format 1
        del trainer["metrics_bytes"]
    else:
        trainer["metrics_bytes"] = metrics_bytes
    prepare_dir(run_dir)
    Checkpointer(run_dir, every_updates=1).write(Algo(5.0), {**st.counters(1), "resumes": 0, "trainer": trainer}, 4)


def test_a_fresh_start_reads_nothing_and_cuts_nothing(tmp_path):
    checkpoint(str(tmp_path), 123)
    st, algo = TrainerState(), Algo(0.0)
    assert start_from_checkpoint(str(tmp_path), 0, 0, algo, st) == Start(None, None, resumed=False)
    assert (st.version, algo.w.tolist()) == (0, [0.0])


@pytest.mark.parametrize("resume,attempt", [(2, 0), (0, 1)])
def test_a_resume_or_restart_loads_the_checkpoint_and_cuts_metrics_back_to_it(tmp_path, resume, attempt):
    checkpoint(str(tmp_path), 123)
    st, algo = TrainerState(), Algo(0.0)
    # metrics.jsonl cut to 123 bytes; TensorBoard purged from env step 40 + 1
    assert start_from_checkpoint(str(tmp_path), resume, attempt, algo, st) == Start(123, 41, resumed=True)
    assert (st.version, st.updates, st.env_steps, st.episodes, st.time_before) == (4, 4, 40, 3, 12.5)
    assert (st.resumes, algo.w.tolist()) == (resume, [5.0])


def test_a_checkpoint_of_format_1_is_not_cut(tmp_path):
    checkpoint(str(tmp_path), None)
    assert start_from_checkpoint(str(tmp_path), 1, 0, Algo(0.0), TrainerState()) == Start(None, 41, resumed=True)


def test_a_resume_without_a_checkpoint_starts_afresh_without_the_lost_rows(tmp_path):
    st = TrainerState()
    assert start_from_checkpoint(str(tmp_path), 1, 0, Algo(0.0), st) == Start(0, None, resumed=True)
    assert (st.version, st.env_steps, st.resumes) == (0, 0, 1)
