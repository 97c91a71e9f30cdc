"""benchmarks/two_teams.py on run folders written by hand (its `run` is checked by hand with a tiny budget)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "two_teams.py"


def load():
    spec = importlib.util.spec_from_file_location("two_teams", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_variant_freezes_one_team_at_its_initial_weights():
    tt = load()
    both, adv = tt.config_text("both"), tt.config_text("adversary-init")
    assert 'weights = "init"' not in both
    assert adv.count('weights = "init"') == 1
    assert adv.index('weights = "init"') < adv.index("[policies.good]")
    assert 'trainable = false\nweights = "init"' in tt.config_text("good-init").split("[policies.good]")[1]


def test_the_report_compares_each_teams_final_return_with_its_frozen_self(tmp_path):
    tt = load()

    def run(variant, adversary, good):
        path = tmp_path / tt.run_name(variant, 1)
        path.mkdir()
        rows = [{"type": "episode", "env_steps": 25 * (1 + i // 2), "return": 0.0, "adversary_return": a,
                 "good_return": g} for i, (a, g) in enumerate(zip(adversary, good, strict=True))]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    run("both", [-30, -20, -10, -10], [1, 3, 5, 7])
    run("adversary-init", [-30, -30, -30, -30], [1, 3, 9, 9])
    run("good-init", [-30, -20, -5, -5], [1, 1, 1, 1])
    text = tt.table(tmp_path, [1], last=2)
    assert "| 1 | -10.00 | -30.00 | 20.00 |" in text  # adversary: -10 trained vs -30 frozen
    assert "| 1 | 6.00 | 1.00 | 5.00 |" in text  # good: mean(5, 7) vs 1
    assert "adversary beats its frozen self in 1 of 1 seeds." in text
    x, y = tt.team_points(tt.read_rows(tmp_path / tt.run_name("both", 1)), "good")
    assert x.tolist() == [25.0, 50.0] and np.allclose(y, [2.0, 6.0])  # two episodes per env-step value
    tt.plot(tmp_path, [1], tmp_path / "curves.png", window=1)
    assert (tmp_path / "curves.png").stat().st_size > 0
