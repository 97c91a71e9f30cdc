"""benchmarks/r2d2_memory.py's pure parts on a run folder written by hand (its runs are checked by
hand with a small budget)."""
from __future__ import annotations

import json

from tests.unit.fakes import load_benchmark


def test_rolling_mean_of_the_last_window_episodes():
    rm = load_benchmark("r2d2_memory")
    episodes = [(10 * (i + 1), float(i + 1)) for i in range(25)]  # returns 1..25 at env steps 10..250
    curve = rm.rolling(episodes, 20)
    # the first mean is of returns 1..20 at the 20th episode; then 2..21, ..., 6..25
    assert curve[0] == (200, 10.5) and curve[-1] == (250, 15.5) and len(curve) == 6


def test_summary_marks_best_and_wall(tmp_path):
    rm = load_benchmark("r2d2_memory")
    run = tmp_path / "r2d2-s1"
    run.mkdir()
    rows = [{"type": "episode", "env_steps": 1000 * (i + 1), "return": float(10 * (i + 1))} for i in range(25)]
    rows.insert(3, {"type": "update", "env_steps": 3500})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = rm.summarise(run, 12.34, 20_000)
    # mean-20 at 20k env steps: returns 10..200 -> 105; none before the 20th episode (10k)
    assert s["mean20_at"] == {"10000": None, "20000": 105.0}
    assert (s["best_mean20"], s["best_at_env_steps"]) == (155.0, 25_000)
    assert (s["wall_s"], s["episodes"], s["env_steps"]) == (12.3, 25, 25_000)
