"""`zoo train mappo --env hide-and-seek` through the multi-process dataflow (short budget)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_mappo_hide_and_seek_short_run_writes_hide_and_seek_statistics(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "zoo", "train", "mappo", "--env", "hide-and-seek", "--steps", "3000",
         "--name", "hns", "--set", f"runs_dir={tmp_path}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mappo presets: " in result.stdout  # the machine-scaled preset says what it chose
    assert "presets: mappo presets:" not in result.stdout  # once, not twice
    rows = [json.loads(line) for line in (tmp_path / "hns" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if r["type"] == "update"]
    episodes = [r for r in rows if r["type"] == "episode"]
    assert updates and all(np.isfinite(u["pg_loss"]) for u in updates)
    assert len(updates) >= 2 and updates[-1]["policy_version"] == len(updates)
    # Quadrant episodes are truncated at exactly 80 env steps.
    assert episodes and {e["length"] for e in episodes} == {80}
    stats = set(episodes[0]) - {"type", "env_steps", "return", "length"}
    print(sorted(stats))
    assert any("hider" in k for k in stats) and any("seeker" in k for k in stats)
    assert any("box" in k for k in stats) and any("lock" in k for k in stats)
