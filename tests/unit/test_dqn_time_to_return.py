"""``benchmarks/peers/dqn_time_to_return.py``: CleanRL's final mean, Zoo's time to it, the target
line and the commands, each with hand-worked values (no process is started here)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import dqn_time_to_return as dq  # noqa: E402


def _eps(returns, t0=1.0, dt=1.0, steps_per=10):
    """Episodes ``[t, env steps, return]`` at t = t0, t0 + dt, ..., env steps 10, 20, ..."""
    return [[t0 + i * dt, steps_per * (i + 1), float(r)] for i, r in enumerate(returns)]


def test_final_mean_is_the_last_100():
    eps = [tuple(e) for e in _eps(range(1, 151))]
    assert dq.final_mean(eps) == 100.5  # mean of 51..150
    assert dq.final_mean(eps[:99]) is None
    assert dq.final_mean(eps[:100]) == 50.5
    assert dq.final_mean(eps, window=4) == 148.5  # 147..150


def test_time_to_mean_first_crossing():
    eps = [tuple(e) for e in _eps(range(1, 151))]  # return i at t = i s, 10 i env steps
    # mean of (k - 99)..k = k - 49.5 >= 60 first at k = 110 (mean 60.5; k = 109 gives 59.5)
    assert dq.time_to_mean(eps, 60.0) == (110.0, 1100, 60.5)
    assert dq.time_to_mean(eps, 100.5) == (150.0, 1500, 100.5)  # reached exactly at the last episode
    assert dq.time_to_mean(eps, 100.6) is None
    assert dq.time_to_mean(eps[:99], 1.0) is None  # fewer than 100 episodes: no mean yet


def _row(system, seed, returns, wall, ended="exit 0", **kw):
    eps = _eps(returns, **kw)
    return {"system": system, "seed": seed, "label": dq.LABELS[system], "episodes": eps,
            "env_steps": eps[-1][1] if eps else 0, "ended": ended, "wall_s": wall}


def test_target_is_the_mean_over_cleanrl_seeds():
    rows = [_row("cleanrl", 1, [200] * 100, 100.0),
            _row("cleanrl", 2, [0] * 20 + [300] * 100, 200.0),
            _row("cleanrl", 3, [500] * 50, 50.0),  # too few episodes: no final mean, not averaged
            {"system": "cleanrl", "seed": 4, "error": "could not run: x"},
            _row("zoo", 1, [999] * 100, 10.0)]
    target, per = dq.target_of(rows)
    assert per == [200.0, 300.0, None]
    assert target == 250.0


def test_target_met_at_exactly_half():
    # target (200 + 300) / 2 = 250; Zoo seed 1 crosses 250 at its 100th episode (t = 60 s); seed 2 at
    # its 104th (mean of 6 x 100 + 94 x 260 = 250.4; the 103rd's is 248.8), t = 84 s: mean 72 s;
    # CleanRL's walls 100, 188: mean 144; 72 / 144 = 0.5
    rows = [_row("zoo", 1, [250] * 120, 240.0, ended="limit", t0=-39.0),
            _row("cleanrl", 1, [200] * 100, 100.0),
            _row("zoo", 2, [100] * 10 + [260] * 100, 240.0, ended="limit", t0=-19.0),
            _row("cleanrl", 2, [300] * 100, 188.0)]
    s = dq.summarise(rows)
    assert s["target"] == 250.0
    assert s["zoo_times"] == [60.0, 84.0]
    assert s["zoo_steps"] == [1000, 1040]
    assert s["cleanrl_wall"] == [100.0, 188.0]
    assert s["ratio"] == 0.5 and s["met"] is True
    table = dq.format_table(rows)
    assert ("CleanRL's final mean return (mean of its last 100 episodes per seed, averaged): 250.0 (200.0, 300.0)"
            in table)
    assert ("| Zoo apex-dqn (`zoo train dqn`) | 240.0 (240.0, 240.0) | 72.0 (60.0, 84.0) | 1,020 (1,000, 1,040) |"
            in table)
    assert table.endswith("mean Zoo s to 250.0 / mean CleanRL wall s = 72.0 / 144.0 = 0.50: target <= 0.5 met")
    assert "ended (limit)" not in table  # a Zoo run stopped at its limit is how it is meant to end


def test_target_not_met_when_a_zoo_seed_never_reaches_it():
    rows = [_row("zoo", 1, [250] * 100, 240.0, ended="limit"),
            _row("cleanrl", 1, [250] * 100, 100.0),
            _row("zoo", 2, [249] * 100, 240.0, ended="limit"),  # mean 249 < 250: never
            _row("cleanrl", 2, [250] * 100, 100.0, ended="limit")]  # stopped: its wall does not count
    s = dq.summarise(rows)
    assert s["zoo_times"] == [100.0, None]
    assert s["cleanrl_wall"] == [100.0]
    assert s["ratio"] is None and s["met"] is False
    table = dq.format_table(rows)
    assert "| never (100.0, never) |" in table
    assert "- CleanRL dqn.py, seed 2: ended (limit) after 1,000 env steps" in table
    assert table.endswith("target <= 0.5 not met")


def test_commands(monkeypatch):
    monkeypatch.setattr(dq, "PEERS_DIR", Path("/peers"))
    monkeypatch.setattr(dq, "_venv_python", lambda peer: f"/peers/{peer}/venv/bin/python")
    z = dq.zoo_command(2, 500_000, "/tmp/r", ["algo.lr=2.5e-4"])
    assert z[1:] == ["-m", "zoo", "train", "dqn", "--env", "CartPole-v1", "--steps", "500000", "--seed", "2",
                     "--name", "dqn-ttr-2", "--set", "runs_dir=/tmp/r", "--set", "algo.lr=2.5e-4"]
    c = dq.cleanrl_command(3, 100_000)
    assert c[0] == "/peers/cleanrl/venv/bin/python"
    assert c[5:] == ["--same-step-autoreset", "/peers/cleanrl/src/cleanrl/dqn.py", "--total-timesteps", "100000",
                     "--seed", "3", "--no-cuda"]
    assert c[4].endswith("benchmarks/peers/cleanrl_compat.py")
