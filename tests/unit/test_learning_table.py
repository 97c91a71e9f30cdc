"""benchmarks/learning_table.py on a run folder written by hand."""
from __future__ import annotations

import json

import numpy as np

from tests.unit.fakes import load_benchmark


def load():
    return load_benchmark("learning_table")


def test_trailing_means_and_the_row_of_a_run(tmp_path, capsys):
    lt = load()
    assert np.allclose(lt.trailing_means(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), 2), [1.0, 1.5, 2.5, 3.5, 4.5])
    run = tmp_path / "brk-s1"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"seed": 1, "name": "brk-s1"}))
    rows = [{"type": "episode", "env_steps": 10 * k, "time_s": float(k), "return": float(k)} for k in range(1, 6)]
    rows += [{"type": "update", "env_steps": 50, "time_s": 5.0}, {"type": "end", "env_steps": 60, "time_s": 6.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # trailing means of 2 episodes: 1, 1.5, 2.5, 3.5, 4.5 at 10..50 env steps; 3.5 first at 40 steps, 4 s
    assert lt.run_row(str(run), [25, 50], 2, [3.5, 9.0]) == [
        "brk-s1", "60", "6", "10", "1.5", "4.5", "4.5", "40 / 4 s", "-"]
    assert lt.main([str(run), "--at", "25", "--last", "2", "--reach", "3.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("| run | env steps | wall s | env steps/s | mean-2 @25 | final mean-2 | "
                      "reach 3.5: env steps / wall |")
    assert out[2] == "| brk-s1 | 60 | 6 | 10 | 1.5 | 4.5 | 40 / 4 s |"
    lt.plot([str(run)], 2, "time", str(tmp_path / "curves.png"))
    assert (tmp_path / "curves.png").stat().st_size > 0

