"""A routed actor's sample buffer: each named policy's columns, outputs and truncated agents'
final observations (docs/policies.md, "The actor")."""
from __future__ import annotations

import numpy as np
from gymnasium import spaces

from zoo.core.env import EnvSpec
from zoo.core.workers.actor import ActionAssembler, SampleBuffer, split_bundle


def test_each_policys_part_holds_its_columns_outputs_and_final_observations():
    # 2 envs x 3 agents; policy "lead" has agent 0 (slots 0, 3), "rest" agents 1, 2 (slots 1, 2, 4, 5)
    lead, rest = np.array([0, 3]), np.array([1, 2, 4, 5])
    obs = {"obs": np.arange(6, dtype=np.float32)[:, None] * np.ones((6, 2), np.float32)}
    buf = SampleBuffer(2, obs)
    extras_lead: dict[str, np.ndarray] = {}
    extras_rest: dict[str, np.ndarray] = {}
    spec = EnvSpec("three", ("a0", "a1", "a2"), {"obs": spaces.Box(0, 9, (2,), np.float32)}, spaces.Discrete(300))
    assemble = ActionAssembler(spec, {"lead": np.array([0]), "rest": np.array([1, 2])}, 2)
    for t in range(2):
        active_rest = np.array([True, True, t == 0, True])
        acted = {"lead": buf.record_part(lead, {"action": np.array([10 + t, 20 + t]),
                                                "logp": np.array([-1.0, -2.0], np.float32)},
                                         5 + t, np.array([True, True]), np.array([t == 0, t == 0]), extras_lead)}
        rows = int(active_rest.sum())
        acted["rest"] = buf.record_part(rest, {"action": np.arange(rows) + 100 * (t + 1), "logp": np.zeros(rows)}, 9,
                                        active_rest, np.zeros(4, bool), extras_rest, keep=False)
        assert [a.tolist() for a in assemble(acted)] == ([[10, 100, 101, 20, 102, 103]] if t == 0 else
                                                         [[11, 200, 201, 21, 0, 202]])
        if t == 1:
            buf.final_obs.append((1, 3, {"obs": np.array([7.0, 7.0], np.float32)}))
            buf.final_obs.append((1, 4, {"obs": np.array([8.0, 8.0], np.float32)}))
        buf.record_step(np.arange(6, dtype=np.float32) + t, np.zeros(6, bool), np.zeros(6, bool), obs)
    assert buf.policy_version.tolist() == [[5, 9, 9, 5, 9, 9], [6, 9, 9, 6, 9, 9]]
    whole = buf.bundle()
    part = split_bundle(whole, lead, extras_lead)
    assert part["action"].tolist() == [[10, 20], [11, 21]]
    assert part["logp"].tolist() == [[-1.0, -2.0], [-1.0, -2.0]]
    assert part["reward"].tolist() == [[0.0, 3.0], [1.0, 4.0]]
    assert part["obs"]["obs"].shape == (3, 2, 2) and part["obs"]["obs"][0, 1].tolist() == [3.0, 3.0]
    assert part["on_reset"].tolist() == [[True, True], [False, False]]
    assert part["final_index"].tolist() == [[1, 1]] and part["final_obs"]["obs"].tolist() == [[7.0, 7.0]]
    other = split_bundle(whole, rest, extras_rest)
    assert other["action"].tolist() == [[100, 101, 102, 103], [200, 201, 0, 202]]
    assert other["active"].tolist() == [[True, True, True, True], [True, True, False, True]]
    assert other["final_index"].tolist() == [[1, 2]] and other["final_obs"]["obs"].tolist() == [[8.0, 8.0]]
    assert "logp" not in other and other["policy_version"].tolist() == [[9, 9, 9, 9], [9, 9, 9, 9]]


def test_padded_spaces_lay_each_space_group_out_under_its_own_keys_zero_elsewhere():
    from mpe2 import simple_adversary_v3

    from zoo.core.env import PaddedSpaces, PettingZooEnv

    mixed = PettingZooEnv(simple_adversary_v3.parallel_env(max_cycles=3), "adv", mixed_spaces=True)
    env = PaddedSpaces(mixed)
    spec = env.spec
    assert [(k, s.shape) for k, s in spec.observation_space.items() if not k.startswith("zoo:")] == [
        ("obs@0", (8,)), ("obs@1", (10,))]
    assert spec.subset(["agent_0", "agent_1"]).observation_space["obs"].shape == (10,)
    plain = PettingZooEnv(simple_adversary_v3.parallel_env(max_cycles=3), "adv", mixed_spaces=True)
    ref, _ = plain.reset(seed=4)
    obs, _ = env.reset(seed=4)
    assert obs["obs@0"].shape == (3, 8) and obs["obs@1"].shape == (3, 10)
    assert np.array_equal(obs["obs@0"][0], ref[0]["obs"][0]) and not obs["obs@0"][1:].any()
    assert np.array_equal(obs["obs@1"][1:], ref[1]["obs"]) and not obs["obs@1"][0].any()
    action = np.array([1, 2, 3])
    stepped = env.step(action)
    expected = plain.step([action[[0]], action[[1, 2]]])
    assert np.array_equal(stepped[1], expected[1]) and np.array_equal(stepped[0]["obs@1"][1:], expected[0][1]["obs"])
    env.close()
    plain.close()
