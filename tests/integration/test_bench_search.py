"""``zoo bench --search --workload cartpole`` end to end with the smallest budget it accepts: real
runs measured, the TOML read back through ``zoo train``'s config path with the exact values, the
table printed and saved beside it, nothing left behind."""
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


def test_zoo_bench_search_cartpole_tiny(tmp_path):
    from zoo.bench.search import LAYOUT_KEYS, config_values
    from zoo.core.config import build_config
    from zoo.core.plugins import get_registry

    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "zoo-bench-*")))
    out = tmp_path / "best.toml"
    # the smallest budget: env cost (8 + 2 + 1 s) + 4 trials x (8 s start-up + 1 s warm-up + 2 s window) = 55 s
    proc = subprocess.Popen([sys.executable, "-m", "zoo", "bench", "--workload", "cartpole", "--search",
                             "--budget-s", "55", "--seconds", "2", "--warmup", "1", "--limit", "150",
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, text
    got = json.loads(out.with_suffix(".json").read_text())
    assert got["workload"] == "cartpole" and got["objective"] == "trained"
    stages = [t["stage"] for t in got["trials"]]
    # the default first, the repeats last (one when the default is also the best)
    assert stages[0] == "default" and stages[-1] == "repeat" and len(stages) >= 2
    assert all(t["score"] is not None and t["score"] > 0 for t in got["trials"]), got["trials"]
    assert got["default_scores"] and got["chosen_scores"]
    # what zoo train ppo --env CartPole-v1 --config best.toml resolves: the values the search wrote
    cfg = build_config(get_registry(), "ppo", "CartPole-v1", config_file=out, overrides=[f"runs_dir={tmp_path}"])
    values = got["values"]
    assert config_values(cfg, [k for k in values if k not in ("algo_name", "env_name")]) == {
        k: v for k, v in values.items() if k not in ("algo_name", "env_name")}
    chosen = got["chosen"]
    assert (cfg.actors.count, cfg.actors.envs_per_actor, cfg.actors.ring_size, cfg.policy.inline, cfg.policy.count,
            cfg.trainer.threads) == (chosen["actors"], chosen["envs_per_actor"], chosen["ring_size"],
                                     chosen["inline"], chosen["policy_workers"], chosen["trainer_threads"])
    assert set(LAYOUT_KEYS) <= set(values)
    assert (cfg.sample_length, cfg.trainer.batch_samples, cfg.algo.lr) == (128, 4, 2.5e-4)  # the workload's own
    md = out.with_suffix(".md").read_text()
    assert "| # | stage | change from the default |" in md and "(default)" in md
    for label in ("layout search: cartpole", "env cost: ", "trial 1 (default", "wrote ", str(out)):
        assert label in text
    # nothing left: no worker, no shared memory of its runs, no temporary runs folder
    assert processes_titled("bench-search-cartpole-") == []
    assert glob.glob(f"/dev/shm/*zoo-{proc.pid}-*") + glob.glob(f"/tmp/zoo-{proc.pid}-*") == []
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "zoo-bench-*"))) == before
