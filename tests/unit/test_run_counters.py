"""The run's counters with named policies (docs/policies.md, "Display, `zoo watch` and `zoo runs`"):
the env steps are the run's (the actors': the most any trainable policy received), what was
trained is each policy's own; the `done:` line, `zoo runs` and the `end` rows agree.

The figures are those of a real run (examples/policies/spread-two-policies.toml with the mappo
preset's 48-sample batches, 2,000 env steps): lead (1 agent) updated once and stopped counting at
2,152 env steps; rest (2 agents) updated 3 times and received 2,250 before the run stopped."""
from __future__ import annotations

import json

from zoo.core.policy_status import PolicyStatuses
from zoo.core.workers.accounting import TrainerState
from zoo.display import final_status, format_status_line, format_summary
from zoo.runinfo import run_info

LEAD = {"type": "status", "policy": "lead", "policy_version": 1, "updates": 1, "env_steps": 2152, "frames": 2152,
        "episodes": 86, "trained_env_steps": 1200, "trained_samples": 48, "dropped_samples": 0,
        "actor_dropped_samples": 0, "dropped_fraction": 0.0, "budget_env_steps": 2000,
        "mean_env_steps_per_s": 895.5, "episode_return_mean": -24.16, "lead_return": -24.08, "rest_return": -24.19}
REST = {"type": "status", "policy": "rest", "policy_version": 3, "updates": 3, "env_steps": 2250, "frames": 2250,
        "episodes": 0, "trained_env_steps": 1800, "trained_samples": 144, "dropped_samples": 0,
        "actor_dropped_samples": 0, "dropped_fraction": 0.0, "budget_env_steps": 2000,
        "mean_env_steps_per_s": 841.1, "mean_trained_env_steps_per_s": 614.7, "episode_return_mean": None}


def merged() -> dict:
    statuses = PolicyStatuses({"lead": True, "rest": True})
    statuses.offer(dict(LEAD))
    return statuses.offer(dict(REST))


def test_the_runs_env_steps_are_the_most_any_policy_received_and_trained_figures_stay_per_policy():
    shown = merged()
    # was: env_steps=2152 and trained_env_steps=1200, lead's, while rest had received 2,250
    assert {k: v for k, v in shown.items() if k != "policies"} == {
        "type": "status", "env_steps": 2250, "frames": 2250, "episodes": 86, "budget_env_steps": 2000,
        "episode_return_mean": -24.16}
    assert shown["policies"]["lead"]["trained_env_steps"] == 1200
    assert shown["policies"]["rest"]["trained_env_steps"] == 1800
    assert shown["policies"]["rest"]["mean_trained_env_steps_per_s"] == 614.7
    assert format_status_line(shown).splitlines() == [
        "env_steps=2,250/2,000 (100.0%) frames=2,250 return=-24.2 episodes=86",
        "policy lead: version=1 updates=1 trained=1,200 return=-24.1 dropped=0 (0.0%)",
        "policy rest: version=3 updates=3 trained=1,800 return=-24.2 dropped=0 (0.0%)"]
    assert format_summary(shown, 9.0, "runs/t2", checkpoints="checkpoints/lead/latest.pt") == (
        "done: 2,250 env steps (2,250 frames) in 9s, 250 env steps/s; return=-24.2 episodes=86; "
        "lead version=1 trained=1,200 return=-24.1, rest version=3 trained=1,800 return=-24.2; "
        "run dir runs/t2: metrics.jsonl, tensorboard/, checkpoints/lead/latest.pt")


END_ROWS = [
    {"type": "episode", "policy": "lead", "env_steps": 2150, "return": -24.0, "length": 25, "lead_return": -24.1,
     "rest_return": -23.95},
    {"type": "end", "policy": "rest", "policy_version": 3, "updates": 3, "env_steps": 2250, "frames": 2250,
     "episodes": 0, "trained_env_steps": 1800, "time_s": 3.221, "episode_return_mean": None},
    {"type": "end", "policy": "lead", "policy_version": 1, "updates": 1, "env_steps": 2152, "frames": 2152,
     "episodes": 86, "trained_env_steps": 1200, "time_s": 3.072, "episode_return_mean": -24.16},
]


def test_the_done_line_zoo_runs_and_the_end_rows_agree(tmp_path):
    run = tmp_path / "t2"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({
        "algo_name": "mappo", "env_name": "pettingzoo:mpe2.simple_spread_v3", "env_steps": 2000, "frames": 0,
        "policies": {"lead": {"algo_name": "mappo"}, "rest": {"algo_name": "mappo"}}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in END_ROWS))
    final = final_status(None, str(run / "metrics.jsonl"))
    assert (final["env_steps"], final["frames"], final["episodes"]) == (2250, 2250, 86)
    assert "trained_env_steps" not in final
    assert {n: e["trained_env_steps"] for n, e in final["policies"].items()} == {"rest": 1800, "lead": 1200}
    info = run_info(run)
    assert info.env_steps == 2250  # was 2,152: the last row written, lead's
    assert [(p.name, p.env_steps) for p in info.policies] == [("lead", 2152), ("rest", 2250)]


def test_a_mean_rate_needs_an_update_after_the_first():
    st = TrainerState()
    st.env_steps = 1200
    st.updated(1200, 48, now=10.0)
    st.env_steps = 2152
    # lead's end row read mean_trained_env_steps_per_s 0.0: nothing trained after its one update
    assert st.rates(11.0) == {}
    assert st.flow(11.0) == {"dropped_samples": 0, "actor_dropped_samples": 0, "trained_samples": 48,
                             "dropped_fraction": 0.0}
    st.updated(1200, 48, now=12.0)
    # (2152 - 1200) / (14 - 10) = 238; (2400 - 1200) / 4 = 300
    assert st.rates(14.0) == {"mean_env_steps_per_s": 238.0, "mean_trained_env_steps_per_s": 300.0}
