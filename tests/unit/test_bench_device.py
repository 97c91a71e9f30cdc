"""``zoo bench`` / ``benchmarks/gpu_pong.py`` on a device (issue 21, fault 1): the synthetic
batch goes to the model's device, CUDA work is timed with CUDA events, and one failed phase
does not cost the table. No GPU needed: ``meta`` tensors and mocked CUDA calls stand in."""
from __future__ import annotations

import contextlib

import pytest
import torch

from zoo.bench import measure, report
from zoo.bench.workloads import WORKLOADS
from zoo.core.testing.devices import assert_on_device


def cartpole_cfg(tmp_path):
    w = WORKLOADS["cartpole"]
    return w, {learn: measure.bench_config(w.algo, w.env, list(w.overrides), learn=learn, runs_dir=str(tmp_path),
                                           name="t") for learn in (False, True)}


class MetaPolicy(torch.nn.Module):
    """A policy whose weights are on ``meta`` (standing in for ``cuda``): ``act`` refuses
    observations elsewhere, as a CUDA model refuses CPU tensors."""
    state_shape = None

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4, device="meta"))

    def act(self, obs):
        assert_on_device(obs, "meta")
        n = next(iter(obs.values())).shape[0]
        return {"action": torch.zeros(n, dtype=torch.int64), "logp": torch.full((n,), -0.5)}


def test_synthetic_batch_feeds_the_policy_on_its_device(tmp_path):
    """Before the fix the observations went to act() as CPU tensors: 'obs: cpu'."""
    import numpy as np

    _, cfgs = cartpole_cfg(tmp_path)
    batch = measure.synthetic_batch(cfgs[True], MetaPolicy(), {"obs": np.zeros((1, 4), np.float32)})
    assert batch["action"].shape == batch["logp"].shape == (128, 4)
    assert float(batch["logp"][5, 2]) == -0.5


def test_cuda_work_is_timed_with_cuda_events(monkeypatch):
    """GPU milliseconds between two events after a synchronize, not host CPU time."""
    calls = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.name = "start" if not any(c[0] == "event" for c in calls) else "end"
            calls.append(("event", self.name))

        def record(self):
            calls.append(("record", self.name))

        def elapsed_time(self, other):
            assert (self.name, other.name) == ("start", "end")
            return 40.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: calls.append(("sync", str(d))))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    ms = measure.device_ms(lambda: calls.append(("fn",)), repeats=4, warmup=1, device="cuda:1")
    assert ms == 10.0
    assert calls == [("fn",), ("sync", "cuda:1"), ("event", "start"), ("event", "end"), ("record", "start"),
                     ("fn",), ("fn",), ("fn",), ("fn",), ("record", "end"), ("sync", "cuda:1")]


def test_a_failed_phase_keeps_the_table(tmp_path, monkeypatch):
    """Before the fix a RuntimeError in the training cost (a CUDA device mismatch) or in a
    measured run left run_bench with no result at all."""
    from zoo.commands.bench import run_bench

    w, cfgs = cartpole_cfg(tmp_path)
    monkeypatch.setattr(measure, "raw_ceiling", lambda *a, **k: measure.RawResult(1000.0, 0.002, 2, 4))

    def run(cfg, **kw):
        raise RuntimeError("CUDA error: out of memory")

    def train(cfg, threads):
        raise RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu")

    monkeypatch.setattr(measure, "measure_run", run)
    monkeypatch.setattr(measure, "inference_cost", lambda cfg, batch: 0.0005)
    monkeypatch.setattr(measure, "training_cost", train)
    result = run_bench(w, cfgs, ("ceiling", "train"), 1.0, 0.0, 10.0, 2)
    assert result["ceiling"]["env_steps_per_s"] == 1000.0
    assert result["bound"]["env_steps_per_s"] == pytest.approx(2 / 0.0025)
    assert result["bound"]["train_note"] == ("RuntimeError: Expected all tensors to be on the same device, "
                                             "but found cuda:0 and cpu")
    assert result["train"] is None
    assert result["errors"] == {"train": "RuntimeError: CUDA error: out of memory"}
    table = report.format_table(result)
    assert "train failed: RuntimeError: CUDA error: out of memory" in table.splitlines()
    assert "training cost: RuntimeError: Expected all tensors to be on the same device, but found cuda:0 and cpu" \
        in table.splitlines()
