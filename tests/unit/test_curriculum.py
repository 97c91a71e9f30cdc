"""Curricula (docs/curriculum.md): conditions, the advancing decision, stage switches at resets,
the control path (parameters -> replies -> actor), checkpoints, refusals and the live line."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.trainer_harness import accounting_trainer
from zoo.core.curriculum import (
    Condition,
    Curriculum,
    CurriculumConfig,
    curriculum_of,
    curriculum_problems,
    last_stage,
    parse_condition,
    parse_conditions,
)
from zoo.core.testing.fake_envs import StagedCorridorEnv, make_stages
from zoo.core.workers.actor import EnvGroup, SampleBuffer, follow_stage
from zoo.core.workers.policy import _reply

STAGES = ("length-1", "length-2", "length-3")


def test_a_condition_parses_into_statistic_operator_and_threshold():
    assert parse_condition("mean_return >= 0.9") == Condition("mean_return", ">=", 0.9)
    assert parse_condition("  min_return>-1.5 ") == Condition("min_return", ">", -1.5)
    assert str(parse_condition("median_return<=2")) == "median_return <= 2"
    hiders = parse_condition("mean_hider_return >= 20")  # an env's per-episode statistic (hide-and-seek)
    assert (hiders.aggregate, hiders.field, hiders.holds(np.array([10.0, 30.0]))) == ("mean", "hider_return", True)


@pytest.mark.parametrize("text, message", [
    ("mean_retrun >= 0.9", "curriculum.advance_when: unknown field 'retrun' in 'mean_retrun >= 0.9'; did you mean "
                           "'mean_return'? write '<aggregate>_<field> <op> <number>', aggregate one of mean, min, max, "
                           "median, field a numeric field of the episode rows (return, or an env statistic), op one "
                           "of >=, >, <=, < (e.g. 'mean_return >= 0.9')"),
    ("avg_return >= 0.9", "curriculum.advance_when: unknown statistic 'avg_return' in 'avg_return >= 0.9': write"),
    ("mean_return = 0.9", "curriculum.advance_when: cannot parse 'mean_return = 0.9': write"),
    ("mean_return >= high", "curriculum.advance_when: threshold 'high' in 'mean_return >= high' is not a number"),
    ("mean_return >= nan", "curriculum.advance_when: threshold 'nan' in 'mean_return >= nan' is not finite"),
])
def test_a_bad_condition_is_refused_naming_the_field_the_text_and_the_grammar(text, message):
    with pytest.raises(ValueError) as err:
        parse_condition(text)
    assert str(err.value).startswith(message)


def test_one_condition_serves_every_advance_and_a_list_needs_one_per_advance():
    one = parse_conditions(CurriculumConfig(["mean_return >= 0.5"]), STAGES, "fake-stages")
    assert one == [Condition("mean_return", ">=", 0.5)] * 2
    two = parse_conditions(CurriculumConfig(["mean_return >= 0.5", "min_return > 0"]), STAGES, "fake-stages")
    assert two == [Condition("mean_return", ">=", 0.5), Condition("min_return", ">", 0.0)]
    with pytest.raises(ValueError) as err:
        parse_conditions(CurriculumConfig(["mean_return >= 0.5"] * 3), STAGES, "fake-stages")
    assert str(err.value) == ("curriculum.advance_when: 3 conditions for env 'fake-stages', whose 3 stages (length-1, "
                              "length-2, length-3) have 2 advances; give one condition for all, or exactly 2 (one per "
                              "stage but the last)")
    with pytest.raises(ValueError) as err:
        parse_conditions(CurriculumConfig(["mean_return >= 0.5", "min_return >> 0"]), STAGES, "fake-stages")
    assert str(err.value).startswith("curriculum.advance_when[1]: cannot parse 'min_return >> 0'")
    with pytest.raises(ValueError) as err:
        parse_conditions(CurriculumConfig(["mean_return >= 0.5"]), (), "fake-counting")
    assert str(err.value) == ("curriculum.advance_when: env 'fake-counting' has no curriculum stages (its spec.stages "
                              "is empty, it has no set_curriculum_stage); drop the [curriculum] section, or use an env "
                              "that declares stages (docs/curriculum.md)")


def test_observe_advances_once_the_window_of_the_current_stage_meets_its_condition():
    # window of 3; stage 0 -> 1 when the mean is >= 0.5, stage 1 -> 2 when every return is > 0
    cur = Curriculum([Condition("mean_return", ">=", 0.5), Condition("min_return", ">", 0.0)], over_episodes=3)
    assert cur.observe([0.0, 1.0]) is None  # two episodes: the window is not full
    assert cur.observe([0.0]) is None  # [0, 1, 0]: mean 1/3
    # [1, 0, 1]: mean 2/3 >= 0.5 -> stage 1; the 0.25 after it was played at stage 0: dropped
    assert cur.observe([1.0, 0.25]) == 1
    assert (cur.stage, list(cur.window)) == (1, [])
    assert cur.observe([1.0, 0.0, 1.0]) is None  # min 0 is not > 0
    assert cur.observe([1.0]) is None  # [0, 1, 1]
    assert cur.observe([2.0]) == 2  # [1, 1, 2]: min 1 > 0
    assert cur.last and cur.observe([5.0] * 10) is None and cur.stage == 2
    assert cur.state_dict() == {"stage": 2, "window": []}


def test_the_state_dict_round_trips_the_stage_and_the_window():
    cur = Curriculum([Condition("mean_return", ">=", 0.5)] * 2, over_episodes=3)
    cur.observe([1.0, 1.0, 1.0, 0.0, 0.5])
    assert cur.state_dict() == {"stage": 1, "window": []}
    cur.observe([0.0, 0.5])
    again = Curriculum([Condition("mean_return", ">=", 0.5)] * 2, over_episodes=3)
    again.load_state_dict(json.loads(json.dumps(cur.state_dict())))
    assert (again.stage, list(again.window)) == (1, [0.0, 0.5])
    assert again.observe([1.0]) == 2  # [0, 0.5, 1]: mean 0.5


def _step_all(group: EnvGroup, actions: list[int], episodes: list) -> None:
    buf = SampleBuffer(1, group.obs)
    reply = {"action": np.array(actions, np.int64)}
    buf.record_policy(reply, version=0, active=group.active, on_reset=group.on_reset)
    group.step(reply["action"], buf, episodes)


def test_an_env_switches_stage_at_its_next_reset_never_in_the_middle_of_an_episode():
    envs = [StagedCorridorEnv(3), StagedCorridorEnv(3)]
    group = EnvGroup(envs, [0, 1], stage=1)  # a restarted actor: its envs start at the run's stage 1
    assert [e.stages_played for e in envs] == [[1], [1]]
    episodes: list = []
    _step_all(group, [0, 1], episodes)  # env 0: right, its episode goes on; env 1: wrong, it ends and resets
    assert [e.stages_played for e in envs] == [[1], [1, 1]]
    group.want_stage(2)  # the run moved on: both envs are mid-episode (the fake raises if told now)
    _step_all(group, [1, 0], episodes)  # env 0 clears stage 1 and resets at stage 2; env 1 goes on
    assert [e.stages_played for e in envs] == [[1, 2], [1, 1]]
    _step_all(group, [0, 1], episodes)  # env 1 clears stage 1 and resets at stage 2
    assert [e.stages_played for e in envs] == [[1, 2], [1, 1, 2]]
    _step_all(group, [1, 0], episodes)
    _step_all(group, [0, 1], episodes)  # env 0 clears stage 2 (0, 1, 0)
    assert episodes == [{"return": 0.0, "length": 1, "curriculum_stage": 1},
                        {"return": 1.0, "length": 2, "curriculum_stage": 1},
                        {"return": 1.0, "length": 2, "curriculum_stage": 1},
                        {"return": 1.0, "length": 3, "curriculum_stage": 2}]


def test_without_a_curriculum_an_env_is_never_told_a_stage():
    env = StagedCorridorEnv(2)
    group = EnvGroup([env], [0])
    episodes: list = []
    _step_all(group, [1], episodes)
    assert env.stages_played == [0, 0] and episodes == [{"return": 0.0, "length": 1}]


def test_the_fake_refuses_a_stage_mid_episode_or_out_of_range():
    env = make_stages(None, None, 0)
    env.reset()
    env.step(np.array([0]))  # stage 0 cleared: the episode ended
    env.set_curriculum_stage(1)
    env.reset()
    with pytest.raises(RuntimeError, match=r"set_curriculum_stage\(2\) in the middle of an episode \(step 0\)"):
        env.set_curriculum_stage(2)
    with pytest.raises(ValueError, match="fake-stages: stage 3 is not one of 0..2"):
        env.set_curriculum_stage(3)


class _Server:
    def __init__(self) -> None:
        self.sent: list = []

    def reply(self, client_id, reply, meta, timeout):
        self.sent.append((client_id, meta))


def test_the_stage_rides_on_replies_and_every_group_of_the_actor_follows_it():
    server = _Server()
    batch = [(3, {}, {"request_id": 7, "rows": 1})]
    _reply(server, batch, [{}], version=5, worker=0, stage=2)
    _reply(server, batch, [{}], version=5, worker=0)
    assert [m for _, m in server.sent] == [
        {"request_id": 7, "policy_version": 5, "policy": 0, "curriculum_stage": 2},
        {"request_id": 7, "policy_version": 5, "policy": 0}]
    groups = [EnvGroup([StagedCorridorEnv(3)], [0], stage=0), EnvGroup([StagedCorridorEnv(3)], [1], stage=0)]
    follow_stage(groups, server.sent[0][1])
    assert [g.stage for g in groups] == [2, 2]
    follow_stage(groups, server.sent[1][1])  # no curriculum_stage: nothing changes
    assert [g.stage for g in groups] == [2, 2]


def _cfg(advance_when, spec, implicit=True):
    return SimpleNamespace(curriculum=CurriculumConfig(list(advance_when), 20), spec=spec,
                           policies=None if implicit else SimpleNamespace(implicit=False))


def test_curriculum_problems_name_the_field_and_pass_a_good_curriculum():
    staged, plain = StagedCorridorEnv(3).spec, dataclasses.replace(StagedCorridorEnv(3).spec, stages=())
    assert curriculum_problems(_cfg(["mean_return >= 0.9"], staged)) == []
    assert curriculum_problems(_cfg([], plain)) == []  # off
    [(field, message)] = curriculum_problems(_cfg(["mean_return >= 0.9"], plain))
    assert field == "curriculum.advance_when" and "has no curriculum stages" in message
    [(field, message)] = curriculum_problems(_cfg(["mean_return >= 0.9", "mean_return >= x"], staged))
    assert field == "curriculum.advance_when" and message.startswith("curriculum.advance_when[1]: threshold 'x'")
    [(field, message)] = curriculum_problems(_cfg(["mean_return >= 0.9"], staged, implicit=False))
    assert message == ("curriculum.advance_when: a curriculum with named policies ([policies.NAME]) is not supported "
                       "yet; train one shared policy, or drop the [curriculum] section")
    cur = curriculum_of(_cfg(["mean_return >= 0.9"], staged), staged)
    assert cur is not None and (cur.stage, cur.stages, cur.over_episodes) == (0, 3, 20)


def test_last_stage_reads_the_last_curriculum_row(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert last_stage(str(path)) == 0
    rows = [{"type": "curriculum", "stage": 0}, {"type": "episode", "return": 1.0, "curriculum_stage": 0},
            {"type": "curriculum", "stage": 2}, {"type": "update", "updates": 3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert last_stage(str(path)) == 2


def test_the_live_line_shows_the_stage():
    from zoo.display import format_status_line

    line = format_status_line({"env_steps": 100, "episode_return_mean": 0.5, "curriculum_stage": 1,
                               "curriculum_stages": 3, "curriculum_stage_name": "length-2", "updates": 3})
    assert line == "env_steps=100 return=0.5 stage=1 of 3 (length-2) updates=3"


def test_hide_and_seek_stages_are_box_counts_switched_at_the_next_reset():
    pytest.importorskip("mujoco")
    from zoo.plugins.envs.hide_and_seek.zoo_env import make

    env = make(None, None, 0)  # quadrant: 2 boxes
    assert env.spec.stages == ("boxes-0", "boxes-1", "boxes-2")
    env.reset(seed=0)
    assert env.env.game.world.n_boxes == 2  # never told a stage: the configured game (the last stage)
    env.set_curriculum_stage(0)
    assert env.env.game.world.n_boxes == 2  # the episode under way keeps its boxes
    counts = []
    for stage in (0, 1, 2):
        env.set_curriculum_stage(stage)
        obs, _ = env.reset(seed=stage)
        counts.append(env.env.game.world.n_boxes)
        assert {k: v.shape for k, v in obs.items()} == {k: (4, *s.shape) for k, s in env.spec.observation_space.items()}
    assert counts == [0, 1, 2]
    with pytest.raises(ValueError, match=r"hide-and-seek: curriculum stage 3 is not one of 0..2 \(boxes-0, boxes-1, "
                                         r"boxes-2\)"):
        env.set_curriculum_stage(3)
    full = make("full", None, 0)
    assert full.spec.stages == ("boxes-0", "boxes-3", "boxes-3-9")
    full.set_curriculum_stage(1)
    full.reset(seed=1)
    assert full.env.game.world.n_boxes == 3


def test_a_checkpoint_keeps_the_curriculum_and_a_run_without_one_writes_none():
    from zoo.core.workers.accounting import TrainerState

    st = TrainerState()
    assert "curriculum" not in st.to_dict(0.0, 0)
    st.curriculum = {"stage": 2, "window": [1.0, 0.0]}
    ckpt = {"trainer": st.to_dict(1.5, 10), "policy_version": 3, "updates": 3, "env_steps": 96, "episodes": 40}
    again = TrainerState()
    again.load(ckpt)  # (restores this process's RNG states to what they were a moment ago)
    assert again.curriculum == {"stage": 2, "window": [1.0, 0.0]}


def test_a_worker_started_after_an_advance_starts_at_the_stage_the_controller_heard_last():
    from zoo.core.config import ExperimentConfig
    from zoo.core.controller import Controller
    from zoo.core.graph import Graph

    cfg = ExperimentConfig("ppo", "fake-stages")
    cfg.curriculum.advance_when = ["mean_return >= 0.9"]
    controller = object.__new__(Controller)  # its context() alone: no streams, no processes
    controller.__dict__.update(cfg=cfg, spec=StagedCorridorEnv().spec, run_id="r", run_dir="/nonexistent",
                               streams={}, curriculum_stage=0, graph=Graph.from_config(cfg))
    assert controller.context("actor", 1, 0).curriculum_stage == 0
    controller.follow_stage({"type": "curriculum", "curriculum_stage": 2})
    controller.follow_stage({"type": "status", "env_steps": 5})  # a status without a stage changes nothing
    restarted = controller.context("actor", 1, 1)  # an actor restarted by supervision
    assert (restarted.curriculum_stage, restarted.attempt) == (2, 1)


def test_a_curriculum_with_named_policies_is_refused_when_the_config_is_built():
    pytest.importorskip("mujoco")
    from pathlib import Path

    from zoo.core.config import build_config
    from zoo.core.options import ConfigError
    from zoo.core.plugins import get_registry

    teams = Path(__file__).resolve().parents[2] / "examples" / "policies" / "hide-and-seek-teams.toml"
    with pytest.raises(ConfigError) as err:
        build_config(get_registry(), "mappo", "hide-and-seek", config_file=teams, steps=5000, name="t",
                     overrides=["curriculum.advance_when=mean_return >= 0.5"])
    assert err.value.field == "curriculum.advance_when"
    assert str(err.value) == ("curriculum.advance_when: a curriculum with named policies ([policies.NAME]) is not "
                              "supported yet; train one shared policy, or drop the [curriculum] section")


def _trainer(conditions: list[str], over: int):
    """The lead trainer's episode accounting alone (Trainer.account), without processes or streams."""
    return accounting_trainer(Curriculum(parse_conditions(CurriculumConfig(conditions), STAGES, "x"), over))


def _share(episodes: list[dict]) -> dict:
    return {"env_steps": 10, "dropped": 0, "actor_dropped": 0, "episodes": episodes,
            "episode_at": list(range(len(episodes)))}


def test_the_trainer_feeds_the_conditions_field_of_the_current_stages_episodes_and_warns_once_when_absent():
    t = _trainer(["mean_hider_return >= 1"], over=2)
    ep = [{"return": 0.0, "length": 1, "curriculum_stage": 0, "hider_return": 1.0},
          {"return": 0.0, "length": 1, "curriculum_stage": 1, "hider_return": 5.0},  # another stage: not counted
          {"return": 0.0, "length": 1, "curriculum_stage": 0, "hider_return": 2.0}]
    t.account([_share(ep)])
    assert t.curriculum.stage == 1 and t.stage_changed
    assert t.ctx.sent == [("curriculum", {"curriculum_stage": 1, "curriculum_stages": 3,
                                          "curriculum_stage_name": "length-2", **t.counters()})]
    t.ctx.sent.clear()
    t.account([_share([{"return": 1.0, "length": 2, "curriculum_stage": 1}] * 3)])  # no hider_return
    assert t.curriculum.stage == 1 and len(t.ctx.sent) == 1
    kind, meta = t.ctx.sent[0]
    assert (kind, meta["key"]) == ("warning", "curriculum-field")
    assert meta["message"] == ("curriculum.advance_when: the episodes of env 'fake-stages' have no numeric field "
                               "'hider_return', so the curriculum cannot advance from stage 1; their fields: return, "
                               "length (docs/curriculum.md)")


class _StagedVector:
    """Two one-agent envs stepped by one call (a VectorEnv) that records the stages it is told."""

    def __init__(self) -> None:
        self.spec = StagedCorridorEnv(3).spec
        self.num_envs = 2
        self.told: list[tuple[str, int]] = []

    def set_curriculum_stage(self, stage: int) -> None:
        self.told.append(("stage", stage))

    def reset(self, seeds):
        self.told.append(("reset", len(seeds)))
        return {"obs": np.zeros((2, 3), np.float32)}, {}

    def step(self, action):
        self.told.append(("step", len(action)))
        return {"obs": np.zeros((2, 3), np.float32)}, np.zeros(2, np.float32), np.zeros(2, bool), np.zeros(2, bool), {}

    def close(self) -> None:
        pass


def test_a_vector_env_is_told_its_first_stage_before_its_reset_and_each_new_one_once():
    from zoo.core.workers.actor import VectorEnvGroup

    venv = _StagedVector()
    group = VectorEnvGroup(venv, [0, 1], stage=1)
    group.want_stage(2)
    for _ in range(2):
        buf = SampleBuffer(1, group.obs)
        reply = {"action": np.zeros(2, np.int64)}
        buf.record_policy(reply, version=0, active=group.active, on_reset=group.on_reset)
        group.step(reply["action"], buf, [])
    assert venv.told == [("stage", 1), ("reset", 2), ("step", 2), ("stage", 2), ("step", 2)]
