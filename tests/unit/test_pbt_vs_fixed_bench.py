"""benchmarks/pbt_vs_fixed.py's pure parts on rows written by hand (its runs are checked by hand
with a small budget)."""
from __future__ import annotations

from tests.unit.fakes import load_benchmark


def test_members_take_their_first_lr_and_their_own_episodes():
    pv = load_benchmark("pbt_vs_fixed")
    rows = [{"type": "update", "policy": "default_1", "lr": 3e-4},
            {"type": "episode", "policy": "default_0", "env_steps": 40, "return": 9.0},
            {"type": "update", "policy": "default_0", "lr": 1e-3},
            {"type": "update", "policy": "default_0", "lr": 5e-4},  # annealed or explored later: not the start
            {"type": "pbt", "event": "exploit", "member_policy": "default_1", "from_policy": "default_0"},
            {"type": "episode", "policy": "default_1", "env_steps": 80, "return": 11.0},
            {"type": "update", "env_steps": 100}]  # no policy: not a member's
    pop = pv.members(rows)
    assert list(pop) == ["default_0", "default_1"]
    assert (pop["default_0"]["start_lr"], pop["default_1"]["start_lr"]) == (1e-3, 3e-4)
    assert pop["default_0"]["episodes"] == [(40, 9.0)] and pop["default_1"]["episodes"] == [(80, 11.0)]
    assert pop["default_0"]["final_return"] is None  # fewer than 20 episodes


def test_final_return_and_the_target():
    pv = load_benchmark("pbt_vs_fixed")
    assert pv.final_return([float(i) for i in range(1, 151)]) == 140.5  # the mean of 131..150
    # median of 4 = the mean of the middle two: (200 + 300) / 2 = 250
    assert pv.judge(250.0, [100.0, 300.0, 200.0, 500.0]) == {"pbt_best": 250.0, "fixed_median": 250.0, "met": True}
    assert pv.judge(249.9, [100.0, 300.0, 200.0, 500.0])["met"] is False
    assert pv.judge(400.0, [100.0, None, 200.0, 500.0]) == {"pbt_best": 400.0, "fixed_median": None, "met": False}
