"""``zoo bench --workload cartpole`` end to end with a budget of seconds: every phase measured,
the table and the JSON written, nothing left behind."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest

from zoo.core.testing.procs import processes_titled

pytestmark = pytest.mark.integration


def test_zoo_bench_cartpole_tiny(tmp_path):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "zoo-bench-*")))
    out = tmp_path / "bench.json"
    proc = subprocess.Popen([sys.executable, "-m", "zoo", "bench", "--workload", "cartpole", "--seconds", "2",
                             "--warmup", "0", "--limit", "150", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, text
    got = json.loads(out.read_text())
    assert got["workload"] == "cartpole" and got["frame_skip"] == 1
    assert got["env_steps_per_update"] == 4 * 128  # 1 inline actor x 4 envs, 4 samples of 1 env x 128 steps
    assert got["ceiling"]["processes"] == os.cpu_count() and got["ceiling"]["env_steps_per_s"] > 0
    b = got["bound"]
    assert b["env_ms_per_step"] > 0 and b["inference_ms_per_step"] > 0 and b["train_ms_per_step"] > 0
    assert b["train_threads"] == 1  # an MLP on 2 cores: the cores the inline actor leaves, at least 1
    # cores / (env + inference + training core seconds per env step)
    total_ms = b["env_ms_per_step"] + b["inference_ms_per_step"] + b["train_ms_per_step"]
    assert b["trained_env_steps_per_s"] == pytest.approx(got["cores"] / total_ms * 1e3)
    for phase in ("sampling", "train"):
        p = got[phase]
        assert p["env_steps_per_s"] > 0 and p["frames_per_s"] == p["env_steps_per_s"]
        assert set(p["cpu_shares"]) == {"actor", "policy", "trainer", "controller", "other", "idle"}
        # workers found by their titles; the workload's actor runs the policy itself: no policy worker
        assert p["cpu_shares"]["actor"] > 0 and p["cpu_shares"]["policy"] == 0
        assert p["bottleneck"]
    for label in ("env ceiling (raw, ", "CPU-work bound", "CPU-work bound (+ training)", "zoo sampling (no training)",
                  "zoo end to end (training)", "CPU share, end to end", "bottleneck, end to end: ",
                  "of the CPU-work bound with training"):
        assert label in text
    # nothing left: no worker, no shared memory of its runs, no temporary runs folder
    assert processes_titled("bench-cartpole-") == []
    assert glob.glob(f"/dev/shm/*zoo-{proc.pid}-*") + glob.glob(f"/tmp/zoo-{proc.pid}-*") == []
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "zoo-bench-*"))) == before
