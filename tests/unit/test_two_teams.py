"""benchmarks/two_teams.py on run folders written by hand (its `run` is checked by hand with a tiny budget)."""
from __future__ import annotations

import json

import numpy as np

from tests.unit.fakes import load_benchmark


def load():
    return load_benchmark("two_teams")


def test_each_variant_freezes_one_team_at_its_initial_weights():
    tt = load()
    both, adv = tt.config_text("both"), tt.config_text("adversary-init")
    assert 'weights = "init"' not in both
    assert adv.count('weights = "init"') == 1
    assert adv.index('weights = "init"') < adv.index("[policies.good]")
    assert 'trainable = false\nweights = "init"' in tt.config_text("good-init").split("[policies.good]")[1]


def test_the_report_compares_each_teams_final_return_with_its_frozen_self(tmp_path):
    tt = load()

    def run(variant, adversary, good, seed=1, status="finished"):
        path = tmp_path / tt.run_name(variant, seed)
        path.mkdir()
        rows = [{"type": "episode", "env_steps": 25 * (1 + i // 2), "return": 0.0, "adversary_return": a,
                 "good_return": g} for i, (a, g) in enumerate(zip(adversary, good, strict=True))]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (path / "status.json").write_text(json.dumps({"status": status}))

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


def test_a_run_that_did_not_finish_is_marked_and_left_out_of_the_summary(tmp_path):
    tt = load()

    def run(variant, seed, adversary, good, status):
        path = tmp_path / tt.run_name(variant, seed)
        path.mkdir()
        rows = [{"type": "episode", "env_steps": 25 * (1 + i), "return": 0.0, "adversary_return": a,
                 "good_return": g} for i, (a, g) in enumerate(zip(adversary, good, strict=True))]
        (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if status is not None:
            (path / "status.json").write_text(json.dumps({"status": status}))

    for seed, good_frozen_status in ((1, "finished"), (2, None)):  # seed 2's good-init still running
        run("both", seed, [-10, -10], [6, 6], "finished")
        run("adversary-init", seed, [-30, -30], [9, 9], "finished")
        run("good-init", seed, [-5, -5], [1, 3], good_frozen_status)
    text = tt.table(tmp_path, [1, 2], last=2)
    good = text.split("**good**")[1]
    assert "| 1 | 6.00 | 2.00 | 4.00 |" in good
    assert "| 2 | 6.00 | 2.00 (unfinished, 50 env steps) | - |" in good
    assert "| mean +- std | 6.00 +- 0.00 | 2.00 +- 0.00 | 4.00 +- 0.00 |" in good
    assert "good beats its frozen self in 1 of 1 seeds." in good
    assert "Not finished (left out of the mean, std and count): two-teams-good-init-s2." in good
    assert "Not finished" not in text.split("**good**")[0]  # the adversary's runs all finished
