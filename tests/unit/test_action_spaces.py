"""Named policies whose agents have different action spaces (docs/policies.md, "Agents with
different spaces"): the actor assembles each env step's actions per agent from the policy that
acted for it, and each policy's sample carries its actions in its own shape and dtype."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from zoo.core.env import PaddedSpaces, PettingZooEnv
from zoo.core.workers.actor import ActionAssembler, EnvGroup, SampleBuffer, split_bundle


class TalkerMover:
    """A PettingZoo ParallelEnv: ``talker`` sees 2 numbers and says Discrete(3), ``mover`` sees
    3 and moves with Box(-1, 1, (2,)); it records the actions of every step."""

    possible_agents = ["talker", "mover"]

    def __init__(self, length: int = 100) -> None:
        self.agents: list[str] = []
        self.seen: list[dict[str, Any]] = []
        self.length, self.t = length, 0

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-10, 10, (2 if agent == "talker" else 3,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3) if agent == "talker" else spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"talker": np.full(2, 1.0, np.float32), "mover": np.full(3, 2.0, np.float32)}

    def reset(self, seed: int | None = None, options: Any = None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        self.seen.append(actions)
        self.t += 1
        flags = dict.fromkeys(self.agents, self.t >= self.length)
        return self._obs(), {"talker": 1.0, "mover": 2.0}, flags, dict(flags), {a: {} for a in self.agents}

    def close(self) -> None:
        pass


def _env(length: int = 100) -> tuple[PaddedSpaces, TalkerMover]:
    raw = TalkerMover(length)
    return PaddedSpaces(PettingZooEnv(raw, "talker-mover", mixed_spaces=True)), raw


def test_padded_spaces_take_one_action_array_per_space_group_and_refuse_one_array_for_different_actions():
    env, raw = _env()
    assert env.spec.space_groups() == [("talker",), ("mover",)]
    assert [(k, s.shape) for k, s in env.spec.observation_space.items()] == [("obs@0", (2,)), ("obs@1", (3,))]
    env.reset(seed=0)
    env.step([np.array([2]), np.array([[0.5, -0.5]], np.float32)])
    assert raw.seen[0]["talker"] == 2 and raw.seen[0]["mover"].tolist() == [0.5, -0.5]
    with pytest.raises(ValueError) as info:
        env.step(np.array([1, 2]))
    assert str(info.value) == ("env 'talker-mover': one action array for agents whose action spaces differ "
                               "('talker': Discrete(3), 'mover': Box(-1.0, 1.0, (2,), float32)); pass one array per "
                               "space group")
    with pytest.raises(ValueError) as info:
        env.step([np.array([2])])
    assert str(info.value) == ("env 'talker-mover': actions for 1 space group(s); its agents fall into 2 "
                               "(spec.space_groups())")


def test_a_hand_made_step_gives_each_agent_the_action_of_its_policy_and_each_sample_its_own_shape():
    (env0, raw0), (env1, raw1) = _env(), _env()
    group = EnvGroup([env0, env1], [1, 2])
    spec = env0.spec
    agent_ids = {"talk": np.array([0]), "move": np.array([1])}
    slots = {"talk": np.array([0, 2]), "move": np.array([1, 3])}  # slot = env * 2 + agent
    assemble = ActionAssembler(spec, agent_ids, 2)
    buf = SampleBuffer(1, group.obs)
    outputs: dict[str, dict[str, np.ndarray]] = {"talk": {}, "move": {}}
    talk = buf.record_part(slots["talk"], {"action": np.array([2, 1]), "logp": np.array([-0.5, -1.5], np.float32)},
                           3, np.array([True, True]), np.array([True, True]), outputs["talk"])
    move = buf.record_part(slots["move"], {"action": np.array([[0.5, 2.0], [-3.0, 0.25]], np.float32),
                                           "logp": np.array([-2.0, -4.0], np.float32)},
                           7, np.array([True, True]), np.array([True, True]), outputs["move"], keep=False)
    actions = assemble({"talk": talk, "move": move})
    assert [a.dtype for a in actions] == [np.int64, np.float32]
    assert actions[0].tolist() == [2, 1] and actions[1].tolist() == [[0.5, 2.0], [-3.0, 0.25]]
    group.step(actions, buf, [])
    # each env got its agents' actions, Box ones clipped to the bounds for the env only
    assert raw0.seen == [{"talker": 2, "mover": pytest.approx(np.array([0.5, 1.0]))}]
    assert raw1.seen == [{"talker": 1, "mover": pytest.approx(np.array([-1.0, 0.25]))}]
    assert type(raw0.seen[0]["talker"]) is int and raw0.seen[0]["mover"].dtype == np.float32
    assert buf.reward.tolist() == [[1.0, 2.0, 1.0, 2.0]] and buf.policy_version.tolist() == [[3, 7, 3, 7]]
    whole = buf.bundle()
    assert "action" not in whole
    talk_part = split_bundle(whole, slots["talk"], outputs["talk"], {"obs@0": "obs"})
    assert talk_part["action"].dtype == np.int64 and talk_part["action"].tolist() == [[2, 1]]
    assert talk_part["logp"].tolist() == [[-0.5, -1.5]] and talk_part["obs"]["obs"].shape == (2, 2, 2)
    move_part = split_bundle(whole, slots["move"], outputs["move"], {"obs@1": "obs"})
    assert move_part["action"].dtype == np.float32 and move_part["action"].shape == (1, 2, 2)
    assert move_part["action"].tolist() == [[[0.5, 2.0], [-3.0, 0.25]]]  # the sampled action, unclipped
    assert "logp" not in move_part and move_part["obs"]["obs"].shape == (2, 2, 3)
    assert move_part["reward"].tolist() == [[2.0, 2.0]]


def test_the_assembler_fills_each_policys_rows_in_its_space_groups_array():
    from zoo.core.env import EnvSpec

    obs = {"obs": spaces.Box(0, 1, (4,), np.float32)}
    box = spaces.Box(-1, 1, (3,), np.float32)
    spec = EnvSpec("three", ("a", "b", "c"), obs, spaces.Discrete(3),
                   agent_spaces={"a": (obs, spaces.Discrete(3)), "b": (obs, box), "c": (obs, spaces.Discrete(3))})
    # a and c share Discrete(3) (group 0) but act with two policies; b's Box(3,) is group 1
    assemble = ActionAssembler(spec, {"p": np.array([0]), "q": np.array([2]), "r": np.array([1])}, 3)
    out = assemble({"p": np.array([1, 2, 0]), "q": np.array([5, 6, 7]),
                    "r": np.arange(9, dtype=np.float32).reshape(3, 3)})
    assert out[0].tolist() == [1, 5, 2, 6, 0, 7]  # env e: [a, c]
    assert out[1].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    with pytest.raises(ValueError) as info:
        ActionAssembler(spec, {"p": np.array([0, 1]), "q": np.array([2])}, 1)
    assert str(info.value) == ("policy p: agents 'a' and 'b' have different spaces (action space Discrete(3) (a) vs "
                               "Box(-1.0, 1.0, (3,), float32) (b)); one policy acts for agents of one space")
    with pytest.raises(ValueError) as info:
        ActionAssembler(spec, {"p": np.array([0, 2])}, 1)({"p": np.array([1, 1])})
    assert str(info.value) == "no policy acted for space group(s) [1] (b)"


def test_one_policy_over_every_agent_passes_its_actions_through():
    """A run of one named policy: its actions are the env's rows in order, so the assembler hands
    the array itself to the env group (no array to fill); a policy over a part of the agents, or
    in another order, still fills its rows."""
    from zoo.core.env import EnvSpec

    spec = EnvSpec("two", ("a", "b"), {"obs": spaces.Box(0, 1, (4,), np.float32)}, spaces.Discrete(3))
    act = np.array([2, 0, 1, 1, 0, 2])
    assemble = ActionAssembler(spec, {"p": np.array([0, 1])}, 3)
    assert assemble.whole == "p" and assemble({"p": act})[0] is act
    swapped = ActionAssembler(spec, {"p": np.array([1, 0])}, 3)  # p's rows are (b, a) per env
    assert swapped.whole is None and swapped({"p": act})[0].tolist() == [0, 2, 1, 1, 2, 0]
    population = ActionAssembler(spec, {"p": np.array([0, 1])}, 3, envs={"p": np.array([0, 2])})
    assert population.whole is None


class Constant:
    """A stand-in network that always acts ``action`` (one row per agent asked)."""

    def __init__(self, action: np.ndarray) -> None:
        self.action = action
        self.asked: list[dict[str, tuple[int, ...]]] = []

    def act(self, batch: dict[str, Any], deterministic: bool = False) -> dict[str, Any]:
        import torch

        self.asked.append({k: tuple(v.shape) for k, v in batch.items()})
        rows = next(iter(batch.values())).shape[0]
        return {"action": torch.as_tensor(np.stack([self.action] * rows))}


def test_zoo_eval_steps_each_env_with_each_seats_actions_in_its_own_space():
    from zoo.play import Seat, play

    (env0, raw0), (env1, raw1) = _env(length=2), _env(length=2)
    talk, move = Constant(np.array(2)), Constant(np.array([3.0, -0.5], np.float32))
    seats = [Seat("talk", "fake", talk, np.array([0]), {"obs@0": "obs"}),
             Seat("move", "fake", move, np.array([1]), {"obs@1": "obs"})]
    rows = play(seats, [env0, env1], 2, seed=0)
    assert [r["policy_returns"] for r in rows] == [{"talk": 2.0, "move": 4.0}] * 2
    for raw in (raw0, raw1):
        assert [a["talker"] for a in raw.seen] == [2, 2]
        assert [a["mover"].tolist() for a in raw.seen] == [[1.0, -0.5], [1.0, -0.5]]  # clipped for the env
    assert talk.asked[0] == {"obs": (2, 2)} and move.asked[0] == {"obs": (2, 3)}
    with pytest.raises(ValueError) as info:
        play(seats, [env0], 1, seed=0, override=lambda actions: None)
    assert str(info.value) == ("env 'talker-mover': override takes one action array [envs, A, ...], but its agents' "
                               "action spaces differ")


def test_check_env_steps_a_mixed_env_with_one_random_array_per_space_group():
    from zoo.core.testing.env_check import check_env

    env, raw = _env(length=3)
    report = check_env(env, seed=0, episodes=1, max_steps=3)
    assert (report.steps, report.episodes) == (3, 1)
    assert all(a["talker"] in (0, 1, 2) and isinstance(a["talker"], int) for a in raw.seen)
    assert all(a["mover"].shape == (2,) and a["mover"].dtype == np.float32 for a in raw.seen)


def _mover_chooser(length: int = 8):
    from zoo.core.testing.fake_envs import MixedConfig, make_mover_chooser

    env = make_mover_chooser(None, MixedConfig(episode_length=length, mixed_spaces=True), 0)
    return env, env.env


def test_fake_mixed_rewards_each_agent_in_its_own_space_and_truncates_at_the_episode_length():
    from zoo.core.testing.fake_envs import MixedConfig, make_mover_chooser

    env, raw = _mover_chooser(length=2)
    assert env.spec.space_groups() == [("mover",), ("chooser",)]
    assert [(k, s.shape) for k, s in env.spec.observation_space.items()] == [("obs@0", (3,)), ("obs@1", (5,))]
    assert str(env.spec.action_space_of("mover")) == "Box(-1.0, 1.0, (2,), float32)"
    assert str(env.spec.action_space_of("chooser")) == "Discrete(4)"
    obs, _ = env.reset(seed=0)
    assert obs["obs@0"].tolist() == [[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]  # mover's row, chooser's zero
    assert obs["obs@1"].tolist() == [[0.0] * 5, [1.0, 0.0, 0.0, 0.0, 0.0]]
    obs, reward, terminated, truncated, _ = env.step([np.array([[0.5, -0.5]], np.float32), np.array([0])])
    assert reward.tolist() == [1.0, 1.0] and terminated.tolist() == [False, False]
    assert truncated.tolist() == [False, False]
    assert obs["obs@0"].tolist()[0] == [-0.5, 0.5, 0.5] and obs["obs@1"].tolist()[1] == [0.0, 1.0, 0.0, 0.0, 0.5]
    _, reward, terminated, truncated, _ = env.step([np.array([[0.5, 0.5]], np.float32), np.array([3])])
    assert reward.tolist() == [0.5, 0.0] and truncated.tolist() == [True, True] and not terminated.any()
    assert [(m.tolist(), c.tolist()) for m, c in raw.actions] == [([[0.5, -0.5]], [0]), ([[0.5, 0.5]], [3])]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step([np.array([[0.0, 0.0]], np.float32), np.array([0])])
    env.reset()
    with pytest.raises(ValueError) as info:
        env.step([np.array([[0.0, 0.0]], np.float32), np.array([1.0])])
    assert str(info.value) == "fake-mixed: chooser's action must be int64 [1] in 0..3, got float64 (1,) [1.0]"
    with pytest.raises(ValueError) as info:
        env.step([np.array([[0.0, 0.0]]), np.array([1])])
    assert str(info.value) == "fake-mixed: mover's action must be float32 [1, 2] in [-1, 1], got float64 (1, 2) " \
                              "[[0.0, 0.0]]"
    with pytest.raises(TypeError) as err:
        make_mover_chooser(None, MixedConfig(), 0)
    assert str(err.value) == ("env 'fake-mixed': agents 'mover' and 'chooser' have different spaces; name a policy "
                              "for each ([policies.NAME] tables and [[agents]] entries: docs/policies.md)")


def test_ppo_networks_for_a_box_and_a_discrete_agent_act_and_sample_in_their_own_spaces():
    """fake-mixed with a ppo network per agent (each built from ``spec.subset``), as the routed
    actor drives them: the env gets float32 [1, 2] and int64 [1] actions, each policy's sample
    carries its actions as its network gave them."""
    import torch

    from zoo.plugins.algorithms.ppo.ppo import PPO, PPOConfig

    (env0, raw0), (env1, raw1) = _mover_chooser(), _mover_chooser()
    spec = env0.spec
    torch.manual_seed(0)
    nets = {"move": PPO.build_policy(PPOConfig(hidden=8), spec.subset(["mover"])),
            "choose": PPO.build_policy(PPOConfig(hidden=8), spec.subset(["chooser"]))}
    keys = {"move": {"obs@0": "obs"}, "choose": {"obs@1": "obs"}}
    slots = {"move": np.array([0, 2]), "choose": np.array([1, 3])}
    group = EnvGroup([env0, env1], [1, 2])
    assemble = ActionAssembler(spec, {"move": np.array([0]), "choose": np.array([1])}, 2)
    T = 3
    buf = SampleBuffer(T, group.obs)
    outputs: dict[str, dict[str, np.ndarray]] = {"move": {}, "choose": {}}
    for _ in range(T):
        acted = {}
        for name, net in nets.items():
            batch = {own: torch.as_tensor(group.obs[padded][slots[name]]) for padded, own in keys[name].items()}
            with torch.no_grad():
                reply = {k: v.numpy() for k, v in net.act(batch).items()}
            acted[name] = buf.record_part(slots[name], reply, 1, group.active[slots[name]],
                                          group.on_reset[slots[name]], outputs[name])
        group.step(assemble(acted), buf, [])
    for raw in (raw0, raw1):
        assert len(raw.actions) == T
        assert all(m.dtype == np.float32 and m.shape == (1, 2) for m, _ in raw.actions)
        assert all(c.dtype == np.int64 and c.shape == (1,) for _, c in raw.actions)
    whole = buf.bundle()
    move = split_bundle(whole, slots["move"], outputs["move"], keys["move"])
    choose = split_bundle(whole, slots["choose"], outputs["choose"], keys["choose"])
    assert (move["action"].dtype, move["action"].shape) == (np.float32, (T, 2, 2))
    assert (choose["action"].dtype, choose["action"].shape) == (np.int64, (T, 2))
    assert move["obs"]["obs"].shape == (T + 1, 2, 3) and choose["obs"]["obs"].shape == (T + 1, 2, 5)
    # the env saw the chooser's sampled actions as they are and the mover's clipped to [-1, 1]
    assert [int(c[0]) for _, c in raw0.actions] == choose["action"][:, 0].tolist()
    assert [m[0].tolist() for m, _ in raw1.actions] == np.clip(move["action"][:, 1], -1, 1).tolist()
    expected = [1.0 if int(c[0]) == t % 4 else 0.0 for t, (_, c) in enumerate(raw0.actions)]
    assert choose["reward"][:, 0].tolist() == expected
