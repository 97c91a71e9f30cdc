"""``stop_when``: a run that ends early, as its budget would, once a condition on the last N
training episodes held (docs/looking-at-runs.md, "Stopping early")."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.unit.fakes import one_line_error
from tests.unit.trainer_harness import accounting_trainer
from zoo.core.workers.episodes import EarlyStop


def _share(returns: list[float], env_steps: int = 10) -> dict:
    # one actor's counts: the episodes end at env steps 1, 2, ... of the share
    return {"env_steps": env_steps, "dropped": 0, "actor_dropped": 0,
            "episodes": [{"return": r, "length": 5} for r in returns], "episode_at": list(range(1, len(returns) + 1))}


def test_it_holds_once_the_full_window_meets_the_condition_and_keeps_the_value_it_held_with():
    stop = EarlyStop("mean_return >= 10", over=3)
    for i, r in enumerate([100.0, 100.0]):  # a window not yet full never holds, whatever its mean
        stop.observe({"return": r}, 10 * (i + 1))
    assert not stop.held
    stop.observe({"return": -190.0}, 30)  # (100 + 100 - 190) / 3 = 3.33
    assert not stop.held
    stop.observe({"return": 20.0}, 40)  # (100 - 190 + 20) / 3 = -23.3
    stop.observe({"return": 5.0}, 50)  # (-190 + 20 + 5) / 3 = -55
    assert not stop.held
    stop.observe({"return": 8.0}, 60)  # (20 + 5 + 8) / 3 = 11
    assert stop.held and stop.value == 11.0 and stop.at_env_steps == 60
    stop.observe({"return": -1000.0}, 70)  # once held it stays held, with the value it held with
    assert stop.held and stop.value == 11.0
    assert stop.describe() == "stop_when 'mean_return >= 10' held: 11 over the last 3 episodes at 60 env steps"
    assert stop.fields() == {"stop_when": "mean_return >= 10", "stop_value": 11.0, "reason": stop.describe()}


def test_other_aggregates_and_fields_and_an_episode_without_the_field():
    stop = EarlyStop("min_length > 4", over=2)
    assert stop.observe({"return": 1.0}, 1) is False  # no length: nothing added
    assert stop.observe({"return": 1.0, "length": True}, 2) is False  # a flag is not a number
    stop.observe({"length": 9}, 3)
    stop.observe({"length": 4}, 4)  # min 4: not > 4
    assert not stop.held
    stop.observe({"length": 5}, 5)  # min(4, 5)... the window is (4, 5): min 4
    assert not stop.held
    stop.observe({"length": 7}, 6)  # (5, 7): min 5 > 4
    assert stop.held and stop.value == 5.0


def test_the_trainer_ends_at_its_budget_or_once_the_condition_held_and_warns_once_when_the_field_is_absent():
    from zoo.core.curriculum import Curriculum, CurriculumConfig, parse_conditions

    t = accounting_trainer(Curriculum(parse_conditions(CurriculumConfig(["mean_return >= 1000"]), ("a", "b", "c"),
                                                       "x"), 100))
    t.budget_steps = 1_000
    t.early_stop = EarlyStop("mean_return >= 450", over=2)
    t.account([_share([500.0])])
    t.counted = t.state.env_steps  # an update point: the budget is judged on what it counted
    assert not t.budget_reached()  # 10 env steps of 1,000, 1 episode of a window of 2
    t.account([_share([300.0, 500.0])])
    t.account([_share([460.0], env_steps=20)])
    # windows: (500, 300) 400; (300, 500) 400; (500, 460) 480 >= 450, logged at 10 + 10 + 1 = 21 env steps
    assert t.budget_reached() and t.early_stop.value == 480.0 and t.early_stop.at_env_steps == 21
    assert t.state.env_steps == 40

    t = accounting_trainer(Curriculum(parse_conditions(CurriculumConfig(["mean_return >= 1000"]), ("a", "b", "c"),
                                                       "x"), 100))
    rows: list[dict] = []
    # a lead trainer (it writes the episode rows, and warns); the budget alone ends this one
    t.budget_steps, t.metrics = 20, SimpleNamespace(write=lambda row, step: rows.append(row))
    t.early_stop = EarlyStop("mean_win >= 0.5", over=2)
    t.account([_share([1.0, 2.0])])
    t.account([_share([3.0])])
    warnings = [m for kind, m in t.ctx.sent if kind == "warning"]
    assert [w["key"] for w in warnings] == ["stop-when-field"]
    assert "no numeric field 'win'" in warnings[0]["message"] and "return, length" in warnings[0]["message"]
    assert not t.early_stop.held and not t.budget_reached()  # 20 env steps, but no update point since 0
    t.counted = t.state.env_steps  # an update point
    assert t.budget_reached()  # 20 env steps
    assert [r["return"] for r in rows] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("text, message", [
    ("mean_retrun >= 450", "stop_when: unknown field 'retrun' in 'mean_retrun >= 450'; did you mean 'mean_return'?"),
    ("450", "stop_when: cannot parse '450'"),
    ("mean_return >= inf", "stop_when: threshold 'inf' in 'mean_return >= inf' is not finite"),
])
def test_a_condition_that_does_not_parse_is_refused_before_any_process_starts(tmp_path, text, message):
    from typer.testing import CliRunner

    from zoo.cli import app

    result = CliRunner().invoke(app, ["train", "ppo", "--env", "CartPole-v1", "--set", f"runs_dir={tmp_path}",
                                      "--set", f"stop_when={text}"])
    one_line_error(result, message, "write '<aggregate>_<field> <op> <number>'")
    assert list(tmp_path.iterdir()) == []  # nothing was started or written


def test_the_reason_of_each_policys_last_end_row_that_carries_stop_when(tmp_path):
    import json

    from zoo.core.rundir import stop_reasons

    rows = [
        {"type": "end", "env_steps": 900, "stop_when": "mean_return >= 10", "reason": "old segment"},
        {"type": "update", "env_steps": 1000},
        {"type": "end", "env_steps": 2000, "reason": "not from stop_when"},  # the implicit policy's last: its budget
        {"type": "end", "policy": "red", "env_steps": 300, "stop_when": "mean_return >= 5", "reason": "red held"},
        {"type": "end", "policy": "blue", "env_steps": 400, "stop_when": "mean_return >= 5", "reason": "blue held"},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"type": "end", "trunc')
    assert stop_reasons(str(tmp_path), {""}) == []
    assert stop_reasons(str(tmp_path), {"red", "blue", "green"}) == ["blue held", "red held"]  # sorted; no row: none
    assert stop_reasons(str(tmp_path), set()) == []
    assert stop_reasons(str(tmp_path / "missing"), {""}) == []
