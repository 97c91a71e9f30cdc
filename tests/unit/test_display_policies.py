"""The live display, `zoo watch` and `zoo runs` with named policies and with replay algorithms
(issue 22 item 4, issue 24 item 4): exact text from hand-written statuses, live.json and run folders."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

from rich.console import Console

from zoo.core.policy_status import PolicyStatuses, status_stats
from zoo.display import Display, final_status, format_status_line, format_summary
from zoo.watch import watch

# A status message of each policy of examples/policies/spread-two-policies.toml (lead, rest) and
# a frozen "opp", as the trainers send them (core/workers/trainer.py, Trainer.report).
LEAD = {"type": "status", "role": "trainer", "index": 0, "policy": "lead", "policy_version": 12, "updates": 12,
        "env_steps": 2400, "frames": 2400, "episodes": 24, "trained_env_steps": 2304, "trained_samples": 2304,
        "dropped_samples": 0, "actor_dropped_samples": 0, "dropped_fraction": 0.0, "budget_env_steps": 3000,
        "episode_return_mean": -30.5, "lead_return": -25.04, "rest_return": -33.25, "policy_lag_mean": 0.43,
        "policy_lag_max": 1, "pg_loss": -0.0123, "v_loss": 0.5}
REST = {"type": "status", "role": "trainer", "index": 1, "policy": "rest", "policy_version": 11, "updates": 11,
        "env_steps": 2368, "frames": 2368, "episodes": 0, "trained_env_steps": 2112, "trained_samples": 4224,
        "dropped_samples": 64, "actor_dropped_samples": 0, "dropped_fraction": 0.015, "budget_env_steps": 3000,
        "episode_return_mean": None, "policy_lag_mean": 0.5, "policy_lag_max": 2, "pg_loss": 0.0042, "v_loss": 1.25}
POLICIES = {"lead": True, "rest": True, "opp": False}
LEAD_ENTRY = {"policy_version": 12, "updates": 12, "env_steps": 2400, "trained_env_steps": 2304,
              "trained_samples": 2304, "dropped_samples": 0, "actor_dropped_samples": 0, "dropped_fraction": 0.0,
              "policy_lag_mean": 0.43, "policy_lag_max": 1, "pg_loss": -0.0123, "v_loss": 0.5,
              "episode_return_mean": -25.04}


def merged() -> dict:
    statuses = PolicyStatuses(POLICIES)
    statuses.offer(dict(LEAD))
    return statuses.offer(dict(REST))


def test_the_status_shown_merges_every_policys_latest_with_the_run_keys_of_the_episode_writer():
    assert merged() == {
        "type": "status", "role": "trainer", "index": 0, "env_steps": 2400, "frames": 2400, "episodes": 24,
        "budget_env_steps": 3000, "episode_return_mean": -30.5,
        "policies": {
            "lead": LEAD_ENTRY,
            "rest": {"policy_version": 11, "updates": 11, "env_steps": 2368, "trained_env_steps": 2112,
                     "trained_samples": 4224,
                     "dropped_samples": 64, "actor_dropped_samples": 0, "dropped_fraction": 0.015,
                     "policy_lag_mean": 0.5, "policy_lag_max": 2, "pg_loss": 0.0042, "v_loss": 1.25,
                     "episode_return_mean": -33.25},
            "opp": {"frozen": True}}}


def test_before_the_episode_writer_reports_the_other_policys_status_carries_the_run():
    statuses = PolicyStatuses(POLICIES)
    shown = statuses.offer(dict(REST))
    assert shown["frames"] == 2368 and shown["episodes"] == 0
    assert shown["policies"] == {"lead": {}, "rest": {k: v for k, v in REST.items() if k in (
        "policy_version", "updates", "env_steps", "trained_env_steps", "trained_samples", "dropped_samples",
        "actor_dropped_samples",
        "dropped_fraction", "policy_lag_mean", "policy_lag_max", "pg_loss", "v_loss")}, "opp": {"frozen": True}}


def test_one_implicit_policy_shows_its_status_as_it_came():
    status = {k: v for k, v in LEAD.items() if k not in ("policy", "pg_loss", "v_loss")}
    assert PolicyStatuses({}).offer(status) is status


def test_status_messages_carry_the_replay_and_for_named_policies_the_losses():
    stats = {"loss": 0.25, "q_mean": 1.5, "td_abs": 0.5, "replay_size": 12800, "replay_fill": 0.64,
             "replay_ratio": 2.0, "gradient_steps": 4}
    assert status_stats(stats, named=False) == {"replay_size": 12800.0, "replay_fill": 0.64, "replay_ratio": 2.0,
                                                "gradient_steps": 4.0}
    assert status_stats(stats, named=True) == {"loss": 0.25, "replay_size": 12800.0, "replay_fill": 0.64,
                                               "replay_ratio": 2.0, "gradient_steps": 4.0}
    assert status_stats({"pg_loss": 0.1, "v_loss": 0.2, "entropy": 1.0}, named=False) == {}  # PPO: as before


def test_plain_lines_one_per_policy():
    assert format_status_line(merged()).splitlines() == [
        "env_steps=2,400/3,000 (80.0%) frames=2,400 return=-30.5 episodes=24",
        "policy lead: version=12 updates=12 trained=2,304 return=-25.0 lag=0.4/1 dropped=0 (0.0%) pg_loss=-0.0123 "
        "v_loss=0.5",
        "policy rest: version=11 updates=11 trained=2,112 return=-33.2 lag=0.5/2 dropped=64 (1.5%) pg_loss=0.0042 "
        "v_loss=1.2",
        "policy opp: frozen"]


def test_a_single_policy_status_reads_exactly_as_before():
    status = {k: v for k, v in LEAD.items() if k not in ("policy", "pg_loss", "v_loss")}
    assert format_status_line(status) == (
        "env_steps=2,400/3,000 (80.0%) trained=2,304 frames=2,400 return=-30.5 episodes=24 version=12 lag=0.4/1 "
        "dropped=0 (0.0%) updates=12 lead_return=-25.0 rest_return=-33.2")


def test_a_replay_algorithms_status_shows_buffer_fill_and_replay_ratio():
    status = {"env_steps": 20_000, "budget_env_steps": 100_000, "policy_version": 150, "updates": 150,
              "replay_size": 12_800.0, "replay_fill": 0.128, "replay_ratio": 2.0, "gradient_steps": 4.0}
    assert format_status_line(status) == (
        "env_steps=20,000/100,000 (20.0%) version=150 updates=150 replay=12,800 (12.8% full) replay_ratio=2.00 "
        "gradient_steps=4")
    assert format_status_line({**status, "rate_limit_waits": 37}).endswith(" gradient_steps=4 rate_limit_waits=37")
    # the cumulative counters `zoo bench` reads stay off the line (they showed as gradient_steps=4 ...
    # gradient_steps_total=800 replayed=51,200 inserted=4,000 rate_limit_wait_s=2.2 rate_limit_held_s=2.2)
    bench = {"gradient_steps_total": 800, "replayed": 51_200, "inserted": 4_000, "rate_limit_wait_s": 2.2,
             "rate_limit_held_s": 2.2}
    assert format_status_line({**status, **bench}) == format_status_line(status)
    statuses = PolicyStatuses({"q": True})
    shown = statuses.offer({**status, "policy": "q", "loss": 0.25})
    assert format_status_line(shown).splitlines()[1] == (
        "policy q: version=150 updates=150 replay=12,800 (12.8% full) replay_ratio=2.00 gradient_steps=4 loss=0.25")


def test_the_live_display_has_a_row_per_policy():
    out = io.StringIO()
    with Display(Console(file=out, force_terminal=True, width=160, color_system=None), title="spread") as display:
        display(merged())
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert "policy version updates trained return lag dropped pg_loss v_loss" in lines
    assert "lead 12 12 2,304 -25.0 0.4/1 0 (0.0%) -0.0123 0.5" in lines
    assert "rest 11 11 2,112 -33.2 0.5/2 64 (1.5%) 0.0042 1.2" in lines
    assert "opp (frozen) frozen" in lines


def write_metrics(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


ROWS = [
    {"type": "episode", "env_steps": 2400, "return": -30.0, "length": 25, "lead_return": -20.0, "rest_return": -35.0,
     "policy": "lead"},
    {"type": "update", "policy": "lead", "env_steps": 2400, "frames": 2400, "episodes": 24, "policy_version": 12,
     "updates": 12, "episode_return_mean": -30.5, "pg_loss": -0.0123, "v_loss": 0.5, "time_s": 9.0},
    {"type": "episode", "env_steps": 3000, "return": -28.0, "length": 25, "lead_return": -22.0, "rest_return": -31.0,
     "policy": "lead"},
    {"type": "end", "policy": "lead", "env_steps": 3072, "frames": 3072, "episodes": 30, "policy_version": 15,
     "updates": 15, "episode_return_mean": -29.0, "time_s": 12.0},
    {"type": "end", "policy": "rest", "env_steps": 3008, "frames": 3008, "episodes": 0, "policy_version": 14,
     "updates": 14, "episode_return_mean": None, "time_s": 12.5},
]


def test_the_last_frame_of_named_policies_comes_from_each_ones_end_row(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", ROWS)
    shown = merged()
    final = final_status(shown, str(tmp_path / "metrics.jsonl"))
    assert final["frames"] == 3072 and final["episodes"] == 30 and final["episode_return_mean"] == -29.0
    assert final["policies"]["lead"] == {**LEAD_ENTRY, "env_steps": 3072, "policy_version": 15, "updates": 15,
                                         "episode_return_mean": -21.0}
    assert final["policies"]["rest"]["policy_version"] == 14 and final["policies"]["rest"]["env_steps"] == 3008
    assert final["policies"]["rest"]["episode_return_mean"] == -33.0
    assert final["policies"]["opp"] == {"frozen": True}
    assert final_status(final, str(tmp_path / "metrics.jsonl")) is final  # nothing newer
    final["policies"]["opp"]["episode_return_mean"] = -40.0
    assert format_summary(final, 12.0, "runs/spread", checkpoints="checkpoints/lead/latest.pt") == (
        "done: 3,072 env steps (3,072 frames) in 12s, 256 env steps/s; "
        "return=-29.0 episodes=30; lead version=15 trained=2,304 return=-21.0, rest version=14 trained=2,112 "
        "return=-33.0, "
        "opp frozen return=-40.0; run dir runs/spread: metrics.jsonl, tensorboard/, checkpoints/lead/latest.pt")


def test_watch_shows_a_line_per_policy_of_a_finished_run(tmp_path):
    snap = {"format": 1, "time": 1.0, "ended": True, "controller": {"pid": 1, "host": "h"}, "interval_s": 5.0,
            "workers": [], "status": merged()}
    (tmp_path / "live.json").write_text(json.dumps(snap))
    out = io.StringIO()
    assert watch(tmp_path, Console(file=out, width=300), refresh_s=0.01) == (0, "run ended")
    assert out.getvalue().splitlines() == format_status_line(merged()).splitlines()
    assert out.getvalue().splitlines()[1].startswith("policy lead: version=12 updates=12 trained=2,304 return=-25.0")


def test_watch_of_a_run_without_live_json_shows_each_policys_last_row(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", ROWS)
    out = io.StringIO()
    assert watch(tmp_path, Console(file=out, width=300), refresh_s=0.01) == (
        0, "run ended: finished (metrics.jsonl has its end row)")
    assert out.getvalue().splitlines() == [
        "env_steps=3,072 frames=3,072 return=-29.0 episodes=30",  # the budget is in config.json, not here
        "policy lead: version=15 updates=15 return=-21.0",
        "policy rest: version=14 updates=14 return=-33.0"]


def render(table) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(table)
    return out.getvalue()


def spread_run(root: Path, name: str, rows: list[dict], policies: dict | None) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    cfg = {"algo_name": "mappo", "env_name": "pettingzoo:mpe2.simple_spread_v3", "name": name, "env_steps": 3000,
           "frames": 0, "env_spec": {"frame_skip": 1}}
    if policies is not None:
        cfg["policies"] = policies
    (run_dir / "config.json").write_text(json.dumps(cfg))
    write_metrics(run_dir / "metrics.jsonl", rows)
    return run_dir


def test_runs_shows_each_named_policy_under_its_run_and_a_single_policy_run_as_before(tmp_path):
    from zoo.commands.runs import runs_table
    from zoo.runinfo import PolicyInfo, run_info

    policies = {"lead": {"algo_name": "mappo", "trainable": True, "agents": ["agent_0"]},
                "rest": {"algo_name": "mappo", "trainable": True, "agents": ["agent_1", "agent_2"]},
                "opp": {"algo_name": "ppo", "trainable": False, "weights": "/x/latest.pt", "agents": ["agent_3"]}}
    named = spread_run(tmp_path, "named", ROWS, policies)
    (named / "checkpoints" / "lead").mkdir(parents=True)
    (named / "checkpoints" / "lead" / "latest.pt").write_bytes(b"x")
    os_times = 1_000.0
    os.utime(named / "checkpoints" / "lead" / "latest.pt", (os_times, os_times))
    info = run_info(named, now=os_times + 5)
    assert info.policies == [
        PolicyInfo("lead", "mappo", True, 15, 3072, -21.0, named / "checkpoints" / "lead" / "latest.pt", os_times),
        PolicyInfo("rest", "mappo", True, 14, 3008, -33.0),
        PolicyInfo("opp", "ppo", False)]
    # the run's env steps: the most any policy received (lead's 3,072), not the last row's (rest's 3,008)
    assert info.team_returns == {} and info.env_steps == 3072 and info.return_mean == -29.0
    assert info.checkpoint == named / "checkpoints" / "lead" / "latest.pt"
    # the same rows without named policies: one row, the per-team returns in brackets, as before
    single = spread_run(tmp_path, "single", [{k: v for k, v in r.items() if k != "policy"} for r in ROWS], None)
    assert run_info(single).policies == [] and run_info(single).team_returns == {"lead": -21.0, "rest": -33.0}
    text = render(runs_table(tmp_path, now=os_times + 5))
    lines = [" ".join(line.strip("│").split()) for line in text.splitlines() if line.startswith("│")]
    env = "pettingzoo:mpe2.simple_spread_v3"
    assert [line.replace("│", "|") for line in lines] == [
        f"named | mappo | {env} | finished | 3,072 / 3,000 | -29.00 | 12s | lead/latest.pt (5s ago)",
        "policy lead | mappo | | version 15 | 3,072 | -21.00 | | lead/latest.pt (5s ago)",
        "policy rest | mappo | | version 14 | 3,008 | -33.00 | | -",
        "policy opp | ppo | | frozen | - | - | | -",
        f"single | mappo | {env} | finished | 3,008 / 3,000 | -29.00 (lead -21.00, rest -33.00) | 12s | -"]


def test_after_ctrl_c_the_last_frame_shows_each_policys_end_row(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", ROWS)
    out = io.StringIO()
    display = Display(Console(file=out, width=300), live=False)
    display(merged())
    display.catch_up(str(tmp_path / "metrics.jsonl"))
    assert out.getvalue().splitlines()[-4:] == [
        "env_steps=3,072/3,000 (100.0%) frames=3,072 return=-29.0 episodes=30",
        "policy lead: version=15 updates=15 trained=2,304 return=-21.0 lag=0.4/1 dropped=0 (0.0%) pg_loss=-0.0123 "
        "v_loss=0.5",
        "policy rest: version=14 updates=14 trained=2,112 return=-33.0 lag=0.5/2 dropped=64 (1.5%) pg_loss=0.0042 "
        "v_loss=1.2",
        "policy opp: frozen"]
    display.catch_up(str(tmp_path / "metrics.jsonl"))  # nothing newer: nothing printed again
    assert len(out.getvalue().splitlines()) == 8


def test_a_frozen_policys_row_shows_the_version_its_policy_worker_serves():
    from types import SimpleNamespace

    from zoo.core.controller import served_versions
    from zoo.core.graph import PolicyCounts
    from zoo.core.health import Health

    layout = [PolicyCounts("lead", "lead", True, False, 1, 1, 0, 0),
              PolicyCounts("opp", "opp", False, False, 2, 0, 1, 1),  # frozen, its policy workers 1 and 2
              PolicyCounts("inl", "inl", False, True, 0, 0, 3, 1)]  # frozen and inline: no policy worker
    graph = SimpleNamespace(named=True, layout=layout)
    health = Health([("trainer", 0), ("policy", 0), ("policy", 1), ("policy", 2)], run_dir=None, interval_s=2.0,
                    listener=None, clock=lambda: 0.0, wall=lambda: 0.0)
    assert served_versions(graph, health) == {}  # before opp's policy worker reported
    health.on_control({"type": "heartbeat", "role": "policy", "index": 1, "pid": 7, "host": "h", "clock_s": 1.0,
                       "time_s": {}, "counts": {}, "policy_version": 120}, now=1.0)
    assert health.served_version(1) == 120 and health.served_version(0) is None
    assert served_versions(graph, health) == {"opp": 120}
    assert served_versions(SimpleNamespace(named=False, layout=layout), health) == {}
    statuses = PolicyStatuses(POLICIES)
    statuses.served.update({"opp": 120})
    shown = statuses.offer(dict(LEAD))
    assert shown["policies"]["opp"] == {"frozen": True, "policy_version": 120}
    assert format_status_line(shown).splitlines()[-1] == "policy opp: frozen version=120"


def test_before_their_first_update_every_policy_reads_alike():
    # the first status line of a run: lead reported its update-0 status, rest nothing yet; it read
    # "policy lead: version=0 updates=0 lag=0.0/0 dropped=0 (0.0%)" above "policy rest: waiting for its first update"
    first = {**{k: v for k, v in LEAD.items() if k not in ("pg_loss", "v_loss", "lead_return", "rest_return")},
             "policy_version": 0, "updates": 0, "env_steps": 0, "frames": 0, "episodes": 0, "trained_env_steps": 0,
             "trained_samples": 0, "episode_return_mean": None, "policy_lag_mean": 0.0, "policy_lag_max": 0}
    shown = PolicyStatuses(POLICIES).offer(first)
    assert format_status_line(shown).splitlines() == [
        "env_steps=0/3,000 (0.0%) frames=0 return=n/a episodes=0",
        "policy lead: waiting for its first update",
        "policy rest: waiting for its first update",
        "policy opp: frozen"]
    out = io.StringIO()
    with Display(Console(file=out, force_terminal=True, width=160, color_system=None), title="spread") as display:
        display(shown)
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert "lead (waiting for its first update)" in lines and "rest (waiting for its first update)" in lines


def test_an_opponents_row_follows_the_version_its_worker_serves_without_waiting_for_a_trainers_status():
    from types import SimpleNamespace

    from zoo.core.controller import served_versions
    from zoo.core.graph import PolicyCounts
    from zoo.core.health import Health

    # learner (trainable) and opp, an opponent following learner's parameter stream (docs/history.md)
    layout = [PolicyCounts("learner", "learner", True, False, 1, 1, 0, 0),
              PolicyCounts("opp", "opp", False, False, 1, 0, 1, 1)]
    graph = SimpleNamespace(named=True, layout=layout)
    health = Health([("trainer", 0), ("policy", 0), ("policy", 1)], run_dir=None, interval_s=2.0, listener=None,
                    clock=lambda: 0.0, wall=lambda: 0.0)
    statuses = PolicyStatuses({"learner": True, "opp": False})

    def beat(version, now):
        health.on_control({"type": "heartbeat", "role": "policy", "index": 1, "pid": 7, "host": "h", "clock_s": now,
                           "time_s": {}, "counts": {}, "policy_version": version}, now=now)
        return statuses.serve(served_versions(graph, health))

    assert beat(12, 1.0) is None  # nothing shown yet: nothing to show again
    # the learner publishes version 13 and reports it; its opponent's worker loads 13 and says so in its next
    # heartbeat, which comes after the status: the row said version=12 until the learner's next status
    statuses.served.update(served_versions(graph, health))
    shown = statuses.offer({"type": "status", "policy": "learner", "policy_version": 13, "updates": 13,
                            "env_steps": 1300})
    assert shown["policies"]["opp"] == {"frozen": True, "policy_version": 12}
    again = beat(13, 2.0)
    assert again is not None and again["policies"]["opp"] == {"frozen": True, "policy_version": 13}
    assert format_status_line(again).splitlines()[-1] == "policy opp: frozen version=13"
    assert beat(13, 3.0) is None  # unchanged: nothing new to show
